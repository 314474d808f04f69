"""Who answers a trial: the node's own server, the simulated node, or a recorded table.

This module owns the `TrialBackend` protocol and its three implementations. The command line
chooses one, once (`make_backend`), and hands it down: the sweep driver, the trainable in the
Ray worker and `spec-sweep trial` only ever call `backend.run(config, ...)` and ask it three
neutral questions: `simulated` (are the node's GPUs pretend, so a local cluster must offer
them), `launches` (does a trial run a process on the node, so the node's system metrics
describe it) and `hardware()` (what the trials run on, for the node fingerprint of reuse). No
other module knows which backend runs.

- `SGLangBackend`: launches the server the spec describes (`node.launch`, SGLang by default)
  through the trial path of `trial.run_trial`, with the GPU guard when it needs GPUs.
- `SimBackend` (`--simulate`): the same trial path, but the server is the simulated node of
  `node.sim_profile` (a real HTTP server process), and no GPU is touched.
- `ReplayBackend` (`--replay FILE.csv`): no server at all; each trial is answered from a
  recorded replay table (`replay`), with optional seeded noise.

Backends are frozen dataclasses, so Ray can ship them to the worker that runs a trial.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from spec_sweep.cost import cost_metrics
from spec_sweep.errors import SpecError
from spec_sweep.replay import ReplayTable, load_replay, replay_result
from spec_sweep.server import ServerProcess
from spec_sweep.space import ServerCommand, build_command
from spec_sweep.spec import SweepSpec
from spec_sweep.trial import TrialResult, run_trial

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
    ) -> TrialResult:
        """Run one configuration; a configuration that fails is a result, never an exception.

        Args:
            config: The configuration (parameter key -> value).
            trial_dir: Where the trial's files go (server.log, command.txt, bench.json).
            trial_id: The trial's id.
            node_id: The Ray node running the trial, recorded with the server for cleanup.
            on_launch: Called with the server right after it started (server backends only).
        """
        ...


@dataclass(frozen=True)
class SGLangBackend:
    """The node's own server, as the spec launches it (`node.launch`, SGLang by default)."""

    spec: SweepSpec
    extra_env: dict[str, str] = field(default_factory=dict)
    grace_s: float = 10.0

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
        from spec_sweep.gpu import describe_gpus

        return describe_gpus()

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
    ) -> TrialResult:
        """Launch, benchmark, tear down and classify (`trial.run_trial`)."""
        return run_trial(
            self.spec,
            config,
            trial_dir=trial_dir,
            trial_id=trial_id,
            simulate=self.simulated,
            extra_env=self.extra_env,
            grace_s=self.grace_s,
            on_launch=on_launch,
            node_id=node_id,
        )


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

    def run(
        self,
        config: Mapping[str, Any],
        *,
        trial_dir: Path,
        trial_id: str = "trial",
        node_id: str | None = None,
        on_launch: Callable[[ServerProcess], None] | None = None,
    ) -> TrialResult:
        """As `SGLangBackend.run`; every trial is a fresh boot with its own run-to-run noise.

        The simulated node draws its run-to-run noise per boot id (`SPEC_SWEEP_SIM_BOOT_ID`):
        the searcher's seed and the trial id, so a confirmation repeat of a configuration
        measures differently from its first boot, and the same sweep reproduces exactly.
        """
        env = {"SPEC_SWEEP_SIM_BOOT_ID": f"{self.spec.searcher.seed}/{trial_id}"}
        env.update(self.extra_env)
        return run_trial(
            self.spec,
            config,
            trial_dir=trial_dir,
            trial_id=trial_id,
            simulate=True,
            extra_env=env,
            grace_s=self.grace_s,
            on_launch=on_launch,
            node_id=node_id,
        )


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
    ) -> TrialResult:
        """Answer from the table (a configuration it lacks ends as `invalid_args`)."""
        del node_id, on_launch  # nothing is launched
        fields = replay_result(
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
        SpecError: `--replay-noise` without `--replay`, or a table that does not fit the spec.
    """
    if replay is not None:
        return ReplayBackend(spec, load_replay(replay, spec), noise=replay_noise)
    if replay_noise:
        raise SpecError("--replay-noise: only applies with --replay FILE.csv")
    if simulate:
        return SimBackend(spec, extra_env=dict(sim_env or {}), grace_s=grace_s)
    return SGLangBackend(spec, grace_s=grace_s)
