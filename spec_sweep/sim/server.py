"""The simulated node's process: HTTP API (aiohttp), start-up, warm-up, signals and exit.

This module owns the main process of ``python -m spec_sweep.sim``. :func:`main` parses the
command line (SGLang's flags from the manifest), loads the profile, plans the node, forks the
worker children, installs SGLang's signal behaviour (SIGQUIT from a failing worker kills the tree
with SIGKILL; SIGTERM shuts down cleanly), plays the boot, then serves the subset of SGLang
0.5.x's HTTP API the product uses: ``/health``, ``/health_generate``, ``/ready``,
``/model_info`` and ``/server_info`` (and the deprecated ``/get_*`` spellings), ``/generate``
(streaming SSE or not), ``/flush_cache`` and ``/v1/models``, with SGLang's response shapes. It
warms up like SGLang (``/model_info``, then an 8-token ``/generate``) before printing the
readiness line. It is the only module of the simulator that imports aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from spec_sweep.sim import texts
from spec_sweep.sim.boot import (
    BootResult,
    boot_node,
    emit_scheduler_failure,
    has_startup_time,
    resolved_args,
)
from spec_sweep.sim.cli import SimOptions, parse_command_line
from spec_sweep.sim.engine import Engine, GenRequest
from spec_sweep.sim.greedy import GreedyPath, lossy_numerics, numerics_key
from spec_sweep.sim.logs import SimLog
from spec_sweep.sim.model import NodePlan, plan_node
from spec_sweep.sim.perf import PerfModel
from spec_sweep.sim.procs import WorkerSet, kill_tree_and_self
from spec_sweep.sim.profiles import Profile, ProfileError, load_profile

__all__ = ["main"]

_PROG = "python -m spec_sweep.sim"
_WARMUP_TIMEOUT_S = 600.0
_DEFAULT_MAX_NEW_TOKENS = 128
_ABORT_MESSAGE = (
    "Out of memory even after retracting all other requests in the decode batch. "
    "Aborting the last request."
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


#: Greedy tokens a configuration with ``--sim-corrupt-output`` gets right before it goes wrong.
_CORRUPT_AFTER = 2


def _count_tokens(text: str) -> int:
    """Prompt length of a text (about 4 bytes per token, like BPE tokenizers on English)."""
    return max(1, round(len(text.encode("utf-8")) / 4))


def _prompt_keys(text: Any, ids: Any) -> list[str | None]:
    """One key per prompt of a greedy request: its text, or its token ids."""
    if text is not None:
        return [str(t) for t in (text if isinstance(text, list) else [text])]
    batch = ids if ids and isinstance(ids[0], list) else [ids]
    return [json.dumps(x) for x in batch]


def _looks_random(ids: Sequence[int]) -> bool:
    """Random token ids (bench_serving's random dataset) rarely repeat; text tokens do."""
    if len(ids) < 24:
        return False
    return 1.0 - len(set(ids)) / len(ids) < 0.15


class SimServer:
    """State of the running node and its HTTP handlers.

    Args:
        options: Simulator options.
        profile: The hardware profile.
        plan: The node plan (booted).
        log: Log writer.
        workers: Worker children.
    """

    def __init__(
        self,
        options: SimOptions,
        *,
        profile: Profile,
        plan: NodePlan,
        log: SimLog,
        workers: WorkerSet,
    ) -> None:
        self.options = options
        self.profile = profile
        self.plan = plan
        self.log = log
        self.workers = workers
        self.perf = PerfModel(profile, plan)
        self.engine = Engine(
            self.perf,
            plan=plan,
            log=log,
            flavor_old=options.flavor == "old",
            boot_time_scale=min(1.0, options.time_scale),
            speed=options.speed,
        )
        self.engine.hang_after = options.faults.hang_after
        self.status = "Starting"
        self.gracefully_exit = False
        self.boot: BootResult | None = None
        self.never = asyncio.Event()
        self.first_decode_failed = False
        self.served_model_name = options.served_model_name or plan.config.model_path
        self._numerics = numerics_key(options.server_args, os.environ)
        self._lossy = lossy_numerics(options.server_args)

    # -- helpers -------------------------------------------------------------------------------
    def _client(self, request: web.Request) -> str:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if isinstance(peer, tuple) and len(peer) >= 2:
            return f"{peer[0]}:{peer[1]}"
        return "127.0.0.1:0"

    async def _maybe_hang(self) -> None:
        if self.engine.hung:
            await self.never.wait()

    async def _first_decode(self) -> None:
        """A failure of the first decode step (``"warmup"``) hits the first request when the
        warm-up was skipped (`--skip-server-warmup`): SGLang is up, and its first generation,
        a readiness probe's included, kills the scheduler (real 0.5.17: (1, 4, 8) and (5, 2, 4)).
        """
        failure = self.plan.failure
        if failure is None or failure.stage != "warmup" or not self.options.skip_server_warmup:
            return
        if not self.first_decode_failed:
            self.first_decode_failed = True
            emit_scheduler_failure(failure, log=self.log, workers=self.workers)
        await self.never.wait()

    def _json(self, payload: Any, status: int = 200) -> web.Response:
        return web.Response(
            body=json.dumps(payload, default=str).encode(),
            status=status,
            content_type="application/json",
        )

    @web.middleware
    async def access_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Hang when the node hangs; refuse a request without the API key as SGLang does; write
        uvicorn's access line for every request."""
        await self._maybe_hang()
        if self._unauthorized(request):
            response: web.StreamResponse = self._json({"error": "Unauthorized"}, status=401)
        else:
            response = await handler(request)
        self.log.access(self._client(request), request.method, request.path_qs, response.status)
        return response

    def _unauthorized(self, request: web.Request) -> bool:
        """With `--api-key`, SGLang's middleware (http_server.add_api_key_middleware) answers 401
        to any request but OPTIONS, `/health*` and `/metrics*` without `Bearer <key>`."""
        key = self.options.server_args.get("api_key")
        if not key or request.method == "OPTIONS":
            return False
        if request.path.startswith(("/health", "/metrics")):
            return False
        return request.headers.get("Authorization") != f"Bearer {key}"

    # -- endpoints -----------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.StreamResponse:
        """``GET /health`` and ``/health_generate`` (http_server.py health_generate)."""
        if self.gracefully_exit:
            self.log.line("Health check request received during shutdown. Returning 503.")
            return web.Response(status=503)
        if self.status == "Starting":
            return web.Response(status=503)
        if request.path == "/health":
            return web.Response(status=200)
        await self._first_decode()
        req = self._new_request("HEALTH_CHECK", prompt_tokens=1, max_new_tokens=1, natural=True)
        req.count_for_hang = False
        self.engine.submit(req)
        await req.queue.get()
        return web.Response(status=200)

    async def ready(self, request: web.Request) -> web.StreamResponse:
        """``GET /ready``: 200 once the node is up."""
        del request
        return web.Response(status=200 if self.status == "Up" else 503)

    def model_info_payload(self) -> dict[str, Any]:
        """The ``/model_info`` body (SGLang 0.5.23 field set)."""
        model = self.profile.model
        return {
            "model_path": self.plan.config.model_path,
            "served_model_name": self.served_model_name,
            "tokenizer_path": self.options.server_args.get("tokenizer_path")
            or self.plan.config.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": self.options.server_args.get("load_format", "auto"),
            "reasoning_parser": self.options.server_args.get("reasoning_parser"),
            "tool_call_parser": self.options.server_args.get("tool_call_parser"),
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model.model_type,
            "architectures": [model.architecture],
        }

    async def model_info(self, request: web.Request) -> web.StreamResponse:
        """``GET /model_info`` (and the deprecated ``/get_model_info``)."""
        if request.path == "/get_model_info" and self.options.flavor == "new":
            self.log.line(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future "
                "version. Please use '/model_info' instead."
            )
        return self._json(self.model_info_payload())

    def internal_state(self) -> dict[str, Any]:
        """One entry of ``internal_states`` (scheduler get_internal_state)."""
        plan = self.plan
        state: dict[str, Any] = dict(self._server_args())
        state["world_size"] = plan.config.tp_size
        state["effective_max_running_requests_per_dp"] = plan.max_running_requests
        state["last_gen_throughput"] = self.engine.last_gen_throughput
        graph = dict(self.boot.graph_memory) if self.boot else {}
        if self.options.flavor == "new":
            state["memory_usage"] = {
                "weight": round(plan.weights_gib, 3),
                "kvcache": round(plan.kv_gib, 3),
                "startup_available": round(plan.available_after_init_gib, 3),
                "token_capacity": plan.max_total_num_tokens,
                "token_capacity_swa": None,
                "graph": {k: round(v, 3) for k, v in graph.items()},
            }
        else:
            state["memory_usage"] = {
                "weight": round(plan.weights_gib, 2),
                "kvcache": round(plan.kv_gib, 2),
                "token_capacity": plan.max_total_num_tokens,
                "graph": round(sum(graph.values()), 2),
            }
        accept = self.engine.avg_spec_accept_length()
        if accept is not None:
            state["avg_spec_accept_length"] = accept
        return state

    def _server_args(self) -> dict[str, Any]:
        args = dict(self.options.server_args)
        args.update(resolved_args(self.options, self.plan, self.profile))
        return args

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        """``GET /server_info`` (and the deprecated ``/get_server_info``)."""
        if request.path == "/get_server_info" and self.options.flavor == "new":
            self.log.line(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead."
            )
        payload: dict[str, Any] = {
            **self._server_args(),
            "status": "ready",
            "max_total_num_tokens": self.plan.max_total_num_tokens,
            "max_req_input_len": self.plan.context_len - 1,
        }
        if has_startup_time(self.options.sglang_version):
            # http_server.py 0.5.17:798, 0.5.23:886: the tokenizer manager's startup_time
            payload["startup_time"] = (self.boot or BootResult()).startup_time()
        payload["internal_states"] = [self.internal_state()]
        payload["version"] = self.options.sglang_version
        if self.options.flavor == "new":
            payload["frontend"] = "python"
        return self._json(payload)

    async def v1_models(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/models`` (OpenAI-compatible model list)."""
        del request
        card = {
            "id": self.served_model_name,
            "object": "model",
            "created": int(self.boot.started if self.boot else time.time()),
            "owned_by": "sglang",
            "root": self.served_model_name,
            "parent": None,
            "max_model_len": self.plan.context_len,
        }
        return self._json({"object": "list", "data": [card]})

    async def flush_cache(self, request: web.Request) -> web.StreamResponse:
        """``GET/POST /flush_cache``."""
        del request
        if self.engine.has_work():
            self.log.line(
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {len(self.engine.waiting)}, "
                f"#running-req: {len(self.engine.running)}",
                rank=0,
            )
            return web.Response(status=400, text="Flush cache failed.\n")
        self.engine.spec_accept_tokens = 0
        self.engine.spec_verify_ct = 0
        self.log.line("Cache flushed successfully!", rank=0)
        return web.Response(
            status=200,
            text="Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)\n",
        )

    async def not_found(self, request: web.Request) -> web.StreamResponse:
        """FastAPI's 404 body for unknown routes."""
        del request
        return self._json({"detail": "Not Found"}, status=404)

    def _new_request(
        self,
        rid: str | None,
        *,
        prompt_tokens: int,
        max_new_tokens: int,
        natural: bool,
        stream: bool = False,
        greedy_key: str | None = None,
        logprobs: tuple[bool, int, bool] = (False, 0, False),
    ) -> GenRequest:
        index = self.engine.next_index()
        greedy = None
        if greedy_key is not None:
            greedy = GreedyPath(
                key=greedy_key,
                numerics=self._numerics,
                vocab=self.engine.vocab,
                corrupt_after=_CORRUPT_AFTER if self.options.corrupt_output else None,
                lossy=self._lossy,
                dummy=self.plan.config.dummy_weights,
            )
        return_logprob, top_n, text_in_logprobs = logprobs
        return GenRequest(
            greedy=greedy,
            return_logprob=return_logprob,
            top_logprobs_num=top_n,
            text_in_logprobs=text_in_logprobs,
            rid=rid or uuid.uuid4().hex,
            prompt_tokens=prompt_tokens,
            max_new_tokens=max_new_tokens,
            natural=natural,
            stream=stream,
            incremental=self.options.incremental_streaming_output,
            index=index,
        )

    def _bad_request(self, message: str) -> web.Response:
        self.log.line(f"[http_server] Error: {message}")
        return self._json({"error": {"message": message}}, status=400)

    def _check_length(self, prompt: int, max_new: int) -> str | None:
        context = self.plan.context_len
        if prompt >= context:
            return (
                f"The input ({prompt} tokens) is longer than the model's context length "
                f"({context} tokens)."
            )
        if prompt + max_new > context:
            return (
                "Requested token count exceeds the model's maximum context length of "
                f"{context} tokens. You requested a total of {prompt + max_new} tokens: {prompt} "
                f"tokens from the input messages and {max_new} tokens for the completion. Please "
                "reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        return None

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """``POST/PUT /generate``: SGLang's native generation API."""
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._json(
                {
                    "object": "error",
                    "message": "Invalid JSON body",
                    "type": "Bad Request",
                    "param": None,
                    "code": 400,
                },
                status=400,
            )
        if not isinstance(body, dict):
            return self._bad_request("The request body must be a JSON object.")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            return self._bad_request("sampling_params must be a JSON object.")
        raw_max = params.get("max_new_tokens", _DEFAULT_MAX_NEW_TOKENS)
        try:
            max_new = int(raw_max if raw_max is not None else _DEFAULT_MAX_NEW_TOKENS)
        except (TypeError, ValueError):
            return self._bad_request(f"max_new_tokens must be an integer, got {raw_max!r}.")
        if max_new < 0:
            return self._bad_request(f"max_new_tokens must be at least 0, got {max_new}.")
        stream = bool(body.get("stream", False))
        prompts: list[tuple[int, bool]] = []
        text, ids = body.get("text"), body.get("input_ids")
        if text is not None:
            items = text if isinstance(text, list) else [text]
            prompts = [(_count_tokens(str(t)), True) for t in items]
        elif ids is not None:
            batch = ids if ids and isinstance(ids[0], list) else [ids]
            prompts = [(max(1, len(x)), not _looks_random(x)) for x in batch]
        else:
            return self._bad_request("Either text, input_ids or input_embeds should be provided.")
        is_batch = isinstance(text, list) or bool(ids and isinstance(ids[0], list))
        if stream and is_batch:
            return self._bad_request("The simulated node streams one prompt per request.")
        for prompt, _ in prompts:
            problem = self._check_length(prompt, max_new)
            if problem is not None:
                if stream:
                    return await self._stream_error(request, problem)
                return self._bad_request(problem)
        if self.options.faults.request_error:
            return await self._fault_error(request, stream=stream)
        rid = body.get("rid") if isinstance(body.get("rid"), str) else None
        greedy = params.get("temperature", 1.0) == 0
        keys = _prompt_keys(text, ids) if greedy else [None] * len(prompts)
        logprobs = (
            bool(body.get("return_logprob", False)),
            int(body.get("top_logprobs_num") or 0),
            bool(body.get("return_text_in_logprobs", False)),
        )
        reqs = [
            self._new_request(
                rid if len(prompts) == 1 else None,
                prompt_tokens=p,
                max_new_tokens=max_new,
                natural=natural,
                stream=stream,
                greedy_key=key,
                logprobs=logprobs,
            )
            for (p, natural), key in zip(prompts, keys, strict=True)
        ]
        await self._first_decode()
        for req in reqs:
            self.engine.submit(req)
        if stream:
            return await self._stream(request, reqs[0])
        outputs = []
        try:
            for req in reqs:
                while True:
                    out = await req.queue.get()
                    if out.finished:
                        outputs.append(out.body)
                        break
        finally:
            for req in reqs:
                self.engine.abort(req)
        payload = outputs[0] if not is_batch else b"[" + b",".join(outputs) + b"]"
        return web.Response(body=payload, content_type="application/json")

    async def _stream(self, request: web.Request, req: GenRequest) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"}
        )
        await response.prepare(request)
        try:
            while True:
                out = await req.queue.get()
                await response.write(b"data: " + out.body + b"\n\n")
                if out.finished:
                    break
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        finally:
            self.engine.abort(req)
        return response

    async def _stream_error(self, request: web.Request, message: str) -> web.StreamResponse:
        self.log.line(f"[http_server] Error: {message}")
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"}
        )
        await response.prepare(request)
        error = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "code": 400,
                "retryable": False,
            }
        }
        await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _fault_error(self, request: web.Request, *, stream: bool) -> web.StreamResponse:
        """The ``request-error`` fault: the scheduler aborts the request (HTTP 500)."""
        self.log.line(
            f"retract_decode: aborted request {uuid.uuid4().hex}: {_ABORT_MESSAGE}", rank=0
        )
        if not stream:
            return self._json(
                {
                    "object": "error",
                    "message": _ABORT_MESSAGE,
                    "type": "500",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"}
        )
        await response.prepare(request)
        meta = {
            "id": uuid.uuid4().hex,
            "finish_reason": {
                "type": "abort",
                "message": _ABORT_MESSAGE,
                "status_code": 500,
                "err_type": None,
            },
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached_tokens": 0,
        }
        chunk = {"text": "", "output_ids": [], "meta_info": meta}
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def app(self) -> web.Application:
        """The aiohttp application with SGLang's routes."""
        app = web.Application(middlewares=[self.access_middleware], client_max_size=64 << 20)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/model_info", self.model_info)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/v1/models", self.v1_models)
        app.router.add_route("POST", "/generate", self.generate)
        app.router.add_route("PUT", "/generate", self.generate)
        app.router.add_route("GET", "/flush_cache", self.flush_cache)
        app.router.add_route("POST", "/flush_cache", self.flush_cache)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        return app

    # -- warm-up (http_server.py _execute_server_warmup) ---------------------------------------
    async def warmup(self) -> bool:
        """Run SGLang's warm-up: ``/model_info``, then an 8-token ``/generate``."""
        await asyncio.sleep(self.options.time_scale * 1.0)
        client = "127.0.0.1:41780"
        self.log.access(client, "GET", "/model_info", 200)
        if self.plan.failure is not None and self.plan.failure.stage == "warmup":
            emit_scheduler_failure(self.plan.failure, log=self.log, workers=self.workers)
            await self.never.wait()
        if self.options.faults.worker_dies:
            stamp = time.strftime("%m%d %H:%M:%S") + f".{int(time.time() * 1e9) % 10**9:09d}"
            fatal = texts.nccl_watchdog_fatal(
                rank=0, stamp=stamp, host=self.profile.hardware.hostname
            )
            self.workers.tell("scheduler", op="print", text=fatal, stream="stderr")
            self.workers.tell("scheduler", op="abort")
            await self._warmup_timeout()
        req = self._new_request(
            None,
            prompt_tokens=_count_tokens("The capital city of France is"),
            max_new_tokens=8,
            natural=True,
        )
        req.count_for_hang = False
        req.boot_phase = True
        self.engine.submit(req)
        try:
            while not (await asyncio.wait_for(req.queue.get(), _WARMUP_TIMEOUT_S)).finished:
                pass
        except TimeoutError:
            await self._warmup_timeout(already_waited=True)
        self.log.access(client, "POST", "/generate", 200)
        return True

    async def _warmup_timeout(self, *, already_waited: bool = False) -> None:
        if not already_waited:
            await asyncio.sleep(_WARMUP_TIMEOUT_S)
        self.log.line(
            "Initialization failed. warmup error: Traceback (most recent call last):\n"
            "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='127.0.0.1', "
            f"port={self.options.port}): Read timed out. (read timeout=600)\n"
        )
        if self.options.flavor == "new":
            pid = os.getpid()
            self.log.line(
                f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}"
            )
        kill_tree_and_self(self.workers)


