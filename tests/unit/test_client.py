"""The load generator: prompt loading for each dataset layout, and streaming against a real
in-process aiohttp server on 127.0.0.1 that speaks SGLang's `/generate` SSE format (including a
multi-token speculative step, error responses and a request that never finishes)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from spec_sweep.errors import SpecError
from spec_sweep.node.client import BenchResult, run_benchmark_sync
from spec_sweep.node.metrics import bench_metrics
from spec_sweep.node.prompts import CONSERVATIVE_ID_RANGE, load_prompts
from spec_sweep.spec import WorkloadSpec

# ---------------------------------------------------------------------------------------------
# Prompt loading


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_builtin_prompts_are_varied_text_and_seeded() -> None:
    prompts, source = load_prompts(WorkloadSpec(dataset="builtin", seed=0), model_path="m")
    assert 40 <= len(prompts) <= 60
    assert all(isinstance(p, str) and len(p.split()) >= 5 for p in prompts)
    assert len(set(prompts)) == len(prompts)
    raw = "raw text (no chat template found in the model folder)"
    assert source == f"builtin text prompts ({len(prompts)}), {raw}"
    again, _ = load_prompts(WorkloadSpec(dataset="builtin", seed=0), model_path="m")
    other, _ = load_prompts(WorkloadSpec(dataset="builtin", seed=1), model_path="m")
    assert again == prompts
    assert other != prompts
    assert sorted(other) == sorted(prompts)


def test_json_list_of_strings(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.json", json.dumps(["first prompt", "  ", "second prompt"]))
    prompts, source = load_prompts(WorkloadSpec(dataset=path), model_path="m")
    assert sorted(prompts) == ["first prompt", "second prompt"]
    assert (
        source
        == f"text prompts from {path} (2), raw text (no chat template found in the model folder)"
    )


def test_json_objects_with_text_or_prompt(tmp_path: Path) -> None:
    items = [{"text": "from text"}, {"prompt": "from prompt"}, {"other": "ignored"}, 3]
    path = _write(tmp_path / "p.json", json.dumps(items))
    prompts, _ = load_prompts(WorkloadSpec(dataset=path), model_path="m")
    assert sorted(prompts) == ["from prompt", "from text"]


def test_sharegpt_first_human_turn(tmp_path: Path) -> None:
    items = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "be brief"},
                {"from": "human", "value": "question one"},
                {"from": "gpt", "value": "answer"},
                {"from": "human", "value": "follow-up"},
            ],
        },
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"id": "c", "conversations": [{"role": "user", "content": "question two"}]},
    ]
    path = _write(tmp_path / "sharegpt.json", json.dumps(items))
    prompts, source = load_prompts(WorkloadSpec(dataset=path), model_path="m")
    assert sorted(prompts) == ["question one", "question two"]
    assert "(2), " in source


def test_jsonl_mixed_layouts(tmp_path: Path) -> None:
    lines = [
        json.dumps("plain string"),
        "",
        json.dumps({"text": "object text"}),
        json.dumps({"conversations": [{"from": "human", "value": "sharegpt line"}]}),
    ]
    path = _write(tmp_path / "p.jsonl", "\n".join(lines) + "\n")
    prompts, _ = load_prompts(WorkloadSpec(dataset=path), model_path="m")
    assert sorted(prompts) == ["object text", "plain string", "sharegpt line"]


def test_jsonl_single_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "one.jsonl", json.dumps({"prompt": "only one"}) + "\n")
    prompts, _ = load_prompts(WorkloadSpec(dataset=path), model_path="m")
    assert prompts == ["only one"]


def test_bad_jsonl_line_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", '"ok"\n{"text": \n')
    with pytest.raises(SpecError, match=r"workload\.dataset: .*bad\.jsonl: line 2 is not JSON"):
        load_prompts(WorkloadSpec(dataset=path), model_path="m")


def test_dataset_without_usable_prompt(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.json", json.dumps([{"a": 1}, "", None]))
    with pytest.raises(SpecError, match="no usable prompt among 3 entries"):
        load_prompts(WorkloadSpec(dataset=path), model_path="m")


def test_unreadable_dataset(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_prompts(WorkloadSpec(dataset=str(tmp_path / "missing.json")), model_path="m")


def test_random_ids_exact_length_distinct_and_seeded() -> None:
    workload = WorkloadSpec(
        dataset="random", input_len=37, num_prompts=5, concurrency=(1, 4), warmup_prompts=2
    )
    prompts, source = load_prompts(workload, model_path="/no/such/model")
    assert len(prompts) == 2 + 5 * 2  # one distinct prompt per request sent
    lo, hi = CONSERVATIVE_ID_RANGE
    for prompt in prompts:
        assert isinstance(prompt, list)
        assert len(prompt) == 37
        assert all(lo <= i < hi for i in prompt)
    assert len({tuple(p) for p in prompts}) == len(prompts)
    assert source == f"random ids in [{lo}, {hi}) (model path unreadable: conservative range)"
    assert load_prompts(workload, model_path="/no/such/model")[0] == prompts
    reseeded = workload.model_copy(update={"seed": 1})
    assert load_prompts(reseeded, model_path="/no/such/model")[0] != prompts


def test_random_ids_use_vocab_from_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 50}), encoding="utf-8")
    workload = WorkloadSpec(dataset="random", input_len=400, num_prompts=3, warmup_prompts=0)
    prompts, source = load_prompts(workload, model_path=str(tmp_path))
    assert source == f"random ids in [0, 50) (vocab_size from {tmp_path / 'config.json'})"
    ids = {i for p in prompts for i in p}
    assert ids <= set(range(50))
    assert len(ids) > 40  # the whole range is used, not the conservative one


def test_random_ids_nested_text_config(tmp_path: Path) -> None:
    config = {"architectures": ["X"], "text_config": {"vocab_size": 163840}}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    workload = WorkloadSpec(dataset="random", input_len=8, num_prompts=1, warmup_prompts=0)
    _, source = load_prompts(workload, model_path=str(tmp_path))
    assert source.startswith("random ids in [0, 163840) (vocab_size from ")


def test_random_ids_fall_back_to_tokenizer_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "x"}), encoding="utf-8")
    tokenizer = {
        "model": {"vocab": {"a": 0, "b": 1, "c": 2}},
        "added_tokens": [{"id": 7, "content": "<eos>"}],
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    workload = WorkloadSpec(dataset="random", input_len=8, num_prompts=1, warmup_prompts=0)
    _, source = load_prompts(workload, model_path=str(tmp_path))
    assert source == f"random ids in [0, 8) (vocabulary size from {tmp_path / 'tokenizer.json'})"


def test_random_ids_conservative_when_config_has_no_vocab(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    workload = WorkloadSpec(dataset="random", input_len=8, num_prompts=1, warmup_prompts=0)
    _, source = load_prompts(workload, model_path=str(tmp_path))
    lo, hi = CONSERVATIVE_ID_RANGE
    assert source == (
        f"random ids in [{lo}, {hi}) (no vocab_size in {tmp_path / 'config.json'}: "
        "conservative range)"
    )


# ---------------------------------------------------------------------------------------------
# A real SGLang-shaped server (aiohttp, in-process, 127.0.0.1:0)

#: Gaps (s) before each event of a normal stream and the cumulative completion_tokens it carries.
#: The third event commits three tokens at once, as a speculative verify step does.
SCRIPT = ((0.03, 1), (0.01, 2), (0.06, 5), (0.01, 6))
#: Streams recorded from real SGLang 0.5.17 (tests/fixtures/sglang/0.5.17/README.md).
REAL_STREAMS = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "0.5.17" / "streams"

#: Text that would fool a client searching the JSON text for the key without its quotes.
TRICKY_TEXT = 'say "completion_tokens": 999 '


@dataclass
class ServerState:
    """What the test server saw."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    active: int = 0
    peak: int = 0
    release: asyncio.Event | None = None
    server_info_calls: list[str] = field(default_factory=list)
    health_peers: list[Any] = field(default_factory=list)
    generate_peers: list[Any] = field(default_factory=list)


