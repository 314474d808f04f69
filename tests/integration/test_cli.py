"""The command line's import discipline: `validate`, `report` and `export` never import Ray.

Each command runs in-process (`spec_sweep.cli.main`) inside a fresh interpreter that has not
imported anything else, against a real MLflow store under the test's temp dir that holds a
sweep recorded through `tracking.Tracker`; afterwards `ray` must be missing from `sys.modules`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from spec_sweep.cli import main
    from spec_sweep.core.outcome import FailureMode
    from spec_sweep.core.config import baseline_config
    from spec_sweep.spec_load import load_spec
    from spec_sweep.store.tracker import Tracker

    sweep_file, uri, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    spec = load_spec(sweep_file)
    tracker = Tracker(uri, spec.experiment)
    parent, _ = tracker.start_sweep(spec, state_id="no-ray", simulate=True)
    config = baseline_config(spec)
    run = tracker.start_trial(parent, trial_id="t0000", config=config)
    tracker.finish_trial(
        run, failure_mode=FailureMode.NONE, metrics={"output_throughput": 80.5},
        reason="measured", elapsed_s=1.0,
    )
    seen = {}
    for argv in (
        ["validate", sweep_file],
        ["report", sweep_file, "--tracking-uri", uri, "-o", str(out / "report")],
        ["export", sweep_file, "--tracking-uri", uri, "-o", str(out / "trials.csv")],
        # An output nobody can write (/proc): one line, exit 2, as every usage error.
        ["report", sweep_file, "--tracking-uri", uri, "-o", "/proc/spec-sweep-report"],
        ["export", sweep_file, "--tracking-uri", uri, "-o", "/proc/spec-sweep.csv"],
    ):
        code = main(argv)
        name = argv[0] + (" unwritable" if argv[-1].startswith("/proc") else "")
        seen[name] = {"code": code, "ray": "ray" in sys.modules}
    print(json.dumps(seen))
    """
)


def test_validate_report_and_export_leave_ray_unimported(project_dir: Path) -> None:
    uri = f"sqlite:///{project_dir / 'store.db'}"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "sweeps/allreduce.yaml", uri, str(project_dir)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=project_dir,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "validate": {"code": 0, "ray": False},
        "report": {"code": 0, "ray": False},
        "export": {"code": 0, "ray": False},
        "report unwritable": {"code": 2, "ray": False},
        "export unwritable": {"code": 2, "ray": False},
    }
    assert "-o /proc/spec-sweep-report: cannot write there (" in done.stderr
    assert "-o /proc/spec-sweep.csv: cannot write there (" in done.stderr
    assert (project_dir / "report" / "report.html").is_file()
    assert (project_dir / "trials.csv").read_text().count("\n") == 2


@pytest.mark.parametrize("command", ["validate", "report", "export"])
def test_commands_import_no_ray_module_at_all(command: str) -> None:
    """Importing the handler's modules alone pulls in no Ray either."""
    modules = {
        "validate": ["spec_sweep.cli", "spec_sweep.spec_load"],
        "report": ["spec_sweep.cli", "spec_sweep.present.report", "spec_sweep.store.sweeps"],
        "export": ["spec_sweep.cli", "spec_sweep.store.replay", "spec_sweep.store.sweeps"],
    }[command]
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    code += "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
