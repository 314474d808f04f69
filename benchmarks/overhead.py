"""Per-trial orchestration overhead of a sweep, against a plain loop calling `run_trial`.

Runs the same simulated configurations twice, with the simulator at its smallest boot time
(`SPEC_SWEEP_SIM_TIME_SCALE=0`) and a tiny workload:

* **plain loop**: a Python loop calling `spec_sweep.node.trial.run_trial` on each configuration
  (no Ray, no Optuna, no MLflow) — the reference;
* **sweep**: `spec_sweep.orchestrate.driver.sweep` (Ray Tune with actor reuse, the Optuna
  searcher, MLflow child runs written by the trainable), on a local Ray cluster started beforehand.

Overhead per trial = (wall time - sum of the trials' own `run_trial` time) / trials. The sweep's
overhead is then split into the MLflow record (the same `Tracker` calls the trainable makes,
timed directly), the Optuna ask/tell of the searcher (timed on an in-memory study with the same
sampler and history), and the rest (Ray Tune scheduling, actor round trips). Ray's start-up is
reported separately: it is paid once per sweep, not per trial.

Run: `.venv/bin/python benchmarks/overhead.py [--trials 20]` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SPEC_SWEEP_SIM_TIME_SCALE", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = """\
name: overhead
node:
  backend: sglang
  model: moonshotai/Kimi-K2.5
  draft_model: lightseekorg/kimi-k2.5-eagle3
  gpus: 8
  sglang_version: "0.5.13"
  server_args: {{tp-size: 8}}
  sim_profile: rtx-pro-6000-pcie-x8
search_space:
  include: [{fragments}]
