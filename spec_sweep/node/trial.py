"""One trial end to end: GPU guard, server launch, readiness, benchmark, teardown, classify.

This module owns `run_trial(spec, config) -> TrialResult`, usable with or without Ray. The order
is fixed: wait until the node's GPUs are free (NVML), launch the server with the trial's flags
and environment, wait for readiness while the log watcher looks for fatal lines, warm up and run
the benchmark while still watching the log and the process, stop the whole process group,
confirm the GPU memory was released, then classify (`classify.classify`). A configuration
that fails is a result (`TrialResult.failure_mode`), never an exception; `TrialError` is only
for the machinery around it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from spec_sweep.core.cost import cost_metrics
from spec_sweep.core.names import (
    AVAIL_METRIC,
    MEASURE_METRIC,
    WEIGHT_CACHE_METRIC,
    WEIGHTS_METRIC,
)
from spec_sweep.core.outcome import FailureMode, TrialResult
from spec_sweep.core.secrets import (
    MissingSecretError,
    Secrets,
    redact,
    secret_values,
    secrets_of,
)
from spec_sweep.node import gpu
from spec_sweep.node.adaptive import adaptive_verdict, write_config
from spec_sweep.node.boot_phases import parse_boot
from spec_sweep.node.classify import Classification, classify
from spec_sweep.node.client import BenchResult, run_benchmark_sync
from spec_sweep.node.command import ServerCommand, build_command, launch_for
from spec_sweep.node.goodput import GoodputResult, find_goodput
from spec_sweep.node.metrics import bench_metrics
from spec_sweep.node.ports import choose_server_port
from spec_sweep.node.procs import group_pids
from spec_sweep.node.quality import QualityCheck, check_quality
from spec_sweep.node.server import ReadyResult, ServerProcess, launch_server
from spec_sweep.node.sglang_env import server_version, version_mismatch
from spec_sweep.node.weight_cache import client_mapped, compile_env, daemon_pids, plan_client
from spec_sweep.spec import SweepSpec

__all__ = ["run_trial"]

_HOST = "127.0.0.1"


def run_trial(
    spec: SweepSpec,
    config: Mapping[str, Any],
    *,
    trial_dir: Path,
    trial_id: str = "trial",
    simulate: bool = False,
    extra_env: Mapping[str, str] | None = None,
    grace_s: float = 10.0,
    on_launch: Callable[[ServerProcess], None] | None = None,
    node_id: str | None = None,
    weight_cache_dir: Path | None = None,
    state_dir: Path | None = None,
) -> TrialResult:
    """Run one configuration through the whole trial path.

    Args:
        spec: The sweep.
        config: The configuration to run (parameter key -> value).
        trial_dir: Where the trial's files go (server.log, command.txt, bench.json, the server
            record used to clean up after a killed driver).
        trial_id: The trial's id.
        simulate: Launch the simulated node instead of the spec's backend (`--simulate`;
            `command.launch_for` decides what that means).
        extra_env: Environment added to the server's (e.g. simulator time scale).
        grace_s: Seconds between SIGTERM and SIGKILL at teardown.
        on_launch: Called with the server right after it started (for bookkeeping).
        node_id: The Ray node running the trial, recorded with the server for cleanup.
        weight_cache_dir: With `node.weight_cache`, the sweep's trials folder: where this
            node's weight-cache daemon is recorded (`weight_cache`); None boots from disk.
        state_dir: The sweep's state folder, where the quality gate finds the baseline's
            reference (`quality.baseline_reference`); None: the trial is not judged.

    Returns:
        The classified outcome; failures of the configuration are results.

    Raises:
        gpu.GpuBusyError: other processes held the node's GPUs for the whole wait (a
            `TrialError`).
    """
    started_at = time.time()
    t0 = time.monotonic()
    trial_dir.mkdir(parents=True, exist_ok=True)
    config = dict(config)
    secrets = secrets_of(spec)
    missing = _missing_secret(spec)
    if missing is not None:  # this node cannot start the server the spec describes
        return TrialResult(
            trial_id=trial_id,
            config=config,
            failure_mode=FailureMode.ENVIRONMENT,
            reason=missing,
            started_at=started_at,
        )
    use_gpus = launch_for(spec, simulate=simulate).uses_gpus(spec)
    cache_dir = weight_cache_dir if spec.node.weight_cache else None
    if use_gpus:
        # The weight-cache daemon holds the GPUs between trials on purpose.
        held = daemon_pids(cache_dir, node_id) if cache_dir is not None else ()
        gpu.wait_for_free_gpus(timeout_s=min(600.0, spec.node.boot_timeout_s), ignore_pids=held)
    client = None
    if cache_dir is not None:
        client = plan_client(
            spec,
            config,
            root=cache_dir,
            node_id=node_id,
            simulate=simulate,
            timeout_s=spec.node.boot_timeout_s,
        )
    port = choose_server_port(_HOST)
    launched = {**config, **client.overrides} if client is not None else config
    adaptive_path = write_config(spec, config, trial_dir)  # SGLang opens a path
    command = build_command(
        spec, launched, port=port, host=_HOST, simulate=simulate, adaptive_path=adaptive_path
    )
    extra_env = {**compile_env(spec), **(extra_env or {})}
    hide = secret_values(spec)
    (trial_dir / "command.txt").write_text(redact(command.shell(), hide) + "\n")
    server = launch_server(
        command,
        log_path=trial_dir / "server.log",
        host=_HOST,
        port=port,
        extra_env=extra_env,
        record_dir=trial_dir,
        node_id=node_id,
        resolved=_resolved(secrets, command),
        hide=hide,
    )
    if on_launch is not None:
        on_launch(server)
    where = _Where(trial_dir=trial_dir, trial_id=trial_id, state_dir=state_dir)
    run = _serve(spec, server, use_gpus=use_gpus, grace_s=grace_s, where=where)
    outcome = _classify(server, run)
    mode, reason = _quality_verdict(outcome, run.extras.quality)
    if run.version_mismatch is not None:  # the node, not the configuration: the sweep stops
        mode, reason = FailureMode.ENVIRONMENT, run.version_mismatch
    mode, reason = adaptive_verdict(spec, config, mode, reason, server.log_text())
    metrics = _metrics(
        spec, run, trial_dir=trial_dir, measured=mode is FailureMode.NONE, log=server.log_text()
    )
    if client is not None:
        # A client's log shows the daemon's weights as already taken: no memory facts from it.
        metrics = {k: v for k, v in metrics.items() if k not in (AVAIL_METRIC, WEIGHTS_METRIC)}
        note = client.note
        mapped = client_mapped(server.log_text())
        if mapped is not None:
            # only what SGLang says it did counts: a client that found no daemon (or one whose
            # weights do not match) loads from disk and says so
            metrics[WEIGHT_CACHE_METRIC] = 1.0 if mapped else 0.0
        if mapped is False:
            note += ", but SGLang found no matching daemon and loaded the weights from disk"
        reason = f"{reason} ({note})" if reason else note
    return TrialResult(
        trial_id=trial_id,
        config=config,
        failure_mode=mode,
        reason=reason,
        metrics=metrics,
        command=command.argv,
        env=dict(command.env),
        log_path=str(server.log_path),
        log_excerpt=outcome.excerpt,
        elapsed_s=round(time.monotonic() - t0, 3),
        prompt_source=run.bench.prompt_source if run.bench is not None else "",
        exit_code=run.exit_code,
        gpu_released=run.released,
        started_at=started_at,
    )


def _missing_secret(spec: SweepSpec) -> str | None:
    """Why this node cannot launch the spec's server: a secret whose value it does not know
    (after looking in its environment, `core.secrets.Secrets.fill_from_environment`)."""
    secrets = secrets_of(spec)
    if secrets is None:
        return None
    secrets.fill_from_environment()
    missing = secrets.missing()
    if not missing:
        return None
    try:
        secrets.resolve([missing[0].placeholder], {})
    except MissingSecretError as exc:
        return str(exc)
    return None


def _resolved(secrets: Secrets | None, command: ServerCommand) -> ServerCommand | None:
    """The command with its secrets' values (None: the spec has no secret)."""
    if secrets is None or not secrets.refs:
        return None
    return ServerCommand(*secrets.resolve(command.argv, command.env))