def _event(meta: dict[str, Any], *, compact: bool) -> bytes:
    """One SSE event; compact ones (orjson's layout) put the tricky text after meta_info."""
    text = TRICKY_TEXT * meta["completion_tokens"]
    if compact:
        body = {"meta_info": meta, "output_ids": [], "text": text}
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
    body = {"text": text, "output_ids": [], "meta_info": meta}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _meta(
    count: int, *, final: bool, reason: Any = None, verify: int | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": "r",
        "finish_reason": (reason or {"type": "length", "length": count}) if final else None,
        "prompt_tokens": 11,
        "completion_tokens": count,
        "cached_tokens": 0,
    }
    if final:
        meta["e2e_latency"] = 0.1
    if verify is not None:
        meta["spec_verify_ct"] = verify
    return meta


def _build_app(state: ServerState) -> web.Application:
    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state.bodies.append(body)
        state.generate_peers.append(
            request.transport and request.transport.get_extra_info("peername")
        )
        mode = body.get("text") if isinstance(body.get("text"), str) else "normal"
        if mode.startswith("REPLAY:"):  # a stream recorded from real SGLang, event by event
            recorded = (REAL_STREAMS / mode.removeprefix("REPLAY:")).read_bytes()
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for event in recorded.split(b"\n\n"):
                if event.strip():
                    await asyncio.sleep(0.002)
                    await response.write(event + b"\n\n")
            await response.write_eof()
            return response
        if mode == "ERROR400":
            message = "The input (40000 tokens) is longer than the model's context length."
            return web.json_response({"error": {"message": message}}, status=400)
        state.active += 1
        state.peak = max(state.peak, state.active)
        try:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            if mode == "HANG":
                await response.write(_event(_meta(1, final=False), compact=True))
                assert state.release is not None
                await state.release.wait()
                return response
            if mode == "STREAMERR":
                await response.write(_event(_meta(1, final=False), compact=True))
                await response.write(b'data: {"error": {"message": "scheduler died"}}\n\n')
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
                return response
            if mode == "TRUNC":
                await response.write(_event(_meta(1, final=False), compact=True))
                await response.write_eof()
                return response
            spec = mode == "SPEC"
            for i, (gap, count) in enumerate(SCRIPT):
                await asyncio.sleep(gap)
                final = i == len(SCRIPT) - 1
                reason = None
                if final and mode == "ABORT":
                    reason = {"type": "abort", "message": "Abort in waiting queue"}
                meta = _meta(count, final=final, reason=reason, verify=2 if spec else None)
                await response.write(_event(meta, compact=spec))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        finally:
            state.active -= 1

    async def server_info(request: web.Request) -> web.Response:
        state.server_info_calls.append(request.path)
        if request.path == "/server_info":
            return web.Response(status=404, text="Not Found")  # an older SGLang
        return web.json_response({"internal_states": [{"avg_spec_accept_length": 2.5}]})

    async def health(request: web.Request) -> web.Response:
        state.health_peers.append(
            request.transport and request.transport.get_extra_info("peername")
        )
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/generate", generate)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/get_server_info", server_info)
    return app


