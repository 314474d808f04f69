"""The quality gate's requests and record (node.quality), against a real local HTTP server.

The server answers `/generate` with what a real SGLang 0.5.17 server answered a batch of two
prompts (tests/fixtures/sglang/0.5.17/streams/base-generate_batch_logprobs.json), or with
trial outputs made from it; it keeps every request body, so the tests see what was asked.
"""

from __future__ import annotations

import copy
import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from spec_sweep.node.quality import (
    QUALITY_NAME,
    TOP_LOGPROBS,
    baseline_reference,
    check_quality,
)
from spec_sweep.spec import QualitySpec, WorkloadSpec

REAL = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "sglang"
    / "0.5.17"
    / "streams"
    / "base-generate_batch_logprobs.json"
)
#: Two prompts of 24 tokens: 48 tokens are little evidence, so the bound on the deficit is wider
#: than the default (set for 16 x 64): one flip 0.1875 nats below is 0.00625 nats/token here.
QUALITY = QualitySpec(num_prompts=2, tokens=24, max_equivalent_deficit=0.01)


class _Node:
    """What the server answers next, and what it was asked."""

    def __init__(self) -> None:
        self.answer: list[dict[str, Any]] = json.loads(REAL.read_text())
        self.bodies: list[dict[str, Any]] = []


@pytest.fixture
def node() -> Iterator[tuple[str, _Node]]:
    state = _Node()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.bodies.append(body)
            answer = copy.deepcopy(state.answer)
            if not body.get("return_logprob"):
                for item in answer:
                    for key in ("output_token_logprobs", "output_top_logprobs"):
                        item["meta_info"].pop(key, None)
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _check(url: str, tmp_path: Path, trial_id: str, quality: QualitySpec = QUALITY) -> Any:
    trial_dir = tmp_path / "trials" / trial_id / "attempt1"
    trial_dir.mkdir(parents=True)
    check = check_quality(
        url,
        quality,
        workload=WorkloadSpec(),
        model_path="some/model",
        trial_dir=trial_dir,
        trial_id=trial_id,
        request_timeout_s=10.0,
        state_dir=tmp_path,
    )
    return check, json.loads((trial_dir / QUALITY_NAME).read_text())


def _take(state: _Node, prompt: int, position: int, token: int) -> None:
    """The next answer takes `token` at `position` of `prompt`, then another path."""
    ids = state.answer[prompt]["output_ids"]
    state.answer[prompt]["output_ids"] = [*ids[:position], token, *ids[position + 1 :]]
    state.answer[prompt]["text"] = f"another text from token {position}"


def test_the_baseline_asks_for_top_logprobs_and_records_them(
    node: tuple[str, _Node], tmp_path: Path
) -> None:
    url, state = node
    check, record = _check(url, tmp_path, "t0000")
    (body,) = state.bodies
    assert len(body["text"]) == 2
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True}
    assert (body["return_logprob"], body["top_logprobs_num"]) == (True, TOP_LOGPROBS)
    assert body["logprob_start_len"] == -1
    assert check.passed
    # the baseline's line says it is the reference (no warning, no "not checked")
    assert check.note == (
        "the quality gate's reference: every other trial's greedy outputs are judged against "
        "this trial's"
    )
    assert check.metrics()["quality_confident_share"] == 0.0
    assert [len(p) for p in record["top_logprobs"]] == [24, 24]
    assert record["top_logprobs"][0][0][0] == [pytest.approx(-0.271079, abs=1e-6), 7042]
    assert record["rule"] == {
        "tokens": 24,
        "margin_nats": 0.5,
        "max_equivalent_deficit": 0.01,
        "min_wrong_deficit": 0.25,
        "allow_lossy": False,
    }
    assert (record["quality_class"], record["deficit"]) == ("identical", 0.0)
    assert [v["verdict"] for v in record["verdicts"]] == ["identical", "identical"]