@dataclass
class _Served:
    """What happened to one launched server: readiness, the benchmark and its extras."""

    ready: ReadyResult
    bench: BenchResult | None
    extras: _Extras
    exit_code: int | None
    timed_out: bool
    released: bool | None
    peak_gib: float | None
    measure_s: float | None = None
    server_info: dict[str, Any] | None = None
    #: a line said one of the server's processes failed while the trial still ran it
    child_failed: str | None = None
    #: the server reports another SGLang version than the spec was checked against
    version_mismatch: str | None = None


def _serve(
    spec: SweepSpec,
    server: ServerProcess,
    *,
    use_gpus: bool,
    grace_s: float,
    where: _Where,
) -> _Served:
    """Wait for readiness, benchmark, then stop the server's group and (with GPUs) confirm its
    memory was released."""
    deadline = server.started + spec.budget.trial_timeout_s
    sampler = gpu.PeakMemorySampler(interval_s=0.5) if use_gpus else None
    bench: BenchResult | None = None
    extras: _Extras = _Extras()
    exit_code: int | None = None
    timed_out = False
    released: bool | None = None
    measure_s: float | None = None
    info: dict[str, Any] | None = None
    mismatch: str | None = None
    try:
        if sampler is not None:
            sampler.__enter__()
        boot_timeout = min(spec.node.boot_timeout_s, spec.budget.trial_timeout_s)
        ready = server.wait_ready(timeout_s=boot_timeout)
        exit_code = ready.exit_code
        if ready.ready:
            measuring = time.monotonic()
            # every version answers it (its `version`; 0.5.17+ also `startup_time`)
            info = _server_info(server)
            mismatch = version_mismatch(spec.node, server_version(info))
            if mismatch is None:  # nothing is measured under another version's rules
                bench, extras, exit_code, timed_out = _benchmark(
                    spec, server, deadline=deadline, where=where
                )
            measure_s = time.monotonic() - measuring
    finally:
        pids = group_pids(server.pgid)
        if exit_code is None and not server.stopped:
            exit_code = server.proc.poll()
        # before the trial stops the server: stopping it prints SGLang's SIGQUIT line too
        child_failed = server.watcher.child_failed
        # a server whose process failed has nothing to shut down cleanly, and its main process
        # may sit in SGLang's crash diagnostics, deaf to SIGTERM: a short grace, then SIGKILL
        server.stop(grace_s=min(grace_s, 0.5) if child_failed else grace_s)
        if sampler is not None:
            sampler.__exit__(None, None, None)
        if use_gpus:
            released = not gpu.wait_for_release(pids, timeout_s=30.0)
    return _Served(
        ready=ready,
        bench=bench,
        extras=extras,
        exit_code=exit_code,
        timed_out=timed_out,
        released=released,
        peak_gib=sampler.peak_gib if sampler is not None else None,
        measure_s=measure_s,
        server_info=info,
        child_failed=child_failed,
        version_mismatch=mismatch,
    )