async def _serve(
    options: SimOptions, *, profile: Profile, plan: NodePlan, log: SimLog, workers: WorkerSet
) -> int:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    server = SimServer(options, profile=profile, plan=plan, log=log, workers=workers)

    def on_sigterm(signum: int) -> None:
        if server.gracefully_exit:
            return
        server.gracefully_exit = True
        log.line(
            f"SIGTERM received. signum={signum} frame=None. Draining requests and shutting down..."
        )
        remaining = [r.rid for r in server.engine.running] + [r.rid for r in server.engine.waiting]
        log.line(
            f"Gracefully exiting... Remaining number of requests {len(remaining)}. "
            f"Remaining requests remaining_rids={remaining}."
        )
        done.set()

    if not options.faults.ignore_sigterm:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm, int(signal.SIGTERM))
        loop.add_signal_handler(signal.SIGINT, on_sigterm, int(signal.SIGINT))

    async def lifecycle() -> None:
        server.boot = await boot_node(
            options=options, plan=plan, profile=profile, log=log, workers=workers
        )
        runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, options.host, options.port, reuse_address=True)
        await asyncio.sleep(profile.boot.server_start * options.time_scale)
        log.uvicorn(f"Started server process [{os.getpid()}]")
        log.uvicorn("Waiting for application startup.")
        try:
            await site.start()
        except OSError as exc:
            log.raw(
                f"[{log.stamp()}] ERROR:    [Errno {exc.errno}] error while attempting to bind on "
                f"address ('{options.host}', {options.port}): {exc.strerror}\n"
            )
            workers.signal_all(signal.SIGKILL)
            os._exit(1)
        engine_task = asyncio.create_task(server.engine.run())
        log.uvicorn("Application startup complete.")
        log.uvicorn(
            f"Uvicorn running on http://{options.host}:{options.port} (Press CTRL+C to quit)"
        )
        if options.skip_server_warmup:
            server.status = "Up"
        else:
            await server.warmup()
            server.status = "Up"
        log.line(texts.READY_LINE)
        _install_running_phase_sigquit(options, log=log, workers=workers)
        await engine_task

    task = asyncio.create_task(lifecycle())
    await done.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    workers.signal_all(signal.SIGKILL)
    workers.reap(timeout=2.0)
    log.uvicorn("Shutting down")
    log.uvicorn("Finished server process [" + str(os.getpid()) + "]")
    return 0


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _env_on(name: str) -> bool:
    """SGLang's `EnvBool(True)`: on unless set to a false word."""
    return os.environ.get(name, "true").strip().lower() not in ("0", "false", "no", "off", "")


