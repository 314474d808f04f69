"""Integration tests of the simulated SGLang node: real processes on 127.0.0.1.

Each test starts ``python -m spec_sweep.sim`` as a process (its own session, like the trial
launcher) on a free loopback port at time scale 0, talks to it over HTTP with httpx, and always
stops the process group it started. Faults are injected through the simulator's own flags.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import SIM_READY as READY
from harness import SimProcess, wait_until

ROOT = Path(__file__).resolve().parents[2]
BASE = ["--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8", "--trust-remote-code"]
EAGLE = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "lightseekorg/kimi-k2.5-eagle3",
]


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[object]:
    """Start simulator processes; every one is stopped (process group) at the end."""
    started: list[SimProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> SimProcess:
        sim = SimProcess([*BASE, *args], tmp_path, env)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def _children(pid: int) -> list[int]:
    """Live (non-zombie) child processes of ``pid``."""
    out = subprocess.run(
        ["ps", "-o", "pid=,stat=", "--ppid", str(pid)], capture_output=True, text=True
    )
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
    return [int(row[0]) for row in rows if not row[1].startswith("Z")]


def _sse(body: str) -> list[str]:
    return [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]


def test_ready_line_endpoints_and_meta_info(start_sim: object) -> None:
    sim = start_sim()  # type: ignore[operator]
    sim.wait_ready()
    log = sim.log()
    assert "Load weight end." in log
    assert "Capture target decode CUDA graph end." in log
    assert log.count(READY) == 1
    assert len(_children(sim.proc.pid)) == 2  # scheduler + detokenizer workers
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/health_generate").status_code == 200
        info = client.get("/model_info").json()
        assert info["model_path"] == "moonshotai/Kimi-K2.5"
        assert info["is_generation"] is True
        assert client.get("/get_model_info").json()["architectures"] == info["architectures"]
        server = client.get("/server_info").json()
        assert server["version"] == "0.5.23"
        assert server["tp_size"] == 8
        assert server["internal_states"][0]["memory_usage"]["token_capacity"] > 0
        assert client.get("/get_server_info").status_code == 200
        assert client.get("/v1/models").json()["data"][0]["id"] == "moonshotai/Kimi-K2.5"
        assert client.post("/flush_cache").status_code == 200
        assert client.get("/no/such/route").status_code == 404
        out = client.post(
            "/generate", json={"text": "Hello there", "sampling_params": {"max_new_tokens": 12}}
        ).json()
        meta = out["meta_info"]
        assert meta["completion_tokens"] == 12
        assert len(out["output_ids"]) == 12
        assert meta["finish_reason"] == {"type": "length", "length": 12}
        assert meta["prompt_tokens"] >= 1
        assert meta["e2e_latency"] > 0
        ids = client.post(
            "/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
        ).json()
        assert ids["meta_info"]["prompt_tokens"] == 3
        bad = client.post("/generate", json={"sampling_params": {}})
        assert bad.status_code == 400
        assert "input_ids" in bad.json()["error"]["message"]


def test_streaming_chunks_are_cumulative(start_sim: object) -> None:
    sim = start_sim("--cuda-graph-max-bs-decode", "128")  # type: ignore[operator]
    sim.wait_ready()
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        resp = client.post(
            "/generate",
            json={"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 20}},
        )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = _sse(resp.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 21))
    assert all(chunks[i + 1]["text"].startswith(chunks[i]["text"]) for i in range(19))
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert chunks[0]["meta_info"]["finish_reason"] is None


def test_speculative_meta_info_and_server_accept_length(start_sim: object) -> None:
    sim = start_sim(
        *EAGLE,
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    )  # type: ignore[operator]
    sim.wait_ready()
    with httpx.Client(base_url=sim.url, timeout=20) as client:
        client.post("/flush_cache")
        resp = client.post(
            "/generate",
            json={"text": "tell me", "stream": True, "sampling_params": {"max_new_tokens": 60}},
        )
        chunks = [json.loads(e) for e in _sse(resp.text)[:-1]]
        meta = chunks[-1]["meta_info"]
        assert meta["completion_tokens"] == 60
        assert meta["spec_verify_ct"] >= 1
        assert 1.0 <= meta["spec_accept_length"] <= 4.0
        assert abs(meta["spec_accept_length"] - 60 / meta["spec_verify_ct"]) < 1e-9
        assert any(
            c2["meta_info"]["completion_tokens"] - c1["meta_info"]["completion_tokens"] > 1
            for c1, c2 in itertools.pairwise(chunks)
        )  # a speculative step delivers several tokens at once
        state = client.get("/server_info").json()["internal_states"][0]
        assert 1.0 <= state["avg_spec_accept_length"] <= 4.0
    assert "Max running requests is reset to 48 for speculative decoding" in sim.log()


def test_unknown_flag_fails_like_argparse(start_sim: object) -> None:
    sim = start_sim("--no-such-flag", "3")  # type: ignore[operator]
    assert sim.wait_exit() == 2
    log = sim.log()
    assert log.splitlines()[-1].endswith("error: unrecognized arguments: --no-such-flag 3")
    assert "usage: " in log


def test_value_outside_choices_fails_like_argparse(start_sim: object) -> None:
    sim = start_sim("--moe-a2a-backend", "warp")  # type: ignore[operator]
    assert sim.wait_exit() == 2
    assert "error: argument --moe-a2a-backend: invalid choice: 'warp'" in sim.log()


def test_oom_during_cuda_graph_capture(start_sim: object) -> None:
    sim = start_sim("--mem-fraction-static", "0.96")  # type: ignore[operator]
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log()
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in log
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in log
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert READY not in log


def test_not_enough_memory_at_low_mem_fraction(start_sim: object) -> None:
    # 0.5.14 and later refuse weights that exceed the static budget before sizing the KV pool
    # (the real 0.5.17 text: tests/fixtures/sglang/0.5.17/oom-low.log); 0.5.13 says "Not enough
    # memory" (tests/fixtures/sglang/0.5.13/oom-low.log).
    sim = start_sim("--mem-fraction-static", "0.70")  # type: ignore[operator]
    assert sim.wait_exit() == -signal.SIGKILL
    assert (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.7. Raise --mem-fraction-static above " in sim.log()
    )
    old = start_sim("--mem-fraction-static", "0.70", "--sim-sglang-version", "0.5.13")  # type: ignore[operator]
    assert old.wait_exit() == -signal.SIGKILL
    assert (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.7" in old.log()
    )


def test_unsupported_feature_fails(start_sim: object) -> None:
    sim = start_sim("--enable-flashinfer-allreduce-fusion")  # type: ignore[operator]
    assert sim.wait_exit() == -signal.SIGKILL
    assert (
        "ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs." in sim.log()
    )


def test_invalid_speculative_combination(start_sim: object) -> None:
    sim = start_sim(
        *EAGLE,
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "2",
        "--speculative-num-draft-tokens",
        "8",
    )  # type: ignore[operator]
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log()
    assert "RuntimeError: selected index k out of range" in log
    assert "Capture cuda graph failed: selected index k out of range" in log


def test_a_first_decode_failure_hits_the_first_request_when_warmup_is_skipped(
    start_sim: object,
) -> None:
    # real 0.5.17 with --skip-server-warmup: (1, 4, 8) came up, then its first request killed it
    sim = start_sim(
        *EAGLE,
        "--speculative-num-steps",
        "1",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        "8",
        "--skip-server-warmup",
        env={"SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0", "SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0"},
    )  # type: ignore[operator]
    sim.wait_for_text(READY)
    with httpx.Client(base_url=sim.url, timeout=2) as client, contextlib.suppress(httpx.HTTPError):
        client.get("/health_generate")
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log()
    assert "Scheduler hit an exception" in log
    assert "RuntimeError: selected index k out of range" in log
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log
    assert "for CUDA coredumps" not in log  # switched off, as SGLang's environment allows


def test_assertion_in_main_process_exits_1(start_sim: object) -> None:
    sim = start_sim("--ep-size", "8", "--moe-a2a-backend", "flashinfer")  # type: ignore[operator]
    assert sim.wait_exit() == 1
    assert "AssertionError: Flashinfer MoE A2A requires --attn-dp-size equal" in sim.log()


def test_unsupported_nccl_algorithm(start_sim: object) -> None:
    sim = start_sim(env={"NCCL_ALGO": "NVLS"})  # type: ignore[operator]
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log()
    assert "NCCL WARN Error : no algorithm/protocol available for function AllReduce" in log
    assert "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)" in log


def test_worker_dies_main_keeps_running_never_ready(start_sim: object) -> None:
    sim = start_sim("--sim-fault", "worker-dies")  # type: ignore[operator]
    sim.wait_for_text("terminate called after throwing an instance of 'c10::DistBackendError'")
    assert wait_until(lambda: len(_children(sim.proc.pid)) == 1), _children(sim.proc.pid)
    assert sim.proc.poll() is None
    assert READY not in sim.log()
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        assert client.get("/health").status_code == 503
        assert client.get("/model_info").status_code == 200
    assert len(_children(sim.proc.pid)) == 1  # the scheduler worker died (SIGABRT)


def test_hang_after_stops_answering(start_sim: object) -> None:
    sim = start_sim("--sim-fault", "hang-after=1")  # type: ignore[operator]
    sim.wait_ready()
    body = {"text": "a", "sampling_params": {"max_new_tokens": 3}}
    with httpx.Client(base_url=sim.url, timeout=1.0) as client:
        assert client.post("/generate", json=body).status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            client.post("/generate", json=body)
        with pytest.raises(httpx.ReadTimeout):
            client.get("/health")
    assert sim.proc.poll() is None


def test_request_error_shape(start_sim: object) -> None:
    sim = start_sim("--sim-fault", "request-error")  # type: ignore[operator]
    sim.wait_ready()
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        resp = client.post("/generate", json={"text": "a"})
    assert resp.status_code == 500
    assert resp.json() == {
        "object": "error",
        "message": "Out of memory even after retracting all other requests in the decode batch. "
        "Aborting the last request.",
        "type": "500",
        "param": None,
        "code": 500,
    }


def test_crash_at_boot_is_a_segfault(start_sim: object) -> None:
    sim = start_sim("--sim-fault", "crash-at-boot")  # type: ignore[operator]
    assert sim.wait_exit() == -signal.SIGSEGV
    assert "Traceback" not in sim.log()


def test_hang_at_boot_never_listens(start_sim: object) -> None:
    sim = start_sim("--sim-fault", "hang-at-boot")  # type: ignore[operator]
    sim.wait_for_text("server_args")  # booting: it hangs at distributed init

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", sim.port)) == 0

    assert not wait_until(lambda: listening() or sim.proc.poll() is not None, timeout=1.0)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.url}/health", timeout=1)


def test_sigterm_exits_cleanly_with_children(start_sim: object) -> None:
    sim = start_sim()  # type: ignore[operator]
    sim.wait_ready()
    children = _children(sim.proc.pid)
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit() == 0
    assert wait_until(lambda: not any(_alive(pid) for pid in children)), children


def test_ignore_sigterm_needs_sigkill(start_sim: object) -> None:
    sim = start_sim("--sim-fault", "ignore-sigterm")  # type: ignore[operator]
    sim.wait_ready()
    os.killpg(sim.proc.pid, signal.SIGTERM)
    assert not wait_until(lambda: sim.proc.poll() is not None, timeout=0.5)
    os.killpg(sim.proc.pid, signal.SIGKILL)
    assert sim.wait_exit() == -signal.SIGKILL


def test_old_sglang_version_flags(start_sim: object) -> None:
    sim = start_sim("--sim-sglang-version", "0.5.13", "--cuda-graph-max-bs", "64")  # type: ignore[operator]
    sim.wait_ready()
    assert "Capture cuda graph end. Time elapsed:" in sim.log()
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        assert client.get("/get_server_info").json()["version"] == "0.5.13"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_simulated_0_5_13_refuses_a_port_the_real_one_refuses() -> None:
    """Real SGLang 0.5.13 died on `--port 58199` (gRPC port 68199); so does the simulated node,
    and the classifier reads the refusal as the arguments' fault, raised while building them."""
    from spec_sweep.core.outcome import FailureMode
    from spec_sweep.node.classify import classify

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spec_sweep.sim",
            "--model-path",
            "m",
            "--port",
            "58199",
            "--sim-sglang-version",
            "0.5.13",
            "--sim-profile",
            "rtx-pro-6000-pcie-x8",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SPEC_SWEEP_SIM_TIME_SCALE": "0"},
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 1
    assert "ValueError: SGLANG_GRPC_PORT (68199) must be between 1 and 65535" in log
    outcome = classify(log_text=log, exit_code=1, ready=False)
    assert outcome.mode is FailureMode.INVALID_ARGS