def _server_info(server: ServerProcess) -> dict[str, Any] | None:
    """`/server_info` once the server is up: its `version`, and from SGLang 0.5.17 on its
    `startup_time`."""
    try:
        response = httpx.get(f"{server.base_url}/server_info", headers=server.headers, timeout=10.0)
        info = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _classify(server: ServerProcess, run: _Served) -> Classification:
    bench, extras = run.bench, run.extras
    bench_error = None
    if bench is not None and bench.error_count:
        total = sum(len(level.outputs) for level in bench.levels)
        bench_error = f"{bench.error_count}/{total} requests failed: {bench.first_error}"
    return classify(
        log_text=server.log_text(),
        exit_code=run.exit_code,
        ready=run.ready.ready,
        boot_timed_out=run.ready.timed_out,
        bench_hung=bool(bench is not None and bench.hung)
        or bool(extras.goodput is not None and extras.goodput.hung)
        or run.timed_out,
        bench_error=bench_error,
        child_failed=run.child_failed,
    )


def _quality_verdict(
    outcome: Classification, quality: QualityCheck | None
) -> tuple[FailureMode, str]:
    """The outcome with the quality gate applied: a measured trial whose greedy outputs
    disagree with the baseline's is `wrong_output`."""
    mode, reason = outcome.mode, outcome.reason
    if quality is not None:
        if mode is FailureMode.NONE and not quality.passed:
            mode, reason = FailureMode.WRONG_OUTPUT, f"wrong output: {quality.reason}"
        elif mode is FailureMode.NONE and quality.note:
            reason = f"{reason} ({quality.note})" if reason else quality.note
    return mode, reason


