"""The MLflow UI as a user sees it: headless Chromium against `spec-sweep ui` on a finished
simulated sweep.

The sweep runs for real (session Ray cluster, the simulator, an MLflow store under tmp_path), with
system metrics sampled every 0.5 s. Chromium (Debian package, `apt-get install -y chromium` in
`.ci/run`; skipped where absent) is driven over the DevTools protocol and waits for the React app's
content, never a fixed time. Checked: the printed URL lands on the sweep's trials, one row per
trial, best objective first, with the objective and the failure modes as columns and the short
trial names; the experiment in "Model training" mode lands on the runs table, not the GenAI
overview (MLflow 3.17 takes the mode from the URL or the browser, not the experiment); a trial's
page shows its system metrics; the sweep's description links the trials and the report.

`SPEC_SWEEP_UI_SHOTS=docs` also writes the screenshots of the README and docs/mlflow.md there.
"""

from __future__ import annotations

import asyncio
import os
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium import CHROMIUM, Page, chromium
from mlflow.tracking import MlflowClient

from spec_sweep.node.backends import SimBackend
from spec_sweep.orchestrate.driver import sweep
from spec_sweep.spec_load import load_spec
from spec_sweep.ui import UiServer, start_ui_server

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)"
    ),
    pytest.mark.usefixtures("ray_cluster"),
]

SPEC = """\
name: uisweep
description: The dashboard's browser test (simulated PCIe node).
node:
  backend: sglang
  model: moonshotai/Kimi-K2.5
  draft_model: lightseekorg/kimi-k2.5-eagle3
  gpus: 8
  sglang_version: "0.5.13"
  server_args: {tp-size: 8}
  boot_timeout_s: 60
  request_timeout_s: 30
  sim_profile: rtx-pro-6000-pcie-x8
search_space:
  params:
    cuda-graph-max-bs: {choices: [128, 512], default: 512}
    mem-fraction-static: {choices: [0.88, 0.97], default: 0.88}
baseline: {cuda-graph-max-bs: 512, mem-fraction-static: 0.88}
workload: {dataset: builtin, output_len: 32, num_prompts: 2, concurrency: 1, warmup_prompts: 1}
objective: {metric: output_throughput, mode: max}
budget: {trials: 4, trial_timeout_s: 120, confirm_repeats: 1, confirm_max_repeats: 1}
searcher: {kind: grid, seed: 0}
"""

ROWS = "[...document.querySelectorAll('.ag-center-cols-container [role=row]')]"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[UiServer, MlflowClient, str, Path]]:
    """A finished 4-trial simulated sweep (two of them OOM) and `spec-sweep ui` serving it.

    The two measured configurations are each booted once more by confirmation (one round, no
    tie-break rounds): runs without the ranking metric, listed after the search trials.
    """
    project = tmp_path_factory.mktemp("uisweep")
    path = project / "uisweep.yaml"
    path.write_text(textwrap.dedent(SPEC))
    uri = f"sqlite:///{project / 'mlruns' / 'mlflow.db'}"
    before = os.environ.get("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL")
    os.environ["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"] = "0.5"  # read by the driver's tracker
    try:
        spec = load_spec(path)
        outcome = sweep(
            spec,
            backend=SimBackend(spec, grace_s=2.0),
            state_dir=project / ".spec_sweep",
            tracking_uri=uri,
        )
    finally:
        if before is None:
            os.environ.pop("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", None)
        else:
            os.environ["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"] = before
    modes = sorted(r.failure_mode.value for r in outcome.records if r.failure_mode)
    assert modes == ["none", "none", "oom", "oom"], modes
    server = start_ui_server(uri, port=_free_port(), log_path=project / "ui.log")
    try:
        yield server, MlflowClient(uri), outcome.parent_run_id, project
    finally:
        server.stop()


def _browse(profile: Path, script: object) -> object:
    async def go() -> object:
        async with chromium(profile, width=1600, height=900) as page:
            return await script(page)  # type: ignore[operator]

    return asyncio.run(go())


async def _close_assistant(page: Page) -> None:
    """Close MLflow's assistant side panel, if open (it takes a third of the screen)."""
    await page.evaluate(
        "[...document.querySelectorAll('button[aria-label=Close]')].forEach(b => b.click())"
    )


def _shot(page: Page, name: str, tmp: Path) -> object:
    folder = Path(os.environ.get("SPEC_SWEEP_UI_SHOTS") or tmp)
    folder.mkdir(parents=True, exist_ok=True)
    return page.screenshot(folder / name)