def test_a_trial_is_asked_for_outputs_alone_and_judged_per_prompt(
    node: tuple[str, _Node], tmp_path: Path
) -> None:
    url, state = node
    _check(url, tmp_path, "t0000")
    check, record = _check(url, tmp_path, "t0001")
    assert "return_logprob" not in state.bodies[-1]
    assert check.passed
    assert record["diverging"] == []

    _take(state, 0, 5, 1797)  # the baseline's runner-up, 0.1875 nats below its choice
    check, record = _check(url, tmp_path, "t0002")
    assert check.passed, check.reason
    assert (record["quality_class"], record["deficit"]) == (
        "equivalent",
        pytest.approx(0.1875 / 30),
    )
    assert check.metrics()["quality_near_tie_flips"] == 1.0
    (flip,) = record["diverging"]
    assert flip["verdict"] == "near_tie"
    assert (flip["prompt_index"], flip["position"], flip["trial_token"]) == (0, 5, 1797)
    assert flip["margin"] == pytest.approx(0.1875)
    assert flip["baseline_ids"][5] == 2988
    assert flip["trial_ids"][5] == 1797
    assert flip["baseline_text"].startswith(" Paris.")
    assert flip["trial_text"] == "another text from token 5"
    assert record["first_diverging"] == flip

    _take(state, 1, 4, 11)  # a token the baseline did not have in its top 5: 13 nats margin
    check, record = _check(url, tmp_path, "t0003")
    assert not check.passed
    assert record["quality_class"] == "wrong"
    assert check.confident_share == 0.5
    assert [d["verdict"] for d in record["diverging"]] == ["confident", "near_tie"]
    assert record["first_diverging"]["prompt_index"] == 1
    assert record["passed"] is False
    assert record["confident_share"] == 0.5


def test_a_trial_before_the_reference_is_not_judged(
    node: tuple[str, _Node], tmp_path: Path
) -> None:
    url, _ = node
    check, record = _check(url, tmp_path, "t0001")
    assert (check.judged, check.passed) == (False, True)
    where = tmp_path / "trials" / "t0000"
    assert (
        check.note
        == f"quality not checked: no baseline outputs in {where} yet (run the sweep first)"
    )
    assert check.metrics() == {}
    assert record["judged"] is False
    assert record["reference"] is None


def test_the_reference_is_the_newest_baseline_attempt_of_the_sweeps_state_folder(
    node: tuple[str, _Node], tmp_path: Path
) -> None:
    """A trial folder anywhere (a manual trial's `<state>/manual/<stamp>/`) is judged against
    the baseline of the state folder it is given; attempts sort by number (10 after 9)."""
    url, state = node
    assert baseline_reference(tmp_path) is None
    _check(url, tmp_path, "t0000")  # attempt1
    for attempt in (9, 10):
        folder = tmp_path / "trials" / "t0000" / f"attempt{attempt}"
        folder.mkdir()
        shutil.copy(tmp_path / "trials" / "t0000" / "attempt1" / QUALITY_NAME, folder)
    (tmp_path / "trials" / "t0000" / "attempt11").mkdir()  # lost before its quality check
    ref = baseline_reference(tmp_path)
    assert ref is not None
    assert ref.path == tmp_path / "trials" / "t0000" / "attempt10" / QUALITY_NAME

    manual = tmp_path / "manual" / "20261206-010203-abcdef"
    manual.mkdir(parents=True)
    _take(state, 1, 4, 11)
    check = check_quality(
        url,
        QUALITY,
        workload=WorkloadSpec(),
        model_path="some/model",
        trial_dir=manual,
        trial_id=manual.name,
        request_timeout_s=10.0,
        state_dir=tmp_path,
    )
    assert check.judged
    assert not check.passed
    record = json.loads((manual / QUALITY_NAME).read_text())
    assert record["reference"] == str(ref.path)


def test_without_the_baselines_logprobs_every_divergence_is_confident(
    node: tuple[str, _Node], tmp_path: Path
) -> None:
    url, state = node
    for item in state.answer:
        item["meta_info"].pop("output_top_logprobs")
    base, record = _check(url, tmp_path, "t0000")
    assert base.passed
    assert base.note.startswith("the quality gate's reference: ")
    assert "returned no top log-probabilities" in base.note
    assert record["top_logprobs"] is None
    _take(state, 0, 5, 1797)
    check, _ = _check(url, tmp_path, "t0001")
    assert not check.passed
    assert "no margin reported" in check.reason