def _metrics(
    spec: SweepSpec, run: _Served, *, trial_dir: Path, measured: bool, log: str
) -> dict[str, float]:
    """What the trial measured (and its files: bench.json, goodput.json)."""
    bench, extras = run.bench, run.extras
    metrics: dict[str, float] = {}
    boot_s = round(run.ready.boot_s, 3) if run.ready.ready else None
    if boot_s is not None:
        metrics["boot_s"] = boot_s
    # Where the boot went, as SGLang timed it (also for a boot that failed: the phases it
    # reached), and the memory facts of its first weight load (`core.memory`).
    boot = parse_boot(log, server_info=run.server_info)
    metrics.update(boot.metrics(boot_s=boot_s))
    if run.measure_s is not None:
        metrics[MEASURE_METRIC] = round(run.measure_s, 3)
    if bench is not None:
        metrics.update(bench_metrics(bench, multi_level=spec.workload.multi_level))
        _write_bench(trial_dir / "bench.json", bench)
    if extras.goodput is not None:
        metrics.update(extras.goodput.metrics())
        _write_goodput(trial_dir / GOODPUT_NAME, extras.goodput)
    if extras.quality is not None:
        metrics.update(extras.quality.metrics())
    if run.peak_gib is not None:
        metrics["gpu_mem_peak_gib"] = round(run.peak_gib, 3)
    if measured:
        metrics.update(cost_metrics(spec, metrics))
    return metrics


@dataclass(frozen=True)
class _Where:
    """Where a trial's files go and its quality reference is found (`run_trial`'s args)."""

    trial_dir: Path
    trial_id: str
    state_dir: Path | None


@dataclass(frozen=True)
class _Extras:
    """What runs after the benchmark in the same boot: the goodput search, the quality gate."""

    goodput: GoodputResult | None = None
    quality: QualityCheck | None = None


def _benchmark(
    spec: SweepSpec,
    server: ServerProcess,
    *,
    deadline: float,
    where: _Where,
) -> tuple[BenchResult | None, _Extras, int | None, bool]:
    """Run the benchmark (then goodput and quality) in a thread, watching log, process, deadline.

    Returns:
        The benchmark result (None if it did not finish), the goodput search and quality check
        (when the spec asks and the benchmark finished cleanly), the server's exit code if it
        exited on its own, and whether the trial deadline passed.
    """
    box: dict[str, Any] = {}

    def work() -> None:
        bench = box["bench"] = run_benchmark_sync(
            server.base_url,
            spec.workload,
            model_path=spec.node.model,
            request_timeout_s=spec.node.request_timeout_s,
            headers=server.headers,
        )
        if bench.hung or bench.error_count:
            return
        if spec.workload.goodput is not None:
            box["goodput"] = find_goodput(
                server.base_url,
                spec.workload,
                model_path=spec.node.model,
                request_timeout_s=spec.node.request_timeout_s,
                headers=server.headers,
            )
            if box["goodput"].hung:
                return
        if spec.quality is not None:
            box["quality"] = check_quality(
                server.base_url,
                spec.quality,
                workload=spec.workload,
                model_path=spec.node.model,
                trial_dir=where.trial_dir,
                trial_id=where.trial_id,
                request_timeout_s=spec.node.request_timeout_s,
                state_dir=where.state_dir,
                headers=server.headers,
            )

    thread = threading.Thread(target=work, name="benchmark", daemon=True)
    thread.start()
    exit_code: int | None = None
    timed_out = False
    while thread.is_alive():
        if server.watcher.failed:
            exit_code = server.settle()
            break
        exit_code = server.proc.poll()
        if exit_code is not None:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        thread.join(0.05)
    if thread.is_alive():
        if exit_code is None:
            exit_code = server.proc.poll()
        # Stop the server so the client's requests fail fast, then collect what it measured.
        server.stop(grace_s=2.0)
        thread.join(timeout=10.0)
    extras = _Extras(goodput=box.get("goodput"), quality=box.get("quality"))
    return box.get("bench"), extras, exit_code, timed_out


#: The goodput search's levels, in the trial folder and its MLflow run.
GOODPUT_NAME = "goodput.json"


def _write_goodput(path: Path, goodput: GoodputResult) -> None:
    path.write_text(json.dumps(asdict(goodput), indent=1))


def _write_bench(path: Path, bench: BenchResult) -> None:
    data = {
        "prompt_source": bench.prompt_source,
        "hung": bench.hung,
        "error_count": bench.error_count,
        "first_error": bench.first_error,
        "levels": [
            {
                "concurrency": level.concurrency,
                "duration_s": level.duration_s,
                "server_accept_length": level.server_accept_length,
                "hung": level.hung,
                "requests": [asdict(out) for out in level.outputs],
            }
            for level in bench.levels
        ],
    }
    path.write_text(json.dumps(data))