def test_trials_view_lists_the_trials_best_first(
    served: tuple[UiServer, MlflowClient, str, Path], tmp_path: Path
) -> None:
    server, client, parent, _ = served
    # The view sorts on the ranking metric: the measured search trials, best first, then the rest.
    trials = client.search_runs(
        [client.get_run(parent).info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent}'",
        order_by=["metrics.`feasible_output_throughput` DESC"],
    )
    names = [r.info.run_name for r in trials]
    ranked = [r for r in trials if "feasible_output_throughput" in r.data.metrics]

    async def script(page: Page) -> dict[str, object]:
        await page.goto(server.url)
        await page.wait_for(f"{ROWS}.length === {len(trials)}", within=120)
        await page.wait_for("document.body.innerText.includes('oom')", within=30)
        await _close_assistant(page)
        headers = await page.evaluate(
            "[...document.querySelectorAll('.ag-header-row-column [role=columnheader]')]"
            ".sort((a, b) => a.getAttribute('aria-colindex') - b.getAttribute('aria-colindex'))"
            ".map(e => e.getAttribute('col-id'))"
        )
        rows = await page.evaluate(
            f"{ROWS}.sort((a, b) => a.getAttribute('row-index') - b.getAttribute('row-index'))"
            ".map(r => Number(r.getAttribute('row-index')))"
        )
        shown = await page.evaluate(
            "[...document.querySelectorAll('.ag-pinned-left-cols-container [role=row], "
            ".ag-center-cols-container [role=row]')]"
            ".filter(r => r.innerText.match(/t\\d{4}/))"
            ".sort((a, b) => a.getAttribute('row-index') - b.getAttribute('row-index'))"
            ".map(r => r.innerText.match(/t\\d{4}[^\\n]*/)[0])"
        )
        await _shot(page, "ui-trials.png", tmp_path)
        return {"headers": headers, "rows": rows, "names": shown, "text": await page.text()}

    seen = _browse(tmp_path / "profile", script)
    assert isinstance(seen, dict)
    assert seen["rows"] == list(range(len(trials)))
    assert seen["names"] == names  # best first by the ranking; failed trials and boots after
    assert len(ranked) == 2  # the two measured search trials
    assert names[:2] == [r.info.run_name for r in ranked]
    best = max(ranked, key=lambda r: r.data.metrics["output_throughput"])
    assert names[0] == best.info.run_name
    assert any(n.startswith("t0000 baseline") for n in names)
    assert "t0001 mem=0.97" in names or "t0002 mem=0.97" in names
    headers = [str(h) for h in seen["headers"]]  # type: ignore[union-attr]
    # In the view's order: name, objective, speed-up, failure mode, (accept length: no trial
    # here speculates, and MLflow shows no column for a metric no run has), parameters.
    assert [h for h in headers if "`" in h][:4] == [
        "attributes.`Run Name`",
        "metrics.`output_throughput`",
        "metrics.`speedup_vs_baseline`",
        "tags.`failure_mode`",
    ], headers
    assert "params.`cuda-graph-max-bs`" in headers
    text = str(seen["text"])
    assert text.count("oom") >= 2
    assert f"{len(trials)} matching runs" in text


def test_experiment_opens_on_the_runs_table(
    served: tuple[UiServer, MlflowClient, str, Path], tmp_path: Path
) -> None:
    server, client, parent, _ = served
    experiment = client.get_run(parent).info.experiment_id

    async def script(page: Page) -> str:
        await page.goto(
            f"{server.base_url}/#/experiments/{experiment}?workflowType=machine_learning"
        )
        await page.wait_for(
            "location.hash.includes('/runs?') && document.body.innerText.includes('matching runs')",
            within=120,
        )
        return str(await page.evaluate("location.hash"))

    landed = _browse(tmp_path / "profile", script)
    assert str(landed).startswith(f"#/experiments/{experiment}/runs")


def test_trial_page_shows_its_system_metrics(
    served: tuple[UiServer, MlflowClient, str, Path], tmp_path: Path
) -> None:
    server, client, parent, _ = served
    best = client.search_runs(
        [client.get_run(parent).info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent}'",
        order_by=["metrics.output_throughput DESC"],
        max_results=1,
    )[0]
    experiment = best.info.experiment_id
    assert len(client.get_metric_history(best.info.run_id, "system/cpu_utilization_percentage")) > 1

    async def script(page: Page) -> str:
        run_page = f"{server.base_url}/#/experiments/{experiment}/runs/{best.info.run_id}"
        mode = "workflowType=machine_learning"
        await page.goto(f"{run_page}?{mode}")
        await page.wait_for(f"document.body.innerText.includes({best.info.run_name!r})", within=120)
        await page.goto(f"{run_page}/system-metrics?{mode}")
        await page.wait_for(
            "document.body.innerText.includes('cpu_utilization_percentage') && "
            "document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length >= 3",
            within=120,
        )
        await _close_assistant(page)
        await _shot(page, "ui-system-metrics.png", tmp_path)
        top = await page.text()
        # The charts below the fold render when scrolled to (the memory ones among them).
        await page.evaluate(
            "[...document.querySelectorAll('*')].filter(e => e.innerText === "
            "'system_memory_usage_megabytes' || e.scrollHeight > e.clientHeight + 50)"
            ".forEach(e => e.scrollTop = e.scrollHeight)"
        )
        await page.wait_for(
            "document.body.innerText.includes('system_memory_usage_megabytes')", within=60
        )
        return top + await page.text()

    text = str(_browse(tmp_path / "profile", script))
    assert "System metrics" in text
    for name in ("cpu_utilization_percentage", "system_memory_usage_megabytes"):
        assert name in text
    system = [k for k in best.data.metrics if k.startswith("system/")]
    assert f"System metrics\n({len(system)})" in text
    assert best.info.run_name in text


def test_sweep_description_links_trials_and_report(
    served: tuple[UiServer, MlflowClient, str, Path], tmp_path: Path
) -> None:
    server, client, parent, _ = served
    experiment = client.get_run(parent).info.experiment_id

    async def script(page: Page) -> list[str]:
        await page.goto(f"{server.base_url}/#/experiments/{experiment}/runs/{parent}")
        await page.wait_for("document.body.innerText.includes('open the trials view')", within=120)
        links = await page.evaluate("[...document.querySelectorAll('a')].map(a => a.href)")
        return [str(link) for link in links]

    links = _browse(tmp_path / "profile", script)
    assert isinstance(links, list)
    assert server.url in links
    report = f"{server.base_url}/#/experiments/{experiment}/runs/{parent}/artifactPath/report/"
    assert f"{report}report.html" in links
    files = {a.path for a in client.list_artifacts(parent, "report")}
    assert "report/report.html" in files
