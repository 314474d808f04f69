"""Two fidelities in one sweep (`budget.fidelity.mode: two`): what each boot tells, and what runs.

This module owns the sweep side of the two-fidelity strategy (docs/concepts/two-fidelities.md;
the simulated reference is `benchmarks/two_fidelity.py`, which imports `tree_of` and
`Acceptance` from here). Search trials boot with dummy weights: such a boot tells whether the
configuration boots and what a decode cycle and the first token cost, not how much its
speculative tree accepts. So:

- `tree_of`: what a configuration's acceptance depends on (algorithm, draft model, steps, top-k,
  draft tokens; top-k 1 runs steps + 1 draft tokens; NGRAM: its draft tokens).
- `Acceptance`: accept length per tree, measured on real boots, and for a tree never booted for
  real the acceptance law of `search.spec_model.SpecModel` fitted on the measured trees of the
  same draft model.
- `predicted_from_decode` and `Fidelity.predict`: the objective a dummy boot predicts, from its
  decode cycle and time to first token with its tree's accept length.
- `TwoFidelitySource`: wraps the `SweepSearcher` as the ProposalSource of the search. Its
  proposals carry `fidelity` (dummy, the baseline real) and `role`; when a dummy boot of a
  speculative configuration comes up and its tree needs acceptance (`Fidelity.needs_acceptance`:
  the first `accept_boots` trees, then up to `accept_cap` trees whose predicted value is within
  `accept_margin` of the best), the same configuration is booted again with real weights under
  a new trial id (role `acceptance`), and the dummy's report is held until that boot ended; the
  searcher is told the predicted objective, never the dummy's own.
- `resume`: what a resumed driver rebuilds from the record (acceptance from the real boots,
  the dummy trials told with today's prediction, acceptance boots a killed driver never ran).
- `promotions`: after the search, real boots of the top `promote` configurations by predicted
  value not booted with real weights yet (role `promoted`).

Pure: no Ray, no store; the record comes in as `core.history.History`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from spec_sweep.core.config import Config, config_key
from spec_sweep.core.history import History, is_dummy
from spec_sweep.core.ids import BASELINE_ID, trial_name
from spec_sweep.core.names import (
    FIDELITY_DUMMY,
    FIDELITY_REAL,
    ROLE_ACCEPTANCE,
    ROLE_PROMOTED,
    TAG_FIDELITY_ROLE,
)
from spec_sweep.core.outcome import FailureMode, TrialReport
from spec_sweep.core.record import TrialRecord
from spec_sweep.search.spec_model import SpecModel, TreeObservation
from spec_sweep.spec import DRAFT_PATH, SweepSpec

if TYPE_CHECKING:  # Optuna is not imported where a spec is checked (`fidelity_problems`)
    from spec_sweep.search.searcher import SweepSearcher

__all__ = [
    "Acceptance",
    "Fidelity",
    "FidelityProposal",
    "Resumed",
    "TwoFidelitySource",
    "acceptance_of",
    "fidelity_problems",
    "predicted_from_decode",
    "predicted_values",
    "promotions",
    "real_records",
    "resume",
    "tree_of",
]

_ALGO = "speculative-algorithm"
_STEPS = "speculative-num-steps"
_TOPK = "speculative-eagle-topk"
_DRAFT = "speculative-num-draft-tokens"
#: The objective a two-fidelity sweep can predict: output throughput at concurrency 1.
_THROUGHPUT = "output_throughput"
_LOAD_FORMATS = ("load-format", "speculative-draft-load-format")

Tree = tuple[Any, ...]


def tree_of(config: Mapping[str, Any]) -> Tree | None:
    """What a configuration's acceptance depends on: `(algorithm, draft model, steps, top-k,
    draft tokens)` (`("NGRAM", draft tokens)`; None without speculative decoding). Top-k 1 runs
    `steps + 1` draft tokens whatever was asked."""
    algo = config.get(_ALGO)
    if algo in (None, False, "") or str(algo).lower() == "none":
        return None
    if str(algo).upper() == "NGRAM":
        return ("NGRAM", int(config.get(_DRAFT) or 0))
    steps, topk = int(config.get(_STEPS) or 1), int(config.get(_TOPK) or 1)
    draft = steps + 1 if topk == 1 else int(config.get(_DRAFT) or steps + 1)
    return (str(algo), str(config.get(DRAFT_PATH) or ""), steps, topk, draft)


class Acceptance:
    """Accept length per tree: measured on real boots, predicted for the others."""

    def __init__(self) -> None:
        self.measured: dict[Tree, list[float]] = {}
        self._models: dict[tuple[Any, ...], SpecModel] = {}

    def add(self, tree: Tree, accept: float) -> None:
        """One real boot's accept length of `tree`."""
        self.measured.setdefault(tree, []).append(accept)
        self._models.clear()

    def known(self, tree: Tree) -> bool:
        """Whether a real boot measured `tree`'s accept length."""
        return tree in self.measured

    def length(self, tree: Tree) -> float:
        """The measured mean, else the EAGLE law (`search.spec_model`) fitted on the measured
        trees of the same draft model (of any draft model while that one has none); the NGRAM
        mean for NGRAM; 1.0 (no gain) where nothing of that algorithm was measured."""
        if tree in self.measured:
            return statistics.fmean(self.measured[tree])
        if tree[0] == "NGRAM":
            ngram = [statistics.fmean(v) for t, v in self.measured.items() if t[0] == "NGRAM"]
            return statistics.fmean(ngram) if ngram else 1.0
        eagle = {t: statistics.fmean(v) for t, v in self.measured.items() if t[0] != "NGRAM"}
        same = {t: a for t, a in eagle.items() if t[:2] == tree[:2]}
        group = tree[:2] if same else ("*",)
        chosen = same or eagle
        if not chosen:
            return 1.0
        if group not in self._models:
            obs = [TreeObservation(t[2], t[3], t[4], 1.0, a) for t, a in chosen.items()]
            self._models[group] = SpecModel(obs)
        return self._models[group].length(tree[2], tree[3], tree[4])


def predicted_from_decode(
    accept: float, cycle_s: float, ttft_s: float, concurrency: int, output_len: int
) -> float:
    """Output tokens per second of `concurrency` requests of `output_len` tokens: the first
    after `ttft_s`, the rest `accept` a cycle of `cycle_s` (the inverse of
    `node.metrics.decode_cycle`)."""
    return concurrency * output_len / (ttft_s + (output_len - 1) / accept * cycle_s)


def fidelity_problems(spec: SweepSpec) -> list[tuple[str, str]]:
    """(field, message) for each thing `budget.fidelity.mode: two` cannot do with this spec."""
    if not spec.budget.fidelity.two:
        return []
    out: list[tuple[str, str]] = []
    metric, levels = spec.objective.metric, spec.workload.concurrency
    at_c1 = metric == f"{_THROUGHPUT}_c1" or (metric == _THROUGHPUT and tuple(levels) == (1,))
    if not at_c1 or spec.objective.mode != "max":
        out.append(
            (
                "budget.fidelity.mode",
                f"'two' with objective {metric!r} ({spec.objective.mode}): a dummy-weight boot "
                "predicts output throughput at concurrency 1 only (at concurrency 8 the GPU "
                "check's predictions were off by up to 60%): maximise output_throughput with "
                "workload.concurrency 1 (output_throughput_c1 with a list), or set mode: real",
            )
        )
    if spec.objective.constraints:
        names = ", ".join(spec.objective.constraints)
        out.append(
            (
                "budget.fidelity.mode",
                f"'two' with objective.constraints ({names}): a dummy-weight boot of a "
                "speculative configuration cannot tell them: drop the constraints or set "
                "mode: real",
            )
        )
    for where, keys in (
        ("node.server_args", spec.node.server_args),
        ("search_space.params", spec.params),
    ):
        for key in keys:
            if key.lstrip("-").replace("_", "-") in _LOAD_FORMATS:
                out.append(
                    (
                        f"{where}.{key}",
                        "set, and budget.fidelity.mode 'two' sets the load format of every "
                        "search boot itself: remove it, or set mode: real",
                    )
                )
    if spec.workload.output_len < 2:
        out.append(
            (
                "workload.output_len",
                f"{spec.workload.output_len} with budget.fidelity.mode 'two': the prediction needs "
                "a decode cycle, the time of the tokens after the first: set output_len to at "
                "least 2, or mode: real",
            )
        )
    if spec.workload.multi_level and spec.adaptive.enabled:
        out.append(
            (
                "budget.fidelity.mode",
                "'two' with adaptive.enabled and a concurrency list: the adaptive configuration "
                "is built from per-level results a dummy-weight boot cannot tell: set "
                "adaptive.enabled: false, or mode: real",
            )
        )
    return out


@dataclass(frozen=True)
class FidelityProposal:
    """One trial with the weights its boot loads.

    Attributes:
        trial_id: Our trial id.
        attempt: The attempt number.
        params: The parameter values (the Tune config).
        config: The normalized configuration.
        predicted: Why SGLang's memory rule says it cannot boot (recorded without a boot).
        fidelity: `real` (the model's weights) or `dummy` (`--load-format dummy`).
        role: Why a real boot runs in a two-fidelity sweep (`acceptance`, `promoted`), or None.
    """

    trial_id: str
    attempt: int
    params: dict[str, Any]
    config: Config
    predicted: str | None = None
    fidelity: str = FIDELITY_REAL
    role: str | None = None


@dataclass
class Fidelity:
    """The prediction and the acceptance rule of one two-fidelity sweep."""

    spec: SweepSpec
    acceptance: Acceptance = field(default_factory=Acceptance)
    best: float = 0.0

    @property
    def _suffix(self) -> str:
        return self.spec.objective.metric[len(_THROUGHPUT) :]

    def tree(self, config: Mapping[str, Any]) -> Tree | None:
        """`tree_of` the configuration with the spec's fixed server arguments under it."""
        fixed: dict[str, Any] = dict(self.spec.node.server_args)
        heads = self.spec.node.draft_models
        if heads:
            fixed[DRAFT_PATH] = heads[0]
        return tree_of({**fixed, **config})

    def accept_of(self, metrics: Mapping[str, float]) -> float | None:
        """A real boot's accept length at concurrency 1 (None: not reported)."""
        return metrics.get(f"accept_length{self._suffix}")

    def predict(self, config: Mapping[str, Any], metrics: Mapping[str, float]) -> float | None:
        """The objective a dummy boot of `config` that came up predicts: its decode cycle and
        time to first token with its tree's measured or fitted accept length (1.0 without
        speculative decoding); None when it reported neither."""
        cycle_ms = metrics.get(f"decode_cycle_ms{self._suffix}")
        ttft_ms = metrics.get(f"ttft_p50_ms{self._suffix}")
        if not cycle_ms or ttft_ms is None or cycle_ms <= 0 or ttft_ms < 0:
            return None
        tree = self.tree(config)
        accept = self.acceptance.length(tree) if tree is not None else 1.0
        output_len = self.spec.workload.output_len
        return predicted_from_decode(accept, cycle_ms / 1000, ttft_ms / 1000, 1, output_len)

    def needs_acceptance(self, tree: Tree | None, guess: float, planned: Iterable[Tree]) -> bool:
        """Whether a tree whose dummy boot came up gets a real boot for its acceptance: the
        first `accept_boots` trees, then (up to `accept_cap` trees) those whose predicted value
        is within `accept_margin` of the best predicted so far."""
        settings = self.spec.budget.fidelity
        planned = set(planned)
        if tree is None or self.acceptance.known(tree) or tree in planned:
            return False
        count = len(set(self.acceptance.measured) | planned)
        if count < settings.accept_boots:
            return True
        return count < settings.accept_cap and guess >= settings.accept_margin * self.best

    def learn(self, config: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """A measured real boot: its tree's accept length, when it reported one."""
        tree = self.tree(config)
        accept = self.accept_of(metrics)
        if tree is not None and accept is not None and accept > 0:
            self.acceptance.add(tree, accept)

    def explain(self, trial_id: str, config: Mapping[str, Any], value: float) -> str | None:
        """One line on what a speculative dummy trial was told: its predicted objective and
        where the accept length came from (None for a configuration without a draft tree)."""
        tree = self.tree(config)
        if tree is None:
            return None
        accept = self.acceptance.length(tree)
        source = "measured" if self.acceptance.known(tree) else "fitted"
        return (
            f"{trial_id}: predicted {self.spec.objective.metric} {value:.4g} (dummy-weight "
            f"decode cycle, accept length {accept:.2f} {source})"
        )

    def told(self, config: Mapping[str, Any], report: TrialReport) -> TrialReport:
        """What the searcher is told of a dummy boot that came up: the predicted objective in
        place of the dummy's own (unchanged when nothing could be predicted)."""
        value = self.predict(config, report.metrics)
        if value is None:
            return report
        self.best = max(self.best, value)
        return replace(report, metrics={**report.metrics, self.spec.objective.metric: value})


@dataclass
class _Held:
    key: str
    report: TrialReport
    config: Config
    trial_id: str


class TwoFidelitySource:
    """The search's ProposalSource with two fidelities (see the module doc)."""

    def __init__(
        self,
        searcher: SweepSearcher,
        fidelity: Fidelity,
        *,
        queued: Iterable[FidelityProposal] = (),
        tried: Iterable[Tree] = (),
        note: Callable[[str], None] | None = None,
    ) -> None:
        """Wrap `searcher`.

        Args:
            searcher: The sweep's searcher (told the predicted objective of dummy boots).
            fidelity: The prediction, with the acceptance the record holds so far.
            queued: Acceptance boots to run first (a resumed sweep's, from `resume`).
            tried: Trees already booted with real weights for their acceptance.
            note: Where a line goes for every speculative dummy trial's predicted objective
                (the live display; its own record shows no value of its own).
        """
        self.searcher = searcher
        self.fidelity = fidelity
        self._note = note
        self._queue: list[FidelityProposal] = list(queued)
        self._tried: set[Tree] = set(tried)
        for boot in self._queue:
            if (tree := fidelity.tree(boot.config)) is not None:
                self._tried.add(tree)
        self._configs: dict[str, tuple[Config, str]] = {}  # Tune key -> (config, fidelity)
        self._ids: dict[str, str] = {}  # Tune key -> our trial id (Tune's own id is in results)
        self._boots: dict[str, FidelityProposal] = {}  # Tune key -> acceptance boot
        self._held: dict[str, _Held] = {}  # acceptance boot's trial id -> the dummy it serves

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its search algorithm into the experiment state; the live display's
        # callback (and what it holds: the tracker, locks) is per run, not part of that state.
        return {**self.__dict__, "_note": None}

    @property
    def exhausted(self) -> bool:
        """Nothing left to propose: the searcher is exhausted and no acceptance boot waits."""
        return self.searcher.exhausted and not self._queue

    @property
    def converged(self) -> Any:
        """The searcher's convergence (`budget.until: converged`)."""
        return self.searcher.converged

    @property
    def queued(self) -> list[FidelityProposal]:
        """The acceptance boots waiting to run."""
        return list(self._queue)

    def suggest(self, key: str) -> FidelityProposal | None:
        """A waiting acceptance boot first, else the searcher's next proposal, booted with
        dummy weights (the baseline with real ones)."""
        if self._queue:
            boot = self._queue.pop(0)
            self._boots[key] = boot
            return boot
        proposal = self.searcher.suggest(key)
        if proposal is None:
            return None
        fidelity = FIDELITY_REAL if proposal.trial_id == BASELINE_ID else FIDELITY_DUMMY
        self._configs[key] = (proposal.config, fidelity)
        self._ids[key] = proposal.trial_id
        return FidelityProposal(
            trial_id=proposal.trial_id,
            attempt=proposal.attempt,
            params=proposal.params,
            config=proposal.config,
            predicted=proposal.predicted,
            fidelity=fidelity,
        )

    def complete(self, key: str, report: TrialReport | None = None, *, error: bool = False) -> None:
        """Learn from a finished trial: an acceptance boot's accept length (then the dummy it
        served is told), a dummy boot that came up (held for its acceptance boot, or told its
        predicted objective), anything else as it ended."""
        ok = not error and report is not None and report.failure_mode is FailureMode.NONE
        if key in self._boots:
            boot = self._boots.pop(key)
            if ok and report is not None:
                self.fidelity.learn(boot.config, report.metrics)
            held = self._held.pop(boot.trial_id, None)
            if held is None:
                return
            if not error and report is not None and report.ended and not ok:
                # a real boot that failed where the dummy came up: the configuration's failure
                told = replace(report, trial_id=held.report.trial_id)
            else:
                told = self._told(held.trial_id, held.config, held.report)
            self.searcher.complete(held.key, told)
            return
        config, fidelity = self._configs.pop(key, ({}, FIDELITY_REAL))
        trial_id = self._ids.pop(key, key)
        if not ok or report is None:
            self.searcher.complete(key, report, error=error)
            return
        if fidelity == FIDELITY_REAL:
            self.fidelity.learn(config, report.metrics)
            self.searcher.complete(key, report)
            return
        tree = self.fidelity.tree(config)
        guess = self.fidelity.predict(config, report.metrics)
        if guess is not None and self.fidelity.needs_acceptance(tree, guess, self._tried):
            assert tree is not None
            self._tried.add(tree)
            boot = FidelityProposal(
                trial_id=self.searcher.reserve_id(),
                attempt=1,
                params=dict(config),
                config=config,
                role=ROLE_ACCEPTANCE,
            )
            self._queue.append(boot)
            self._held[boot.trial_id] = _Held(key, report, config, trial_id)
            return
        self.searcher.complete(key, self._told(trial_id, config, report))

    def _told(self, trial_id: str, config: Config, report: TrialReport) -> TrialReport:
        """`Fidelity.told`, with its line to `note` for a speculative configuration."""
        told = self.fidelity.told(config, report)
        value = told.metrics.get(self.fidelity.spec.objective.metric)
        if self._note is not None and told is not report and value is not None:
            line = self.fidelity.explain(trial_id, config, value)
            if line is not None:
                self._note(line)
        return told


def real_records(history: History) -> list[TrialRecord]:
    """The finished records booted with the model's weights, search trials and repeats."""
    return [r for r in history.finished.values() if not is_dummy(r)]


def acceptance_of(spec: SweepSpec, history: History) -> Fidelity:
    """The prediction with every accept length the record's real boots measured."""
    fidelity = Fidelity(spec)
    for record in sorted(real_records(history), key=lambda r: (r.start_time, r.trial_id)):
        if record.failure_mode is FailureMode.NONE:
            fidelity.learn(record.config, record.metrics)
    return fidelity


def predicted_values(fidelity: Fidelity, history: History) -> dict[str, float]:
    """Trial id -> the objective predicted for each dummy search trial that came up."""
    out: dict[str, float] = {}
    for record in history.done:
        if is_dummy(record) and record.failure_mode is FailureMode.NONE:
            value = fidelity.predict(record.config, record.metrics)
            if value is not None:
                out[record.trial_id] = value
    return out


@dataclass(frozen=True)
class Resumed:
    """What a resumed two-fidelity search starts from (`resume`).

    Attributes:
        fidelity: The prediction with the acceptance of the record's real boots.
        told: The finished search records the fresh searcher is told: dummy trials with their
            predicted objective, real ones as measured, acceptance and promoted boots left out
            (their configuration is told through its dummy trial).
        queued: Acceptance boots the rule asks for that never finished (a killed driver's).
        tried: Trees booted with real weights already.
    """

    fidelity: Fidelity
    told: list[TrialRecord]
    queued: list[FidelityProposal]
    tried: set[Tree]

    @property
    def queued_ids(self) -> list[str]:
        """The trial ids the queued acceptance boots hold."""
        return [boot.trial_id for boot in self.queued]


def resume(spec: SweepSpec, history: History) -> Resumed:
    """Rebuild a two-fidelity search from the record (the MLflow record is the truth).

    The acceptance comes from the real boots' accept lengths; every dummy trial that came up is
    told with the objective predicted from today's acceptance; the acceptance rule is replayed
    over the dummy trials in the order they started, and a tree it asks for that no real boot
    measured gets its acceptance boot (under the id of an acceptance boot a killed driver left
    unfinished, else a new one).
    """
    fidelity = acceptance_of(spec, history)
    tried = {
        tree
        for r in real_records(history)
        if (tree := fidelity.tree(r.config)) is not None and r.trial_id != BASELINE_ID
    }
    unfinished = _unfinished(history, ROLE_ACCEPTANCE)
    told: list[TrialRecord] = []
    queued: list[FidelityProposal] = []
    planned: set[Tree] = set(tried)
    index = history.next_index
    for record in history.done:
        role = record.tags.get(TAG_FIDELITY_ROLE)
        if role in (ROLE_ACCEPTANCE, ROLE_PROMOTED):
            continue
        if not is_dummy(record) or record.failure_mode is not FailureMode.NONE:
            told.append(record)
            continue
        value = fidelity.predict(record.config, record.metrics)
        if value is None:
            told.append(record)
            continue
        tree = fidelity.tree(record.config)
        if fidelity.needs_acceptance(tree, value, planned) and tree is not None:
            planned.add(tree)
            boot, index = _real_boot(history, record.config, ROLE_ACCEPTANCE, unfinished, index)
            queued.append(boot)
        fidelity.best = max(fidelity.best, value)
        metric = spec.objective.metric
        told.append(replace(record, metrics={**record.metrics, metric: value}))
    return Resumed(fidelity=fidelity, told=told, queued=queued, tried=tried)


def promotions(spec: SweepSpec, history: History) -> list[FidelityProposal]:
    """After the search: real boots of the top `promote` distinct configurations by predicted
    value (with every acceptance measured by now) that no real boot measured yet, until
    `promote` promoted boots have finished."""
    count = spec.budget.fidelity.promote
    done = sum(1 for r in history.done if r.tags.get(TAG_FIDELITY_ROLE) == ROLE_PROMOTED)
    if count - done <= 0:
        return []
    fidelity = acceptance_of(spec, history)
    values = predicted_values(fidelity, history)
    by_id = {r.trial_id: r for r in history.done}
    booted = {config_key(r.config) for r in history.done if not is_dummy(r)}
    unfinished = _unfinished(history, ROLE_PROMOTED)
    top: dict[str, TrialRecord] = {}
    for trial_id in sorted(values, key=lambda t: (-values[t], t)):
        record = by_id[trial_id]
        top.setdefault(config_key(record.config), record)
        if len(top) >= count:
            break
    todo = [r for key, r in top.items() if key not in booted][: count - done]
    index = history.next_index
    out: list[FidelityProposal] = []
    for record in todo:
        boot, index = _real_boot(history, record.config, ROLE_PROMOTED, unfinished, index)
        out.append(boot)
    return out


def _unfinished(history: History, role: str) -> dict[str, str]:
    """Configuration key -> trial id of each real boot of `role` a killed driver left
    unfinished (it runs again under its id)."""
    return {
        config_key(r.config): r.trial_id
        for r in history.search
        if r.tags.get(TAG_FIDELITY_ROLE) == role and r.trial_id not in history.finished
    }


def _real_boot(
    history: History, config: Config, role: str, unfinished: Mapping[str, str], index: int
) -> tuple[FidelityProposal, int]:
    """A real boot of `config` in `role`: under an unfinished boot's id when there is one, else
    under the next new id; returns it and the next free index."""
    trial_id = unfinished.get(config_key(config))
    if trial_id is None:
        trial_id, index = trial_name(index), index + 1
    cfg = dict(config)
    boot = FidelityProposal(trial_id, history.next_attempt(trial_id), dict(cfg), cfg, role=role)
    return boot, index
