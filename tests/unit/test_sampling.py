"""The sweep's proposal logic without servers: failure model, failure-aware TPE, screening design.

Pure and seeded: synthetic objectives told to in-memory Optuna studies, and the sweep's own
`SweepSearcher` driven by hand (no Ray cluster, no server).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import harness
import optuna
import pytest
from harness import DROP
from optuna.distributions import CategoricalDistribution
from optuna.samplers import TPESampler
from optuna.trial import FrozenTrial, TrialState

from spec_sweep.core.config import baseline_config, config_key, normalize_config
from spec_sweep.search import sampling
from spec_sweep.spec import SweepSpec

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_spec(tmp_path: Path, *, trials: int = 30, kind: str = "tpe", seed: int = 0) -> SweepSpec:
    eagle = {"speculative-algorithm": "EAGLE3"}
    return harness.make_spec(
        tmp_path,
        name=f"sampling-{kind}-{seed}-{trials}",
        search_space={
            "include": DROP,
            "params": {
                "speculative-algorithm": {"choices": [None, "EAGLE3"]},
                "speculative-num-steps": {"choices": [1, 2, 3], "default": 3, "when": eagle},
                "speculative-eagle-topk": {"choices": [1, 2], "default": 1, "when": eagle},
                "cuda-graph-max-bs": {"choices": [64, 128, 512], "default": 512},
                "mem-fraction-static": {"float": [0.7, 0.9]},
                "enable-flashinfer-allreduce-fusion": {"choices": [False, True], "default": False},
            },
        },
        baseline={"mem-fraction-static": 0.8},
        workload={"num_prompts": 1},
        budget={"trials": trials},
        searcher={"kind": kind, "seed": seed},
    )


# ---------------------------------------------------------------------------------------------
# FailureModel


def frozen(params: dict[str, Any], *, failed: bool) -> FrozenTrial:
    return optuna.trial.create_trial(
        params=params,
        distributions={k: CategoricalDistribution([v, "other"]) for k, v in params.items()},
        value=None if failed else 1.0,
        state=TrialState.FAIL if failed else TrialState.COMPLETE,
        constraints={sampling.FAILED_CONSTRAINT: 1.0 if failed else 0.0},
    )


def test_failure_model_blames_the_value_that_never_ran() -> None:
    trials = [
        frozen({"bs": 64, "fusion": False}, failed=False),
        frozen({"bs": 128, "fusion": False}, failed=False),
        frozen({"bs": 64, "fusion": True}, failed=True),
        frozen({"bs": 128, "fusion": True}, failed=True),
    ]
    model = sampling.FailureModel(trials)
    assert model.log_ok({"bs": 64, "fusion": False}) == 0.0
    risky = model.log_ok({"bs": 512, "fusion": True})
    # blamed twice: P(runs) = 0.5 / (2 + 0.5)
    assert risky == pytest.approx(-1.609, abs=1e-3)


def test_failure_model_falls_back_to_pairs_of_values() -> None:
    trials = [
        frozen({"steps": 1, "topk": 1}, failed=False),
        frozen({"steps": 2, "topk": 2}, failed=False),
        frozen({"steps": 1, "topk": 2}, failed=True),  # each value ran elsewhere: the pair fails
    ]
    model = sampling.FailureModel(trials)
    assert model.log_ok({"steps": 1, "topk": 2}) < -1.0
    assert model.log_ok({"steps": 1, "topk": 1}) == 0.0
    assert model.log_ok({"steps": 2, "topk": 1}) == 0.0


def test_constraint_violations_count_as_failures_but_machinery_failures_do_not() -> None:
    slow = optuna.trial.create_trial(
        params={"x": "a"},
        distributions={"x": CategoricalDistribution(["a", "b"])},
        value=1.0,
        constraints={"ttft": 5.0},
    )
    crashed_driver = optuna.trial.create_trial(
        params={"x": "b"},
        distributions={"x": CategoricalDistribution(["a", "b"])},
        state=TrialState.FAIL,
    )
    model = sampling.FailureModel([slow, crashed_driver])
    assert model.log_ok({"x": "a"}) < 0.0
    assert model.log_ok({"x": "b"}) == 0.0


# ---------------------------------------------------------------------------------------------
# Failure-aware TPE against plain TPE


def failures_after_startup(sampler: optuna.samplers.BaseSampler, *, trials: int = 40) -> int:
    """Failed trials after the 5 random start-up ones, on a space where two values fail."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    failed = 0
    for number in range(trials):
        trial = study.ask()
        fusion = trial.suggest_categorical("fusion", [False, True])
        bs = trial.suggest_categorical("bs", [16, 32, 64, 128, 256, 512])
        mfs = trial.suggest_categorical("mfs", [0.7, 0.8, 0.9])
        if fusion or mfs == 0.7:
            failed += number >= 5
            sampling.tell_result(study, trial, value=None, failed=True)
        else:
            sampling.tell_result(study, trial, value=100.0 - abs(bs - 128) / 8, failed=False)
    return failed


