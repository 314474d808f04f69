#!/usr/bin/env python3
"""Greedy outputs with top log-probabilities from several real SGLang servers at once, on one GPU.

The measurements the quality gate's rule is set and checked from: the baseline across fresh boots,
benign flags (CUDA-graph batch, memory, decode graphs off, deterministic kernels, another
attention backend), NGRAM and EAGLE-3 chains and trees (two boots each), and the lossy group (fp8
KV cache in both formats, fp8 weight quantization), each decoding
the same prompts greedily, raw and through the model's chat template. Throughput is not measured,
so the servers share the GPU: each gets a small KV pool (`--max-total-tokens`) and they boot in
parallel, staggered by a few seconds. Usage (from the repository root, SGLang importable)::

    python scripts/real_quality.py --out OUT/quality-0.5.17 --version 0.5.17
    python scripts/real_quality.py --out OUT/q --only base-1 ngram-d8 --keep   # a subset

For each configuration `OUT/<name>.json` holds the command, boot time, `/server_info`'s
`startup_time` (SGLang 0.5.17+), and per prompt format (`raw`, `chat`): each prompt, its output
ids and text, `output_token_logprobs` ([logprob, id] per position) and `output_top_logprobs`
([[logprob, id] x K] per position), plus the speculative fields of `meta_info`. The server log is
`OUT/<name>.log`. `OUT/summary.json` compares every configuration with `base-1`: per prompt, the
first position where the greedy ids differ and the baseline's top-1 minus top-2 log-probability
there (a near tie or a confident position). `--record NAME` also runs
`scripts/record_sglang_stream.sh` against that server (SSE fixtures).

Requests: one batch `/generate` per format, as spec_sweep's quality gate sends them: `text` a list,
`sampling_params` {temperature 0, max_new_tokens, ignore_eos}, `return_logprob` true,
`top_logprobs_num` K, `logprob_start_len` -1 (output positions only). In SGLang 0.5.13 and 0.5.17
(`managers/tokenizer_manager.py`, `add_logprob_to_meta_info`/`detokenize_top_logprobs_tokens`)
`meta_info.output_top_logprobs` is a list with one entry per output token, each a list of K
`[logprob, token_id, text-or-null]`, and `output_token_logprobs` one `[logprob, token_id, null]`
per output token (the text is filled only with `return_text_in_logprobs`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".models" / "smollm2-135m"
PROMPTS = ROOT / "spec_sweep" / "data" / "prompts.jsonl"
HOST = "127.0.0.1"
FIRST_PORT = 21000  # + 20 per server; SGLang 0.5.13 validates port + 10000 (gRPC) on launch
SPEC_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:3])


def configs(version: str, model: Path) -> dict[str, list[str]]:
    """Name -> the flags that differ from the common ones, for this SGLang version."""
    split = _version_tuple(version) >= (0, 5, 14)
    cgbs = "--cuda-graph-max-bs-decode" if split else "--cuda-graph-max-bs"
    no_decode_graph = (
        ["--cuda-graph-backend-decode", "disabled"] if split else ["--disable-cuda-graph"]
    )
    draft_dir = model.with_name(model.name + "-eagle3")
    draft = str(draft_dir)
    # A head trained by scripts/train_test_draft.py loads its weights; the config-only draft of
    # make_real_model.py --eagle3 has none (random weights: every draft rejected).
    trained = (draft_dir / "train_summary.json").is_file()
    load = [] if trained else ["--speculative-draft-load-format", "dummy"]

    def eagle(steps: int, topk: int, tokens: int) -> list[str]:
        return [
            *["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft],
            *[*load, "--speculative-num-steps", str(steps)],
            *["--speculative-eagle-topk", str(topk)],
            *["--speculative-num-draft-tokens", str(tokens)],
        ]

    return {
        "base-1": [],
        "base-2": [],
        "base-3": [],
        "cgbs-8": [cgbs, "8"],
        "kv-64k": ["--max-total-tokens", "65536"],
        "no-decode-graph": no_decode_graph,
        "deterministic": ["--enable-deterministic-inference"],
        "attn-torch-native": ["--attention-backend", "torch_native"],
        "ngram-d8": ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"],
        "ngram-d8-2": ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"],
        "eagle3-s3-k1-d4": eagle(3, 1, 4),
        "eagle3-s3-k1-d4-2": eagle(3, 1, 4),
        "eagle3-s3-k2-d6": eagle(3, 2, 6),
        "eagle3-s3-k2-d6-2": eagle(3, 2, 6),
        # Lossy on purpose: the gate must class these lossy, not equivalent.
        "kv-fp8-e5m2": ["--kv-cache-dtype", "fp8_e5m2"],
        "kv-fp8-e4m3": ["--kv-cache-dtype", "fp8_e4m3"],
        "quant-fp8": ["--quantization", "fp8"],
    }


def common_flags(version: str, model: Path) -> list[str]:
    """What every server gets: the real specs' fixed flags, a small KV pool, a cgbs of 16."""
    split = _version_tuple(version) >= (0, 5, 14)
    prefill_off = (
        ["--cuda-graph-backend-prefill", "disabled"]
        if split
        else ["--disable-piecewise-cuda-graph"]
    )
    cgbs = "--cuda-graph-max-bs-decode" if split else "--cuda-graph-max-bs"
    return [
        "--model-path",
        str(model),
        "--attention-backend",
        "triton",
        "--sampling-backend",
        "pytorch",
        "--skip-server-warmup",
        *prefill_off,
        cgbs,
        "16",
        "--mem-fraction-static",
        "0.85",
        "--max-total-tokens",
        "32768",
    ]


