"""Every name spec_sweep writes into MLflow or hands through Ray Tune, in one place.

As MLflow's own `mlflow_tags.py` does for its tags: the MLflow tag keys of a sweep's parent run
and of its trial (child) runs, the metrics spec_sweep derives itself (speed-up, cost, the
ranking metric, the parent run's verdict metrics), the keys of the result dict a trial hands
to Ray Tune and of the Tune config that carries our trial id, and the files of a trial folder
that the record is rebuilt from. docs/design.md, "MLflow layout", is the contract these names
implement; nothing else spells them out (the MLflow UI's private tags: `store.mlflow_private`).
"""

from __future__ import annotations

import re

__all__ = [
    "CI_HIGH",
    "CI_LOW",
    "COST_METRIC",
    "KIND_SWEEP",
    "KIND_TRIAL",
    "SPEEDUP_METRIC",
    "best_metric",
    "level_of",
    "predicted_metric",
    "ranked_metric",
]

# -- MLflow's own tags -------------------------------------------------------------------------
#: The parent run of a child run.
TAG_PARENT = "mlflow.parentRunId"
#: A run's description (markdown) in the UI.
TAG_NOTE = "mlflow.note.content"
# The MLflow UI's undocumented experiment tags (its experiment kind, its shared views) are a
# private API: they live in `store.mlflow_private`, pinned by a contract test.

# -- our tags ----------------------------------------------------------------------------------
#: `sweep` on a sweep's parent run, `trial` on a trial's child run.
TAG_KIND = "spec_sweep.kind"
#: The value of `TAG_KIND` on a sweep's parent run.
KIND_SWEEP = "sweep"
#: The value of `TAG_KIND` on a trial's run.
KIND_TRIAL = "trial"
#: On the parent run: the id of the sweep's state folder (`state.json`), which finds the run
#: again on resume.
TAG_STATE_ID = "spec_sweep.state_id"
#: On the parent run: `true` when the trials ran on the simulated node (or a replay).
TAG_SIMULATE = "spec_sweep.simulate"
#: On the parent run: the trial budget in force for its latest run (`--trials` overrides the
#: spec's `budget.trials`); `spec-sweep report` reports against it.
TAG_BUDGET_TRIALS = "spec_sweep.budget_trials"
#: Our trial id (`t0007`; the baseline is `t0000`; repeats add a suffix).
TAG_TRIAL_ID = "spec_sweep.trial_id"
#: The attempt number of a trial (an attempt lost to an interrupted run is run again under
#: a new run).
TAG_ATTEMPT = "spec_sweep.attempt"
#: The trial's configuration, as JSON (parameter -> value).
TAG_CONFIG = "spec_sweep.config"
#: A hash of the configuration: finds the same configuration in other runs (`budget.reuse`).
TAG_CONFIG_HASH = "spec_sweep.config_hash"
#: A hash of what makes measurements comparable (model, hardware, SGLang version, launch
#: command, fixed arguments, workload): where a record may be reused.
TAG_FINGERPRINT = "spec_sweep.node_fingerprint"
#: How the trial ended: `ok` or a failure mode (Concepts, "Failure modes").
TAG_FAILURE = "failure_mode"
#: Why it ended so, in one line (the deciding log line or measurement).
TAG_REASON = "spec_sweep.reason"
#: Seconds the attempt held the node.
TAG_ELAPSED = "spec_sweep.elapsed_s"
#: Where the prompts came from (the builtin set, a file, random token ids).
TAG_PROMPTS = "spec_sweep.prompt_source"
#: The end of the server log of a failed trial.
TAG_LOG_EXCERPT = "spec_sweep.log_excerpt"
#: On a trial answered from an earlier record (`budget.reuse`): the run it was taken from.
TAG_REUSED = "spec_sweep.reused_from"
#: `true` on a run of `spec-sweep trial` (no parent run).
TAG_MANUAL = "spec_sweep.manual"
#: On a run of `spec-sweep trial`, and on every trial of a sweep with `budget.fidelity.mode:
#: two`: the weights its server booted with, `real` (the model's) or `dummy` (`--dummy-weights`,
#: a two-fidelity sweep's search trials: random weights, nothing read). A dummy boot tells
#: whether the configuration boots, its decode cycle and its time to first token; its
#: acceptance, outputs and a speculative configuration's throughput mean nothing
#: (docs/evidence/two-fidelity.md).
TAG_FIDELITY = "spec_sweep.fidelity"
#: The value of `TAG_FIDELITY` on a boot with the model's own weights.
FIDELITY_REAL = "real"
#: The value of `TAG_FIDELITY` on a boot with random weights (`--load-format dummy`).
FIDELITY_DUMMY = "dummy"
#: On a sweep trial of `budget.fidelity.mode: two`, why it was booted with the model's weights:
#: `acceptance` (to measure its tree's accept length), `promoted` (after the search, among the
#: top by predicted value). A sweep's dummy-weight trials carry `TAG_FIDELITY` `dummy`.
TAG_FIDELITY_ROLE = "spec_sweep.fidelity_role"
#: The value of `TAG_FIDELITY_ROLE` on a real boot that measures its tree's accept length.
ROLE_ACCEPTANCE = "acceptance"
#: The value of `TAG_FIDELITY_ROLE` on a real boot of a top configuration by predicted value.
ROLE_PROMOTED = "promoted"
#: On a confirmation boot (or baseline re-measure): the trial id it repeats.
TAG_CONFIRMS = "spec_sweep.confirms"
# The parent run's verdict (docs/design.md, "Confirmation").
#: The confirmation's verdict: `confirmed winner`, `tie within noise` or `not confirmed`.
TAG_VERDICT = "spec_sweep.confirm_verdict"
#: Why, with the between-boot noise it was judged against.
TAG_VERDICT_REASON = "spec_sweep.confirm_reason"
#: The trial id with the best pooled mean over the confirmation boots.
TAG_WINNER = "spec_sweep.winner"
#: The trial id to launch: the winner, or on a tie the lowest-risk of those as good.
TAG_RECOMMENDED = "spec_sweep.recommended"
#: Set when the re-measured baseline moved beyond noise, or when the noise cannot tell.
TAG_DRIFT = "spec_sweep.drift"
# The parent run's adaptive judgement (docs/concepts/adaptive.md).
#: The adaptive configuration's verdict against the best static ones (or `not built`).
TAG_ADAPTIVE = "spec_sweep.adaptive"
#: Why.
TAG_ADAPTIVE_REASON = "spec_sweep.adaptive_reason"
#: The adaptive configuration file that was judged.
TAG_ADAPTIVE_CONFIG = "spec_sweep.adaptive_config"
#: The configuration recommended for every load (the adaptive one or a static trial id).
TAG_OVERALL = "spec_sweep.recommended_every_load"

