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
KIND_SWEEP = "sweep"
KIND_TRIAL = "trial"
TAG_STATE_ID = "spec_sweep.state_id"
TAG_SIMULATE = "spec_sweep.simulate"
TAG_TRIAL_ID = "spec_sweep.trial_id"
TAG_ATTEMPT = "spec_sweep.attempt"
TAG_CONFIG = "spec_sweep.config"
TAG_CONFIG_HASH = "spec_sweep.config_hash"
TAG_FINGERPRINT = "spec_sweep.node_fingerprint"
TAG_FAILURE = "failure_mode"
TAG_REASON = "spec_sweep.reason"
TAG_ELAPSED = "spec_sweep.elapsed_s"
TAG_PROMPTS = "spec_sweep.prompt_source"
TAG_LOG_EXCERPT = "spec_sweep.log_excerpt"
TAG_REUSED = "spec_sweep.reused_from"
TAG_MANUAL = "spec_sweep.manual"
#: On a confirmation boot (or baseline re-measure): the trial id it repeats.
TAG_CONFIRMS = "spec_sweep.confirms"
# The parent run's verdict (docs/design.md, "Confirmation").
TAG_VERDICT = "spec_sweep.confirm_verdict"
TAG_VERDICT_REASON = "spec_sweep.confirm_reason"
TAG_WINNER = "spec_sweep.winner"
TAG_RECOMMENDED = "spec_sweep.recommended"
TAG_DRIFT = "spec_sweep.drift"
# The parent run's adaptive judgement (README, "One configuration for every load").
TAG_ADAPTIVE = "spec_sweep.adaptive"
TAG_ADAPTIVE_REASON = "spec_sweep.adaptive_reason"
TAG_ADAPTIVE_CONFIG = "spec_sweep.adaptive_config"
#: The configuration recommended for every load (the adaptive one or a static trial id).
TAG_OVERALL = "spec_sweep.recommended_every_load"

# -- metrics spec_sweep derives ----------------------------------------------------------------
#: Speed-up over the baseline on the objective (> 1 is better in both directions).
SPEEDUP_METRIC = "speedup_vs_baseline"
#: Dollars per million output tokens at `node.cost_per_hour`.
COST_METRIC = "usd_per_million_tokens"
#: The adaptive judgement's parent-run metrics: its score over the mix, the best static
#: configuration's, and (suffixed `_c<N>`) its relative difference from the best static one.
ADAPTIVE_MIX = "adaptive_mix_score"
ADAPTIVE_MIX_STATIC = "adaptive_mix_score_best_static"
ADAPTIVE_DIFF = "adaptive_vs_best_static"
#: Suffixes of a level throughput's 95% within-boot interval.
CI_LOW = "_ci_low"
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
#: Keys of a Tune trial config that carry our trial id and attempt number.
CONFIG_TRIAL_ID = "__spec_sweep_trial_id"
CONFIG_ATTEMPT = "__spec_sweep_attempt"
#: Every bookkeeping key of a Tune config starts so.
CONFIG_PREFIX = "__spec_sweep"
#: Keys of the result dict a trial reports to Tune (`outcome.TrialReport`).
RESULT_TRIAL_ID = "trial_id"
RESULT_FAILURE = "failure_mode"
RESULT_REASON = "reason"
RESULT_FROM_RECORD = "from_record"
RESULT_INTERRUPTED = "interrupted"
RESULT_ENVIRONMENT = "environment"
RESULT_TIME_TRIAL = "time_trial_s"
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
#: ranks), and the memory the target's weights took, per GPU (GiB; the least over ranks): the
#: two facts SGLang's memory rule needs (`core.memory`), read from the trial's own log.
AVAIL_METRIC = "gpu_avail_pre_load_gib"
WEIGHTS_METRIC = "weights_gib"
#: On a trial that was never booted because SGLang's own memory rule says it cannot boot: the
#: rule and the facts it used (`core.memory`).
TAG_PREDICTED = "spec_sweep.predicted"
#: Keys of a Tune trial config: a proposal the searcher predicts to fail (the reason), and a
#: client boot of the weight cache.
CONFIG_PREDICTED = "__spec_sweep_predicted"
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
#: The parent run's node-hours split (`core.hours`), `node_hours_<part>`.
HOURS_PARTS: tuple[str, ...] = ("boot", "measure", "failed", "confirm", "other")
