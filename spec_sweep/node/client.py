"""The load generator: httpx async streaming requests against SGLang's native `/generate`.

This module owns the client side of a trial's benchmark (docs/design.md, "How a sweep runs" and
"Spec format"): how the prompts (`prompts.load_prompts`) are sent (`concurrency` requests in flight
per level, each in-flight slot with its own kept-alive connection, warm-up first, `max_new_tokens =
output_len` with `ignore_eos`, greedy sampling, request bodies built before the level starts) and
what is recorded for each request (`RequestOutput`: TTFT, inter-token latencies, server-counted
tokens, error). It is the only module that imports httpx. Turning records into metrics is
`spec_sweep.metrics`' job.

Stream format (SGLang 0.5.x `http_server.generate_request`): one `data: {json}` SSE event per
scheduler output, ending with `data: [DONE]`; each event carries the (by default cumulative)
`text` and a `meta_info` with the cumulative `completion_tokens`; the last one also carries
`prompt_tokens`, `finish_reason`, `e2e_latency` and, for speculative decoding, `spec_verify_ct`.
An error inside the stream is `data: {"error": {"message": ...}}`; an aborted request has
`finish_reason.type == "abort"`. To keep the client cheap, a streamed event is never fully
parsed: `completion_tokens` is read straight from the bytes (JSON escapes every quote inside a
string value, so the key pattern cannot occur inside the generated text); only the last event of
a request, and any event without `completion_tokens`, goes through `json.loads`.

Timing follows SGLang's `bench_serving.py` (`async_request_sglang_generate`): TTFT is the time
from sending the request to the first event that carries output tokens; for every later event
that carries `n` new tokens (speculative decoding commits several tokens per step), the gap since
the previous token-bearing event is divided evenly into `n` inter-token latencies, so that
`len(itl_s) == output_tokens - tokens of the first event` and ITL percentiles weigh every token
alike; latency runs to the end of the stream. Token counts come from the server's `meta_info`,
never from counting events.

A failed request is data (`RequestOutput.error`). A request that exceeds `request_timeout_s`
(an asyncio timeout around the whole request, connect included) means the server is hung: the
level is marked hung, its requests still in flight are cancelled and recorded as such, and no
further level runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import re
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx

from spec_sweep.node.answers import (
    accept_length_of,
    as_int,
    clip,
    error_message,
    error_text,
    event_error,
    exception_text,
)
from spec_sweep.node.prompts import Prompt, load_prompts
from spec_sweep.spec import WorkloadSpec

__all__ = [
    "BenchResult",
    "LevelResult",
    "RequestOutput",
    "run_benchmark",
    "run_benchmark_sync",
]

# `"completion_tokens": 12`; JSON escapes every quote inside a string, so only the key matches.
_CT_KEY = b'"completion_tokens"'
_CT_KEY_LEN = len(_CT_KEY)
_CT_VALUE = re.compile(rb"\s*:\s*(\d+)")
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
_SERVER_INFO_TIMEOUT_S = 10.0
# httpx's own timeouts are a backstop that must never fire before the asyncio timeout around each
# request (read has none: a per-read timer costs CPU on every streamed event).
_HTTPX_SLACK_S = 30.0


@dataclass(slots=True)
class RequestOutput:
    """One request's record (hot path: a plain slots dataclass).

    Attributes:
        prompt_tokens: Prompt tokens as counted by the server (`meta_info.prompt_tokens`).
        output_tokens: Generated tokens as counted by the server (`meta_info.completion_tokens`).
        ttft_s: Seconds from sending the request to the first event carrying output tokens.
        itl_s: Inter-token latencies in seconds: the gap before each token-bearing event after
            the first, divided evenly among the tokens it carries (bench_serving's convention).
        latency_s: Seconds from sending the request to the end of its stream (or its failure).
        start_s: When the request was sent, in seconds since its level started.
        spec_verify_ct: Speculative verify steps (`meta_info.spec_verify_ct`), if reported.
        error: Why the request failed; None when it succeeded.
        e2e_latency_s: The server's own end-to-end latency (`meta_info.e2e_latency`), if
            reported; `latency_s - e2e_latency_s` is what the network and the client added.
    """

    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list, repr=False)
    latency_s: float = 0.0
    start_s: float = 0.0
    spec_verify_ct: int | None = None
    error: str | None = None
    e2e_latency_s: float | None = None


@dataclass(frozen=True, slots=True)
class LevelResult:
    """The requests of one concurrency level.

    Attributes:
        concurrency: Requests kept in flight.
        outputs: One record per request sent, in sending order (cancelled ones included).
        duration_s: Wall time from the level's first request to the end of its last.
        server_accept_length: `internal_states[0].avg_spec_accept_length` from `/server_info`
            read after the level (SGLang accumulates it since boot or the last cache flush, so it
            includes earlier levels and the warm-up); None when absent or unreadable.
        hung: Whether a request exceeded `request_timeout_s`.
    """

    concurrency: int
    outputs: tuple[RequestOutput, ...]
    duration_s: float
    server_accept_length: float | None
    hung: bool


@dataclass(frozen=True, slots=True)
class BenchResult:
    """A whole benchmark: the levels run, in order, and a summary of what went wrong.

    Attributes:
        levels: The levels that ran; a hung level is the last one.
        prompt_source: What was sent, e.g. "builtin text prompts (48)" or "random ids in
            [0, 151936) (vocab_size from /m/config.json)".
        hung: Whether the server stopped answering (during the warm-up or a level).
        error_count: Failed measured requests (failed warm-up requests when the warm-up hung).
        first_error: The message of the earliest failure, None when nothing failed.
    """

    levels: tuple[LevelResult, ...]
    prompt_source: str
    hung: bool
    error_count: int
    first_error: str | None


# ---------------------------------------------------------------------------------------------
# Prompts


async def run_benchmark(
    base_url: str,
    workload: WorkloadSpec,
    *,
    model_path: str,
    request_timeout_s: float,
    headers: Mapping[str, str] | None = None,
) -> BenchResult:
    """Warm up, then measure each concurrency level of `workload` in turn on one server.

    Args:
        base_url: The server, e.g. "http://127.0.0.1:30000".
        workload: What to send and at which concurrency levels.
        model_path: The served model's path (for the vocabulary of random prompts).
        request_timeout_s: The most one request may take; beyond it the server counts as hung.
        headers: Sent with every request (the server's API key: `Authorization: Bearer ...`).

    Returns:
        The levels measured (stopping at a hung one) and an error summary.

    Raises:
        SpecError: the dataset file is unreadable or holds no usable prompt.
    """
    prompts, source = await asyncio.to_thread(load_prompts, workload, model_path=model_path)
    levels = workload.concurrency
    width = max(levels)
    url = f"{base_url.rstrip('/')}/generate"
    sent = {**_JSON_HEADERS, **(headers or {})}
    cursor = 0

    def take(count: int) -> list[httpx.Request]:
        """The next `count` requests, built before their level starts (off the hot path)."""
        nonlocal cursor
        start, cursor = cursor, cursor + count
        return [
            httpx.Request(
                "POST",
                url,
                content=_payload(prompts[i % len(prompts)], workload),
                headers=sent,
            )
            for i in range(start, cursor)
        ]

    results: list[LevelResult] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(_connection(base_url, request_timeout_s, headers))
            for _ in range(width)
        ]
        await _open_connections(clients, timeout_s=min(request_timeout_s, _SERVER_INFO_TIMEOUT_S))
        if workload.warmup_prompts:
            warmup = await _run_level(
                clients,
                take(workload.warmup_prompts),
                concurrency=min(workload.warmup_prompts, width),
                request_timeout_s=request_timeout_s,
            )
            if warmup.hung:
                failed = [o for o in warmup.outputs if o.error is not None]
                message = _first_error((warmup,))
                return BenchResult(
                    levels=(),
                    prompt_source=source,
                    hung=True,
                    error_count=len(failed),
                    first_error=f"warm-up: {message}",
                )
        for concurrency in levels:
            level = await _run_level(
                clients,
                take(workload.num_prompts),
                concurrency=concurrency,
                request_timeout_s=request_timeout_s,
            )
            if not level.hung:
                accept = await _server_accept_length(
                    clients[0], min(request_timeout_s, _SERVER_INFO_TIMEOUT_S)
                )
                level = dataclasses.replace(level, server_accept_length=accept)
            results.append(level)
            if level.hung:
                break
    return BenchResult(
        levels=tuple(results),
        prompt_source=source,
        hung=any(level.hung for level in results),
        error_count=sum(1 for lv in results for o in lv.outputs if o.error is not None),
        first_error=_first_error(results),
    )


def run_benchmark_sync(
    base_url: str,
    workload: WorkloadSpec,
    *,
    model_path: str,
    request_timeout_s: float,
    headers: Mapping[str, str] | None = None,
) -> BenchResult:
    """`run_benchmark` in a fresh event loop (for callers without one)."""
    return asyncio.run(
        run_benchmark(
            base_url,
            workload,
            model_path=model_path,
            request_timeout_s=request_timeout_s,
            headers=headers,
        )
    )


def _connection(
    base_url: str, request_timeout_s: float, headers: Mapping[str, str] | None = None
) -> httpx.AsyncClient:
    """The HTTP client of one in-flight slot: a pool of one kept-alive connection.

    One pool per slot rather than one shared pool: httpcore (1.0.x) re-scans every pooled
    connection for each idle one whenever a request starts or ends, which is quadratic in the
    concurrency; with one shared 64-connection pool the client became the bottleneck whenever a
    batch of requests finished together (benchmarks/client_accuracy.py: 2146 instead of 3008
    tok/s at concurrency 64 on the simulated PCIe node). Plain-HTTP servers get no certificate
    store (loading one costs ~30 ms of CPU per client).
    """
    return httpx.AsyncClient(
        base_url=base_url,
        headers=dict(headers or {}),
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        timeout=httpx.Timeout(request_timeout_s + _HTTPX_SLACK_S, read=None),
        trust_env=False,
        verify=_tls_context() if base_url.startswith("https:") else False,
    )


async def _open_connections(clients: Sequence[httpx.AsyncClient], *, timeout_s: float) -> None:
    """Open every slot's connection before any level starts (a `GET /health` each).

    Otherwise the first request of each slot pays for its TCP (and TLS) handshake inside the
    measured window, and at concurrency 64 the server sat idle for the first 75-150 ms of a
    5.5 s level while the connections were made. Failures are left to the levels to report.
    """

    async def touch(client: httpx.AsyncClient) -> None:
        with contextlib.suppress(httpx.HTTPError):
            await client.get("/health", timeout=timeout_s)

    await asyncio.gather(*(touch(c) for c in clients))


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def _payload(prompt: Prompt, workload: WorkloadSpec) -> bytes:
    """The `/generate` request body, serialised before the level starts (off the hot path)."""
    body = {
        "text" if isinstance(prompt, str) else "input_ids": prompt,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": workload.output_len,
            "ignore_eos": True,
        },
        "stream": True,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _first_error(levels: Sequence[LevelResult]) -> str | None:
    """The error of the request that failed first (levels run one after another)."""
    for level in levels:
        failed = [o for o in level.outputs if o.error is not None]
        if failed:
            return min(failed, key=lambda o: o.start_s + o.latency_s).error
    return None


async def _run_level(
    clients: Sequence[httpx.AsyncClient],
    requests: list[httpx.Request],
    *,
    concurrency: int,
    request_timeout_s: float,
) -> LevelResult:
    """Send `requests`, `concurrency` at a time (worker k uses `clients[k]`); stop on a hang."""
    total = len(requests)
    outputs: list[RequestOutput] = []
    in_flight: dict[int, RequestOutput] = {}
    workers: list[asyncio.Task[None]] = []
    hung = False
    next_index = 0
    t0 = time.perf_counter()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal hung, next_index
        while next_index < total and not hung:
            index = next_index
            next_index += 1
            out = RequestOutput()
            outputs.append(out)
            in_flight[index] = out
            try:
                async with asyncio.timeout(request_timeout_s):
                    await _send(client, requests[index], out=out, t0=t0)
            except TimeoutError:
                out.error = (
                    f"no complete answer within request_timeout_s={request_timeout_s:g} s "
                    f"(server hung?) after {out.output_tokens} output tokens"
                )
                out.latency_s = time.perf_counter() - t0 - out.start_s
                del in_flight[index]
                if not hung:
                    hung = True
                    current = asyncio.current_task()
                    for task in workers:
                        if task is not current:
                            task.cancel()
                return
            del in_flight[index]

    workers.extend(asyncio.create_task(worker(c)) for c in clients[: min(concurrency, total)])
    await asyncio.gather(*workers, return_exceptions=True)
    end = time.perf_counter()
    for out in in_flight.values():  # cancelled because another request hung
        out.error = "cancelled: another request of this level exceeded request_timeout_s"
        out.latency_s = end - t0 - out.start_s
    return LevelResult(
        concurrency=concurrency,
        outputs=tuple(outputs),
        duration_s=end - t0,
        server_accept_length=None,
        hung=hung,
    )


async def _send(
    client: httpx.AsyncClient, request: httpx.Request, *, out: RequestOutput, t0: float
) -> None:
    """Stream one `/generate` request into `out`; every failure becomes `out.error`."""
    start = time.perf_counter()
    out.start_s = start - t0
    last_time = start
    last_count = 0
    last_event = b""
    done = False
    error: str | None = None
    itl = out.itl_s
    try:
        r = await client.send(request, stream=True)
        try:
            if r.status_code != 200:
                body = await r.aread()
                out.error = f"HTTP {r.status_code}: {error_text(body)}"
                out.latency_s = time.perf_counter() - start
                return
            pending = b""
            async for chunk in r.aiter_bytes():
                now = time.perf_counter()
                lines = (pending + chunk if pending else chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue  # blank separator, SSE comment or other field
                    data = line[5:].strip()
                    at = data.rfind(_CT_KEY)
                    match = _CT_VALUE.match(data, at + _CT_KEY_LEN) if at >= 0 else None
                    if match is None:
                        if data == b"[DONE]":
                            done = True
                        else:
                            error = error or event_error(data)
                        continue
                    last_event = data
                    count = int(match[1])
                    if count > last_count:
                        if last_count == 0:
                            out.ttft_s = now - start
                        else:
                            new = count - last_count
                            itl.extend([(now - last_time) / new] * new)
                        last_time = now
                        last_count = out.output_tokens = count
            end = time.perf_counter()
        finally:
            await r.aclose()
    except Exception as exc:  # a failed request is data, never an exception
        out.error = exception_text(exc, out.output_tokens)
        out.latency_s = time.perf_counter() - start
        return
    out.latency_s = end - start
    out.error = error or _finish(out, last_event, done=done)


def _finish(out: RequestOutput, last_event: bytes, *, done: bool) -> str | None:
    """Fill the final `meta_info` counts into `out`; the error of the request, if any."""
    if not last_event:
        return "the stream ended without any data event"
    try:
        final = json.loads(last_event)
    except ValueError:
        return f"unparsable final event: {clip(last_event.decode(errors='replace'))}"
    if not isinstance(final, dict):
        return f"unexpected final event: {clip(repr(final))}"
    if "error" in final:
        return error_message(final["error"])
    meta = final.get("meta_info")
    if not isinstance(meta, dict):
        return "the final event has no meta_info"
    out.output_tokens = as_int(meta.get("completion_tokens"), out.output_tokens)
    out.prompt_tokens = as_int(meta.get("prompt_tokens"), 0)
    e2e = meta.get("e2e_latency")
    if isinstance(e2e, int | float) and not isinstance(e2e, bool) and math.isfinite(e2e):
        out.e2e_latency_s = float(e2e)
    verify = meta.get("spec_verify_ct")
    out.spec_verify_ct = (
        verify if isinstance(verify, int) and not isinstance(verify, bool) else None
    )
    reason = meta.get("finish_reason")
    if isinstance(reason, dict) and reason.get("type") == "abort":
        return f"aborted by the server: {error_message(reason)}"
    if not done and reason is None:
        return f"the stream ended early (no [DONE]) after {out.output_tokens} output tokens"
    if out.output_tokens <= 0:
        return "the server finished without generating a token"
    return None


async def _server_accept_length(client: httpx.AsyncClient, timeout_s: float) -> float | None:
    """`internal_states[0].avg_spec_accept_length` of `/server_info` (or `/get_server_info`)."""
    for path in _SERVER_INFO_PATHS:
        try:
            async with asyncio.timeout(timeout_s):
                response = await client.get(path)
        except (TimeoutError, httpx.HTTPError):
            continue
        if response.status_code != 200:
            continue
        try:
            info = response.json()
        except ValueError:
            continue
        return accept_length_of(info)
    return None