# The fields of SGLang's decode log line, as real 0.5.13 servers print them
# (tests/fixtures/sglang/0.5.13/baseline-0.log and ngram-d8.log; tests/unit/test_sglang_fixtures.py
# checks every real line against it).
REAL_DECODE_LINE = re.compile(
    r"Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, "
    r"(?:accept len: [\d.]+, accept rate: [\d.]+, )?cuda graph: (?:True|False), "
    r"gen throughput \(token/s\): [\d.]+, #queue-req: \d+$"
)


def test_simulated_decode_lines_have_the_real_fields(start_sim: object) -> None:
    sim = start_sim(
        *EAGLE,
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--decode-log-interval", "4",
    )  # type: ignore[operator]  # fmt: skip
    sim.wait_ready()
    with httpx.Client(base_url=sim.url, timeout=20) as client:
        client.post(
            "/generate", json={"text": "tell me", "sampling_params": {"max_new_tokens": 40}}
        )
    lines = [line.split("] ", 1)[1] for line in sim.log().splitlines() if "Decode batch" in line]
    assert lines
    assert all(REAL_DECODE_LINE.match(line) for line in lines), lines[:3]
    assert any("accept len" in line for line in lines)


# -- adaptive speculative decoding and boot phases ---------------------------------------------
H200_EAGLE = ["--sim-profile", "h200-nvlink-x8", "--speculative-algorithm", "EAGLE3"]


