"""The simulated node's token timing: per-step times and acceptance of a booted configuration.

:class:`PerfModel` gives per-step times (decode steps as a function of concurrency and
CUDA-graph coverage; speculative cycles as draft steps + verify (all-reduce count x
per-all-reduce latency + compute) + draft extend, an NGRAM cycle as a trie match + verify) and
acceptance (per-position rates, golden-ratio low-discrepancy sampling in :class:`AcceptSampler`,
so short runs converge; fixed by dummy weights, :meth:`PerfModel.dummy_acceptance`). Seeded
by the profile and the configuration: the same configuration gives the same numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random

from spec_sweep.sim.model import NodePlan, SpecSettings
from spec_sweep.sim.profiles import Profile

__all__ = ["AcceptSampler", "PerfModel", "accept_length", "tree_acceptance"]

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
#: Tokens per step above which FlashInfer's fused all-reduce falls back (no fusion speed-up).
_FUSION_TOKEN_LIMIT = 2048
#: Step-to-step correlation of the within-boot drift (a time constant of ~50 steps).
_DRIFT_RHO = 0.98
#: Milliseconds an NGRAM cycle spends matching the text in its n-gram trie (CPU), beyond the
#: profile's speculative overhead. Calibrated: with SmolLM2-135M on an H100 (SGLang 0.5.17,
#: benchmarks/real/fidelity-0.5.17/ngram-d8.*) a cycle took 2.49 ms against 1.09 ms for a
#: plain decode step, whose cost an 8-token verify of that model hardly exceeds: ~1.4 ms of
#: bookkeeping and matching, ~0.8 ms of it the profiles' `overhead_ms`.
NGRAM_MATCH_MS = 0.6
#: P(accept depth d | shallower depths accepted) of NGRAM on natural text, every depth, when the
#: profile gives no `acceptance.NGRAM`. Calibrated: SmolLM2-135M-Instruct accepted 1.45 tokens a
#: cycle of 8 draft tokens at concurrency 1 (benchmarks/real/fidelity-0.5.17/ngram-d8.real.json);
#: 0.31 at each of 7 depths gives 1.45.
NGRAM_RATE = 0.31


def _seed_of(*parts: object) -> int:
    # The port a node listens on is not part of what it is: leave it out of the noise seed, so
    # the same configuration behaves the same on any port (ports are drawn at random).
    parts = tuple(
        dataclasses.replace(p, port=0, grpc_port_env=None)
        if dataclasses.is_dataclass(p) and not isinstance(p, type) and hasattr(p, "grpc_port_env")
        else p
        for p in parts
    )
    digest = hashlib.sha256("|".join(repr(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def tree_acceptance(
    rates: list[float], gain: float, *, steps: int, topk: int, draft_tokens: int
) -> list[float]:
    """The simulator's acceptance law: P(accept depth d | shallower depths accepted), d = 1..steps.

    The tree's ``draft_tokens - 1`` nodes go one per depth first (a chain), then up to ``topk``
    per depth from the shallowest; a depth with ``n`` candidates accepts with
    ``1 - (1 - rate_d) (1 - gain)^(n - 1)``, ``rate_d`` the chain's rate at that depth (the last
    rate repeats past the list) and ``gain`` what each extra candidate adds
    (`perf.speculative.extra_candidate_gain`); a depth without a node accepts nothing.
    """
    nodes = max(0, draft_tokens - 1)
    budget = [0] * steps
    for d in range(min(steps, nodes)):
        budget[d] = 1
    left = nodes - sum(budget)
    for d in range(steps):
        extra = min(left, max(0, topk - budget[d]))
        budget[d] += extra
        left -= extra
    out = []
    for d in range(steps):
        if budget[d] == 0:
            out.append(0.0)
            continue
        rate = rates[d] if d < len(rates) else rates[-1]
        out.append(1.0 - (1.0 - rate) * (1.0 - gain) ** (budget[d] - 1))
    return out


def accept_length(depth_rates: list[float]) -> float:
    """Expected tokens per cycle (bonus token included) from per-depth conditional rates."""
    length, prob = 1.0, 1.0
    for q in depth_rates:
        prob *= q
        length += prob
    return length


class AcceptSampler:
    """Accept lengths of one request, drawn with a low-discrepancy (golden-ratio) sequence.

    The n-th cycle uses ``u_n = frac(u_0 + n * 0.618...)`` through the inverse CDF of the accept
    length, so the running mean converges like O(log n / n) instead of O(1/sqrt(n)): a few hundred
    cycles already reproduce the expected accept length within a fraction of a percent, while the
    per-cycle sequence still varies like a real one. ``u_0`` comes from the seed.
    """

    __slots__ = ("_cdf_tail", "_u", "last_accepted")

    def __init__(self, rates: list[float], *, seed: int) -> None:
        self._cdf_tail = self.tail_of(rates)
        self._u = random.Random(seed).random()
        self.last_accepted = 0

    @staticmethod
    def tail_of(rates: list[float]) -> list[float]:
        """``tail[k]`` = P(accept length >= k + 2): the first k + 1 draft depths accepted."""
        tail: list[float] = []
        prob = 1.0
        for q in rates:
            prob *= q
            tail.append(prob)
        return tail

    def next(self, limit: int, tail: list[float] | None = None) -> tuple[int, int]:
        """Draw one cycle.

        Args:
            limit: Tokens still allowed for the request (>= 1).
            tail: This cycle's :meth:`tail_of` when the tree changes between cycles (adaptive
                speculative decoding); the sampler's own otherwise.

        Returns:
            (tokens produced this cycle incl. the bonus token, draft tokens accepted). The
            draft tokens the verify accepted before the request's limit cut them is kept in
            ``last_accepted`` (what SGLang feeds its adaptive controller).
        """
        self._u = (self._u + _GOLDEN) % 1.0
        accepted = 0
        for p in self._cdf_tail if tail is None else tail:
            if self._u < p:
                accepted += 1
            else:
                break
        self.last_accepted = accepted
        produced = min(accepted + 1, limit)
        return produced, min(accepted, produced - 1)


class PerfModel:
    """Per-step times and acceptance of one booted configuration.

    Args:
        profile: The hardware profile.
        plan: The node plan (must not have a failure).
    """

    def __init__(self, profile: Profile, plan: NodePlan) -> None:
        self.profile = profile
        self.plan = plan
        self.perf = profile.perf
        self.spec = plan.spec
        self._ep = self.perf.ep_decode_factor if plan.config.ep_size > 1 else 1.0
        # Fields left out of the configuration's repr (so older configurations keep their
        # draws) still make a different boot when they are set: the adaptive config's contents
        # (not its path, which may be a temporary file's).
        adaptive = plan.config.adaptive
        self._extra: tuple[object, ...] = ("adaptive", adaptive.text) if adaptive else ()
        # and the load formats: a dummy-weight boot is another boot of the configuration
        if plan.config.load_format != "auto" or plan.config.draft_load_format is not None:
            self._extra += ("load", plan.config.load_format, plan.config.draft_load_format)
        rng = random.Random(_seed_of(profile.name, plan.config, "boot", *self._extra))
        sigma = self.perf.noise_boot_sigma
        self.boot_factor = min(1 + 2.5 * sigma, max(1 - 2.5 * sigma, rng.gauss(1.0, sigma)))
        self._step_rng = random.Random(_seed_of(profile.name, plan.config, "steps", *self._extra))
        # Within-boot drift: a slowly wandering speed factor (AR(1) over scheduler steps, the
        # stationary sd `drift_sigma`), so consecutive requests of one boot differ by a few
        # percent as on a real node (clocks, host noise), beyond the per-step jitter.
        self._drift_sd = self.perf.noise_drift_sigma
        self._drift = self._step_rng.gauss(0.0, self._drift_sd) if self._drift_sd else 0.0
        penalty = 0.0
        if plan.graph_max_bs > self.perf.graph_ref_bs:
            penalty = self.perf.graph_penalty_ms_per_doubling * math.log2(
                plan.graph_max_bs / self.perf.graph_ref_bs
            )
        self._graph_penalty_ms = penalty
        rates: list[float] | tuple[float, ...] = ()
        if self.spec is not None and not self.spec.drafts_with_a_model:
            rates = self.perf.acceptance.get("NGRAM") or (NGRAM_RATE,)
        elif self.spec is not None:
            rates = (
                self.perf.acceptance.get(self.spec.algorithm)
                or self.perf.acceptance.get("EAGLE3")
                or next(iter(self.perf.acceptance.values()))
            )
        self._rates = tuple(rates)
        self._tails: dict[tuple[int, bool], list[float]] = {}

    # -- building blocks -----------------------------------------------------------------------
    def allreduce_ms(self, kind: str, tokens: int) -> float:
        """Latency of one all-reduce.

        Args:
            kind: ``"decode"``, ``"verify"`` or ``"draft"``.
            tokens: Tokens in the step (message size grows with them).

        Returns:
            Milliseconds.
        """
        base = {
            "decode": self.perf.ar_decode_us,
            "verify": self.perf.ar_verify_us,
            "draft": self.perf.ar_draft_us,
        }[kind]
        if self.plan.config.tp_size <= 1:
            return 0.0
        factor = self.plan.allreduce_factor
        if self.plan.allreduce_impl == "flashinfer_fusion" and tokens > _FUSION_TOKEN_LIMIT:
            factor = self.plan.allreduce_factor / max(
                1e-9, self.profile.features.allreduce_factors.get("flashinfer_fusion", 1.0)
            )
        return (base * factor + self.perf.ar_per_token_us * tokens) / 1000.0

    def uses_graph(self, batch: int) -> bool:
        """Whether a step of ``batch`` requests replays a CUDA graph."""
        return 0 < batch <= self.plan.graph_max_bs

    def _graph_adjust(self, ms: float, batch: int) -> float:
        if self.uses_graph(batch):
            return ms + self._graph_penalty_ms
        return ms * self.perf.eager_factor + self.perf.eager_overhead_ms

    def decode_step_ms(self, batch: int) -> float:
        """Mean time of one non-speculative decode step with ``batch`` running requests."""
        compute = self.perf.decode_compute_ms + self.perf.decode_compute_per_req_ms * (batch - 1)
        comm = self.perf.ar_count * self.allreduce_ms("decode", batch)
        return self._graph_adjust((compute + comm) * self._ep, batch)

    def tree(self, steps: int | None = None) -> SpecSettings:
        """The draft tree of a cycle: the booted one, or an adaptive state of ``steps`` steps
        (top-k 1, ``steps + 1`` draft tokens: ``AdaptiveController.init_states``)."""
        assert self.spec is not None
        if steps is None:
            return self.spec
        return dataclasses.replace(self.spec, steps=steps, topk=1, draft_tokens=steps + 1)

    def verify_ms(self, batch: int, steps: int | None = None) -> float:
        """Mean time of the verify forward of one speculative cycle."""
        tree = self.tree(steps)
        tokens = batch * (tree.draft_tokens or 1)
        compute = self.perf.verify_compute_ms + self.perf.verify_per_token_ms * (tokens - 1)
        return (compute + self.perf.ar_count * self.allreduce_ms("verify", tokens)) * self._ep

    def spec_cycle_ms(self, batch: int, steps: int | None = None) -> float:
        """Mean time of one speculative cycle (draft steps + verify + draft extend).

        At 0 steps (an adaptive state, SGLang 0.5.14+) nothing is drafted and the target runs
        one token per request, a decode-sized forward (``_build_trivial_verify_input``,
        eagle_worker_v2.py 0.5.23:1468-1471); the draft extend still runs to keep the draft's
        KV cache warm (``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND`` defaults to false,
        environ.py 0.5.23:1577).
        """
        tree = self.tree(steps)
        if not tree.drafts_with_a_model:  # NGRAM: match in the trie, verify; no draft forward
            total = self.verify_ms(batch) + self.perf.spec_overhead_ms + NGRAM_MATCH_MS
            return self._graph_adjust(total, batch)
        topk, n_steps = tree.topk or 1, tree.steps or 0
        per_req = self.perf.draft_per_req_ms * (batch - 1)
        extend = (
            self.perf.draft_extend_ms
            + per_req
            + self.perf.draft_ar_count
            * self.allreduce_ms("draft", batch * (tree.draft_tokens or 1))
        )
        if steps == 0:
            compute = self.perf.decode_compute_ms + self.perf.decode_compute_per_req_ms * (
                batch - 1
            )
            target = (compute + self.perf.ar_count * self.allreduce_ms("decode", batch)) * self._ep
            return self._graph_adjust(target + extend + self.perf.spec_overhead_ms, batch)
        draft_step = (
            self.perf.draft_step_ms * (1 + self.perf.draft_topk_cost * (topk - 1))
            + per_req
            + self.perf.draft_ar_count * self.allreduce_ms("draft", batch * topk)
        )
        total = (
            n_steps * draft_step
            + self.verify_ms(batch, steps)
            + extend
            + self.perf.spec_overhead_ms
        )
        return self._graph_adjust(total, batch)

    def step_ms(self, batch: int, steps: int | None = None) -> float:
        """Mean time of one scheduler step (decode step or speculative cycle)."""
        if self.spec is None:
            return self.decode_step_ms(batch)
        return self.spec_cycle_ms(batch, steps)

    def noisy(self, ms: float) -> float:
        """``ms`` times the per-boot factor and a seeded per-step jitter."""
        jitter = self._step_rng.gauss(1.0, self.perf.noise_step_sigma)
        if self._drift_sd:
            rho = _DRIFT_RHO
            shock = self._step_rng.gauss(0.0, self._drift_sd * math.sqrt(1.0 - rho * rho))
            self._drift = rho * self._drift + shock
            jitter += self._drift
        return ms * self.boot_factor * min(1.5, max(0.5, jitter))

    def prefill_ms(self, tokens: int) -> float:
        """Time of a prefill (extend) forward over ``tokens`` new tokens."""
        comm = self.perf.ar_count * self.allreduce_ms("decode", min(tokens, 8192))
        ms = self.perf.prefill_base_ms + self.perf.prefill_per_token_ms * tokens + comm
        if self.spec is not None and self.spec.drafts_with_a_model:
            ms += self.perf.draft_extend_ms
        return ms * self._ep

    # -- acceptance ----------------------------------------------------------------------------
    def depth_acceptance(self, *, natural: bool, steps: int | None = None) -> list[float]:
        """P(accept depth d | shallower depths accepted) for this tree, d = 1..steps.

        Args:
            natural: Text prompts (True) or random token ids (False).
            steps: An adaptive state's steps (None: the booted tree).

        Returns:
            One probability per draft depth.
        """
        if self.spec is None:
            return []
        tree = self.tree(steps)
        dummy = self.dummy_acceptance()
        if dummy is not None:
            return [dummy] * tree.depths
        factor = 1.0 if natural else self.perf.random_token_factor
        return tree_acceptance(
            [rate * factor for rate in self._rates],
            self.perf.extra_candidate_gain,
            steps=tree.depths,
            # NGRAM's matches are a chain per depth (its BFS breadth is not modelled)
            topk=(tree.topk or 1) if tree.drafts_with_a_model else 1,
            draft_tokens=tree.draft_tokens or 1,
        )

    def dummy_acceptance(self) -> float | None:
        """The per-depth acceptance that random weights fix, or None with real ones.

        Measured (SGLang 0.5.17, one H100, SmolLM2-135M; benchmarks/real/fidelity-0.5.17/):
        an EAGLE-3 draft with dummy weights never matches the target (accept length exactly 1.0
        at concurrency 1 and 8, four trees), and a drafting model is just as useless to a target
        with dummy weights; NGRAM on a dummy target accepts every draft token (127 tokens in 16
        cycles of 8: accept length 7.94 of 8 at both levels), since random weights write
        repetitive text that the n-gram cache always matches.
        """
        cfg = self.plan.config
        if self.spec is None:
            return None
        if self.spec.algorithm.upper() == "NGRAM":
            return 1.0 if cfg.dummy_weights else None
        return 0.0 if cfg.dummy_draft or cfg.dummy_weights else None

    def expected_accept_length(self, *, natural: bool = True, steps: int | None = None) -> float:
        """Expected tokens per cycle (bonus token included)."""
        return accept_length(self.depth_acceptance(natural=natural, steps=steps))

    def expected_decode_tok_s(
        self, batch: int = 1, *, natural: bool = True, steps: int | None = None
    ) -> float:
        """Steady-state decode speed of one request (tokens/s), without noise."""
        if self.spec is None:
            return 1000.0 / self.decode_step_ms(batch)
        length = self.expected_accept_length(natural=natural, steps=steps)
        return 1000.0 * length / self.spec_cycle_ms(batch, steps)

    def accept_tail(self, steps: int, *, natural: bool) -> list[float]:
        """The sampler tail (:meth:`AcceptSampler.tail_of`) of an adaptive state (cached)."""
        key = (steps, natural)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = AcceptSampler.tail_of(
                self.depth_acceptance(natural=natural, steps=steps)
            )
        return tail

    def sampler(self, request_index: int, *, natural: bool) -> AcceptSampler:
        """A seeded accept-length sampler for one request."""
        rates = self.depth_acceptance(natural=natural)
        return AcceptSampler(
            rates,
            seed=_seed_of(
                self.profile.name, self.plan.config, "accept", request_index, *self._extra
            ),
        )