def _install_running_phase_sigquit(options: SimOptions, *, log: SimLog, workers: WorkerSet) -> None:
    """SGLang's running-phase SIGQUIT handler, installed once the server is up: a failed child's
    SIGQUIT gets crash diagnostics before the tree is killed, in real seconds as in SGLang (the
    time scale shortens the node's work, not SGLang's sleeps): 5 s when py-spy or the CUDA
    coredump is on (both are by default; real 0.5.13 and 0.5.17 logs), then, from 0.5.17 with the
    coredump on, a wait of `SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS` (60 s by default; read
    in 0.5.17, assumed to stay in later versions)."""
    coredump_wait = _version(options.sglang_version) >= (0, 5, 17)

    def on_sigquit(signum: int, frame: object) -> None:
        del signum, frame
        log.line(texts.RUNNING_SIGQUIT_LINE)
        coredump = _env_on(texts.COREDUMP_ENV)
        if coredump or _env_on(texts.PYSPY_ENV):
            log.line(texts.CRASH_DIAGNOSTICS_LINE)
            time.sleep(texts.CRASH_DIAGNOSTICS_S)
        if coredump_wait and coredump:
            wait_s = float(os.environ.get(texts.COREDUMP_WAIT_ENV, "60") or 60)
            if wait_s > 0:
                log.line(texts.COREDUMP_WAIT_LINE.format(wait_s))
                time.sleep(wait_s)
        pid = os.getpid()
        log.line(f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}")
        kill_tree_and_self(workers)

    signal.signal(signal.SIGQUIT, on_sigquit)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the simulated node.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).
        environ: Environment (default: ``os.environ``).

    Returns:
        The exit status (0 after a clean SIGTERM shutdown; 1 on an argument-resolution error;
        2 on a command-line error). Failures inside workers end the process with SIGKILL.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    log = SimLog()
    log.raw(texts.LAUNCH_WARNING)
    options, config = parse_command_line(argv, environ)
    if options.faults.missing_module:
        log.raw(
            texts.format_traceback(
                (
                    *texts.IMPORT_FRAMES[:-1],
                    (
                        "srt/layers/attention/vision.py",
                        47,
                        "<module>",
                        f"import {options.faults.missing_module}",
                    ),
                ),
                f"ModuleNotFoundError: No module named {options.faults.missing_module!r}",
            )
        )
        return 1
    try:
        profile = load_profile(options.profile)
    except ProfileError as exc:
        print(f"{_PROG}: error: argument --sim-profile: {exc}", file=sys.stderr)
        return 2
    plan = plan_node(profile, config)
    if plan.failure is not None and plan.failure.where == "main":
        for warning in plan.main_warnings:
            log.line(warning)
        log.raw(plan.failure.text)
        return 1
    if options.faults.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    workers = WorkerSet.spawn(ignore_sigterm=options.faults.ignore_sigterm)

    def on_sigquit(signum: int, frame: object) -> None:
        del signum, frame
        log.line(texts.SIGQUIT_LINE)
        if options.flavor == "new":
            pid = os.getpid()
            log.line(f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}")
        kill_tree_and_self(workers)

    signal.signal(signal.SIGQUIT, on_sigquit)
    try:
        return asyncio.run(_serve(options, profile=profile, plan=plan, log=log, workers=workers))
    finally:
        workers.signal_all(signal.SIGKILL)
        workers.close()