def _level(url: str, concurrency: int, *, tokens: int = 64) -> tuple[float, float]:
    """``concurrency`` simultaneous text requests: (output tokens/s, mean accept length)."""
    import asyncio

    async def run() -> tuple[float, float]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:

            async def one(i: int) -> dict[str, object]:
                body = {
                    "text": f"Request {i}: write about the weather in the mountains.",
                    "sampling_params": {"max_new_tokens": tokens, "temperature": 0.7},
                }
                return (await client.post("/generate", json=body)).json()["meta_info"]  # type: ignore[no-any-return]

            start = time.perf_counter()
            metas = await asyncio.gather(*(one(i) for i in range(concurrency)))
            wall = time.perf_counter() - start
        produced = sum(int(m["completion_tokens"]) for m in metas)  # type: ignore[call-overload]
        accept = sum(float(m["spec_accept_length"]) for m in metas) / len(metas)  # type: ignore[arg-type]
        return produced / wall, accept

    return asyncio.run(run())


def test_adaptive_server_follows_its_steps(start_sim: object, tmp_path: Path) -> None:
    """One adaptive boot measured at 1, 8 and 32 beside a static 1-step chain.

    SGLang 0.5.23's default slots keep 3 steps at 1 and 8 (the EMA of ~1.1 accepted drafts stays
    between the thresholds) and pick one step at 32 (slot [0, 1], initial 3 is not in it); the
    accept length per level says which steps ran. On the H200 profile that is the crossover: 3
    steps fastest at 1, one step as fast as any at 32 (the model's figures, without wall time:
    tests/unit/test_sim_adaptive.py). Speeds measured here are left out: the simulated node paces
    tokens in wall time, and on the suite's loaded machine the adaptive boot once read 16% below
    the static chain at 32 while running its steps.
    """
    config = tmp_path / "adaptive.json"
    config.write_text(
        json.dumps(
            {
                "1": {"candidate_steps": [1, 3, 5, 7]},
                "8": {"candidate_steps": [0, 1, 3]},
                "32": {"candidate_steps": [0, 1]},
            }
        )
    )
    adaptive = start_sim(  # type: ignore[operator]
        *H200_EAGLE, "--speculative-adaptive", "--speculative-adaptive-config", str(config),
        "--sim-boot-id", "adaptive",
    )  # fmt: skip
    one = start_sim(*H200_EAGLE, "--speculative-num-steps", "1", "--sim-boot-id", "s1")  # type: ignore[operator]
    for sim in (adaptive, one):
        sim.wait_ready()
    accept = {("adaptive", c): _level(adaptive.url, c)[1] for c in (1, 8, 32)}
    accept["one", 32] = _level(one.url, 32)[1]
    # Acceptance follows the steps run: 3 steps at 1 and 8 (2.14 expected), 1 step at 32 (1.68).
    assert accept["adaptive", 1] == pytest.approx(2.14, rel=0.08)
    assert accept["adaptive", 8] == pytest.approx(2.14, rel=0.08)
    assert accept["adaptive", 32] == pytest.approx(accept["one", 32], rel=0.08)
    assert accept["one", 32] == pytest.approx(1.68, rel=0.08)
    log = adaptive.log()
    assert "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5, 7]" in log
    assert "Switch adaptive runtime state: steps 3 -> 1, draft_tokens 4 -> 2" in log
    assert log.count("Built adaptive runtime state steps=") == 4  # 0, 1, 5, 7
    with httpx.Client(base_url=adaptive.url, timeout=5) as client:
        info = client.get("/server_info").json()
    assert info["speculative_adaptive"] is True
    assert info["speculative_num_draft_tokens"] == 4