# -- the parent run's params --------------------------------------------------------------------
#: The objective, as `max output_throughput`.
PARAM_OBJECTIVE = "objective"
#: The searcher and its seed, as `tpe seed=0`.
PARAM_SEARCHER = "searcher"
#: `budget.trials`.
PARAM_TRIALS = "budget.trials"
#: `node.model`.
PARAM_MODEL = "node.model"
#: `node.draft_model` (`None` without one).
PARAM_DRAFT_MODEL = "node.draft_model"
#: `node.gpus`.
PARAM_GPUS = "node.gpus"
#: The SGLang version the flags were checked against.
PARAM_SGLANG_VERSION = "node.sglang_version"
#: Where that version came from: `spec` (written), `auto`, `node` or `server`.
PARAM_SGLANG_VERSION_SOURCE = "node.sglang_version_source"
#: The simulated node's profile, `none` on real GPUs.
PARAM_SIM_PROFILE = "node.sim_profile"
#: The searched parameters, comma-separated.
PARAM_SEARCH_SPACE = "search_space"

# -- metrics spec_sweep derives ----------------------------------------------------------------
#: Speed-up over the baseline on the objective (> 1 is better in both directions).
SPEEDUP_METRIC = "speedup_vs_baseline"
#: Dollars per million output tokens at `node.cost_per_hour`.
COST_METRIC = "usd_per_million_tokens"
#: On the parent run: the adaptive configuration's score over `workload.mix`.
ADAPTIVE_MIX = "adaptive_mix_score"
#: On the parent run: the best static configuration's score over the mix.
ADAPTIVE_MIX_STATIC = "adaptive_mix_score_best_static"
#: On the parent run, per level (`_c<N>`): the adaptive configuration's relative difference
#: from the best static one.
ADAPTIVE_DIFF = "adaptive_vs_best_static"
#: Suffix of the low end of a level throughput's 95% within-boot interval.
CI_LOW = "_ci_low"
#: Suffix of its high end.
CI_HIGH = "_ci_high"
#: Prefix of the metric node telemetry is logged under (not a result of the configuration).
SYSTEM_PREFIX = "system/"