baseline: {{speculative-algorithm: null}}
workload: {{dataset: builtin, output_len: 4, num_prompts: 1, concurrency: 1, warmup_prompts: 0}}
objective: {{metric: output_throughput, mode: max}}
budget: {{trials: {trials}}}
searcher: {{kind: random, seed: 0}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()

    import ray

    from spec_sweep.node.backends import SimBackend
    from spec_sweep.node.trial import run_trial
    from spec_sweep.orchestrate.cluster import NODE_RESOURCE
    from spec_sweep.orchestrate.driver import sweep
    from spec_sweep.spec_load import load_spec

    with tempfile.TemporaryDirectory(prefix="spec-sweep-overhead-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "search_spaces").mkdir()
        for name in ("speculative.yaml", "memory.yaml"):
            (tmp / "search_spaces" / name).write_text((ROOT / "search_spaces" / name).read_text())
        spec_path = tmp / "overhead.yaml"
        spec_path.write_text(
            SPEC.format(fragments="speculative.yaml, memory.yaml", trials=args.trials)
        )
        spec = load_spec(spec_path)

        t0 = time.monotonic()
        ray.init(
            num_gpus=8,
            resources={NODE_RESOURCE: 1},
            include_dashboard=False,
            log_to_driver=False,
            _temp_dir=str(Path(tempfile.gettempdir()) / f"ssw-ovh-{os.getpid()}"),
        )
        ray_start = time.monotonic() - t0

        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        # Warm the MLflow store (schema creation happens once per store, not per trial).
        from spec_sweep.store.tracker import Tracker

        _ = Tracker(uri, "warmup").experiment_id

        def timed_sweep(trials: int) -> tuple[float, float, list[dict[str, object]]]:
            path = tmp / f"overhead{trials}.yaml"
            path.write_text(
                SPEC.format(fragments="speculative.yaml, memory.yaml", trials=trials).replace(
                    "name: overhead", f"name: overhead{trials}"
                )
            )
            t0 = time.monotonic()
            swept = load_spec(path)
            outcome = sweep(
                swept,
                backend=SimBackend(swept, grace_s=2.0),
                state_dir=tmp / "state",
                tracking_uri=uri,
                report=False,
            )
            wall = time.monotonic() - t0
            records = [r for r in outcome.records if r.finished]
            trial_time = sum(r.elapsed_s or 0.0 for r in records)
            return wall, trial_time, [r.config for r in sorted(records, key=lambda r: r.trial_id)]

        small = max(3, args.trials // 4)
        small_wall, small_trial_time, _ = timed_sweep(small)
        sweep_wall, sweep_trial_time, configs = timed_sweep(args.trials)
        ray.shutdown()

        # Plain loop over the same configurations.
        t0 = time.monotonic()
        loop_trial_time = 0.0
        for i, config in enumerate(configs):
            result = run_trial(
                spec, config, trial_dir=tmp / "loop" / f"t{i}", grace_s=2.0, simulate=True
            )
            loop_trial_time += result.elapsed_s
        loop_wall = time.monotonic() - t0

        # The MLflow record of one trial, as the trainable writes it.
        tracker = Tracker(uri, "overhead-record")
        parent, _ = tracker.start_sweep(spec, state_id="bench", simulate=True)
        log = tmp / "server.log"
        log.write_text("x" * 20_000)
        times = []
        for config in configs:
            t0 = time.monotonic()
            tracker.finished_trial_by_config(parent, config)
            run_id = tracker.start_trial(parent, trial_id="t", config=config)
            tracker.finished_trial_by_id(parent, "t0000")
            from spec_sweep.core.outcome import FailureMode

            tracker.finish_trial(
                run_id,
                failure_mode=FailureMode.NONE,
                metrics={"output_throughput": 1.0},
                reason="ok",
                elapsed_s=1.0,
                command="python -m x",
                log_path=log,
            )
            times.append(time.monotonic() - t0)
        record_s = statistics.median(times)

        # The searcher's own work: ask + define-by-run + tell on the same sampler.
        import optuna

        from spec_sweep.search.sampling import make_sampler
        from spec_sweep.search.space import SearchSpace

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
        space = SearchSpace(spec.params)
        t0 = time.monotonic()
        for _ in configs:
            trial = study.ask()
            space.sample(trial)
            study.tell(trial, 1.0)
        optuna_s = (time.monotonic() - t0) / len(configs)

    n = len(configs)
    loop_over = (loop_wall - loop_trial_time) / n
    sweep_over = (sweep_wall - sweep_trial_time) / n
    small_over = small_wall - small_trial_time
    marginal = ((sweep_wall - sweep_trial_time) - small_over) / (n - small)
    fixed = small_over - small * marginal
    rest = marginal - record_s - optuna_s
    print(
        f"\n{n} simulated trials (boot scale 0, 4 output tokens); Ray start-up {ray_start:.1f} s "
        "(once per sweep)\n"
    )
    print(f"| {'path':<34} | {'wall s':>7} | {'trials s':>8} | {'overhead/trial s':>16} |")
    print(f"|{'-' * 36}|{'-' * 9}|{'-' * 10}|{'-' * 18}|")
    print(
        f"| {'plain loop over run_trial':<34} | {loop_wall:7.2f} | {loop_trial_time:8.2f} | "
        f"{loop_over:16.3f} |"
    )
    print(
        f"| {'sweep (Ray Tune + Optuna + MLflow)':<34} | {sweep_wall:7.2f} | "
        f"{sweep_trial_time:8.2f} | {sweep_over:16.3f} |"
    )
    print(f"\nsweep wall time / plain loop wall time: {sweep_wall / loop_wall:.2f}x")
    print(
        f"overhead = fixed {fixed:.2f} s per sweep (state, MLflow parent run, Tuner, first "
        f"actor) + {marginal:.3f} s per trial (fit over {small} and {n} trials)\n"
    )
    print("where the per-trial part goes:")
    print(f"| {'part':<44} | {'s/trial':>8} |")
    print(f"|{'-' * 46}|{'-' * 10}|")
    print(f"| {'MLflow record (lookup, child run, artifacts)':<44} | {record_s:8.3f} |")
    print(f"| {'Optuna ask + define-by-run + tell':<44} | {optuna_s:8.3f} |")
    print(f"| {'Ray Tune scheduling and actor round trips':<44} | {rest:8.3f} |")


if __name__ == "__main__":
    main()
