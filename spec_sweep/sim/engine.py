"""The simulated scheduler: batches requests and emits tokens in real (wall-clock) time.

This module owns serving. One asyncio task plays SGLang's scheduler loop: it admits waiting
requests (up to ``max_running_requests`` and the KV-cache capacity; the rest queue), runs a
prefill step for newly admitted ones (their first token), then decode steps over the running batch
whose duration comes from :class:`~spec_sweep.sim.perf.PerfModel` (per-token time grows with the
batch; past the CUDA-graph max batch a step runs eagerly). A speculative cycle delivers an accept
length sampled per request; with adaptive speculative decoding the cycle's tree is the one SGLang's
controller (:mod:`spec_sweep.sim.adaptive`) picks for the batch, with that many steps' time and
acceptance. Pacing is real: each step ends at an absolute deadline on the event
loop clock, counted from the previous step's deadline (a late wake is caught up), so the client
measures the model's speed and not the host's load. Outputs (cumulative ``text`` and
``output_ids``, ``meta_info`` as SGLang's tokenizer manager builds it) are pushed to a per-request
queue as ready-made JSON, one item per step.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.sim.adaptive import AdaptiveController
from spec_sweep.sim.greedy import GreedyPath
from spec_sweep.sim.logs import SimLog
from spec_sweep.sim.model import NodePlan
from spec_sweep.sim.perf import AcceptSampler, PerfModel

__all__ = ["Engine", "GenRequest", "StepOutput"]

#: The most a step may run behind its deadline and still be caught up by the next ones (s): a
#: loaded test host's stall (seconds) is the host's, not the node's; longer (a suspended
#: process) is forgiven.
_MAX_BEHIND_S = 10.0

_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "at",
    "from",
    "or",
    "an",
    "have",
    "not",
    "which",
    "but",
    "they",
    "were",
    "all",
    "we",
    "one",
    "can",
    "has",
    "their",
    "been",
    "more",
    "there",
    "if",
    "will",
    "would",
    "about",
    "so",
    "what",
    "when",
    "up",
    "out",
    "them",
    "some",
    "into",
    "other",
    "than",
    "then",
    "its",
    "time",
    "only",
    "could",
    "new",
    "these",
    "two",
    "may",
    "first",
    "any",
    "like",
    "now",
    "over",
    "such",
    "make",
    "just",
    "also",
    "after",
    "use",
    "well",
    "way",
    "even",
    "because",
    "most",
    "good",
    "model",
    "token",
    "speed",
    "node",
    "graph",
    "batch",
    "cache",
    "memory",
    "server",
    "decode",
    "verify",
    "draft",
    "accept",
)


@dataclass(slots=True)
class StepOutput:
    """One output item of a request: a JSON object (bytes) and whether it is the last."""

    body: bytes
    finished: bool


@dataclass(slots=True)
class GenRequest:
    """One generation request inside the engine.

    Attributes:
        rid: Request id.
        prompt_tokens: Prompt length in tokens.
        max_new_tokens: Tokens to generate.
        natural: Text prompt (True) or random token ids (False); drives acceptance.
        stream: Whether every step is delivered (else only the final output).
        incremental: Stream only the new text and ids in each chunk.
        index: Sequence number (seeds the token ids and accept lengths).
        count_for_hang: Counts towards the ``hang-after`` fault.
        boot_phase: Part of start-up (SGLang's warm-up request): paced by the boot time scale.
        queue: Where outputs go.
    """

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    natural: bool
    stream: bool
    incremental: bool
    index: int
    count_for_hang: bool = True
    boot_phase: bool = False
    queue: asyncio.Queue[StepOutput] = field(default_factory=asyncio.Queue)
    created: float = field(default_factory=time.time)
    generated: int = 0
    text: str = ""
    ids_json: str = ""
    verify_ct: int = 0
    correct_drafts: int = 0
    proposed_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    sampler: AcceptSampler | None = None
    rng: random.Random | None = None
    reserved_tokens: int = 0
    finished: bool = False
    greedy: GreedyPath | None = None
    return_logprob: bool = False
    top_logprobs_num: int = 0
    text_in_logprobs: bool = False
    token_logprobs: list[list[Any]] = field(default_factory=list)
    top_logprobs: list[list[list[Any]]] = field(default_factory=list)


class Engine:
    """The scheduler loop of the simulated node.

    Args:
        perf: Performance model of the booted configuration.
        plan: The node plan.
        log: Log writer.
        flavor_old: Emit SGLang 0.5.13's extra meta_info aliases.
        boot_time_scale: Time factor for steps made only of start-up (warm-up) requests.
        speed: Factor on the node's speed (every step takes 1/speed of the model's time).
    """

    def __init__(
        self,
        perf: PerfModel,
        *,
        plan: NodePlan,
        log: SimLog,
        flavor_old: bool,
        boot_time_scale: float = 1.0,
        speed: float = 1.0,
    ) -> None:
        self.perf = perf
        self.boot_time_scale = boot_time_scale
        self.speed = speed
        self.plan = plan
        self.log = log
        self.flavor_old = flavor_old
        self.waiting: deque[GenRequest] = deque()
        self.running: list[GenRequest] = []
        self.wake = asyncio.Event()
        self.hung = False
        self.tokens_in_use = 0
        self.spec_accept_tokens = 0
        self.spec_verify_ct = 0
        self.interval_accept_tokens = 0
        self.interval_verify_ct = 0
        self.interval_correct = 0
        self.last_gen_throughput = 0.0
        self.completed = 0
        self.hang_after: int | None = None
        self.decode_steps = 0
        self._interval_tokens = 0
        self._interval_tic = time.perf_counter()
        self._counter = 0
        self.vocab = max(2, perf.profile.model.vocab_size)
        self.adaptive: AdaptiveController | None = None
        if plan.adaptive is not None:
            graphs = plan.capture_bs if plan.graph_max_bs > 0 else None
            self.adaptive = AdaptiveController(
                policy=plan.adaptive.policy(graphs), steps=plan.adaptive.initial_steps
            )

    def next_index(self) -> int:
        """A fresh request sequence number."""
        self._counter += 1
        return self._counter

    def submit(self, request: GenRequest) -> None:
        """Queue a request for admission."""
        # Greedy decoding (temperature 0) follows `request.greedy` (a function of the prompt and
        # the configuration's numerics); sampled decoding a generator of the request.
        request.rng = random.Random(self.perf.plan.config.seed * 1_000_003 + request.index)
        if self.perf.spec is not None:
            request.sampler = self.perf.sampler(request.index, natural=request.natural)
            deepest = self.perf.spec.depths
            if self.adaptive is not None:
                deepest = max(self.adaptive.policy.candidate_steps)
            request.histogram = [0] * (deepest + 1)
        self.waiting.append(request)
        self.wake.set()

    def abort(self, request: GenRequest) -> None:
        """Drop a request whose client went away."""
        if request.finished:
            return
        request.finished = True
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
            self.tokens_in_use -= request.reserved_tokens
            request.reserved_tokens = 0

    def has_work(self) -> bool:
        """Whether any request is queued or running."""
        return bool(self.waiting or self.running)

    # -- outputs -------------------------------------------------------------------------------
    def _meta(self, req: GenRequest, *, finished: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": req.max_new_tokens} if finished else None,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": req.generated,
            "cached_tokens": 0,
        }
        if req.return_logprob:
            # As TokenizerManager.add_logprob_to_meta_info builds them (0.5.13 and 0.5.17:
            # (logprob, token id, text or None) per token; input ones empty with the default
            # logprob_start_len -1).
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = req.token_logprobs
            meta["output_token_logprobs_length"] = len(req.token_logprobs)
            if req.top_logprobs_num > 0:
                meta["input_top_logprobs"] = []
                meta["output_top_logprobs"] = req.top_logprobs
        if finished:
            meta["e2e_latency"] = time.time() - req.created
            spec = self.perf.spec
            if spec is not None and req.verify_ct > 0:
                proposed = req.proposed_drafts
                if proposed > 0:
                    meta["spec_accept_rate"] = req.correct_drafts / proposed
                    meta["spec_accept_length"] = req.generated / req.verify_ct
                    meta["spec_num_correct_drafts"] = req.correct_drafts
                    meta["spec_num_proposed_drafts"] = proposed
                    meta["spec_verify_ct"] = req.verify_ct
                    if self.flavor_old:
                        meta["spec_accepted_drafts"] = req.correct_drafts
                        meta["spec_proposed_drafts"] = proposed
                meta["spec_correct_drafts_histogram"] = list(req.histogram)
        return meta

    def _emit(self, req: GenRequest, new_text: str, new_ids: str) -> None:
        finished = req.finished
        if not req.stream and not finished:
            return
        if req.incremental and req.stream:
            text, ids = new_text, new_ids
        else:
            text, ids = req.text, req.ids_json
        body = (
            b'{"text":'
            + json.dumps(text).encode()
            + b',"output_ids":['
            + ids.encode()
            + b'],"meta_info":'
            + json.dumps(self._meta(req, finished=finished), separators=(",", ":")).encode()
            + b"}"
        )
        req.queue.put_nowait(StepOutput(body, finished))

    @staticmethod
    def _record_logprobs(req: GenRequest, top: list[tuple[float, int]]) -> None:
        def entry(logprob: float, token: int) -> list[Any]:
            text = _WORDS[token % len(_WORDS)] if req.text_in_logprobs else None
            return [logprob, token, text]

        req.token_logprobs.append(entry(*top[0]))
        if req.top_logprobs_num > 0:
            req.top_logprobs.append([entry(lp, t) for lp, t in top])

    def _produce(self, req: GenRequest, count: int) -> None:
        rng = req.rng
        assert rng is not None
        pieces: list[str] = []
        ids: list[str] = []
        for _ in range(count):
            if req.greedy is not None:
                token, top = req.greedy.step(req.top_logprobs_num)
            else:
                token = rng.randrange(self.vocab)
                top = [(math.log(0.5 + 0.5 * rng.random()), token)] if req.return_logprob else []
            word = _WORDS[token % len(_WORDS)]
            if req.return_logprob:
                self._record_logprobs(req, top)
            pieces.append(word if not req.text and not pieces else " " + word)
            ids.append(str(token))
        new_text = "".join(pieces)
        new_ids = ",".join(ids)
        req.text += new_text
        req.ids_json = f"{req.ids_json},{new_ids}" if req.ids_json else new_ids
        req.generated += count
        self._interval_tokens += count
        if req.generated >= req.max_new_tokens:
            req.finished = True
        self._emit(req, new_text, new_ids)

    def _finish(self, req: GenRequest) -> None:
        self.tokens_in_use -= req.reserved_tokens
        req.reserved_tokens = 0
        if req.count_for_hang:
            self.completed += 1
            if self.hang_after is not None and self.completed >= self.hang_after:
                self.hung = True

    # -- the loop ------------------------------------------------------------------------------
    def _admit(self) -> list[GenRequest]:
        capacity = self.plan.max_total_num_tokens
        limit = self.plan.max_running_requests
        admitted: list[GenRequest] = []
        while self.waiting and len(self.running) + len(admitted) < limit:
            req = self.waiting[0]
            need = req.prompt_tokens + req.max_new_tokens
            if self.tokens_in_use + need > capacity and (self.running or admitted):
                break
            self.waiting.popleft()
            req.reserved_tokens = need
            self.tokens_in_use += need
            admitted.append(req)
        return admitted

    async def run(self) -> None:
        """Serve forever (until the task is cancelled)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        never = asyncio.Event()
        while True:
            if self.hung:
                await never.wait()
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
                deadline = loop.time()
                continue
            admitted = self._admit()
            if admitted:
                new_tokens = sum(r.prompt_tokens for r in admitted)
                seconds = self.perf.noisy(self.perf.prefill_ms(new_tokens)) / 1000.0
                seconds *= self._pace(admitted)
                deadline = await self._sleep_until(loop, deadline + seconds)
                if self.hung:
                    continue
                self._log_prefill(admitted, new_tokens, seconds)
                for req in admitted:
                    if req.max_new_tokens > 0:
                        self._produce(req, 1)
                    else:
                        req.finished = True
                        self._emit(req, "", "")
                    if req.finished:
                        self._finish(req)
                    else:
                        self.running.append(req)
                continue
            batch = len(self.running)
            steps = None
            if self.adaptive is not None:
                # activate_step_by_batch before the forward (eagle_worker_v2.py 0.5.23:1445)
                for line in self.adaptive.activate_for_batch(batch):
                    self.log.line(line, rank=0)
                steps = self.adaptive.steps
            seconds = self.perf.noisy(self.perf.step_ms(batch, steps)) / 1000.0
            seconds *= self._pace(self.running)
            deadline = await self._sleep_until(loop, deadline + seconds)
            if self.hung:
                continue
            self._decode_step(steps)
            self.decode_steps += 1
            if self.decode_steps % max(1, self.plan.config.decode_log_interval) == 0:
                self._log_decode(batch)

    def _pace(self, batch: list[GenRequest]) -> float:
        """1/speed for real requests; the boot time scale for a batch of start-up requests."""
        if batch and all(r.boot_phase for r in batch):
            return self.boot_time_scale
        return 1.0 / self.speed

    async def _sleep_until(self, loop: asyncio.AbstractEventLoop, deadline: float) -> float:
        """Sleep until `deadline`; the next step's deadline counts from it, not from the wake.

        A late wake (a loaded host, a sleep's overshoot) is caught up by the steps after it, so
        the node's speed is its model's, not the host's: counting from the wake made every step
        pay the event loop's lateness, which taxes a plain decode's many short steps more than a
        speculative decode's fewer long ones (under load the simulated PCIe node's speculation
        "won"). Lateness beyond `_MAX_BEHIND_S` (a stopped process) is forgiven, not replayed.
        """
        now = loop.time()
        if deadline > now:
            await asyncio.sleep(deadline - now)
            return deadline
        return deadline if now - deadline <= _MAX_BEHIND_S else now

    def _decode_step(self, steps: int | None = None) -> None:
        spec = self.perf.spec
        still: list[GenRequest] = []
        accepted: list[int] = []
        batch = len(self.running)
        drafts = 0
        if spec is not None:
            drafts = steps if steps is not None else max(0, (spec.draft_tokens or 1) - 1)
        for req in self.running:
            left = req.max_new_tokens - req.generated
            if spec is None:
                self._produce(req, 1)
            else:
                assert req.sampler is not None
                tail = None
                if steps is not None:
                    tail = self.perf.accept_tail(steps, natural=req.natural)
                produced, correct = req.sampler.next(left, tail)
                accepted.append(req.sampler.last_accepted)
                req.verify_ct += 1
                req.correct_drafts += correct
                req.proposed_drafts += drafts
                if correct < len(req.histogram):
                    req.histogram[correct] += 1
                self.spec_accept_tokens += produced
                self.spec_verify_ct += 1
                self.interval_accept_tokens += produced
                self.interval_verify_ct += 1
                self.interval_correct += correct
                self._produce(req, produced)
            if req.finished:
                self._finish(req)
            else:
                still.append(req)
        self.running = still
        if self.adaptive is not None:
            # on_verify_complete_cpu with len(batch.reqs) (batch_result_processor.py 0.5.23:804)
            for line in self.adaptive.on_verify_complete(accepted, batch):
                self.log.line(line, rank=0)

    # -- SGLang's scheduler log lines (managers/scheduler_components/metrics_reporter.py) ------
    def _usage(self) -> str:
        cap = max(1, self.plan.max_total_num_tokens)
        return f"#token: {self.tokens_in_use}, token usage: {self.tokens_in_use / cap:.2f}"

    def _log_prefill(self, admitted: list[GenRequest], new_tokens: int, seconds: float) -> None:
        throughput = new_tokens / seconds if seconds > 0 else 0.0
        cap = max(1, self.plan.max_total_num_tokens)
        self.log.line(
            f"Prefill batch, #new-seq: {len(admitted)}, #new-token: {new_tokens}, "
            f"#cached-token: 0, token usage: {self.tokens_in_use / cap:.2f}, "
            f"#running-req: {len(self.running)}, #queue-req: {len(self.waiting)}, "
            f"#pending-token: 0, cuda graph: False, input throughput (token/s): {throughput:.2f}",
            rank=0,
        )

    def _log_decode(self, batch: int) -> None:
        now = time.perf_counter()
        gap = now - self._interval_tic
        self._interval_tic = now
        self.last_gen_throughput = self._interval_tokens / gap if gap > 0 else 0.0
        self._interval_tokens = 0
        msg = f"Decode batch, #running-req: {batch}, {self._usage()}, "
        spec = self.perf.spec
        if spec is not None and self.interval_verify_ct > 0:
            drafts = self.interval_verify_ct * max(1, (spec.draft_tokens or 1) - 1)
            if self.adaptive is not None:
                # the current draft tokens - 1 (metrics_reporter.py 0.5.23:975-982)
                drafts = self.interval_verify_ct * self.adaptive.steps
            rate = self.interval_correct / drafts if drafts > 0 else 0.0
            msg += (
                f"accept len: {self.interval_accept_tokens / self.interval_verify_ct:.2f}, "
                f"accept rate: {rate:.2f}, "
            )
            self.interval_accept_tokens = self.interval_verify_ct = self.interval_correct = 0
        msg += (
            f"cuda graph: {self.perf.uses_graph(batch)}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.waiting)}"
        )
        self.log.line(msg, rank=0)

    def avg_spec_accept_length(self) -> float | None:
        """Mean accept length over all cycles so far (None before the first cycle)."""
        if self.perf.spec is None or self.spec_verify_ct == 0:
            return None
        return self.spec_accept_tokens / self.spec_verify_ct