_LEVEL = re.compile(r"_c(\d+)$")


def best_metric(objective: str) -> str:
    """The parent run's metric of the best trial's objective (`best_output_throughput`)."""
    return f"best_{objective}"


def ranked_metric(objective: str) -> str:
    """The trial metric the trials view sorts on (`feasible_output_throughput`).

    The objective, logged only on the trials the ranking counts (`History.ranked`: measured
    search trials that meet the constraints), so the MLflow UI's rank 1 is the sweep's best.
    """
    return f"feasible_{objective}"


def level_of(metric: str) -> int | None:
    """The concurrency level a metric name is suffixed with (`itl_p99_ms_c8` -> 8), or None."""
    match = _LEVEL.search(metric)
    return int(match[1]) if match else None


# -- Ray Tune ----------------------------------------------------------------------------------
#: Key of a Tune trial config that carries our trial id.
CONFIG_TRIAL_ID = "__spec_sweep_trial_id"
#: Key of a Tune trial config that carries the attempt number.
CONFIG_ATTEMPT = "__spec_sweep_attempt"
#: Every bookkeeping key of a Tune config starts so.
CONFIG_PREFIX = "__spec_sweep"
# Keys of the result dict a trial reports to Tune (`outcome.TrialReport`).
#: Our trial id.
RESULT_TRIAL_ID = "trial_id"
#: How the trial ended (`ok` or a failure mode).
RESULT_FAILURE = "failure_mode"
#: Why, in one line.
RESULT_REASON = "reason"
#: Whether the result was answered from an earlier record instead of a launch.
RESULT_FROM_RECORD = "from_record"
#: Whether the trial was torn down by an interrupt (not a result of its configuration).
RESULT_INTERRUPTED = "interrupted"
#: Set when the node itself cannot start a server (the sweep stops instead of going on).
RESULT_ENVIRONMENT = "environment"
#: Seconds the trial ran.
RESULT_TIME_TRIAL = "time_trial_s"
#: Seconds spent recording it.
RESULT_TIME_RECORD = "time_record_s"

# -- a trial's folder ----------------------------------------------------------------------------
#: The outcome of an attempt, written before it is recorded (`TrialResult.to_dict`).
RESULT_FILE = "result.json"
#: The MLflow run id of an attempt.
RUN_ID_FILE = "mlflow_run_id"


def boot_metric(phase: str) -> str:
    """The metric of a boot phase (`load_weight` -> `boot_load_weight_s`)."""
    return f"boot_{phase}_s"


