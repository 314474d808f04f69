"""Who answers a trial: the node's own server, the simulated node, or a recorded table.

This module owns the `TrialBackend` protocol and its three implementations. The command line
chooses one, once (`make_backend`: the only reader of `--replay`, `--simulate` and the spec's
`node.backend`), and hands it down: the sweep driver, the trainable in the Ray worker and
`spec-sweep trial` only ever call `backend.run(config, ...)` and ask it neutral questions:
`simulated` (are the node's GPUs pretend, so a local cluster must offer them), `launches` (does
a trial run a process on the node, so the node's system metrics describe it), `hardware()` and
`fingerprint()` (what the trials run on, for reuse across sweeps). No other module knows which
backend runs.

- `SGLangBackend`: launches the server the spec describes (`node.launch`, SGLang by default)
  through the trial path of `trial.run_trial`, with the GPU guard when it needs GPUs.
- `SimBackend` (`--simulate`): the same trial path, but the server is the simulated node of
  `node.sim_profile` (a real HTTP server process), and no GPU is touched.
- `ReplayBackend` (`--replay FILE.csv`): no server at all; each trial is answered from a
  recorded replay table (`store.replay`), with optional seeded noise; a configuration the table
  lacks ends as `invalid_args` naming it.

Backends are frozen dataclasses, so Ray can ship them to the worker that runs a trial.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from spec_sweep.core.config import config_key, normalize_config
from spec_sweep.core.cost import cost_metrics
from spec_sweep.core.outcome import FailureMode, TrialResult
from spec_sweep.core.secrets import redact, secret_values
from spec_sweep.errors import SpecError
from spec_sweep.node.command import ServerCommand, build_command, node_fingerprint
from spec_sweep.node.server import ServerProcess
from spec_sweep.node.trial import run_trial
from spec_sweep.spec import Backend, SweepSpec
from spec_sweep.store.replay import ReplayTable, load_replay

__all__ = ["ReplayBackend", "SGLangBackend", "SimBackend", "TrialBackend", "make_backend"]


@runtime_checkable
class TrialBackend(Protocol):
    """What answers the trials of a sweep."""

    @property
    def name(self) -> str:
        """`sglang`, `sim` or `replay` (recorded with the sweep)."""
        ...

    @property
    def simulated(self) -> bool:
        """Whether the node's GPUs are pretend (a local cluster then offers `node.gpus`)."""
        ...

    @property
    def launches(self) -> bool:
        """Whether a trial runs a server on the node (its system metrics are then worth logging)."""
        ...

    @property
    def spec(self) -> SweepSpec:
        """The sweep the backend answers for."""
        ...

    def hardware(self) -> str:
        """What the trials run on, for the node fingerprint (read on the node running it)."""
        ...

    def fingerprint(self) -> str:
        """What makes this node's measurements comparable (`command.node_fingerprint`)."""
        ...

    def command(self, config: Mapping[str, Any]) -> ServerCommand:
        """The server command a trial of `config` runs (without host and port)."""
        ...

    def run(
        self,
        config: Mapping[str, Any],
        *,
        trial_dir: Path,
        trial_id: str = "trial",
        node_id: str | None = None,
        on_launch: Callable[[ServerProcess], None] | None = None,
        state_dir: Path | None = None,
    ) -> TrialResult:
        """Run one configuration; a configuration that fails is a result, never an exception.

        Args:
            config: The configuration (parameter key -> value).
            trial_dir: Where the trial's files go (server.log, command.txt, bench.json).
            trial_id: The trial's id.
            node_id: The Ray node running the trial, recorded with the server for cleanup.
            on_launch: Called with the server right after it started (server backends only).
            state_dir: The sweep's state folder: the quality gate judges the trial against
                the reference of that sweep's baseline (`quality.baseline_reference`).
        """
        ...


