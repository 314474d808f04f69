"""One configuration for every load, through a whole simulated sweep: real Ray, MLflow, the
simulated H200 node as SGLang 0.5.17.

The space offers a short and a long EAGLE-3 chain (1 and 5 draft steps; the 1-step chain is the
baseline), so the node has a crossover
wide enough for a small, fast workload to see it: the 5-step chain wins at concurrency 1 (53 tok/s
against 45 in the profile's model) and the 1-step chain at 32 (1,132 against 966). After the
search the adaptive configuration is built from those results, written to a file per trial,
booted twice beside the best static configurations through the same Ray Tune trial path, and
judged at each level and over `workload.mix`; the summary and the report show it with the
launch command and the config file.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import harness
import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from spec_sweep.core import names
from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.backends import SimBackend
from spec_sweep.orchestrate.driver import sweep
from spec_sweep.present.terminal import print_summary

# About 8 trials: the simulated node paces tokens in real time (level 1's 32 requests of 12
# tokens take ~8 s at 50 tok/s). With 8 tokens a request the first token's share flattened the
# crossover (the 5-step chain only 1.10x the 1-step one at c1, the adaptive boot 1.064x against
# the 1.05x asked); with 12 the adaptive boot measured 1.185x. At its profile's own speed: run 3x
# faster (`--sim-speed 3`) it passed alone and in most runs of the two-worker suite, but once
# there the 5-step chain also won at c32 (steps a third as long are more exposed to the other
# worker's load), so the speed-up was taken back (~100 s, beside the other worker's files).
pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_crossover_sweep_builds_boots_and_judges_the_adaptive_configuration(
    project_dir: Path,
) -> None:
    # The simulated node paces tokens in real time, so a loaded machine can flatten the
    # crossover the test is about (twice in clean-clone CI runs the 5-step chain also won at
    # c32, and the build rightly said there was nothing to adapt; once, with three benchmarks
    # sharing the two cores, it won at c32 while the 1-step chain won at c8): then the sweep runs
    # once more from scratch. Everything below is asserted against what the run measured, never
    # against the profile's crossover.
    for attempt in (1, 2):
        outcome, spec, uri = _crossover_sweep(project_dir, attempt)
        build = outcome.view.adaptive.build if outcome.view.adaptive else None
        if build is None or build.ok or "won at every level" not in (build.reason or ""):
            break
    assert sorted(r.trial_id for r in outcome.records) == ["t0000", "t0001"]
    answer = outcome.view.adaptive
    assert answer is not None
    build = answer.build

    def measured(concurrency: int) -> list[int]:
        """The chains within `adaptive.close` of the level's best, as the run measured them."""
        at = {
            r.config["speculative-num-steps"]: r.metrics[f"output_throughput_c{concurrency}"]
            for r in outcome.records
        }
        return sorted(s for s, v in at.items() if v >= (1 - spec.adaptive.close) * max(at.values()))

    per_level = {c: measured(c) for c in (1, 8, 32)}
    if not build.ok and "won at every level" in (build.reason or ""):
        # Two loaded runs without a crossover: the build must have declined for that reason.
        assert len({tuple(v) for v in per_level.values()}) == 1, (build.reason, per_level)
        assert len(per_level[1]) == 1
        return
    assert build.ok, (build.reason, [(r.trial_id, r.metrics) for r in outcome.records])
    slots = json.loads(build.text or "")
    # Built from the search: each level's slot (keys 1, 3, 17: the lower edges) holds the chains
    # that measured within `adaptive.close` of the level's best (at the profile's speed the long
    # chain at 1 and the short one at 32; on a loaded machine the long chain's c32 once came
    # within 2% of the short one's, and the build rightly kept both).
    assert {p.concurrency: str(p.key) for p in build.levels} == {1: "1", 8: "3", 32: "17"}
    for plan in build.levels:
        assert slots[str(plan.key)] == {"candidate_steps": per_level[plan.concurrency]}
    assert build.config is not None
    assert build.config["speculative-adaptive"] is True

    # Booted twice, interleaved with the best static configurations, as confirmation boots.
    finished = outcome.history.finished
    boots = [tid for tid in finished if tid.startswith("adaptive.r")]
    assert sorted(boots) == ["adaptive.r1", "adaptive.r2"]
    for tid in boots:
        assert finished[tid].failure_mode is FailureMode.NONE, finished[tid].reason
        assert finished[tid].config == build.config
    statics = {tid.split(".r")[0] for tid in finished if ".r" in tid and tid not in boots}
    assert statics == {j.best_id for j in answer.levels} | {r.trial_id for r in answer.mix[1:]}

    # The trial wrote the file SGLang opens, launched its path, and the node ran adaptive mode.
    client = MlflowClient(uri)
    run_id = finished["adaptive.r1"].run_id
    assert finished["adaptive.r1"].tags[names.TAG_CONFIRMS] == "adaptive"
    folder = Path(client.download_artifacts(run_id, "", str(project_dir / "artifacts")))
    assert (folder / "adaptive-config.json").read_text().strip() == build.text
    command = (folder / "command.txt").read_text()
    assert "--speculative-adaptive --speculative-adaptive-config /" in command
    assert command.rstrip().split(" ")[-1].endswith("adaptive.r1/attempt1/adaptive-config.json")
    log = (folder / "server.log").read_text()
    assert "AdaptiveSpeculativeParams initialized: steps=" in log
    assert "speculative_adaptive disabled" not in log
    # Level 1's batches are all of one request, so they run in slot 1: when its candidates lack
    # the steps the server starts in (level 8's winner), the worker must switch. When both chains
    # measured within `adaptive.close` at level 1 (a loaded machine flattens the crossover), slot 1
    # holds the starting steps too and nothing forces a switch; any switch goes to a candidate.
    switch = r"Switch adaptive runtime state: steps \d+ -> (\d+)"
    switched = [int(m) for m in re.findall(switch, log)]
    assert set(switched) <= {s for slot in slots.values() for s in slot["candidate_steps"]}
    if build.initial_steps not in slots["1"]["candidate_steps"]:
        assert switched, (build.initial_steps, slots, log[-2000:])

    # Judged at every level and over the mix, from the two fresh boots of each: the adaptive
    # configuration against the best static chain there. How fast it is depends on the machine
    # the simulated node shares (it paces tokens in real time; once in clean-clone CI the
    # adaptive boots read 15% below the 5-step chain at c32), so the test checks the verdict
    # against the boots, not a speed-up; what the adaptive mode gains is measured on the H200
    # (tests/real/test_adaptive_real.py, docs/concepts/adaptive.md).
    assert [j.concurrency for j in answer.levels] == [1, 8, 32]
    assert answer.judged
    assert statics == {"t0000", "t0001"}  # the 1-step and the 5-step chain

    def pooled(trial_id: str, metric: str) -> float:
        return sum(finished[f"{trial_id}.r{k}"].metrics[metric] for k in (1, 2)) / 2

    for at_level in answer.levels:
        metric = f"output_throughput_c{at_level.concurrency}"
        means = {tid: pooled(tid, metric) for tid in ("t0000", "t0001")}
        assert at_level.best_id == max(means, key=lambda tid: (means[tid], tid))
        assert at_level.best_mean == pytest.approx(means[at_level.best_id])
        assert at_level.adaptive_mean == pytest.approx(pooled("adaptive", metric))
        diff = (pooled("adaptive", metric) - at_level.best_mean) / at_level.best_mean
        assert at_level.diff == pytest.approx(diff)
        assert at_level.bound is not None
        assert at_level.bound > 0
        expected = (
            "better"
            if diff > at_level.bound
            else "worse"
            if diff < -at_level.bound
            else "within noise"
        )
        assert at_level.verdict == expected
    assert answer.mix[0].trial_id == "adaptive"
    # The acceptance: within noise of the best static configuration at every level and above
    # each static one over the mix, or the answer says which level loses and why.
    for level in answer.levels:
        if level.verdict == "worse":
            assert f"it loses at c{level.concurrency}" in answer.reason
            assert level.why
    if answer.passes:
        assert answer.recommended == "adaptive"
    else:
        assert answer.recommended != "adaptive"
        assert "over the mix" in answer.reason
    print(answer.reason)  # the figures, for the record of a run

    # The record, the state folder, the summary and the report.
    parent = client.get_run(outcome.parent_run_id)
    assert parent.data.tags[names.TAG_ADAPTIVE] == answer.label
    assert parent.data.tags[names.TAG_ADAPTIVE_CONFIG] == build.text
    assert parent.data.tags[names.TAG_OVERALL] == answer.recommended
    assert parent.data.metrics[names.ADAPTIVE_MIX] == pytest.approx(answer.mix[0].mean)
    state_file = _state_dir(project_dir, attempt) / spec.name / "adaptive-config.json"
    assert outcome.adaptive_file == state_file
    assert state_file.read_text().strip() == build.text
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=400, color_system=None), outcome)
    text = buffer.getvalue()
    assert "one configuration for every load (adaptive speculative decoding, SGLang 0.5.17" in text
    assert f"recommended for every load: {answer.recommended}; launch it with:" in text
    if answer.passes:
        assert f"--speculative-adaptive-config {state_file}" in text
        assert f"{state_file}: {build.text}" in text
    assert outcome.report is not None
    html = outcome.report.read_text()
    assert "One configuration for every load" in html
    assert (outcome.report.parent / "adaptive-config.json").read_text().strip() == build.text
    report_files = {a.path for a in client.list_artifacts(outcome.parent_run_id, "report")}
    assert "report/adaptive-config.json" in report_files