def test_adaptive_turned_off_boots_static_with_the_warning(start_sim: object) -> None:
    sim = start_sim(  # type: ignore[operator]
        *H200_EAGLE, "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
        "--speculative-num-draft-tokens", "6", "--speculative-adaptive",
    )  # fmt: skip
    sim.wait_ready()
    assert (
        "speculative_adaptive disabled: speculative_eagle_topk=2 (only topk=1 is supported). "
        "Falling back to static speculative params."
    ) in sim.log()
    assert "AdaptiveSpeculativeParams" not in sim.log()


def test_inline_adaptive_config_fails_like_sglang(start_sim: object) -> None:
    sim = start_sim(  # type: ignore[operator]
        *H200_EAGLE, "--speculative-adaptive", "--speculative-adaptive-config",
        '{"1": {"candidate_steps": [1, 3]}}',
    )  # fmt: skip
    assert sim.wait_exit() == 1
    assert (
        sim.log()
        .rstrip()
        .endswith(
            "FileNotFoundError: [Errno 2] No such file or directory: "
            '\'{"1": {"candidate_steps": [1, 3]}}\''
        )
    )


@pytest.mark.parametrize("version", ["0.5.23", "0.5.13"])
def test_startup_time_by_phase_where_the_version_has_it(start_sim: object, version: str) -> None:
    scale = 0.01
    sim = start_sim(  # type: ignore[operator]
        "--sim-profile", "h200-nvlink-x8", "--sim-sglang-version", version,
        env={"SPEC_SWEEP_SIM_TIME_SCALE": str(scale)},
    )  # fmt: skip
    started = time.monotonic()
    sim.wait_ready(timeout=60)
    wall = time.monotonic() - started
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        info = client.get("/server_info").json()
    log = sim.log()
    if version == "0.5.13":
        assert "startup_time" not in info
        assert "Engine startup timings" not in log
        rank0 = "\n".join(x for x in log.splitlines() if " TP0] " in x)
        timed = re.findall(r"(?:elapsed=|Time elapsed: )([\d.]+) s", rank0)
        scheduler_e2e = sum(float(x) for x in timed)  # all but the KV allocation
    else:
        startup = info["startup_time"]
        assert set(startup) == {
            "load_weight", "kv_cache_allocation", "scheduler_e2e", "cuda_graph", "tokenizer_e2e",
        }  # fmt: skip
        assert list(startup["cuda_graph"]) == [
            "prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend",
        ]  # fmt: skip
        line = next(x for x in log.splitlines() if "Engine startup timings (s):" in x)
        assert f"scheduler_e2e={startup['scheduler_e2e']:.2f}," in line
        assert f"tokenizer_e2e={startup['tokenizer_e2e']:.2f}" in line
        assert startup["load_weight"] == 150.0
        scheduler_e2e = startup["scheduler_e2e"]
    # The boot lasts its phases times the time scale (plus the process's own start).
    assert wall >= scheduler_e2e * scale
    assert wall < scheduler_e2e * scale + 20