@pytest.fixture
def server() -> Iterator[tuple[str, ServerState]]:
    """An SGLang-shaped server on 127.0.0.1 in a background thread; stopped at teardown."""
    state = ServerState()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]

    async def start() -> web.AppRunner:
        state.release = asyncio.Event()
        runner = web.AppRunner(_build_app(state), handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        return runner

    runner = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)

    async def stop() -> None:
        assert state.release is not None
        state.release.set()
        await runner.cleanup()

    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        sock.close()


def _dataset(tmp_path: Path, *texts: str) -> str:
    return _write(tmp_path / "prompts.json", json.dumps(list(texts)))


def _run(url: str, workload: WorkloadSpec, *, timeout_s: float = 10.0) -> BenchResult:
    return run_benchmark_sync(url, workload, model_path="m", request_timeout_s=timeout_s)


def test_stream_timing_and_server_token_counts(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, state = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "normal"),
        output_len=6,
        num_prompts=2,
        concurrency=(1,),
        warmup_prompts=1,
    )
    bench = _run(url, workload)
    assert not bench.hung
    assert bench.error_count == 0
    assert bench.first_error is None
    assert bench.prompt_source.startswith("text prompts from ")
    (level,) = bench.levels
    assert level.concurrency == 1
    assert len(level.outputs) == 2  # the warm-up request is not recorded
    assert len(state.bodies) == 3
    body = state.bodies[0]
    assert body["text"] == "normal"
    assert body["stream"] is True
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True}
    for out in level.outputs:
        assert out.error is None
        assert out.output_tokens == 6  # from meta_info: 4 events carried 6 tokens
        assert out.prompt_tokens == 11
        assert out.spec_verify_ct is None
        assert out.ttft_s is not None
        assert out.ttft_s >= 0.03
        # 5 gaps after the first token; the 3-token event's gap is split evenly.
        assert len(out.itl_s) == 5
        assert out.itl_s[1] == out.itl_s[2] == out.itl_s[3]
        assert 0.04 <= sum(out.itl_s[1:4]) <= 0.2
        assert out.latency_s >= out.ttft_s + sum(out.itl_s) - 1e-6
    starts = [o.start_s for o in level.outputs]
    assert starts[0] >= 0.0
    assert starts[1] >= starts[0] + level.outputs[0].latency_s - 1e-6  # one at a time
    assert level.duration_s >= sum(o.latency_s for o in level.outputs) - 1e-6
    # The server's accept length comes from /get_server_info when /server_info is missing.
    assert state.server_info_calls == ["/server_info", "/get_server_info"]
    assert level.server_accept_length == 2.5


