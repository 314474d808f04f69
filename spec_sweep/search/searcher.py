"""The Optuna side of a sweep: which configuration comes next, and what each outcome teaches.

This module owns `SweepSearcher`, built on Optuna's public ask-and-tell interface (no Ray: the
driver wraps it in a thin Ray Tune `Searcher`). Order of proposals: the queue (the baseline on a
fresh sweep, interrupted trials on a resumed one, under their old ids), then for TPE the
screening design (`sampling.screening_design`: one-factor changes of the baseline, a quarter of
the budget), then the model. With the failure-aware TPE searcher the model's proposals take
turns with domain knowledge (`spec_guide.SpecGuide`): a tree the speculative model ranks first
(at once when the speculative branch is below its share of the trials), a system-knob step from
the best trial, then TPE; and SGLang's tree rules are applied before launch, so a tree SGLang
rejects is never launched and one it rewrites is proposed as what actually runs. It never
proposes a configuration already measured or running: a model proposal that repeats one is asked
again (three times); if the model insists, the sweep takes a local step instead, an unmeasured
neighbour of that configuration (one value changed), the one least likely to fail by
`sampling.FailureModel`, seeded ties. Random search stays random: it just draws again. A grid
search enumerates its points and skips, without a boot, those SGLang's tree rules reject or
rewrite into a configuration already run.

A trial teaches the searcher one way, whether it is read from the record when the searcher is
built (a resumed sweep) or reported by Ray Tune as it ends (`_learn`): a measured trial
(`History.is_measured`) is told as COMPLETE with its constraint values; any other classified
outcome as FAIL with a violated `failed` constraint, which the failure-aware TPE sampler learns
from; a trial whose machinery failed (no classified outcome) as FAIL without it, which every
sampler ignores (docs/design.md, "Failure modes").
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from spec_sweep.core.config import Config, config_key, normalize_config
from spec_sweep.core.converge import Convergence, convergence, search_noise
from spec_sweep.core.ids import trial_name
from spec_sweep.core.memory import Observation, observations, predict_oom
from spec_sweep.core.names import AVAIL_METRIC, WEIGHTS_METRIC
from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import FailureMode, TrialReport
from spec_sweep.core.record import TrialRecord
from spec_sweep.search import sampling
from spec_sweep.search.space import SearchSpace
from spec_sweep.search.spec_guide import SpecGuide
from spec_sweep.search.tree_rules import check_tree
from spec_sweep.spec import Scalar, SweepSpec

__all__ = ["Proposal", "SweepSearcher"]

_MAX_REPEATS = 200
_MODEL_REPEATS = 3


@dataclass(frozen=True)
class Proposal:
    """One proposed trial.

    Attributes:
        trial_id: Our trial id (`t0000` is the baseline).
        attempt: The attempt number (> 1 when an interrupted trial runs again).
        params: The parameter values as Optuna proposed them.
        config: The normalized configuration (active parameters, in dependency order).
        predicted: Why it cannot boot by SGLang's own memory rule (`core.memory`): recorded
            as a predicted `oom` without a boot. None for a trial to launch.
    """

    trial_id: str
    attempt: int
    params: dict[str, Any]
    config: Config
    predicted: str | None = None


class SweepSearcher:
    """Proposes the sweep's trials in a fixed order, never twice, learning from failures."""

    def __init__(
        self,
        spec: SweepSpec,
        *,
        history: Sequence[TrialRecord],
        requeue: Sequence[tuple[str, Config, int]],
        next_index: int,
        failure_aware: bool = True,
    ) -> None:
        """Build the study and replay the finished trials into it.

        Args:
            spec: The sweep.
            history: Finished trials from the record (told to Optuna once each).
            requeue: (trial id, configuration, attempt) to run first, in order: the baseline on
                a fresh sweep, interrupted trials on a resumed one.
            next_index: Index of the next new trial id.
            failure_aware: Let the sampler (and the local steps) learn from failed trials.
        """
        self._spec = spec
        self._objective = Objective.of(spec)
        self._space = SearchSpace(spec.params)
        self.study = optuna.create_study(
            sampler=sampling.make_sampler(spec, failure_aware=failure_aware),
            pruner=optuna.pruners.NopPruner(),
            study_name="optuna",
            direction=self._objective.direction,
        )
        self._trials: dict[str, optuna.Trial] = {}
        self._configs: dict[str, Config] = {}
        self._completed: set[str] = set()
        self._queue = list(requeue)
        self._next_index = next_index
        self._seen: set[str] = set()
        self._failure_aware = failure_aware
        self._rng = random.Random(f"steps:{spec.searcher.seed}")
        self.exhausted = False
        # `budget.until: converged` (`core.converge`): every search trial's value, in order.
        self.converged: Convergence | None = None
        self._values: list[float | None] = []
        self._measured: list[Mapping[str, float]] = []
        # Domain knowledge (`spec_guide`): SGLang's tree rules before launch, and the
        # speculative branch's share of the budget. Part of the failure-aware TPE searcher.
        self._guide: SpecGuide | None = None
        if spec.searcher.kind == "tpe" and failure_aware:
            self._guide = SpecGuide(spec, seed=spec.searcher.seed)
        self._gates = sampling.gate_params(spec) if failure_aware else frozenset()
        # A grid search applies SGLang's tree rules too (`_launchable`), without the guide's models.
        self._grid = spec.searcher.kind == "grid"
        # Optuna's grid draws its points at random, each once per study; a resumed study does
        # not know which were drawn before, and most points may repeat a measured configuration
        # (inactive values, trees SGLang rejects or rewrites): a grid asks until every point was
        # drawn, not a fixed number of times.
        self._max_repeats = (
            max(_MAX_REPEATS, math.prod(len(p.values()) for p in spec.params.values()) + 1)
            if self._grid
            else _MAX_REPEATS
        )
        self._turn = 0  # the guide's proposals take turns with TPE's
        # What earlier trials' logs said about GPU memory (`core.memory`): the pre-launch check.
        self._memory: list[Observation] = observations(history)
        self._ids: dict[str, str] = {}
        for record in history:
            mode = record.failure_mode or FailureMode.CRASH
            value = self._learn(record.config, mode, record.metrics)
            sampling.add_finished(
                self.study,
                spec,
                record.config,
                value=value,
                failed=value is None,
                constraints=self._objective.violations(record.metrics),
                trial_id=record.trial_id,
            )
            self._seen.add(config_key(record.config))
            if (effective := self._effective_key(record.config)) is not None:
                self._seen.add(effective)
        for _, config, _ in self._queue:
            self._seen.add(config_key(config))
        self._design: list[Config] = []
        if spec.searcher.kind == "tpe":
            design = sampling.screening_design(spec, seed=spec.searcher.seed)
            self._design = [c for c in design if config_key(c) not in self._seen]

    def suggest(self, key: str) -> Proposal | None:
        """The next trial for the scheduler's slot `key`; None when nothing is left to propose.

        Args:
            key: The scheduler's id of the slot (opaque; passed back to `complete`).
        """
        if self._queue:
            our_id, config, attempt = self._queue.pop(0)
            return self._fixed(key, config, our_id=our_id, attempt=attempt)
        if self._stop():
            return None
        return self._checked(self._next(key))

    def _stop(self) -> bool:
        """Whether the search has converged (`budget.until: converged`, after the design)."""
        budget = self._spec.budget
        if budget.until != "converged" or self._design:
            return False
        if self.converged is None or not self.converged.converged:
            gain = self._guide.predicted_gain(seen=self._seen) if self._guide is not None else None
            self.converged = convergence(
                self._values,
                maximize=self._objective.direction == "maximize",
                noise=search_noise(self._measured, self._spec.objective.metric),
                predicted_gain=gain,
                patience=budget.patience,
            )
        return self.converged.converged

    def _next(self, key: str) -> Proposal | None:
        """The design's next configuration, the guide's turn, or the model's proposal."""
        while self._design:
            launch = self._launchable(self._design.pop(0))
            if launch is not None:
                return self._fixed(key, launch)
        guided = self._guided()
        if guided is not None:
            return self._fixed(key, guided)
        return self._from_model(key)

    def _checked(self, proposal: Proposal | None) -> Proposal | None:
        """The proposal, marked `predicted` when SGLang's memory rule says it cannot boot."""
        if proposal is None:
            return None
        why = predict_oom(self._spec, proposal.config, self._memory)
        if why is None:
            return proposal
        return Proposal(proposal.trial_id, proposal.attempt, proposal.params, proposal.config, why)

    def _guided(self) -> Config | None:
        """The guide's turn, if it is one: a tree the speculative model ranks first (at once
        when the branch is below its share; otherwise a knob step when the model predicts that
        tree to lose), then a system-knob step from the best trial; the third turn is TPE's."""
        if self._guide is None:
            return None
        turn, self._turn = self._turn % 3, self._turn + 1
        if self._guide.due():
            return self._guide.propose(seen=self._seen)
        if turn == 0:
            return self._guide.propose(seen=self._seen, step_if_losing=True)
        if turn == 1:
            return self._guide.exploit(seen=self._seen)
        return None

    def _from_model(self, key: str) -> Proposal | None:
        """The sampler's proposal, asked again while it repeats what ran (a local step or a
        random draw after `_MODEL_REPEATS`); None (and `exhausted`) when nothing new is left."""
        repeated: Config | None = None
        for attempt in range(self._max_repeats):
            if attempt >= _MODEL_REPEATS and repeated is not None and not self._grid:
                step = self._local_step(repeated)
                if step is not None:
                    return self._fixed(key, step)
            if attempt < _MODEL_REPEATS or self._spec.searcher.kind != "tpe":
                params = self._ask(key)
            else:
                # No unmeasured neighbour: explore with one random proposal.
                seed = self._rng.randrange(2**31)
                with sampling.random_sampling(self.study, seed=seed):
                    params = self._ask(key)
            config = normalize_config(self._spec, params)
            if self._guide is not None or self._grid:
                launch = self._launchable(config)
                if launch is None or config_key(launch) != config_key(config):
                    # SGLang rejects it (never launched) or runs another configuration: Optuna
                    # forgets the proposal; the rewritten one is proposed as what runs.
                    sampling.discard_repeat(self.study, self._trials.pop(key))
                    if launch is not None:
                        return self._fixed(key, launch)
                    repeated = config
                    continue
            if config_key(config) not in self._seen:
                return self._accept(key, params, config)
            # A repeat: answered by the record, never launched. Optuna forgets it.
            repeated = config
            sampling.discard_repeat(self.study, self._trials.pop(key))
        self.exhausted = True
        return None

    def complete(
        self,
        key: str,
        report: TrialReport | Mapping[str, Any] | None = None,
        *,
        error: bool = False,
    ) -> None:
        """Tell Optuna how the trial of slot `key` ended (see the module doc).

        Args:
            key: The slot the trial was proposed for.
            report: What the trial reported, or the dict it reported to Tune
                (`TrialReport.to_tune`).
            error: The trial raised (the machinery failed, not the configuration).
        """
        if key in self._completed or key not in self._trials:
            return
        if report is not None and not isinstance(report, TrialReport):
            report = TrialReport.from_tune(report)
        ot_trial = self._trials[key]
        self._completed.add(key)
        if error or report is None or not report.ended or report.failure_mode is None:
            # The machinery failed (not the configuration): FAIL without a constraint, which
            # the sampler ignores.
            sampling.tell_result(self.study, ot_trial, value=None, failed=False)
            return
        self._remember_memory(key, report.metrics)
        value = self._learn(self._configs.get(key), report.failure_mode, report.metrics)
        sampling.tell_result(
            self.study,
            ot_trial,
            value=value,
            failed=value is None,
            constraints=self._objective.violations(report.metrics),
        )

    def _remember_memory(self, key: str, metrics: Mapping[str, float]) -> None:
        """Keep what the trial's log said about GPU memory, for the pre-launch check."""
        avail, weights = metrics.get(AVAIL_METRIC), metrics.get(WEIGHTS_METRIC)
        config = self._configs.get(key)
        if avail and weights and avail > 0 and weights > 0 and config is not None:
            self._memory.append(Observation(self._ids.get(key, key), config, avail, weights))

    def _learn(
        self,
        config: Config | None,
        mode: FailureMode,
        metrics: Mapping[str, float],
    ) -> float | None:
        """What a classified outcome teaches: the objective value Optuna is told (None: the
        configuration failed), and the speculative guide's observation."""
        value = self._objective.value(metrics) if mode is FailureMode.NONE else None
        ok = value is not None and self._objective.meets(metrics)
        self._values.append(value if ok else None)
        if ok:
            self._measured.append(metrics)
        if self._guide is not None and config is not None:
            self._guide.observe(
                config, value=value if ok else None, metrics={**metrics, "failure_mode": mode.value}
            )
        return value

    def _ask(self, key: str) -> dict[str, Any]:
        """Ask the study for the slot's trial and sample every active parameter on it."""
        if key not in self._trials:
            self._trials[key] = self.study.ask()
        return dict(self._space.sample(self._trials[key]))

    def _fixed(
        self, key: str, config: Config, *, our_id: str | None = None, attempt: int = 1
    ) -> Proposal:
        """Propose exactly `config` (through the study, so Optuna records it)."""
        self.study.enqueue_trial(dict(config))
        params = self._ask(key)
        normalized = normalize_config(self._spec, params)
        return self._accept(key, params, normalized, our_id=our_id, attempt=attempt)

    def _accept(
        self,
        key: str,
        params: dict[str, Any],
        config: Config,
        *,
        our_id: str | None = None,
        attempt: int = 1,
    ) -> Proposal:
        self._seen.add(config_key(config))
        if (effective := self._effective_key(config)) is not None:
            self._seen.add(effective)
        self._configs[key] = config
        if our_id is None:
            our_id = trial_name(self._next_index)
            self._next_index += 1
        self._ids[key] = our_id
        return Proposal(trial_id=our_id, attempt=attempt, params=params, config=config)

    def reserve_id(self) -> str:
        """A new search trial id, never proposed (a two-fidelity sweep's acceptance boot)."""
        our_id = trial_name(self._next_index)
        self._next_index += 1
        return our_id

    def _launchable(self, config: Config) -> Config | None:
        """What to launch for `config` after SGLang's tree rules (None: rejected or seen)."""
        if config_key(config) in self._seen:
            return None
        if self._guide is not None:
            return self._guide.unseen_launch(config, seen=self._seen)
        if self._grid and (
            not check_tree(
                config,
                server_args=self._spec.node.server_args,
                version=self._spec.node.sglang_version,
            ).runs
            or self._effective_key(config) in self._seen
        ):
            # A grid enumerates: a point SGLang rejects, or rewrites into one already run, is
            # skipped, never booted (the first real table spent a boot on (1, 4, 8)).
            return None
        return config

    def _effective_key(self, config: Mapping[str, Scalar]) -> str | None:
        """The key of what SGLang runs for `config` when the searcher applies its tree rules."""
        if self._guide is not None:
            return self._guide.resolve(config).effective_key
        if self._grid:
            check = check_tree(
                config,
                server_args=self._spec.node.server_args,
                version=self._spec.node.sglang_version,
            )
            return config_key(normalize_config(self._spec, check.config))
        return None

    def _local_step(self, config: Config) -> Config | None:
        """An unmeasured neighbour of `config`, the least likely to fail (seeded ties)."""
        launchable = (
            self._launchable(c) for c in sampling.neighbors(self._spec, config, rng=self._rng)
        )
        options = [c for c in launchable if c is not None]
        if not options:
            return None
        self._rng.shuffle(options)
        if self._failure_aware:
            model = sampling.failure_model(self.study, self._gates)
            options.sort(key=lambda c: -model.log_ok(c))
        return options[0]
