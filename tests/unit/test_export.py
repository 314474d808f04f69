"""The replay table as `spec-sweep export` and the report write it (store.replay, writing)."""

from __future__ import annotations

from pathlib import Path

from report_records import PLAIN, make_record, pcie_sweep, report_spec

from spec_sweep.core.config import normalize_config
from spec_sweep.core.history import History
from spec_sweep.core.names import BOOT_METRICS
from spec_sweep.spec import parse_value
from spec_sweep.spec_metrics import metric_names
from spec_sweep.store.replay import export_columns, export_rows, load_replay, write_csv


def test_export_columns(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    columns = export_columns(spec)
    params = list(spec.params)
    assert columns[: len(params)] == params
    assert columns[len(params)] == "output_throughput"
    assert columns[len(params) + 1] == "accept_length"
    assert columns[-1] == "failure_mode"
    # the metrics of the MLflow layout, then where each boot went
    assert set(columns[len(params) : -1]) == set(metric_names(spec.workload)) | set(BOOT_METRICS)
    assert columns[-1 - len(BOOT_METRICS) : -1] == list(BOOT_METRICS)


def test_export_columns_per_level(tmp_path: Path) -> None:
    spec = report_spec(tmp_path, concurrency="[1, 8]", objective="output_throughput_c1")
    columns = export_columns(spec)
    n = len(spec.params)
    assert columns[n : n + 4] == [
        "output_throughput_c1",
        "output_throughput_c8",
        "accept_length_c1",
        "accept_length_c8",
    ]


def test_export_rows(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    rows = export_rows(spec, History(spec, pcie_sweep()).done)
    assert len(rows) == 6
    assert all(list(row) == export_columns(spec) for row in rows)
    base, _, eagle, _, oom, _ = rows
    assert base["speculative-algorithm"] == "null"
    assert base["speculative-num-steps"] == ""  # inactive
    assert base["disable-custom-all-reduce"] == "false"
    assert base["mem-fraction-static"] == "0.88"
    assert base["cuda-graph-max-bs"] == "512"
    assert base["output_throughput"] == "80.0"
    assert base["accept_length"] == ""
    assert base["failure_mode"] == "none"
    assert eagle["speculative-algorithm"] == "EAGLE3"
    assert eagle["speculative-num-steps"] == "3"
    assert eagle["accept_length"] == "2.5"
    assert oom["failure_mode"] == "oom"
    assert oom["disable-custom-all-reduce"] == "true"
    assert oom["output_throughput"] == ""


def test_export_rows_read_back(tmp_path: Path) -> None:
    """Each row's cells parse back (as `--set` values do) to the trial's configuration."""
    spec = report_spec(tmp_path)
    records = pcie_sweep()
    for record, row in zip(records, export_rows(spec, History(spec, records).done), strict=True):
        parsed = {k: parse_value(row[k]) for k in spec.params}
        assert normalize_config(spec, parsed) == record.config
        for name, value in record.metrics.items():
            assert float(row[name]) == value


def test_export_rows_keep_full_precision(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    value = 1 / 3
    rows = export_rows(
        spec,
        History(spec, [make_record("t0000", PLAIN, metrics={"output_throughput": value})]).done,
    )
    assert float(rows[0]["output_throughput"]) == value


def test_repeat_boots_follow_the_search_rows_and_replay_reads_the_first(tmp_path: Path) -> None:
    """`export --repeats`: confirmation boots as rows after the search trials; a replay of the
    table reads each configuration's first row and counts the repeats."""
    spec = report_spec(tmp_path)
    records = [
        *pcie_sweep(),
        make_record(
            "t0001.r1", {**PLAIN, "cuda-graph-max-bs": 128}, metrics={"output_throughput": 70.0}
        ),
        make_record("t0000.r1", PLAIN, metrics={"output_throughput": 85.0}),
    ]
    history = History(spec, records)
    assert [r.trial_id for r in history.repeat_boots] == ["t0001.r1", "t0000.r1"]
    rows = export_rows(spec, [*history.done, *history.repeat_boots])
    assert [row["output_throughput"] for row in rows[-2:]] == ["70.0", "85.0"]
    path = tmp_path / "table.csv"
    write_csv(path, export_columns(spec), rows)
    table = load_replay(path, spec)
    assert table.duplicates == 2
    assert len(table.rows) == len(history.done)
    first = [r for r in table.rows.values() if r.config == normalize_config(spec, PLAIN)]
    assert first[0].metrics["output_throughput"] == 80.0  # the search trial's, not the repeat's
