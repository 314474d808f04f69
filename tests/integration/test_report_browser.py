"""The HTML report in a real browser: headless Chromium opens it offline and renders its figures.

Skipped where `/usr/bin/chromium` is absent (`apt-get install -y chromium` in `.ci/run`). The
report is built from records shaped like the write-up's PCIe campaign (baseline 82 tok/s, tuned
89.5, EAGLE-3 around 54, failures of three modes), so that every section and figure is present.
Chromium runs with no network reachable (`--host-resolver-rules`) and records every request
it makes in a NetLog; the page must make none but its own `file:`/`data:` loads, print nothing
to the console, and its screenshot must show the figures' colours.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import DROP, make_spec
from matplotlib import image as mpimg

from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.present.report import ReportResult, build_report

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"
)


_PLAIN = {
    "speculative-algorithm": None,
    "cuda-graph-max-bs": 512,
    "enable-torch-symm-mem": False,
    "ep-size": 1,
}


def _eagle(steps: int, bs: int = 128) -> dict[str, Any]:
    return {
        **_PLAIN,
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": steps,
        "cuda-graph-max-bs": bs,
    }


def _ok(speed: float, *, accept: float | None = None, ttft: float = 45.0) -> dict[str, float]:
    metrics = {
        "output_throughput": speed * 0.93,
        "request_throughput": speed / 128,
        "decode_speed_p50": speed,
        "ttft_p50_ms": ttft * 0.8,
        "ttft_p99_ms": ttft,
        "itl_p50_ms": 1000 / speed,
        "itl_p99_ms": 1300 / speed,
        "boot_s": 290.0,
    }
    if accept is not None:
        metrics["accept_length"] = accept
    return metrics


def _records() -> list[TrialRecord]:
    rows: list[tuple[dict[str, Any], FailureMode, dict[str, float], str]] = [
        (_PLAIN, FailureMode.NONE, _ok(82.0, ttft=52.0), ""),
        ({**_PLAIN, "cuda-graph-max-bs": 128}, FailureMode.NONE, _ok(89.5, ttft=48.0), ""),
        (_eagle(3), FailureMode.NONE, _ok(54.1, accept=2.01, ttft=40.0), ""),
        (_eagle(5), FailureMode.NONE, _ok(47.0, accept=2.1, ttft=43.0), ""),
        (_eagle(2, 512), FailureMode.NONE, _ok(50.0, accept=1.85, ttft=41.0), ""),
        (
            {**_PLAIN, "enable-torch-symm-mem": True},
            FailureMode.UNSUPPORTED,
            {},
            "[2026-01-01 10:00:00 TP0] TorchSymmMemCommunicator: Device capability 12 not "
            "supported",
        ),
        (
            {**_PLAIN, "ep-size": 8},
            FailureMode.OOM,
            {},
            "[2026-01-01 10:00:00 TP3] torch.OutOfMemoryError: CUDA out of memory. Tried to "
            "allocate 2.00 GiB.",
        ),
        (
            {**_eagle(4), "ep-size": 8},
            FailureMode.ASSERTION,
            {},
            "AssertionError: Flashinfer MoE A2A is only supported with dp_size == tp_size",
        ),
    ]
    out = []
    for i, (config, mode, metrics, excerpt) in enumerate(rows):
        out.append(
            TrialRecord(
                run_id=f"run{i}",
                trial_id=f"t{i:04d}",
                status="FINISHED",
                config=dict(config),
                failure_mode=mode,
                metrics=metrics,
                reason=excerpt.splitlines()[0] if excerpt else "",
                elapsed_s=300.0,
                start_time=1_000_000 + i * 1000,
                end_time=1_000_500 + i * 1000,
                tags={"spec_sweep.log_excerpt": excerpt} if excerpt else {},
            )
        )
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ReportResult:
    """The report of the write-up-like sweep."""
    root = tmp_path_factory.mktemp("browser")
    spec = make_spec(
        root,
        name="browser",
        description="the write-up's campaign, as a report",
        node={
            "server_args": {"tp-size": 8, "trust-remote-code": True},
            "boot_timeout_s": DROP,
            "request_timeout_s": DROP,
        },
        search_space={
            "include": DROP,
            "params": {
                "speculative-algorithm": {"choices": [None, "EAGLE3"]},
                "speculative-num-steps": {
                    "int": [1, 5],
                    "default": 3,
                    "when": {"speculative-algorithm": "EAGLE3"},
                },
                "cuda-graph-max-bs": {"choices": [128, 512], "default": 512},
                "enable-torch-symm-mem": {"choices": [False, True], "default": False},
                "ep-size": {"choices": [1, 8], "default": 1},
            },
        },
        workload={"output_len": 128, "num_prompts": 4, "warmup_prompts": DROP},
        budget={"trials": 9, "trial_timeout_s": DROP},
        searcher=DROP,
    )
    return build_report(
        History(spec, _records()), out_dir=root / "report", parent_run_id="0123abcd"
    )


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def _net_log(path: Path) -> dict[str, Any]:
    text = path.read_text()
    try:
        return dict(json.loads(text))
    except ValueError:  # Chromium may end without closing the events list
        return dict(json.loads(text.rstrip().rstrip(",") + "]}"))


def _page_requests(log: dict[str, Any]) -> list[str]:
    """URLs of requests the page made (the browser's own background requests left out)."""
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if types.get(event["type"]) != "URL_REQUEST_START_JOB" or "url" not in params:
            continue
        if "file://" in str(params.get("network_isolation_key", "")):
            urls.append(str(params["url"]))
    return urls


def test_html_links_nothing_outside(report: ReportResult) -> None:
    text = report.html.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert "<script" not in text.lower()
    assert "<link" not in text.lower()
    assert "@import" not in text
    srcs = re.findall(r"""\ssrc\s*=\s*["']([^"']+)""", text)
    assert srcs
    assert all(s.startswith("data:image/png;base64,") for s in srcs)


def test_opens_offline_without_console_errors(report: ReportResult, tmp_path: Path) -> None:
    net_log = tmp_path / "netlog.json"
    done = _chromium(
        tmp_path,
        "--enable-logging=stderr",
        "--v=0",
        f"--log-net-log={net_log}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        report.html.as_uri(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    dom = done.stdout
    assert "spec_sweep report: browser" in dom
    assert dom.count('src="data:image/png;base64,') == len(report.figures)
    requests = _page_requests(_net_log(net_log))
    external = [u for u in requests if not u.startswith(("file:", "data:"))]
    assert external == []


def _colour_share(pixels: np.ndarray, hex_colour: str, *, tolerance: float = 0.06) -> float:
    rgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    close = np.all(np.abs(pixels[..., :3] - rgb) < tolerance, axis=-1)
    return float(close.mean())


def test_screenshot_shows_the_figures(report: ReportResult, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    done = _chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1280,9000",
        "--virtual-time-budget=5000",
        report.html.as_uri(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert shot.stat().st_size > 200_000
    pixels = np.asarray(mpimg.imread(shot))
    assert pixels.shape[0] == 9000
    assert pixels.shape[1] == 1280
    flat = (pixels[..., :3] * 255).round().astype(np.uint32).reshape(-1, 3)
    codes = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
    assert len(np.unique(codes)) > 1000  # anti-aliased plots, not a blank page
    white = float(np.all(pixels[..., :3] > 0.97, axis=-1).mean())
    assert white < 0.9
    # Colours only the figures use: the best-so-far line and star (progress, effects), the
    # losing EAGLE-3 bars (diagnosis) and the Pareto front (latency).
    assert _colour_share(pixels, "#e8a200") > 1e-4
    assert _colour_share(pixels, "#d62728") > 1e-3
    assert _colour_share(pixels, "#2a7ab0") > 1e-4