@dataclass(frozen=True)
class SGLangBackend:
    """The node's own server, as the spec launches it (`node.launch`, SGLang by default)."""

    spec: SweepSpec
    extra_env: dict[str, str] = field(default_factory=dict)
    grace_s: float = 10.0
    #: The sweep's trials folder, where each node's weight-cache daemon is recorded (set by the
    #: sweep's run when `node.weight_cache` is on; None: every trial boots from disk).
    weight_cache_dir: Path | None = None

    @property
    def name(self) -> str:
        """`sglang` (or `sim` when the spec's node itself is the simulator)."""
        return self.spec.node.backend.value

    @property
    def simulated(self) -> bool:
        """The GPUs are real."""
        return False

    @property
    def launches(self) -> bool:
        """A trial runs a server on the node."""
        return True

    def hardware(self) -> str:
        """The GPUs of this node, from NVML."""
        from spec_sweep.node.gpu import describe_gpus

        return describe_gpus()

    def fingerprint(self) -> str:
        """The node fingerprint of this node's measurements."""
        return node_fingerprint(self.spec, hardware=self.hardware(), simulate=self.simulated)

    def command(self, config: Mapping[str, Any]) -> ServerCommand:
        """The spec's server command for `config`."""
        return build_command(self.spec, config, simulate=self.simulated)

    def run(
        self,
        config: Mapping[str, Any],
        *,
        trial_dir: Path,
        trial_id: str = "trial",
        node_id: str | None = None,
        on_launch: Callable[[ServerProcess], None] | None = None,
        state_dir: Path | None = None,
    ) -> TrialResult:
        """Launch, benchmark, tear down and classify (`trial.run_trial`)."""
        return run_trial(
            self.spec,
            config,
            trial_dir=trial_dir,
            trial_id=trial_id,
            simulate=self.simulated,
            extra_env=self.trial_env(trial_id),
            grace_s=self.grace_s,
            on_launch=on_launch,
            node_id=node_id,
            weight_cache_dir=self.weight_cache_dir,
            state_dir=state_dir,
        )

    def trial_env(self, trial_id: str) -> dict[str, str]:
        """The environment a trial's server gets besides the spec's own."""
        del trial_id  # the node's own server is the same for every trial
        return dict(self.extra_env)


@dataclass(frozen=True)
class SimBackend(SGLangBackend):
    """The simulated node of `node.sim_profile`, launched through the same trial path."""

    @property
    def name(self) -> str:
        """`sim`."""
        return "sim"

    @property
    def simulated(self) -> bool:
        """The GPUs are pretend."""
        return True

    def hardware(self) -> str:
        """The simulated profile."""
        return f"sim:{self.spec.node.sim_profile}"

    def trial_env(self, trial_id: str) -> dict[str, str]:
        """Every trial is a fresh boot with its own run-to-run noise.

        The simulated node draws its run-to-run noise per boot id (`SPEC_SWEEP_SIM_BOOT_ID`):
        the searcher's seed and the trial id, so a confirmation repeat of a configuration
        measures differently from its first boot, and the same sweep reproduces exactly.
        """
        env = {"SPEC_SWEEP_SIM_BOOT_ID": f"{self.spec.searcher.seed}/{trial_id}"}
        env.update(self.extra_env)
        return env


@dataclass(frozen=True)
class ReplayBackend:
    """Trials answered from a recorded replay table; nothing is launched."""

    spec: SweepSpec
    table: ReplayTable
    noise: float = 0.0

    @property
    def name(self) -> str:
        """`replay`."""
        return "replay"

    @property
    def simulated(self) -> bool:
        """The GPUs are pretend."""
        return True

    @property
    def launches(self) -> bool:
        """Nothing runs: a trial is a row of the table."""
        return False

    def hardware(self) -> str:
        """The table the answers come from."""
        return f"replay:{self.table.path}"

    def fingerprint(self) -> str:
        """The fingerprint of the table's answers (with the node's own launch command)."""
        return node_fingerprint(self.spec, hardware=self.hardware(), simulate=False)

    def command(self, config: Mapping[str, Any]) -> ServerCommand:
        """The command the recorded trial ran (the spec's server)."""
        return build_command(self.spec, config, simulate=True)

    def run(
        self,
        config: Mapping[str, Any],
        *,
        trial_dir: Path,
        trial_id: str = "trial",
        node_id: str | None = None,
        on_launch: Callable[[ServerProcess], None] | None = None,
        state_dir: Path | None = None,
    ) -> TrialResult:
        """Answer from the table (a configuration it lacks ends as `invalid_args`)."""
        del node_id, on_launch, state_dir  # nothing is launched or judged
        fields = _replay_result(
            self.spec,
            config,
            self.table,
            trial_dir=trial_dir,
            noise=self.noise,
            seed=self.spec.searcher.seed,
        )
        result = TrialResult(trial_id=trial_id, **fields)
        if result.ok:  # priced with this spec's node, as a launched trial is
            result.metrics.update(cost_metrics(self.spec, result.metrics))
        return result


#: Metrics whose value does not scale with the node's speed (no noise is applied to them).
_NO_NOISE = ("accept_length", "speedup_vs_baseline")