def _trial(project_dir: Path, spec: Path, *sets: str) -> dict[str, object]:
    """`spec-sweep trial SPEC --simulate --set ... --json`, as a user runs it."""
    argv = [sys.executable, "-m", "spec_sweep", "trial", str(spec), "--simulate", "--json"]
    for item in sets:
        argv += ["--set", item]
    done = subprocess.run(argv, cwd=project_dir, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_switch_and_a_given_config_through_spec_sweep_trial(project_dir: Path) -> None:
    """During a search (or by hand) adaptive mode runs with a config from the spec's steps, or
    the file given; what SGLang refuses or turns off is never measured as adaptive."""
    node = {"sglang_version": "0.5.23", "sim_profile": "h200-nvlink-x8"}
    switch = harness.write_spec(
        project_dir / "sweeps", name="switch", node=node,
        search_space={"include": ["speculative_adaptive.yaml"]},
    )  # fmt: skip
    result = _trial(
        project_dir, switch, "speculative-algorithm=EAGLE3", "speculative-adaptive=true"
    )
    assert result["failure_mode"] == "none", result["reason"]
    command = list(result["command"])  # type: ignore[call-overload]
    path = Path(command[command.index("--speculative-adaptive-config") + 1])
    assert path == Path(str(result["trial_dir"])).resolve() / "adaptive-config.json"
    steps = [1, 2, 3, 4, 5, 6, 7]  # the space's steps, before any per-level result exists
    assert json.loads(path.read_text()) == {"1": {"candidate_steps": steps}}
    log = (path.parent / "server.log").read_text()
    assert f"AdaptiveSpeculativeParams initialized: steps=3, candidate_steps={steps}" in log

    plain = harness.write_spec(project_dir / "sweeps", name="given", node=node)
    given = project_dir / "mine.json"
    given.write_text('{"1": {"candidate_steps": [2, 3]}}')
    base = ["speculative-algorithm=EAGLE3", "speculative-adaptive=true"]
    result = _trial(project_dir, plain, *base, "speculative-num-steps=3",
                    f"speculative-adaptive-config={given}")  # fmt: skip
    assert result["failure_mode"] == "none", result["reason"]
    written = Path(str(result["trial_dir"])).resolve() / "adaptive-config.json"
    assert written.read_text().strip() == given.read_text()
    # SGLang's own refusals: the initial steps are not a candidate (a ValueError while it
    # builds its arguments), or top-k 2 turns adaptive mode off (then it is not measured).
    result = _trial(project_dir, plain, *base, "speculative-num-steps=5",
                    f"speculative-adaptive-config={given}")  # fmt: skip
    assert result["failure_mode"] == "invalid_args"
    assert "is not in the adaptive config candidate_steps" in str(result["reason"])
    result = _trial(project_dir, plain, *base, "speculative-eagle-topk=2",
                    "speculative-num-draft-tokens=4")  # fmt: skip
    assert result["failure_mode"] == "invalid_args"
    assert "SGLang turned adaptive speculative decoding off (speculative_eagle_topk=2" in str(
        result["reason"]
    )


def _crossover_sweep(project_dir: Path, attempt: int) -> tuple[Any, Any, str]:
    name = "adaptive" if attempt == 1 else f"adaptive{attempt}"
    spec = harness.make_spec(
        project_dir / "sweeps",
        name=name,
        node={
            "model": "deepseek-ai/DeepSeek-V3",
            "draft_model": "lmsys/DeepSeek-V3-0324-NextN",
            "sglang_version": "0.5.17",
            "sim_profile": "h200-nvlink-x8",
            "server_args": {"tp-size": 8, "speculative-algorithm": "EAGLE3"},
        },
        search_space={
            "include": [],
            "params": {"speculative-num-steps": {"choices": [1, 5], "default": 1}},
        },
        baseline=harness.DROP,
        workload={
            "output_len": 12,
            "num_prompts": 32,
            "concurrency": [1, 8, 32],
            "mix": {1: 0.2, 8: 0.5, 32: 0.3},
        },
        objective={"metric": "output_throughput_c1"},
        budget={"trials": 2, "confirm": 0, "confirm_repeats": 2, "remeasure_baseline": False},
    )
    uri = f"sqlite:///{project_dir / 'mlruns' / f'{name}.db'}"
    outcome = sweep(
        spec,
        backend=SimBackend(spec, grace_s=2.0),
        state_dir=_state_dir(project_dir, attempt),
        tracking_uri=uri,
    )
    return outcome, spec, uri


def _state_dir(project_dir: Path, attempt: int) -> Path:
    return project_dir / (".spec_sweep" if attempt == 1 else f".spec_sweep{attempt}")