def test_speculative_accept_length_from_meta_info(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, _ = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "SPEC"), output_len=6, num_prompts=3, warmup_prompts=0
    )
    bench = _run(url, workload)
    (level,) = bench.levels
    assert [o.spec_verify_ct for o in level.outputs] == [2, 2, 2]
    metrics = bench_metrics(bench, multi_level=False)
    assert metrics["accept_length"] == pytest.approx(2.5)  # 5 decode tokens / 2 verify steps
    assert metrics["output_throughput"] == pytest.approx(18 / level.duration_s)
    assert metrics["request_throughput"] == pytest.approx(3 / level.duration_s)


def test_levels_concurrency_and_suffixes(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, state = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "normal"),
        output_len=6,
        num_prompts=6,
        concurrency=(1, 3),
        warmup_prompts=2,
    )
    bench = _run(url, workload)
    assert [lv.concurrency for lv in bench.levels] == [1, 3]
    assert [len(lv.outputs) for lv in bench.levels] == [6, 6]
    assert len(state.bodies) == 2 + 12
    assert state.peak == 3
    assert bench.levels[1].duration_s < bench.levels[0].duration_s
    metrics = bench_metrics(bench, multi_level=True)
    for c in (1, 3):
        for name in ("output_throughput", "ttft_p50_ms", "itl_p99_ms", "decode_speed_p50"):
            assert f"{name}_c{c}" in metrics
        assert metrics[f"accept_length_c{c}"] == 2.5  # no verify counts: the server's value
    assert metrics["output_throughput_c3"] > metrics["output_throughput_c1"]


def test_every_slot_connects_before_the_first_request(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    """Handshakes happen before the measured window: each slot's connection says /health first
    and then carries its requests (kept alive), so no request of a level opens a connection."""
    url, state = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "normal"),
        output_len=6,
        num_prompts=8,
        concurrency=(2, 4),
        warmup_prompts=0,
    )
    bench = _run(url, workload)
    assert bench.error_count == 0
    assert len(state.health_peers) == 4 == len(set(state.health_peers))  # one per slot
    assert len(state.generate_peers) == 16
    assert set(state.generate_peers) == set(state.health_peers)


def test_random_ids_are_sent_as_input_ids(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, state = server
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1000}), encoding="utf-8")
    workload = WorkloadSpec(
        dataset="random", input_len=64, output_len=6, num_prompts=4, warmup_prompts=1
    )
    bench = run_benchmark_sync(url, workload, model_path=str(tmp_path), request_timeout_s=10)
    assert bench.error_count == 0
    assert bench.prompt_source.startswith("random ids in [0, 1000)")
    assert len(state.bodies) == 5
    for body in state.bodies:
        assert "text" not in body
        ids = body["input_ids"]
        assert len(ids) == 64
        assert all(0 <= i < 1000 for i in ids)
    assert len({tuple(b["input_ids"]) for b in state.bodies}) == 5


def test_request_errors_are_data(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, _ = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "normal", "ERROR400", "STREAMERR", "ABORT", "TRUNC"),
        output_len=6,
        num_prompts=5,
        warmup_prompts=0,
    )
    bench = _run(url, workload)
    assert not bench.hung
    (level,) = bench.levels
    errors = sorted(o.error for o in level.outputs if o.error is not None)
    assert bench.error_count == 4
    assert len(errors) == 4
    assert errors[0].startswith("HTTP 400: The input (40000 tokens) is longer")
    assert errors[1] == "aborted by the server: Abort in waiting queue"
    assert errors[2] == "scheduler died"
    assert errors[3] == "the stream ended early (no [DONE]) after 1 output tokens"
    assert bench.first_error in errors
    metrics = bench_metrics(bench, multi_level=False)
    assert metrics["request_throughput"] == pytest.approx(1 / level.duration_s)


