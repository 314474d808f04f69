"""The rule that takes a model's turns away when it is wrong (spec_sweep.search.model_check)."""

from __future__ import annotations

import math

from spec_sweep.search.model_check import HITS, MISSES, WINDOW, Z_NOISE, ModelCheck, Quantity


def hit(name: str = "throughput") -> Quantity:
    return Quantity(name, predicted=100.0, measured=103.0, floor=0.1)


def miss(name: str = "throughput") -> Quantity:
    return Quantity(name, predicted=100.0, measured=160.0, floor=0.1)


def test_a_quantity_misses_beyond_its_floor_or_its_noise() -> None:
    assert not hit().missed
    assert miss().missed
    assert math.isclose(miss().error, math.log(1.6))
    # the trial's own noise widens the tolerance beyond the floor
    noisy = Quantity("throughput", predicted=100.0, measured=130.0, floor=0.1, noise=0.15)
    assert noisy.tolerance == Z_NOISE * 0.15
    assert not noisy.missed
    assert Quantity("x", predicted=0.0, measured=5.0, floor=0.1).error == 0.0


def test_a_trial_misses_when_any_quantity_misses() -> None:
    check = ModelCheck("trees")
    record = check.record("t1", [hit(), miss("accept_length")])
    assert record is not None
    assert record.missed
    assert check.record("t2", []) is None  # nothing predicted: no test
    assert len(check.checks) == 1


def test_misses_distrust_the_model_and_hits_trust_it_again() -> None:
    check = ModelCheck("trees")
    for i in range(5):
        check.record(f"h{i}", [hit()])
    assert check.trusted
    check.record("m1", [miss()])
    assert check.trusted  # one miss is not enough
    for i in range(MISSES - 1):
        check.record(f"m{i + 2}", [miss()])
    assert not check.trusted
    assert check.switches == [(5 + MISSES, False)]
    check.record("h5", [hit()])
    if HITS > 1:
        assert not check.trusted
    for i in range(HITS - 1):
        check.record(f"h{i + 6}", [hit()])
    assert check.trusted
    assert check.switches[-1] == (5 + MISSES + HITS, True)


def test_misses_far_apart_keep_the_model() -> None:
    check = ModelCheck("knobs")
    for i in range(4 * WINDOW):
        check.record(f"t{i}", [miss() if i % WINDOW == 0 else hit()])
    assert check.trusted
    assert not check.switches


def test_the_typical_miss_is_the_root_mean_square_of_one_quantitys_errors() -> None:
    check = ModelCheck("trees")
    assert check.typical_miss("throughput") == 0.0  # nothing logged yet
    check.record("t1", [hit(), miss("accept_length")])
    check.record("t2", [miss()])
    expected = math.sqrt((math.log(1.03) ** 2 + math.log(1.6) ** 2) / 2)
    assert math.isclose(check.typical_miss("throughput"), expected)
    assert math.isclose(check.typical_miss("accept_length"), math.log(1.6))
