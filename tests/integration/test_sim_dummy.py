"""The simulated node with `--load-format dummy`: what a dummy-weight boot changes, and what not.

Each test boots the real simulator process (`harness.SimProcess`, time scale 0) with real and
with dummy weights and compares them as SGLang 0.5.17 compared on an H100
(benchmarks/real/fidelity-0.5.17/): the weight load is an allocation, not a read, and the rest
of the boot is the same; a failing configuration fails the same way; a dummy EAGLE-3 draft
accepts nothing; NGRAM on a dummy target accepts every draft token; plain decoding costs the
same; the greedy text is another one, which the quality gate classes wrong.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SimProcess

from spec_sweep.node.divergence import QualityClass, judge_outputs, parse_top_logprobs
from spec_sweep.sim.boot import DUMMY_LOAD_GIB_PER_S
from spec_sweep.spec import QualitySpec

#: The write-up's PCIe node (Kimi-K2.5, TP8) as SGLang 0.5.17, which reports `startup_time`.
BASE = [
    *("--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8", "--trust-remote-code"),
    *("--sim-sglang-version", "0.5.17", "--skip-server-warmup"),
]
EAGLE = [
    *("--speculative-algorithm", "EAGLE3"),
    *("--speculative-draft-model-path", "lightseekorg/kimi-k2.5-eagle3"),
    *("--speculative-num-steps", "3", "--speculative-eagle-topk", "1"),
    *("--speculative-num-draft-tokens", "4", "--cuda-graph-max-bs", "32"),
]
NGRAM = [
    *("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"),
    *("--cuda-graph-max-bs", "32"),
]
DUMMY = ["--load-format", "dummy"]
DUMMY_DRAFT = ["--speculative-draft-load-format", "dummy"]
PROMPTS = [
    "Explain why the sky is blue.",
    "Write a haiku about a speculative decoder.",
    "List three prime numbers and say why they are prime.",
    "What does a KV cache store?",
]


#: No crash diagnostics: a failing node dies at once (SGLang waits 5 s, then 60 s by default).
NO_DIAGNOSTICS = {"SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0", "SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0"}


@pytest.fixture
def boot(tmp_path: Path) -> Iterator[Any]:
    """Boot simulator processes (20x faster by default); every one is stopped at the end."""
    started: list[SimProcess] = []

    def start(*args: str, ready: bool = True, speed: int = 20) -> SimProcess:
        sim = SimProcess([*BASE, "--sim-speed", str(speed), *args], tmp_path, NO_DIAGNOSTICS)
        started.append(sim)
        if ready:
            sim.wait_ready()
        return sim

    yield start
    for sim in started:
        sim.stop()


def _generate(sim: SimProcess, prompt: str, tokens: int, top: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0},
    }
    if top:
        body |= {"return_logprob": True, "top_logprobs_num": top}
    answer = httpx.post(f"{sim.url}/generate", json=body, timeout=30)
    answer.raise_for_status()
    out: dict[str, Any] = answer.json()
    return out


def _accept_length(sim: SimProcess, tokens: int = 64) -> float:
    """Tokens per verify after the first, over the prompts (`spec_sweep.node.metrics`'s)."""
    metas = [_generate(sim, p, tokens)["meta_info"] for p in PROMPTS]
    steps = sum(m["spec_verify_ct"] for m in metas)
    return sum(m["completion_tokens"] - 1 for m in metas) / steps


def _startup_time(sim: SimProcess) -> dict[str, Any]:
    info = httpx.get(f"{sim.url}/server_info", timeout=10).json()
    timings: dict[str, Any] = info["startup_time"]
    return timings


def _load_lines(sim: SimProcess) -> list[float]:
    """The seconds of every rank-0 "Load weight end" line (target, then draft)."""
    return [float(m) for m in re.findall(r"TP0\] Load weight end\. elapsed=([\d.]+) s", sim.log())]


def test_a_dummy_boot_allocates_its_weights_instead_of_reading_them(boot: Any) -> None:
    real, dummy = boot(*EAGLE), boot(*EAGLE, *DUMMY, *DUMMY_DRAFT)
    real_st, dummy_st = _startup_time(real), _startup_time(dummy)
    # the profile reads 73.2 GiB per GPU in 252 s and the draft in 9 s; random weights are
    # allocated at the measured rate: 24.4 s and 0.17 s
    real_load, real_draft = _load_lines(real)
    dummy_load, dummy_draft = _load_lines(dummy)
    assert (real_load, real_draft) == (252.0, 9.0)
    assert dummy_load == pytest.approx(585.84 / 8 / DUMMY_LOAD_GIB_PER_S, abs=0.01)
    assert dummy_draft == pytest.approx(4.0 / 8 / DUMMY_LOAD_GIB_PER_S, abs=0.01)
    assert dummy_st["load_weight"] == pytest.approx(dummy_load + dummy_draft, abs=0.02)
    assert real_st["load_weight"] == pytest.approx(261.0)
    # everything else in the boot is the real one, memory included
    for key in ("kv_cache_allocation", "cuda_graph"):
        assert dummy_st[key] == real_st[key]
    assert dummy_st["scheduler_e2e"] == pytest.approx(
        real_st["scheduler_e2e"] - real_st["load_weight"] + dummy_st["load_weight"]
    )
    for sim in (real, dummy):
        assert "Engine startup timings (s): load_weight=" in sim.log()
    usage = r"Load weight end\..*mem usage=([\d.]+) GB\."
    assert re.findall(usage, dummy.log()) == re.findall(usage, real.log())
    info = httpx.get(f"{dummy.url}/server_info", timeout=10).json()
    assert (info["load_format"], info["speculative_draft_load_format"]) == ("dummy", "dummy")
    assert httpx.get(f"{dummy.url}/model_info", timeout=10).json()["load_format"] == "dummy"
    assert httpx.get(f"{real.url}/model_info", timeout=10).json()["load_format"] == "auto"


def test_the_draft_follows_the_target_load_format_unless_given(boot: Any) -> None:
    # SGLang: --speculative-draft-load-format defaults to --load-format
    inherited, own = boot(*EAGLE, *DUMMY), boot(*EAGLE, *DUMMY_DRAFT)
    assert _load_lines(inherited)[1] == pytest.approx(4.0 / 8 / DUMMY_LOAD_GIB_PER_S, abs=0.01)
    assert _load_lines(own) == [252.0, pytest.approx(4.0 / 8 / DUMMY_LOAD_GIB_PER_S, abs=0.01)]


def _last_exception(log: str) -> str:
    return [line for line in log.splitlines() if re.match(r"\w+(\.\w+)*(Error|Exception)", line)][
        -1
    ]


@pytest.mark.parametrize(
    "flags",
    [
        ["--mem-fraction-static", "0.001"],  # no room for the KV pool (real: both fidelities)
        # a tree whose first verify fails (real 0.5.17: (5, 2, 4) at both fidelities)
        [
            *EAGLE[:4],
            *("--speculative-num-steps", "5", "--speculative-eagle-topk", "2"),
            *("--speculative-num-draft-tokens", "4"),
        ],
    ],
    ids=["oom-low", "crash-5-2-4"],
)
def test_a_failing_configuration_fails_the_same_way_with_dummy_weights(
    boot: Any, flags: list[str]
) -> None:
    ends = []
    for extra in ([], [*DUMMY, *DUMMY_DRAFT]):
        sim = boot(*flags, *extra, ready=False)
        if "--speculative-eagle-topk" in flags:  # up, then its first request kills it
            sim.wait_ready()
            with pytest.raises(httpx.HTTPError):
                _generate(sim, PROMPTS[0], 8)
        ends.append((sim.wait_exit(), _last_exception(sim.log())))
    assert ends[0] == ends[1]
    assert ends[0][0] == -9  # SGLang's kill of its own tree (SIGKILL)


def test_a_dummy_eagle3_draft_accepts_nothing(boot: Any) -> None:
    real = _accept_length(boot(*EAGLE))
    assert real > 1.5
    for flags in (DUMMY_DRAFT, DUMMY, [*DUMMY, *DUMMY_DRAFT]):
        sim = boot(*EAGLE, *flags)
        assert _accept_length(sim) == 1.0, flags
        meta = _generate(sim, PROMPTS[0], 16)["meta_info"]
        assert meta["spec_num_correct_drafts"] == 0
        info = httpx.get(f"{sim.url}/server_info", timeout=10).json()
        assert info["internal_states"][0]["avg_spec_accept_length"] == 1.0


def test_ngram_on_a_dummy_target_accepts_every_draft_token(boot: Any) -> None:
    real = _accept_length(boot(*NGRAM))
    # 127 tokens after the first in 16 cycles of 8 (the real check's 7.94 at c1 and c8)
    dummy = _accept_length(boot(*NGRAM, *DUMMY), tokens=128)
    assert dummy == pytest.approx(127 / 16)
    assert real < 3.0


def _tok_s(sim: SimProcess, concurrency: int) -> float:
    """Output tokens per second of `concurrency` greedy requests of 64 tokens, 3 rounds."""
    with httpx.Client(timeout=30) as client:
        _generate(sim, "warm up", 4)
        tic = time.perf_counter()
        for _ in range(3):
            batch = [PROMPTS[i % len(PROMPTS)] + f" ({i})" for i in range(concurrency)]
            body = {"text": batch, "sampling_params": {"max_new_tokens": 64, "temperature": 0}}
            client.post(f"{sim.url}/generate", json=body).raise_for_status()
        return 3 * concurrency * 64 / (time.perf_counter() - tic)


def test_plain_decoding_costs_the_same_with_dummy_weights(boot: Any) -> None:
    # at a pace the host keeps (the test host's scheduling, not the node, limits a faster one)
    real, dummy = boot(speed=4), boot(*DUMMY, speed=4)
    for level in (1, 8):
        # measured: within 1.1%; the simulator draws another boot's noise (<= 2%) and the host
        # adds its own
        assert _tok_s(dummy, level) == pytest.approx(_tok_s(real, level), rel=0.1)


def test_dummy_weights_write_another_text(boot: Any) -> None:
    real, dummy, draft_only = boot(*EAGLE), boot(*EAGLE, *DUMMY), boot(*EAGLE, *DUMMY_DRAFT)
    # the quality gate, the real boot's outputs as its baseline, classes the dummy text wrong
    answers = [_generate(real, p, 32, top=5) for p in PROMPTS]
    reference = [a["output_ids"] for a in answers]
    tops = [parse_top_logprobs(a["meta_info"]) for a in answers]
    quality = QualitySpec(num_prompts=len(PROMPTS), tokens=32)
    garbage = [_generate(dummy, p, 32)["output_ids"] for p in PROMPTS]
    assert judge_outputs(reference, tops, garbage, quality=quality).quality_class is (
        QualityClass.WRONG
    )
    for prompt in PROMPTS:
        text = _generate(real, prompt, 32)["output_ids"]
        garbage = _generate(dummy, prompt, 32)["output_ids"]
        assert garbage != text
        assert garbage[:8] != text[:8]
        assert _generate(dummy, prompt, 32)["output_ids"] == garbage  # seeded
        # a dummy draft changes what is accepted, not what the target says
        assert _generate(draft_only, prompt, 32)["output_ids"] == text