def test_greedy_batch_with_top_logprobs_has_sglangs_meta_info(start_sim: object) -> None:
    sim = start_sim()  # type: ignore[operator]
    sim.wait_ready()
    body = {
        "text": ["The capital of France is", "Write a haiku about rain."],
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True},
        "return_logprob": True,
        "top_logprobs_num": 2,
    }
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        first = client.post("/generate", json=body).json()
        again = client.post("/generate", json=body).json()
        plain = client.post("/generate", json={**body, "return_logprob": False}).json()
    assert [o["output_ids"] for o in first] == [o["output_ids"] for o in again]
    assert [o["output_ids"] for o in first] == [o["output_ids"] for o in plain]
    for out in first:
        meta = out["meta_info"]
        # TokenizerManager.add_logprob_to_meta_info (0.5.13, 0.5.17): (logprob, id, text|None)
        assert meta["input_token_logprobs"] == []
        assert meta["output_token_logprobs_length"] == 6
        assert [t[1] for t in meta["output_token_logprobs"]] == out["output_ids"]
        assert len(meta["output_top_logprobs"]) == 6
        for position, token in zip(meta["output_top_logprobs"], out["output_ids"], strict=True):
            assert len(position) == 2
            assert position[0][1] == token
            assert position[0][0] >= position[1][0]
            assert position[0][2] is None
    assert "output_top_logprobs" not in plain[0]["meta_info"]