def test_all_requests_failing_gives_no_metrics(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, _ = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "ERROR400"), num_prompts=3, concurrency=(2,), warmup_prompts=1
    )
    bench = _run(url, workload)
    assert bench.error_count == 3
    assert bench.first_error is not None
    assert bench.first_error.startswith("HTTP 400")
    assert bench_metrics(bench, multi_level=False) == {}


def test_hung_request_stops_the_benchmark(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, state = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "normal", "HANG"),
        output_len=6,
        num_prompts=6,
        concurrency=(2, 4),
        warmup_prompts=0,
    )
    started = time.monotonic()
    bench = _run(url, workload, timeout_s=0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 5.0
    assert bench.hung
    assert len(bench.levels) == 1  # the second level never ran
    (level,) = bench.levels
    assert level.hung
    assert level.server_accept_length is None
    timed_out = [o for o in level.outputs if o.error and "request_timeout_s=0.5 s" in o.error]
    assert len(timed_out) == 1
    assert timed_out[0].latency_s >= 0.5
    assert timed_out[0].output_tokens == 1  # it had started streaming
    assert bench.first_error == timed_out[0].error
    assert any(o.error is None for o in level.outputs)  # the normal request finished
    assert len(level.outputs) < 6
    assert all(o.error is None or o.latency_s > 0 for o in level.outputs)
    assert len(state.bodies) == len(level.outputs)
    assert bench_metrics(bench, multi_level=True) == {}  # a hung level measures nothing


def test_hang_cancels_the_requests_in_flight(
    server: tuple[str, ServerState], tmp_path: Path
) -> None:
    url, state = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "HANG"), num_prompts=5, concurrency=(3,), warmup_prompts=0
    )
    bench = _run(url, workload, timeout_s=0.3)
    (level,) = bench.levels
    assert level.hung
    assert len(level.outputs) == 3  # the other two requests were never sent
    assert len(state.bodies) == 3
    assert bench.error_count == 3
    errors = [o.error or "" for o in level.outputs]
    assert any(e.startswith("no complete answer within request_timeout_s=0.3 s") for e in errors)
    assert all(e.startswith(("no complete answer", "cancelled: another request")) for e in errors)
    assert level.duration_s < 2.0


def test_hung_warmup(server: tuple[str, ServerState], tmp_path: Path) -> None:
    url, _ = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, "HANG"), num_prompts=2, concurrency=(1,), warmup_prompts=2
    )
    bench = _run(url, workload, timeout_s=0.3)
    assert bench.hung
    assert bench.levels == ()
    assert bench.error_count == 1  # warm-up runs at most max(concurrency) = 1 at a time
    assert bench.first_error is not None
    assert bench.first_error.startswith("warm-up: no complete answer within")


def test_unreachable_server_is_data(tmp_path: Path) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    workload = WorkloadSpec(dataset="builtin", num_prompts=3, warmup_prompts=1)
    bench = _run(f"http://127.0.0.1:{port}", workload, timeout_s=5)
    assert not bench.hung
    assert bench.error_count == 3
    assert bench.first_error is not None
    assert bench.first_error.startswith("ConnectError")
    assert bench.levels[0].server_accept_length is None


@pytest.mark.parametrize(
    ("recording", "tokens", "verify"),
    [
        ("base-generate_stream.sse", 24, None),
        ("base-generate_logprobs_stream.sse", 24, None),
        ("ngram-d8-generate_stream.sse", 24, 11),
    ],
)
def test_streams_recorded_from_real_sglang_parse(
    server: tuple[str, ServerState], tmp_path: Path, recording: str, tokens: int, verify: int | None
) -> None:
    url, _ = server
    workload = WorkloadSpec(
        dataset=_dataset(tmp_path, f"REPLAY:{recording}"),
        output_len=tokens,
        num_prompts=1,
        concurrency=(1,),
        warmup_prompts=0,
    )
    bench = _run(url, workload)
    assert bench.error_count == 0, bench.first_error
    (out,) = bench.levels[0].outputs
    assert out.error is None
    assert out.output_tokens == tokens
    assert out.prompt_tokens == 8
    assert out.e2e_latency_s is not None
    assert out.e2e_latency_s > 0
    assert out.ttft_s is not None
    assert out.spec_verify_ct == verify
    # Cumulative streaming (SGLang's default): one ITL per token after the first.
    assert len(out.itl_s) == tokens - 1