def test_failure_aware_tpe_avoids_the_failing_region_plain_tpe_keeps_trying() -> None:
    kwargs: dict[str, Any] = {"multivariate": True, "group": True, "n_startup_trials": 5}
    aware = sum(
        failures_after_startup(sampling.FailureAwareTPESampler(seed=seed, **kwargs))
        for seed in range(4)
    )
    plain = sum(failures_after_startup(TPESampler(seed=seed, **kwargs)) for seed in range(4))
    assert aware <= 0.1 * 35 * 4  # at most one failure in ten after the start-up
    assert aware < plain / 3


def test_failure_aware_tpe_is_deterministic() -> None:
    def proposals() -> list[dict[str, Any]]:
        sampler = sampling.FailureAwareTPESampler(seed=3, multivariate=True, group=True)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for _ in range(15):
            trial = study.ask()
            x = trial.suggest_categorical("x", [1, 2, 3, 4])
            sampling.tell_result(study, trial, value=None if x == 4 else float(x), failed=x == 4)
        return [t.params for t in study.trials]

    assert proposals() == proposals()


# ---------------------------------------------------------------------------------------------
# Screening design and neighbours


def test_screening_design_changes_one_baseline_value_at_a_time(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, trials=40)
    base = baseline_config(spec)
    design = sampling.screening_design(spec, seed=0)
    # EAGLE3; bs 64 and 128; four points spread over the mfs range; fusion on
    assert len(design) == 8
    assert len(sampling.screening_design(make_spec(tmp_path, trials=9), seed=0)) == 9 // 4
    assert len({config_key(c) for c in design}) == len(design)
    assert config_key(base) not in {config_key(c) for c in design}
    for config in design:
        assert config == normalize_config(spec, config)
        changed = [k for k in base if config.get(k) != base[k]]
        assert len(changed) == 1, config
        if config["speculative-algorithm"] == "EAGLE3":  # activated knobs take their defaults
            assert config["speculative-num-steps"] == 3
            assert config["speculative-eagle-topk"] == 1
    assert design == sampling.screening_design(spec, seed=0)
    assert design != sampling.screening_design(spec, seed=1)


def test_neighbors_cover_each_parameter_and_spread_numeric_ranges(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    config = {**baseline_config(spec), "speculative-algorithm": "EAGLE3"}
    config = normalize_config(spec, sampling._complete(spec, config, random.Random(0)))
    found = sampling.neighbors(spec, config, rng=random.Random(0))
    by_param: dict[str, set[Any]] = {}
    for other in found:
        diff = [k for k in spec.params if other.get(k) != config.get(k)]
        assert len(diff) >= 1
        by_param.setdefault(diff[0], set()).add(other.get(diff[0]))
    assert by_param["cuda-graph-max-bs"] == {64, 128}
    assert by_param["speculative-num-steps"] == {1, 2}
    assert by_param["mem-fraction-static"] == {0.7, 0.7667, 0.8333, 0.9}
    assert by_param["speculative-algorithm"] == {None}


# ---------------------------------------------------------------------------------------------
# The sweep's searcher, driven by hand


def drive(spec: SweepSpec, score: Any, trials: int) -> list[dict[str, Any]]:
    """Propose and tell `trials` configurations; returns them in order."""
    from spec_sweep.search.searcher import SweepSearcher

    searcher = SweepSearcher(
        spec,
        history=[],
        requeue=[("t0000", baseline_config(spec), 1)],
        next_index=1,
    )
    out = []
    for i in range(trials):
        proposal = searcher.suggest(f"x{i}")
        if proposal is None:
            break
        config = proposal.config
        value = score(config)
        result = (
            {"failure_mode": "crash"}
            if value is None
            else {"failure_mode": "none", "output_throughput": value}
        )
        searcher.complete(f"x{i}", result)
        out.append(config)
    return out


def score(config: dict[str, Any]) -> float | None:
    if config["enable-flashinfer-allreduce-fusion"]:
        return None
    speculative = config["speculative-algorithm"] is not None
    return 100.0 - config["cuda-graph-max-bs"] / 16 - 30.0 * speculative


def test_searcher_runs_baseline_then_design_never_repeats_and_learns_failures(
    tmp_path: Path,
) -> None:
    spec = make_spec(tmp_path, trials=30, seed=2)
    configs = drive(spec, score, 30)
    keys = [config_key(c) for c in configs]
    assert configs[0] == baseline_config(spec)
    design = sampling.screening_design(spec, seed=2)
    assert keys[1 : 1 + len(design)] == [config_key(c) for c in design]
    assert len(set(keys)) == len(keys)
    after = configs[1 + len(design) :]
    assert sum(c["enable-flashinfer-allreduce-fusion"] for c in after) <= 1
    assert configs == drive(spec, score, 30)


def test_random_search_has_no_design(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, kind="random")
    configs = drive(spec, score, 12)
    keys = [config_key(c) for c in configs]
    assert configs[0] == baseline_config(spec)
    assert len(set(keys)) == len(keys)
    changed = [sum(c.get(k) != configs[0].get(k) for k in spec.params) for c in configs[1:]]
    assert max(changed) > 1  # uniform draws, not one-factor changes
