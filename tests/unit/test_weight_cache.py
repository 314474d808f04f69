"""`node.weight_cache`: compile caches pinned per node, the weight-cache daemon's command, who
boots as its client and with which static fraction."""

from __future__ import annotations

import json
import re
from pathlib import Path

import harness
import pytest

from spec_sweep.core.names import AVAIL_METRIC, WEIGHTS_METRIC
from spec_sweep.errors import SpecError
from spec_sweep.node.weight_cache import (
    client_fraction,
    compile_env,
    daemon_command,
    eligible,
    plan_client,
)

EAGLE = {"speculative-algorithm": "EAGLE3"}


def _spec(tmp_path: Path, version: str = "0.5.17", **node: object) -> object:
    return harness.make_spec(
        tmp_path,
        node={
            "sglang_version": version,
            "server_args": {"tp-size": 8, "trust-remote-code": True},
            **node,
        },
        search_space={"include": ["speculative.yaml", "memory_decode.yaml"]},
    )


def test_compile_caches_are_pinned_per_version_and_node_env_wins(tmp_path: Path) -> None:
    old = compile_env(_spec(tmp_path, env={"TRITON_CACHE_DIR": "/mine"}))  # type: ignore[arg-type]
    root = Path("~/.cache/spec_sweep/compile").expanduser() / "sglang-0.5.17"
    assert old["SGLANG_CACHE_DIR"] == str(root)
    assert old["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor")
    assert old["SGLANG_DG_CACHE_DIR"] == str(root / "deep_gemm")
    assert old["FLASHINFER_WORKSPACE_BASE"] == str(root)
    assert "TRITON_CACHE_DIR" not in old  # node.env sets it
    assert "TILELANG_CACHE_DIR" not in old  # 0.5.18+ only
    new = compile_env(_spec(tmp_path, "0.5.23", compile_cache="/vol/cache"))  # type: ignore[arg-type]
    assert new["TRITON_CACHE_DIR"] == "/vol/cache/sglang-0.5.23/triton"
    assert new["TILELANG_CACHE_DIR"] == "/vol/cache/sglang-0.5.23/tilelang"
    assert compile_env(_spec(tmp_path, compile_cache=False)) == {}  # type: ignore[arg-type]


def test_the_weight_cache_needs_0_5_17_and_owns_its_flag(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"node.weight_cache: .*arrived in 0.5.17.*0.5.13"):
        harness.make_spec(tmp_path, node={"sglang_version": "0.5.13", "weight_cache": True})
    with pytest.raises(SpecError, match="sets --weight-cache-mode itself"):
        _spec(tmp_path, weight_cache=True, server_args={"weight-cache-mode": "client"})
    with pytest.raises(SpecError, match=r"leave node\.launch out"):
        _spec(tmp_path, weight_cache=True, launch=["sglang", "serve"])


def test_only_non_speculative_trials_with_the_baselines_weights_are_clients(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path, weight_cache=True)
    assert eligible(spec, {"cuda-graph-max-bs-decode": 64, "mem-fraction-static": 0.8})  # type: ignore[arg-type]
    assert not eligible(spec, {**EAGLE, "speculative-num-steps": 3})  # type: ignore[arg-type]
    assert not eligible(spec, {"tp-size": 4})  # type: ignore[arg-type]
    assert not eligible(_spec(tmp_path), {"cuda-graph-max-bs-decode": 64})  # type: ignore[arg-type]


def test_the_daemon_serves_the_baselines_model_and_layout(tmp_path: Path) -> None:
    spec = _spec(tmp_path, weight_cache=True, model="/models/kimi")
    real = daemon_command(spec)  # type: ignore[arg-type]
    assert real.argv == (
        "python",
        "-m",
        "sglang.srt.weight_cache.daemon",
        "--model-path",
        "/models/kimi",
        "--tp-size",
        "8",
        "--trust-remote-code",
    )
    sim = daemon_command(spec, simulate=True)  # type: ignore[arg-type]
    assert sim.argv[:3] == ("python", "-m", "spec_sweep.sim.weight_cache")


def test_a_clients_fraction_gives_the_disk_boots_kv_pool() -> None:
    # H200: 139.13 GB free before 74 GB of weights; the daemon holds 74.6 GB (weights + context)
    f = client_fraction(0.85, pre_gib=139.13, weights_gib=74.0, held_gib=74.6)
    assert f is not None
    disk_pool = 0.85 * 139.13 - 74.0
    assert f * (139.13 - 74.6) == pytest.approx(disk_pool, abs=0.01)
    assert client_fraction(0.5, pre_gib=139.13, weights_gib=74.0, held_gib=74.6) is None  # OOM
    assert client_fraction(0.99, pre_gib=100.0, weights_gib=10.0, held_gib=40.0) is None  # > 1