def _merge(common: Sequence[str], extra: Sequence[str]) -> list[str]:
    """`common` with the flags `extra` names replaced by `extra`'s values."""
    named = {a for a in extra if a.startswith("--")}
    out: list[str] = []
    skip = False
    for i, arg in enumerate(common):
        if skip:
            skip = False
            continue
        if arg in named:
            skip = i + 1 < len(common) and not common[i + 1].startswith("--")
            continue
        out.append(arg)
    return out + list(extra)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _ports(count: int, first: int = FIRST_PORT) -> list[int]:
    found, port = [], first
    while len(found) < count:
        if all(_port_free(p) for p in (port, port + 1, port + 2, port + 7, port + 10000)):
            found.append(port)
        port += 20
    return found


def load_prompts(count: int) -> list[str]:
    texts = [json.loads(line)["text"] for line in PROMPTS.read_text().splitlines() if line]
    return ["The capital of France is", *texts][:count]


def chat_prompts(model: Path, prompts: Sequence[str]) -> list[str]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts
    ]


class Server:
    """One `sglang.launch_server` process group, its log and readiness."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path) -> None:
        self.name, self.argv, self.port, self.log = name, argv, port, log
        self.started = time.monotonic()
        self.ready_s: float | None = None
        env = {**os.environ, "SGLANG_IS_FLASHINFER_AVAILABLE": "false", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def poll_ready(self) -> bool:
        import httpx

        if self.ready_s is not None:
            return True
        try:
            if httpx.get(self.url + "/health", timeout=2.0, trust_env=False).status_code == 200:
                self.ready_s = time.monotonic() - self.started
                return True
        except httpx.HTTPError:
            pass
        return False

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def generate(url: str, texts: list[str], *, tokens: int, top: int) -> list[dict[str, Any]]:
    """One batch greedy `/generate` with log-probabilities; one record per prompt."""
    import httpx

    body = {
        "text": texts,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": tokens, "ignore_eos": True},
        "return_logprob": True,
        "top_logprobs_num": top,
        "logprob_start_len": -1,
    }
    r = httpx.post(url + "/generate", json=body, timeout=300.0, trust_env=False)
    r.raise_for_status()
    data = r.json()
    if not isinstance(data, list) or len(data) != len(texts):
        raise ValueError(f"expected {len(texts)} outputs, got {str(data)[:300]}")
    out = []
    for prompt, item in zip(texts, data, strict=True):
        meta = item.get("meta_info", {})
        out.append(
            {
                "prompt": prompt,
                "output_ids": item.get("output_ids"),
                "text": item.get("text"),
                "output_token_logprobs": [e[:2] for e in meta.get("output_token_logprobs") or []],
                "output_top_logprobs": [
                    [e[:2] for e in pos] if pos else None
                    for pos in meta.get("output_top_logprobs") or []
                ],
                "meta": {k: meta[k] for k in (*SPEC_KEYS, "finish_reason") if k in meta},
            }
        )
    return out


def server_info(url: str) -> dict[str, Any]:
    import httpx

    info = httpx.get(url + "/server_info", timeout=30.0, trust_env=False).json()
    keep = (
        "version",
        "startup_time",
        "max_total_num_tokens",
        "speculative_algorithm",
        "cuda_graph_max_bs",
        "attention_backend",
        "mem_fraction_static",
    )
    return {k: info.get(k) for k in keep}


def first_divergence(
    ref: dict[str, Any], other: dict[str, Any]
) -> tuple[int | None, float | None, float | None]:
    """First differing position, the reference's top-1 minus top-2 logprob there, and its
    top-1 logprob (None, None, None when the outputs agree)."""
    a, b = ref["output_ids"] or [], other["output_ids"] or []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            tops = ref["output_top_logprobs"][i] if i < len(ref["output_top_logprobs"]) else None
            if tops and len(tops) >= 2:
                return i, tops[0][0] - tops[1][0], tops[0][0]
            return i, None, None
    return None, None, None


def summarize(out: Path, names: Sequence[str]) -> dict[str, Any]:
    results = {n: json.loads((out / f"{n}.json").read_text()) for n in names}
    base = results.get("base-1")
    summary: dict[str, Any] = {}
    if base is None or "formats" not in base:
        return summary
    for name, result in results.items():
        if name == "base-1" or "formats" not in result:
            summary[name] = {"error": result.get("error")} if name != "base-1" else {}
            continue
        per_format = {}
        for fmt, rows in result["formats"].items():
            diverged = []
            for i, (ref, other) in enumerate(zip(base["formats"][fmt], rows, strict=True)):
                pos, margin, top1 = first_divergence(ref, other)
                if pos is not None:
                    diverged.append(
                        {"prompt": i, "position": pos, "margin": margin, "ref_top1_logprob": top1}
                    )
            agree = 1.0 - len(diverged) / max(1, len(rows))
            per_format[fmt] = {"identical_prompts": agree, "diverged": diverged}
        summary[name] = per_format
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--version", required=True, help="SGLang version (decides flag names)")
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--only", nargs="*", help="configurations to run (default: all)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--top", type=int, default=5, help="top_logprobs_num")
    parser.add_argument("--stagger-s", type=float, default=3.0)
    parser.add_argument(
        "--first-port", type=int, default=FIRST_PORT, help="ports from here (20 per server)"
    )
    parser.add_argument("--boot-timeout-s", type=float, default=480.0)
    parser.add_argument("--record", nargs="*", default=[], help="record SSE fixtures from these")
    parser.add_argument("--keep", action="store_true", help="leave the servers running")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    table = configs(args.version, args.model)
    names = args.only or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {list(table)}")
    prompts = load_prompts(args.prompts)
    formats = {"raw": prompts, "chat": chat_prompts(args.model, prompts)}
    common = common_flags(args.version, args.model)
    servers: list[Server] = []
    t0 = time.monotonic()
    try:
        for name, port in zip(names, _ports(len(names), args.first_port), strict=True):
            flags = _merge(common, table[name])
            argv_ = [
                args.python,
                "-m",
                "sglang.launch_server",
                *flags,
                "--host",
                HOST,
                "--port",
                str(port),
                "--nccl-port",
                str(port + 7),
            ]
            servers.append(Server(name, argv_, port, args.out / f"{name}.log"))
            print(f"[{time.monotonic() - t0:6.1f}s] launched {name} on {port}", flush=True)
            time.sleep(args.stagger_s)
        pending = list(servers)
        deadline = time.monotonic() + args.boot_timeout_s
        while pending and time.monotonic() < deadline:
            for server in list(pending):
                if server.proc.poll() is not None:
                    print(
                        f"[{time.monotonic() - t0:6.1f}s] {server.name} EXITED "
                        f"{server.proc.returncode}",
                        flush=True,
                    )
                    pending.remove(server)
                elif server.poll_ready():
                    print(
                        f"[{time.monotonic() - t0:6.1f}s] {server.name} ready "
                        f"({server.ready_s:.1f} s)",
                        flush=True,
                    )
                    pending.remove(server)
            time.sleep(1.0)
        for server in servers:
            record: dict[str, Any] = {
                "name": server.name,
                "sglang_version": args.version,
                "command": server.argv,
                "boot_s": server.ready_s,
                "tokens": args.tokens,
                "top_logprobs_num": args.top,
            }
            if server.ready_s is None:
                record["error"] = (
                    f"exit {server.proc.returncode}"
                    if server.proc.poll() is not None
                    else "not ready before the boot timeout"
                )
            else:
                try:
                    record["server_info"] = server_info(server.url)
                    record["formats"] = {
                        fmt: generate(server.url, texts, tokens=args.tokens, top=args.top)
                        for fmt, texts in formats.items()
                    }
                except Exception as exc:  # recorded, not raised: the other servers still count
                    record["error"] = f"{type(exc).__name__}: {exc}"
                if server.name in args.record:
                    fixtures = args.out / f"stream-{server.name}"
                    subprocess.run(
                        ["bash", str(ROOT / "scripts" / "record_sglang_stream.sh"), str(fixtures)],
                        env={**os.environ, "SGLANG_URL": server.url},
                        check=False,
                    )
            (args.out / f"{server.name}.json").write_text(json.dumps(record, indent=1))
            print(f"{server.name}: {record.get('error') or 'ok'}", flush=True)
    finally:
        if not args.keep:
            for server in servers:
                server.stop()
    summary = summarize(args.out, names)
    for name, per in summary.items():
        line = ", ".join(
            f"{fmt} {v['identical_prompts']:.2f}" for fmt, v in per.items() if "diverged" in v
        )
        print(f"vs base-1: {name}: {line or per}")
    print(f"done in {time.monotonic() - t0:.0f} s; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
