"""The additive (ridge) model of the system knobs (spec_sweep.search.knobs)."""

from __future__ import annotations

import math

from spec_sweep.search.knobs import Effects, fit_effects


def test_effects_rank_values_and_predict_measured_configurations() -> None:
    trials = [
        ({"cgbs": 64, "mem": 0.8}, 100.0),
        ({"cgbs": 128, "mem": 0.8}, 90.0),
        ({"cgbs": 64, "mem": 0.9}, 110.0),
        ({"cgbs": 128, "mem": 0.9}, 99.0),
    ]
    effects = fit_effects(trials)
    assert effects.get(("cgbs", "64")) > effects.get(("cgbs", "128"))
    assert effects.get(("mem", "0.9")) > effects.get(("mem", "0.8"))
    assert effects.knows({"cgbs": 64, "mem": 0.9})
    assert not effects.knows({"cgbs": 32, "mem": 0.9})
    best = effects.predict({"cgbs": 64, "mem": 0.9})
    assert abs(math.log(best / 110.0)) < 0.05


def test_too_few_trials_fit_nothing() -> None:
    assert fit_effects([({"cgbs": 64}, 100.0)]) == Effects()
    assert not Effects().knows({})
    assert fit_effects([({"a": 1}, 0.0), ({"a": 2}, 5.0)]) == Effects()