def test_no_client_before_a_disk_boot_of_the_weights(tmp_path: Path) -> None:
    spec = _spec(tmp_path, weight_cache=True)
    root = tmp_path / "trials"
    config = {"cuda-graph-max-bs-decode": 64, "mem-fraction-static": 0.8}
    assert plan_client(spec, config, root=root) is None  # type: ignore[arg-type]
    folder = root / "t0000" / "attempt1"
    folder.mkdir(parents=True)
    # a client's own record does not count as a disk boot
    client = {
        "config": config,
        "command": ["x", "--weight-cache-mode", "client"],
        "metrics": {AVAIL_METRIC: 139.13, WEIGHTS_METRIC: 0.01},
    }
    (folder / "result.json").write_text(json.dumps(client))
    assert plan_client(spec, config, root=root) is None  # type: ignore[arg-type]


def test_the_daemon_is_ready_when_every_rank_listens() -> None:
    # What SGLang 0.5.17's daemons print, one per rank in its own logging format (daemon.py
    # :557, :424); the launcher's "All N ... are ready" (:774) never reaches the log, since the
    # launcher configures no logging (the first real daemon waited out its boot timeout for it).
    from spec_sweep.node.weight_cache import _ready

    def line(rank: int, message: str) -> str:
        return f"2026-12-02 11:41:0{rank},123 [Daemon gpu={rank} tp_rank={rank}] INFO {message}\n"

    loading = "".join(
        line(r, f"[WeightCacheDaemon gpu={r} tp_rank={r}] Loading model from disk: /m")
        for r in (0, 1)
    )
    one = loading + line(0, "[WeightCacheDaemon gpu=0] Listening on /tmp/x_rank0.sock")
    both = one + line(1, "[WeightCacheDaemon gpu=1] Listening on /tmp/x_rank1.sock")
    assert not _ready(loading, 2)
    assert not _ready(one, 2)
    assert _ready(both, 2)
    assert _ready(one, 1)
    # a launcher whose logging is configured says so itself
    assert _ready(loading + "All 2 weight cache daemons on node 0 are ready (pp_ranks=0..0)", 2)


def test_a_client_counts_only_when_sglang_says_it_mapped_the_daemons_weights() -> None:
    # the client loader's lines (weight_cache/ipc_loader.py 0.5.17: :121/:155 mapped, :442/:114
    # no daemon): a client that found none loads from disk and must not count as one
    from spec_sweep.node.weight_cache import client_mapped

    begin = "[2026-12-02 11:41:04] Load weight begin. avail mem=138.23 GB\n"
    mapped = (
        begin + "[2026-12-02 11:41:04] [IpcModelLoader] Fetched 273 IPC handles from daemon in "
        "0.04s\n[2026-12-02 11:41:05] [IpcModelLoader] Loaded model via IPC (mode=client), "
        "total=0.31s\n"
    )
    fell_back = (
        begin + "[2026-12-02 11:41:04] [IpcModelLoader] Daemon socket not found at "
        "/tmp/sglang_weight_cache_rank0.sock.\n[2026-12-02 11:41:04] [IpcModelLoader] Weight "
        "cache not available or config mismatch, falling back to disk load\n"
    )
    assert client_mapped(mapped) is True
    assert client_mapped(fell_back) is False
    assert client_mapped(begin) is None


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "0.5.17"


def _real(name: str) -> str:
    return (REAL / name).read_text()


def _shape(text: str) -> str:
    return re.sub(r"\d+(?:\.\d+)?", "N", text)


def test_the_real_daemon_and_client_logs_read_as_ready_and_mapped() -> None:
    # SGLang 0.5.17 on the H200 (2026-12-02): the daemon of one rank, and the client it served
    from spec_sweep.node.weight_cache import _ready, client_mapped

    daemon = _real("weight-cache-daemon.log")
    assert _ready(daemon, 1)
    assert not _ready(daemon, 2)
    assert not _ready(daemon.split("Listening on")[0], 1)
    assert client_mapped(_real("weight-cache-client.log")) is True
    assert client_mapped(_real("baseline-1.log")) is None  # a disk boot says nothing of it


def test_the_simulated_daemon_and_client_lines_are_the_real_ones() -> None:
    from spec_sweep.sim import texts

    def real_message(log: str, key: str) -> str:
        line = next(line for line in log.splitlines() if key in line)
        start = line.index("[WeightCacheDaemon" if "Daemon gpu" in line else "[IpcModelLoader")
        return line[start:]

    daemon = _real("weight-cache-daemon.log")
    # the model path the real daemon logged, so that the two lines have the same words
    logged = re.search(r"Loading model from disk: (\S+)", daemon)
    assert logged is not None
    model = logged.group(1)
    sim = texts.weight_cache_daemon_lines(0, model, 2.93)
    for key, ours in zip(
        ("Loading model from disk", "Model loaded from disk in", "Listening on"), sim, strict=True
    ):
        assert _shape(ours) == _shape(real_message(daemon, key)), key
    client = _real("weight-cache-client.log")
    for key, ours in zip(
        ("Fetched", "Loaded model via IPC"), texts.ipc_loader_lines(184, 0.04), strict=True
    ):
        assert _shape(ours) == _shape(real_message(client, key)), key
    # a client's weights are the daemon's: SGLang counts none against it
    assert re.search(r"Load weight end\..*mem usage=0\.00 GB", client)