# -- where a trial's node-hours went (docs/design.md, "Node-hours") -----------------------------
#: The boot phases a trial records, each as metric `boot_<phase>_s` (`boot_metric`): seconds
#: as SGLang timed them (its log lines, or `/server_info` `startup_time` from 0.5.17), and
#: `other` = the measured `boot_s` minus the timed phases (imports, tokenizer, HTTP server).
BOOT_PHASES: tuple[str, ...] = (
    "init",
    "load_weight",
    "kv_cache",
    "cuda_graph",
    "piecewise_cuda_graph",
    "other",
)
#: Seconds from readiness to the end of the benchmark (and goodput search, quality check).
MEASURE_METRIC = "measure_s"
#: GPU memory free when the target's weights began to load, per GPU (GiB; the most over
#: ranks): one of the two facts SGLang's memory rule needs (`core.memory`), from the log.
AVAIL_METRIC = "gpu_avail_pre_load_gib"
#: The memory the target's weights took, per GPU (GiB; the least over ranks): the other.
WEIGHTS_METRIC = "weights_gib"
#: On a trial that was never booted because SGLang's own memory rule says it cannot boot: the
#: rule and the facts it used (`core.memory`).
TAG_PREDICTED = "spec_sweep.predicted"
#: On the parent run: the SGLang version the sweep's flags and rules follow, and where it came
#: from (`SGLang 0.5.17 (auto: the version installed where node.launch runs)`).
TAG_SGLANG_VERSION = "spec_sweep.sglang_version"
#: Key of a Tune trial config: a proposal the searcher predicts to fail (the reason).
CONFIG_PREDICTED = "__spec_sweep_predicted"
#: Key of a Tune trial config: the weights its boot loads (`FIDELITY_REAL`, `FIDELITY_DUMMY`).
CONFIG_FIDELITY = "__spec_sweep_fidelity"
#: Key of a Tune trial config: why a real boot of `budget.fidelity.mode: two` runs
#: (`TAG_FIDELITY_ROLE`).
CONFIG_FIDELITY_ROLE = "__spec_sweep_fidelity_role"


def predicted_metric(objective: str) -> str:
    """On a dummy-weight trial that came up: the objective predicted from its decode cycle and
    time to first token with its tree's real (or fitted) accept length (`predicted_<metric>`)."""
    return f"predicted_{objective}"


#: 1 on a trial that booted as a client of SGLang's weight-cache daemon (`node.weight_cache`).
WEIGHT_CACHE_METRIC = "weight_cache_client"
#: Where each trial's boot went, as the replay table carries it (`store.replay`): the phases,
#: the measuring time, the memory facts of its weight load, the weight-cache client flag.
BOOT_METRICS: tuple[str, ...] = (
    *(boot_metric(p) for p in BOOT_PHASES),
    MEASURE_METRIC,
    AVAIL_METRIC,
    WEIGHTS_METRIC,
    WEIGHT_CACHE_METRIC,
)
#: The parent run's node-hours split (`core.hours`), `node_hours_<part>` (`hours_metric`).
HOURS_PARTS: tuple[str, ...] = ("boot", "measure", "failed", "rejected", "confirm", "other")
#: On the parent run: every attempt's node-hours together.
NODE_HOURS = "node_hours"
#: On the parent run: trials never booted because SGLang's memory rule says they cannot boot.
BOOTS_AVOIDED = "boots_avoided"
#: On the parent run: about the node-hours those boots would have taken.
NODE_HOURS_SAVED = "node_hours_saved"


def hours_metric(part: str) -> str:
    """The parent run's metric of one part of the node-hours (`boot` -> `node_hours_boot`)."""
    return f"{NODE_HOURS}_{part}"


# -- the parent run's verdict (docs/design.md, "Confirmation") ----------------------------------
#: Boots the confirmation spent (the top configurations again, the baseline re-measured).
CONFIRM_TRIALS = "confirm_trials"
#: Boots the winner's pooled mean is over.
WINNER_BOOTS = "winner_boots"
#: 1 when the verdict is a tie within noise, else 0.
CONFIRM_TIE = "confirm_tie"
#: The relative sd of one boot, pooled over the confirmed configurations' boots.
BOOT_NOISE = "boot_noise_rel_sd"
#: The re-measured baseline's relative change at the end, from its first boot.
DRIFT = "baseline_drift"
#: The largest relative change of any re-measure of the baseline, signed.
DRIFT_MAX = "baseline_drift_max"
#: The relative change the noise allows (95%, over all the re-measures together).
DRIFT_BOUND = "baseline_drift_bound"
#: 1 when that bound is narrow enough to tell a drift worth knowing about, else 0.
DRIFT_DECIDABLE = "baseline_drift_decidable"


def winner_metric(objective: str) -> str:
    """The winner's pooled mean of the objective over its confirmation boots
    (`winner_output_throughput`; with `_ci_low` / `_ci_high`, its 95% interval)."""
    return f"winner_{objective}"
