"""The two-fidelity groundwork: the GPU check's pure parts and the benchmark's strategy.

`scripts/real_fidelity.py`: its configurations (both OOM ends, a rejected tree, plain, NGRAM and
EAGLE-3 chains and trees, graph batch and memory fraction), the dummy and real commands, the
cycle-cost arithmetic, the comparison of made-up records, the dry run and the resume.
`benchmarks/two_fidelity.py`: trees, the acceptance per tree, and one sweep of the strategy on a
landscape (every recommendation measured with real weights).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import load_script

ROOT = Path(__file__).resolve().parents[2]


rf = load_script(ROOT / "scripts" / "real_fidelity.py", "real_fidelity")
sys.path.insert(0, str(ROOT / "benchmarks"))
tf = load_script(ROOT / "benchmarks" / "two_fidelity.py", "two_fidelity")

DRAFT = Path("/m/smollm2-135m-eagle3")


# ---------------------------------------------------------------------------------------------
# scripts/real_fidelity.py: configurations and commands


def test_configurations_span_what_the_check_needs() -> None:
    configs = rf.configurations("0.5.17", DRAFT)
    assert len(configs) >= 20
    assert len({c.name for c in configs}) == len(configs)
    whys = {c.why for c in configs}
    assert {"oom-low", "oom-high", "rejected", "plain", "graph", "memory"} <= whys
    assert {"ngram", "chain", "tree"} <= whys
    trees = {c.tree for c in configs if c.tree is not None}
    assert ("EAGLE3", 3, 1, 4) in trees
    assert ("NGRAM", 8) in trees
    assert any(t[0] == "EAGLE3" and t[2] > 1 for t in trees)  # a real tree, not only chains
    # the same tree at other system knobs: its acceptance can come from another configuration
    same = [c for c in configs if c.tree == ("EAGLE3", 3, 1, 4)]
    assert len(same) >= 2


def test_flag_names_follow_the_version() -> None:
    new = " ".join(" ".join(c.flags) for c in rf.configurations("0.5.17", DRAFT))
    old = " ".join(" ".join(c.flags) for c in rf.configurations("0.5.13", DRAFT))
    assert "--cuda-graph-max-bs-decode" in new
    assert "--cuda-graph-max-bs-decode" not in old
    assert "--cuda-graph-max-bs " in old + " "
    assert "--cuda-graph-backend-prefill" in rf.common_flags("0.5.17", Path("/m/x"))
    assert "--disable-piecewise-cuda-graph" in rf.common_flags("0.5.13", Path("/m/x"))


def test_dummy_commands_load_no_weights_and_real_ones_do() -> None:
    by = {c.name: c for c in rf.configurations("0.5.17", DRAFT)}
    kw: dict[str, Any] = {"version": "0.5.17", "model": Path("/m/x"), "python": "py", "port": 30}
    eagle_dummy = rf.command(by["eagle3-s3-k1-d4"], "dummy", **kw)
    assert eagle_dummy[:3] == ["py", "-m", "sglang.launch_server"]
    assert eagle_dummy[eagle_dummy.index("--load-format") + 1] == "dummy"
    draft_flag = eagle_dummy.index("--speculative-draft-load-format")
    assert eagle_dummy[draft_flag + 1] == "dummy"
    plain_dummy = rf.command(by["plain"], "dummy", **kw)
    assert "--load-format" in plain_dummy
    assert "--speculative-draft-load-format" not in plain_dummy
    ngram_dummy = rf.command(by["ngram-d8"], "dummy", **kw)
    assert "--speculative-draft-load-format" not in ngram_dummy  # NGRAM has no draft model
    real = rf.command(by["eagle3-s3-k1-d4"], "real", **kw)
    assert "--load-format" not in real
    assert "--speculative-draft-load-format" not in real
    assert real[real.index("--port") + 1] == "30"
    assert real[real.index("--nccl-port") + 1] == "37"
    with pytest.raises(ValueError, match="fidelity 'fake'"):
        rf.command(by["plain"], "fake", **kw)


# ---------------------------------------------------------------------------------------------
# The arithmetic


def test_cycle_cost_and_prediction_are_inverse() -> None:
    # 1 request at 100 tok/s accepting 2 tokens a cycle: 50 cycles a second, 20 ms each
    assert rf.cycle_cost(100.0, 1, 2.0) == pytest.approx(0.02)
    # 8 requests at 800 tok/s without speculation: 100 tok/s each, 10 ms a step
    assert rf.cycle_cost(800.0, 8, 1.0) == pytest.approx(0.01)
    assert rf.predicted_throughput(2.0, 0.02, 1) == pytest.approx(100.0)
    assert rf.predicted_throughput(3.0, 0.01, 8) == pytest.approx(2400.0)
    with pytest.raises(ValueError, match="must be > 0"):
        rf.cycle_cost(0.0, 1, 2.0)


def _rec(
    name: str,
    fidelity: str,
    mode: str = "none",
    *,
    tree: list[Any] | None = None,
    c1: float | None = None,
    accept: float | None = None,
) -> dict[str, Any]:
    metrics: dict[str, float] = {}
    if c1 is not None:
        metrics["output_throughput_c1"] = c1
    if accept is not None:
        metrics["accept_length_c1"] = accept
    return {
        "name": name,
        "fidelity": fidelity,
        "failure_mode": mode,
        "tree": tree,
        "metrics": metrics,
    }


def test_compare_counts_agreement_and_names_disagreements() -> None:
    records = [
        _rec("oom-low", "real", "oom"),
        _rec("oom-low", "dummy", "oom"),
        _rec("oom-high", "real", "oom"),
        _rec("oom-high", "dummy", "none", c1=500.0),
        _rec("rejected", "real", "invalid_args"),
        _rec("rejected", "dummy", "invalid_args"),
        _rec("lonely", "real", "crash"),  # no dummy boot yet: not compared
    ]
    summary = rf.compare(records)
    assert summary["configurations"] == 3
    assert summary["failure_modes"]["oom"] == {"configurations": 2, "agree": 1}
    assert summary["failure_modes"]["invalid_args"] == {"configurations": 1, "agree": 1}
    assert summary["disagreements"] == [{"name": "oom-high", "real": "oom", "dummy": "none"}]
    lines = rf.summary_lines(summary)
    assert any("DISAGREE oom-high" in line for line in lines)


def _served(name: str, fidelity: str, *, accept: float, cycle_s: float, tree: Any = None) -> Any:
    """A c1 record of 11-token requests: the first after 100 ms, the rest `accept` a cycle."""
    record = _rec(name, fidelity, tree=tree, c1=11 / (0.1 + 10 / accept * cycle_s), accept=accept)
    record["metrics"]["ttft_p50_ms_c1"] = 100.0
    record["output_len"] = 11
    return record


def test_decode_cycle_takes_the_first_token_out() -> None:
    # 11 tokens: 100 ms to the first, then 5 cycles of 50 ms accepting 2 -> 0.35 s a request
    assert rf.decode_cycle(11 / 0.35, 1, 2.0, 0.1, 11) == pytest.approx(0.05)
    assert rf.predicted_from_decode(2.0, 0.05, 0.1, 1, 11) == pytest.approx(11 / 0.35)
    # 4 requests at once, the same timing: 4x the throughput, the same cycle
    assert rf.decode_cycle(44 / 0.35, 4, 2.0, 0.1, 11) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="ttft"):
        rf.decode_cycle(11 / 0.35, 1, 2.0, 0.5, 11)  # the first token took longer than all


def test_compare_decode_cycle_and_prediction_from_the_same_tree() -> None:
    tree = ["EAGLE3", 3, 1, 4]
    records = [
        # plain: the dummy cycle 10% shorter
        _served("plain", "real", accept=1.0, cycle_s=0.05),
        _served("plain", "dummy", accept=1.0, cycle_s=0.045),
        # the chain at two memory fractions: the same 50 ms cycle; a dummy draft accepts nothing
        _served("chain", "real", tree=tree, accept=2.0, cycle_s=0.05),
        _served("chain", "dummy", tree=tree, accept=1.0, cycle_s=0.05),
        _served("chain-m90", "real", tree=tree, accept=2.5, cycle_s=0.05),
        _served("chain-m90", "dummy", tree=tree, accept=1.0, cycle_s=0.05),
    ]
    summary = rf.compare(records)
    cyc = summary["cycle"]["c1"]["per_configuration"]
    assert cyc["plain"] == pytest.approx(-0.1, abs=1e-4)
    assert cyc["chain"] == pytest.approx(0.0, abs=1e-4)  # the first token's time taken out
    eagle = summary["by_algorithm"]["c1"]["EAGLE3"]
    assert eagle["decode_ratio_median"] == pytest.approx(1.0)
    assert eagle["cycle_ratio_median"] < 0.9  # `cycle_cost` spreads the first token's time
    pred = summary["predicted"]["c1"]
    # the chain's acceptance from chain-m90 (2.5): 11 / (0.1 + 4 x 0.05) against 11 / 0.35
    assert pred["per_configuration"]["chain"] == pytest.approx(0.35 / 0.3 - 1.0, abs=1e-4)
    assert pred["acceptance_from"]["chain"] == "same tree, other knobs"
    assert pred["acceptance_from"]["plain"] == "plain"
    # the anchored prediction: chain from chain-m90's real boot and both dummy boots
    anchored = summary["anchored"]["c1"]["per_configuration"]
    assert anchored["chain"] == pytest.approx(0.35 / 0.3 - 1.0, abs=1e-4)
    lines = rf.summary_lines(summary)
    assert any(line.startswith("  EAGLE3 c1: dummy / real cycle") for line in lines)
    assert any(line.startswith("  predicted c1: |error|") for line in lines)


#: The configurations of the first H100 lease (a quiet host); the second lease booted the others.
FIRST_LEASE = [
    "plain",
    "plain-g8",
    "plain-m60",
    "oom-low",
    "oom-high",
    "eagle3-s1-k2-d4",
    "eagle3-s5-k2-d4",
    "eagle3-s3-k1-d4",
    "eagle3-s3-k1-d4-g16",
    "eagle3-s2-k4-d8",
    "eagle3-s2-k4-d8-g16",
    "ngram-d8",
    "ngram-d8-g16",
]
RECORDED = ROOT / "benchmarks" / "real" / "fidelity-0.5.17"


def test_the_recorded_gpu_check_reads_as_the_docs_say() -> None:
    """The H100 records (benchmarks/real/fidelity-0.5.17) give the figures on the evidence page."""
    records = rf.load_records(RECORDED)
    summary = rf.compare(records)
    assert summary["configurations"] >= 20
    assert summary["disagreements"] == []
    assert summary["failure_modes"]["oom"]["agree"] == 2
    assert summary["failure_modes"]["invalid_args"]["agree"] == 1
    assert summary["failure_modes"]["crash"]["agree"] == 2
    c1 = summary["by_algorithm"]["c1"]
    assert c1["EAGLE3"]["accept_dummy_median"] == 1.0
    assert c1["NGRAM"]["accept_dummy_median"] > 3.9  # random text repeats: NGRAM accepts ~all
    # the first lease (a quiet host): the decode cycle transfers at c1, and the prediction
    first = rf.compare([r for r in records if r["name"] in FIRST_LEASE])
    c1 = first["by_algorithm"]["c1"]
    for algo in ("plain", "EAGLE3", "NGRAM"):
        assert 0.97 < c1[algo]["decode_ratio_min"] <= c1[algo]["decode_ratio_max"] < 1.02
    assert first["predicted"]["c1"]["max_abs"] < 0.03
    assert first["predicted"]["c8"]["max_abs"] > 0.3  # and not at c8 (docs say why)
    # the second lease's host moved one configuration's own boots by more than that
    earlier = rf.load_records(RECORDED / rf.REPEATS)
    spread = rf.spread(records, earlier)
    assert len(spread) == 3
    assert max(abs(1 - v["c1"]["decode_ratio"]) for v in spread.values()) > 0.2
    second = rf.compare([r for r in records if r["name"] not in FIRST_LEASE])
    assert second["cycle"]["c1"]["max_abs"] < max(
        abs(1 / v["c1"]["decode_ratio"] - 1) for v in spread.values()
    )


def test_spread_compares_two_boots_of_one_configuration(tmp_path: Path) -> None:
    """`--again` keeps the earlier boot in repeats/; `spread` reads it against the later."""
    first = _rec("plain", "real", c1=400.0) | {"output_len": 128}
    first["metrics"]["ttft_p50_ms_c1"] = 40.0
    (tmp_path / "plain.real.json").write_text(json.dumps(first))
    (tmp_path / "plain.real.log").write_text("log")
    rf.keep_earlier(tmp_path, "plain.real")
    assert not (tmp_path / "plain.real.json").exists()
    assert (tmp_path / "repeats" / "plain.real.1.json").exists()
    assert (tmp_path / "repeats" / "plain.real.1.log").read_text() == "log"
    later = _rec("plain", "real", c1=500.0) | {"output_len": 128}
    later["metrics"]["ttft_p50_ms_c1"] = 40.0
    out = rf.spread([later], rf.load_records(tmp_path / "repeats"))
    ratio = out["plain.real"]["c1"]
    assert ratio["throughput_ratio"] == 1.25
    assert ratio["ttft_ratio"] == 1.0
    assert ratio["decode_ratio"] < 0.8  # faster: each cycle took less
    failed = _rec("plain", "real", "oom")
    assert rf.spread([failed], [failed]) == {}


def test_again_names_a_configuration_and_a_fidelity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        rf.main(["--out", str(tmp_path), "--summary", "--again", "plain"])
    assert exc.value.code == 2
    assert "--again plain: give NAME.FIDELITY" in capsys.readouterr().err
    record = _rec("plain", "real", c1=500.0)
    (tmp_path / "plain.real.json").write_text(json.dumps(record))
    (tmp_path / "plain.dummy.json").write_text(json.dumps(_rec("plain", "dummy", c1=500.0)))
    (tmp_path / "ngram-d8.real.json").write_text(json.dumps(_rec("ngram-d8", "real", c1=5.0)))
    assert rf.main(["--out", str(tmp_path), "--summary", "--only", "plain"]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["configurations"] == 1


# ---------------------------------------------------------------------------------------------
# The command line


def test_dry_run_prints_every_command_and_boots_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "f"
    assert rf.main(["--out", str(out), "--dry-run", "--python", "py"]) == 0
    text = capsys.readouterr().out
    count = len(rf.configurations("0.5.17", DRAFT))
    assert text.count("py -m sglang.launch_server") == 2 * count
    assert text.count("--load-format dummy") == count
    assert not out.exists()


def test_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        rf.main(["--out", str(tmp_path), "--only", "nope", "--dry-run"])
    assert exc.value.code == 2
    assert "--only nope: unknown" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        rf.main(["--out", str(tmp_path), "--prompts", "0"])
    assert exc.value.code == 2


def test_recorded_boots_are_skipped_and_summarized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fidelity, c1 in (("dummy", 550.0), ("real", 500.0)):
        record = _rec("plain", fidelity, c1=c1)
        (tmp_path / f"plain.{fidelity}.json").write_text(json.dumps(record))
    assert rf.main(["--out", str(tmp_path), "--only", "plain"]) == 0
    text = capsys.readouterr().out
    assert text.count("recorded, skipped") == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["configurations"] == 1
    assert summary["failure_modes"] == {"none": {"configurations": 1, "agree": 1}}


# ---------------------------------------------------------------------------------------------
# benchmarks/two_fidelity.py


def test_tree_of_rewrites_chains_and_keys_the_draft_model() -> None:
    assert tf.tree_of({"speculative-algorithm": None}) is None
    chain = {
        "speculative-algorithm": "EAGLE3",
        "speculative-draft-model-path": "head-a",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 8,
    }
    # top-k 1 runs steps + 1 draft tokens; acceptance is per (tree, draft model)
    assert tf.tree_of(chain) == ("EAGLE3", "head-a", 3, 1, 4)
    assert tf.tree_of({**chain, "speculative-eagle-topk": 2}) == ("EAGLE3", "head-a", 3, 2, 8)
    other = {**chain, "speculative-draft-model-path": "head-b"}
    assert tf.tree_of(other) != tf.tree_of(chain)
    ngram = {"speculative-algorithm": "NGRAM", "speculative-num-draft-tokens": 8}
    assert tf.tree_of(ngram) == ("NGRAM", 8)


def test_acceptance_measured_then_predicted_per_draft_model() -> None:
    acc = tf.Acceptance()
    assert acc.length(("EAGLE3", "a", 3, 1, 4)) == 1.0  # nothing measured: no gain assumed
    assert acc.length(("NGRAM", 4)) == 1.0
    acc.add(("EAGLE3", "a", 3, 1, 4), 2.0)
    acc.add(("EAGLE3", "a", 3, 1, 4), 2.2)
    acc.add(("EAGLE3", "a", 1, 1, 2), 1.6)
    acc.add(("NGRAM", 8), 1.5)
    assert acc.length(("EAGLE3", "a", 3, 1, 4)) == pytest.approx(2.1)
    assert acc.length(("NGRAM", 4)) == pytest.approx(1.5)  # the measured NGRAM mean
    deeper = acc.length(("EAGLE3", "a", 5, 1, 6))
    assert 2.1 < deeper < 6.0  # the fitted law: a longer chain accepts more, never above its depth
    # head b has no measurement yet: head a's law stands in; once measured, b's own law
    borrowed = acc.length(("EAGLE3", "b", 5, 1, 6))
    assert borrowed == pytest.approx(deeper)
    acc.add(("EAGLE3", "b", 3, 1, 4), 1.3)
    acc.add(("EAGLE3", "b", 1, 1, 2), 1.2)
    assert acc.length(("EAGLE3", "b", 5, 1, 6)) < deeper


def test_acceptance_boots_go_first_then_to_promising_trees() -> None:
    settings = tf.TwoFidelity(accept_boots=1, accept_cap=2, accept_margin=0.9)
    acc = tf.Acceptance()
    tree = ("EAGLE3", "a", 3, 1, 4)
    assert not tf._needs_acceptance(None, 100.0, 100.0, acc, settings)  # plain: nothing to learn
    assert tf._needs_acceptance(tree, 1.0, 100.0, acc, settings)  # the first tree, whatever
    acc.add(tree, 2.0)
    assert not tf._needs_acceptance(tree, 100.0, 100.0, acc, settings)  # known
    other = ("EAGLE3", "a", 5, 1, 6)
    assert not tf._needs_acceptance(other, 80.0, 100.0, acc, settings)  # not promising
    assert tf._needs_acceptance(other, 95.0, 100.0, acc, settings)  # within the margin
    acc.add(other, 2.5)
    assert not tf._needs_acceptance(("EAGLE3", "a", 2, 1, 3), 99.0, 100.0, acc, settings)  # cap


def test_two_fidelity_recommends_a_really_measured_configuration(tmp_path: Path) -> None:
    node = tf.nh.family_nodes("a", [100], tmp_path)[0]
    outcome = tf.run_two_fidelity(node, tf.TwoFidelity(), seed=100, noise=0.02)
    fidelity = [r.tags.get(tf.TAG_FIDELITY) for r in outcome.records]
    dummies = [r for r, f in zip(outcome.records, fidelity, strict=True) if f == "dummy"]
    reals = [r for r, f in zip(outcome.records, fidelity, strict=True) if f != "dummy"]
    assert dummies
    assert reals
    assert outcome.trials == 40
    # dummy boots load no weights: each is shorter than any real boot of a working configuration
    ok = [r.elapsed_s for r in reals if r.failure_mode is tf.FailureMode.NONE]
    assert max(r.elapsed_s for r in dummies) < min(ok)
    # the recommendation's true value is that of a configuration booted with real weights
    truths = {node.table.true_value(r.config) for r in reals}
    assert outcome.truth in truths
    today = tf.nh.run_sweep(node, tf.nh.TODAY, seed=100, noise=0.02)
    assert outcome.hours < today.hours


def test_benchmark_prints_the_table_and_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert tf.main(["--families", "a", "--seeds", "100", "--no-real", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "| two fidelities | " in text
    assert "| today's defaults | " in text
    # the dummy boots' own share of today's hours: a number for two fidelities, "-" for today
    two = next(line for line in text.splitlines() if line.startswith("| two fidelities |"))
    today = next(line for line in text.splitlines() if line.startswith("| today's defaults |"))
    assert 0.0 < float(two.rstrip(" |").rsplit("|", 1)[1]) < 1.0
    assert today.rstrip(" |").rsplit("|", 1)[1].strip() == "-"
    assert "the line (>= 9 of 10 seeds" in text
    with pytest.raises(SystemExit) as exc:
        tf.main(["--promote", "-1"])
    assert exc.value.code == 2


def test_a_boot_that_fails_is_recorded_with_its_class(tmp_path: Path) -> None:
    """A stand-in for `python -m sglang.launch_server` (a real process) that prints SGLang's
    low-end refusal and exits: the record carries the classifier's `oom`, no metrics."""
    fake = tmp_path / "fake-python"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.'\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    out = tmp_path / "out"
    args = ["--out", str(out), "--only", "oom-low", "--fidelities", "dummy"]
    assert rf.main([*args, "--python", str(fake), "--boot-timeout-s", "30"]) == 0
    record = json.loads((out / "oom-low.dummy.json").read_text())
    assert record["failure_mode"] == "oom"
    assert record["boot_s"] is None
    assert record["metrics"] == {}
    assert "--load-format" in record["command"]
    assert (out / "oom-low.dummy.log").read_text().startswith("RuntimeError: Not enough memory")


def test_sigterm_stops_the_server_before_the_script_exits(tmp_path: Path) -> None:
    """A time limit's SIGTERM to the script (a real process) stops the server it started (a
    stand-in that never gets ready and records its pid)."""
    import os
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "server.pid"
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    fake.chmod(0o755)
    argv = [sys.executable, str(ROOT / "scripts" / "real_fidelity.py"), "--out", str(tmp_path)]
    argv += ["--only", "plain", "--fidelities", "dummy", "--python", str(fake)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pid_file.exists()
    time.sleep(0.5)
    server = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=40) == 143
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)
    assert not (tmp_path / "plain.dummy.json").exists()  # an unfinished boot is not recorded