def _replay_result(
    spec: SweepSpec,
    config: Mapping[str, Any],
    table: ReplayTable,
    *,
    trial_dir: Path,
    noise: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Answer one trial from the table; returns the fields of a `TrialResult`.

    The trial folder gets the same files a launched trial leaves (`command.txt` with the command
    that would have run, `server.log` saying where the answer came from, and `bench.json` when
    the recorded trial got as far as its benchmark).
    """
    started_at = time.time()
    t0 = time.monotonic()
    config = normalize_config(spec, config)
    command = build_command(spec, config)
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "command.txt").write_text(redact(command.shell(), secret_values(spec)) + "\n")
    row = table.lookup(config)
    if row is None:
        mode = FailureMode.INVALID_ARGS
        shown = json.dumps(config)
        reason = f"invalid args: replay table {table.path} has no row for configuration {shown}"
        log = f"[replay] {reason}\n"
        metrics: dict[str, float] = {}
    else:
        mode = row.failure_mode
        metrics = _with_noise(row.metrics, config, noise=noise, seed=seed)
        reason = f"{mode.value}: replayed from {table.path} line {row.line}"
        log = f"[replay] answered from {table.path} line {row.line}: failure_mode={mode.value}\n"
    (trial_dir / "server.log").write_text(log)
    if mode in (FailureMode.NONE, FailureMode.HANG, FailureMode.BENCH_ERROR):
        # A live trial leaves bench.json when its benchmark ran; so does a replayed one.
        bench = {"replayed_from": table.path, "line": row.line if row else None, "noise": noise}
        (trial_dir / "bench.json").write_text(json.dumps(bench))
    return {
        "config": dict(config),
        "failure_mode": mode,
        "reason": reason,
        "metrics": metrics,
        "command": command.argv,
        "env": dict(command.env),
        "log_path": str(trial_dir / "server.log"),
        "log_excerpt": log.strip() if mode is not FailureMode.NONE else "",
        "elapsed_s": round(time.monotonic() - t0, 4),
        "prompt_source": f"replay table {Path(table.path).name}",
        "started_at": started_at,
    }


def _with_noise(
    metrics: Mapping[str, float], config: Mapping[str, Any], *, noise: float, seed: int
) -> dict[str, float]:
    if noise <= 0:
        return dict(metrics)
    digest = hashlib.sha256(f"{seed}:{config_key(config)}".encode()).hexdigest()
    rng = random.Random(int(digest[:16], 16))
    out: dict[str, float] = {}
    for name, value in metrics.items():
        base = name.rsplit("_c", 1)[0] if "_c" in name else name
        out[name] = value if base in _NO_NOISE else value * max(0.0, rng.gauss(1.0, noise))
    return out


def make_backend(
    spec: SweepSpec,
    *,
    simulate: bool = False,
    replay: str | Path | None = None,
    replay_noise: float = 0.0,
    sim_env: Mapping[str, str] | None = None,
    grace_s: float = 10.0,
) -> TrialBackend:
    """The backend the command line asked for: `--replay`, else `--simulate`, else the node.

    Args:
        spec: The sweep.
        simulate: `--simulate`: the simulated node of `node.sim_profile`.
        replay: `--replay FILE.csv`: answer from this table (implies a simulated node).
        replay_noise: `--replay-noise`: relative sd of seeded noise on replayed metrics.
        sim_env: Environment for simulated servers (e.g. `SPEC_SWEEP_SIM_TIME_SCALE`), passed
            explicitly so it reaches servers on every node of a cluster.
        grace_s: SIGTERM-to-SIGKILL grace at server teardown.

    Raises:
        SpecError: `--replay-noise` without `--replay`, a table that does not fit the spec, or
            `--simulate` without a hardware profile to simulate.
    """
    if replay is not None:
        return ReplayBackend(spec, load_replay(replay, spec), noise=replay_noise)
    if replay_noise:
        raise SpecError("--replay-noise: only applies with --replay FILE.csv")
    if simulate:
        if spec.node.sim_profile is None and spec.node.backend is not Backend.SIM:
            raise SpecError(
                f"{spec.source or 'the spec'}: node.sim_profile: missing: --simulate needs a "
                "hardware profile (e.g. rtx-pro-6000-pcie-x8)"
            )
        return SimBackend(spec, extra_env=dict(sim_env or {}), grace_s=grace_s)
    return SGLangBackend(spec, grace_s=grace_s)
