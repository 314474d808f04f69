"""`spec-sweep` / `python -m spec_sweep.run`: argument parsing, handlers, exit codes.

This module owns the command line (docs/design.md, "Command line"). It parses arguments, loads
the spec and chooses the trial backend at the edge (`node.backends.make_backend`: `--replay`,
else `--simulate`, else the node's server), runs one handler per subcommand and turns errors into
exit codes: 0 done (failed trials are results), 2 invalid spec or usage with nothing launched,
130 interrupted, 1 anything else. Errors print as one line; `--debug` adds the traceback. Heavy
libraries are imported only by the handlers that need them: only `run` imports Ray, so
`validate`, `report` and `export` start without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from spec_sweep.core.names import FIDELITY_DUMMY, FIDELITY_REAL, TAG_FIDELITY
from spec_sweep.errors import SpecError, SpecSweepError
from spec_sweep.spec import Scalar, SweepSpec, parse_value
from spec_sweep.spec_load import load_spec

if TYPE_CHECKING:
    from spec_sweep.core.outcome import TrialResult
    from spec_sweep.node.backends import TrialBackend

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_out = Console(soft_wrap=True, highlight=False)
_err = Console(stderr=True, soft_wrap=True, highlight=False)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")


def _add_backend(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--simulate",
        action="store_true",
        help="use the simulated node (node.sim_profile) instead of the real server",
    )
    p.add_argument(
        "--replay", metavar="FILE.csv", help="answer trials from a recorded table (implies sim)"
    )
    p.add_argument(
        "--replay-noise",
        type=float,
        default=0.0,
        metavar="SD",
        help="with --replay: seeded multiplicative noise on recorded metrics (e.g. 0.02)",
    )
    p.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI")
    _add_insecure(p)


def _add_insecure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-insecure-tracking",
        action="store_true",
        help="record to a plain-HTTP tracking server on another machine without credentials "
        "(refused otherwise: docs/running/security.md)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="spec-sweep",
        description="Find the fastest safe SGLang serving configuration on a GPU node.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run (or resume) a sweep")
    run.add_argument("sweep", metavar="SWEEP.yaml")
    _add_backend(run)
    run.add_argument("--fresh", action="store_true", help="start over; old state is moved aside")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and print the baseline and first proposals; launch nothing",
    )
    run.add_argument("--proposals", type=int, default=5, metavar="N", help="dry run: how many")
    run.add_argument("--trials", type=int, metavar="N", help="override budget.trials")
    run.add_argument("--address", metavar="ADDR", help="join an existing Ray cluster")
    run.add_argument("--state-dir", metavar="DIR", help="where sweep state is kept")
    _add_common(run)

    trial = sub.add_parser("trial", help="run one configuration through the real trial path")
    trial.add_argument("sweep", metavar="SWEEP.yaml")
    trial.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter value (repeatable); others take the baseline's values",
    )
    _add_backend(trial)
    trial.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where sweep state is kept: the trial is judged against that sweep's baseline",
    )
    trial.add_argument(
        "--dummy-weights",
        action="store_true",
        help="boot with random weights, nothing read (--load-format dummy): tells whether the "
        "configuration boots, its decode cycle and time to first token; not its acceptance, "
        "quality or speculative throughput",
    )
    trial.add_argument("--json", action="store_true", help="print one JSON object")
    _add_common(trial)

    validate = sub.add_parser("validate", help="check a sweep spec and exit")
    validate.add_argument("sweep", metavar="SWEEP.yaml")
    validate.add_argument(
        "--fix",
        action="store_true",
        help="rewrite the spec's renamed SGLang flags for the node's version, showing the diff",
    )
    validate.add_argument(
        "--sglang-version",
        metavar="V",
        help="with --fix: rewrite for this SGLang version instead of the node's",
    )
    _add_common(validate)

    manifest = sub.add_parser(
        "manifest", help="write the flag manifest of the SGLang installed here (JSON)"
    )
    manifest.add_argument(
        "--version",
        metavar="V",
        help="the SGLang version it must be (a bundled version is written without SGLang)",
    )
    manifest.add_argument(
        "--python",
        metavar="PYTHON",
        help="the interpreter whose SGLang is read (default: this one)",
    )
    manifest.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    _add_common(manifest)

    report = sub.add_parser("report", help="rebuild a sweep's report")
    report.add_argument("sweep", metavar="SWEEP.yaml")
    report.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI")
    _add_insecure(report)
    report.add_argument("-o", "--output", metavar="DIR", help="where to write the report")
    report.add_argument("--state-dir", metavar="DIR", help="where sweep state is kept")
    _add_common(report)

    export = sub.add_parser("export", help="write every trial as a replay table (CSV)")
    export.add_argument("sweep", metavar="SWEEP.yaml")
    export.add_argument(
        "-o", "--output", metavar="FILE.csv", required=True, help="the table to write"
    )
    export.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI")
    _add_insecure(export)
    export.add_argument("--state-dir", metavar="DIR", help="where sweep state is kept")
    export.add_argument(
        "--repeats",
        action="store_true",
        help="add the confirmation boots as rows after the search trials (the table's noise; "
        "a replay reads each configuration's first row)",
    )
    _add_common(export)

    ui = sub.add_parser("ui", help="MLflow UI on 127.0.0.1, opening on the latest sweep's trials")
    ui.add_argument(
        "sweep", metavar="SWEEP.yaml", nargs="?", help="show this sweep (default: the latest)"
    )
    ui.add_argument("--port", type=_port, default=5000, help="the UI's port on 127.0.0.1")
    ui.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI")
    ui.add_argument("--open", action="store_true", help="open the trials view in a browser")
    _add_common(ui)

    docs = sub.add_parser(
        "docs", help="write the docs' generated reference pages and the package's JSON Schema"
    )
    docs.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming each generated file that differs from the code",
    )
    docs.add_argument(
        "--out", metavar="DIR", default="docs/reference", help="where the reference pages go"
    )
    docs.add_argument(
        "--schema-file",
        metavar="FILE",
        default="spec_sweep/data/sweep.schema.json",
        help="where the package's copy of the JSON Schema goes",
    )
    _add_common(docs)

    schema = sub.add_parser("schema", help="print the JSON Schema of a sweep spec (for editors)")
    schema.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead")
    _add_common(schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    handler = _HANDLERS[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        hint = ": run the same command again to resume" if args.command == "run" else ""
        _err.print(f"interrupted{hint}")
        return EXIT_INTERRUPTED
    except SpecError as exc:
        _fail(args, exc)
        return EXIT_USAGE
    except SpecSweepError as exc:
        _fail(args, exc)
        return EXIT_ERROR
    except Exception as exc:
        _fail(args, exc, unexpected=True)
        return EXIT_ERROR


@contextlib.contextmanager
def _output(path: Path) -> Iterator[None]:
    """An `-o` path that cannot be written is the user's to fix: one line, exit 2."""
    try:
        yield
    except OSError as exc:
        raise SpecError(
            f"-o {path}: cannot write there ({exc.strerror or exc}): use a path you can write"
        ) from exc


def _port(text: str) -> int:
    """argparse type of a TCP port (1-65535)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: use a number 1-65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port}: use a number 1-65535")
    return port


def _fail(args: argparse.Namespace, exc: BaseException, *, unexpected: bool = False) -> None:
    if getattr(args, "debug", False):
        traceback.print_exception(exc, file=sys.stderr)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if unexpected:
        text = f"{type(exc).__name__}: {text}"
        if not getattr(args, "debug", False):
            text += " (run with --debug for the traceback)"
    print(f"spec-sweep: error: {text}", file=sys.stderr)


def _load(args: argparse.Namespace) -> SweepSpec:
    # The node's SGLang decides `node.sglang_version: auto` and is checked against a written
    # one; the simulated node and a replay have none to ask, and on a joined Ray cluster every
    # node is asked by the driver (`orchestrate.versions`).
    simulated = bool(getattr(args, "simulate", False) or getattr(args, "replay", None))
    joined = bool(getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"))
    detect = not simulated and not (args.command == "run" and joined)
    state_dir = getattr(args, "state_dir", None)
    # report, export and ui launch nothing: the flags were checked when the sweep ran (maybe
    # against a version found on nodes this machine cannot ask), and a written version stays
    reading = args.command in ("report", "export", "ui")
    spec = load_spec(
        args.sweep,
        detect=detect,
        state_dir=state_dir,
        defer_flags=reading or not detect,
        refuse_mismatch=not reading,
    )
    trials = getattr(args, "trials", None)
    if trials is not None:
        if trials <= 0:
            raise SpecError(f"--trials: {trials} is invalid: use a positive number of trials")
        budget = spec.budget.model_copy(update={"trials": trials})
        spec = spec.model_copy(update={"budget": budget})
    replay = getattr(args, "replay", None)
    noise = getattr(args, "replay_noise", 0.0) or 0.0
    if noise < 0 or noise >= 1:
        raise SpecError(f"--replay-noise: {noise} is invalid: use a relative sd in [0, 1)")
    if noise and not replay:
        raise SpecError("--replay-noise: only applies with --replay FILE.csv")
    return spec


def _cmd_validate(args: argparse.Namespace) -> int:
    if args.fix:
        _fix(args)
    elif args.sglang_version:
        raise SpecError("--sglang-version: only applies with --fix")
    spec = _load(args)
    from spec_sweep.store.paths import check_tracking_uri

    check_tracking_uri(spec)
    n_params = len(spec.params)
    _out.print(
        f"{Path(args.sweep)}: ok: sweep {spec.name!r}, {n_params} parameters, "
        f"{spec.budget.trials} trials, objective {spec.objective.mode} {spec.objective.metric}"
    )
    _print_version(spec)
    return EXIT_OK


def _print_version(spec: SweepSpec) -> None:
    """Which SGLang version the spec was checked against and why (and a version newer than
    any known one, once)."""
    from spec_sweep.core.versions import newer_than_known, version_line

    _out.print(f"flags checked against {version_line(spec.node)}", markup=False)
    notice = newer_than_known(spec.node.sglang_version)
    if notice:
        _out.print(f"note: {notice}", markup=False)


def _fix(args: argparse.Namespace) -> None:
    """`validate --fix`: rewrite the spec for the node's (or the given) SGLang version."""
    from spec_sweep.spec_load import fix_spec

    fixed = fix_spec(args.sweep, detect=args.sglang_version is None, version=args.sglang_version)
    if fixed.after != fixed.before:
        print(fixed.diff(), end="")
        with _output(fixed.path):
            fixed.path.write_text(fixed.after, encoding="utf-8")
        _out.print(
            f"{fixed.path}: rewritten for SGLang {fixed.version}: " + "; ".join(fixed.changes),
            markup=False,
        )
    else:
        _out.print(f"{fixed.path}: nothing to rewrite for SGLang {fixed.version}", markup=False)
    for line in fixed.left:
        _out.print(f"left as is: {line}", markup=False)


def _cmd_manifest(args: argparse.Namespace) -> int:
    """Write the flag manifest of the SGLang installed here (or a bundled one)."""
    from spec_sweep.node.sglang_env import write_manifest

    out = Path(args.output) if args.output else None
    with _output(out or Path("-")):
        text = write_manifest(args.version, python=args.python, out=out)
    if out is None:
        sys.stdout.write(text)
    else:
        _err.print(f"wrote {out}", markup=False)
    return EXIT_OK


def _backend(spec: SweepSpec, args: argparse.Namespace) -> TrialBackend:
    """The trial backend the options ask for (chosen here, once)."""
    from spec_sweep.node.backends import make_backend

    simulate = bool(args.simulate or args.replay)
    # Simulator settings reach servers on every node, not only those that inherit this process.
    sim_env = {k: v for k, v in os.environ.items() if k.startswith("SPEC_SWEEP_SIM_")}
    return make_backend(
        spec,
        simulate=simulate,
        replay=args.replay,
        replay_noise=args.replay_noise,
        sim_env=sim_env if simulate else None,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    spec = _load(args)
    if args.dry_run:
        return _dry_run(spec, args)
    backend = _backend(spec, args)
    from spec_sweep.orchestrate.driver import sweep  # heavy: Ray, MLflow
    from spec_sweep.present.live import SweepProgress
    from spec_sweep.present.terminal import print_summary

    progress = SweepProgress()
    with progress:
        outcome = sweep(
            spec,
            backend=backend,
            fresh=args.fresh,
            state_dir=args.state_dir,
            tracking_uri=args.tracking_uri,
            allow_insecure_tracking=args.allow_insecure_tracking,
            address=args.address,
            progress=progress,
        )
    print_summary(progress.console, outcome)
    if outcome.environment:
        _err.print(
            f"error: the node cannot start a server: {outcome.environment}; fix the node and "
            "run the same command again to resume"
        )
        return EXIT_ERROR
    return EXIT_INTERRUPTED if outcome.interrupted else EXIT_OK


def _dry_run(spec: SweepSpec, args: argparse.Namespace) -> int:
    from spec_sweep.search.sampling import propose

    backend = _backend(spec, args)
    simulate = backend.simulated
    searcher = spec.searcher
    _out.print(
        f"sweep {spec.name}: {spec.budget.trials} trials, {searcher.kind} search "
        f"(seed {searcher.seed}), objective: {spec.objective.mode} {spec.objective.metric}"
        + (f", simulated node {spec.node.sim_profile}" if simulate else "")
    )
    for i, (config, repeat) in enumerate(propose(spec, max(1, args.proposals))):
        title = "baseline (trial 0)" if i == 0 else f"proposal {i}"
        if repeat:
            title += " (repeats an earlier configuration: answered from the record, not launched)"
        _out.print(f"\n{title}: {json.dumps(config)}")
        _out.print(f"  {backend.command(config).shell()}")
    _out.print(
        "\n(each trial adds --host 127.0.0.1 --port <a free port in 20000-29999 whose derived "
        "ports are free too>; nothing was launched)"
    )
    return EXIT_OK


def _parse_sets(spec: SweepSpec, sets: Sequence[str]) -> dict[str, Scalar]:
    values: dict[str, Scalar] = {}
    for item in sets:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set {item!r}: write KEY=VALUE, e.g. --set mem-fraction-static=0.85")
        if key in _ADAPTIVE_KEYS and key not in spec.params:
            values[key] = _adaptive_set(spec, key, text)
            continue
        if key not in spec.params:
            raise SpecError(
                f"--set {key}: not a parameter of the search space: use one of "
                f"{', '.join(sorted(spec.params))}"
            )
        value = parse_value(text)
        if not spec.params[key].contains(value):
            raise SpecError(
                f"--set {key}: {value!r} is not a value this parameter can take: use "
                f"{spec.params[key].domain()}"
            )
        values[key] = value
    return values


_ADAPTIVE_KEYS = ("speculative-adaptive", "speculative-adaptive-config")


def _adaptive_set(spec: SweepSpec, key: str, text: str) -> Scalar:
    """`--set speculative-adaptive=true` and `--set speculative-adaptive-config=FILE.json` (a
    file, as SGLang takes it; its contents become the configuration's), where the space does
    not search them."""
    from spec_sweep.core.adaptive_rules import adaptive_version, parse_config_text

    if key == "speculative-adaptive":
        value = parse_value(text)
        if not isinstance(value, bool):
            raise SpecError(f"--set {key}: {text!r}: write true or false")
        return value
    path = Path(text).expanduser()
    try:
        contents = path.read_text().strip()
    except OSError as exc:
        raise SpecError(f"--set {key}: {text!r}: give the adaptive config file ({exc})") from exc
    rules = adaptive_version(spec.node.sglang_version)
    if rules is None or not rules.per_batch_size:
        raise SpecError(f"--set {key}: SGLang {spec.node.sglang_version} has no per-batch slots")
    try:
        parse_config_text(contents, rules)
    except ValueError as exc:
        raise SpecError(f"--set {key}: {path}: {exc}") from exc
    return contents


def _cmd_trial(args: argparse.Namespace) -> int:
    """Run one configuration through the backend and print the outcome.

    Returns 0 whenever the trial reached a classified outcome, failed or not.
    """
    spec = _load(args)
    overrides = _parse_sets(spec, args.sets)
    from spec_sweep.core.config import resolve_config
    from spec_sweep.store.paths import check_tracking_uri, manual_trial_dir, sweep_state_dir

    # spec_sweep's own adaptive keys need not be parameters of the space (core.adaptive).
    own = [k for k in _ADAPTIVE_KEYS if k in overrides and k not in spec.params]
    derived = {k: overrides.pop(k) for k in own}
    try:
        config = resolve_config(spec, {**spec.baseline, **overrides}, what="--set values")
    except ValueError as exc:
        raise SpecError(f"--set: {exc}") from exc
    if derived:
        from spec_sweep.core.config import normalize_config

        config = normalize_config(spec, {**config, **derived})
    fidelity = FIDELITY_REAL
    if args.dummy_weights:
        spec = _dummy_weights_spec(spec, config, args)
        fidelity = FIDELITY_DUMMY
    check_tracking_uri(spec, args.tracking_uri)  # a store it cannot record to: say so first
    uri = None
    if args.tracking_uri or spec.tracking.uri:  # a server that refuses us: say so first too
        from spec_sweep.store.paths import resolve_tracking_uri

        allow = args.allow_insecure_tracking
        uri = resolve_tracking_uri(spec, args.tracking_uri, allow_insecure=allow)
    backend = _backend(spec, args)
    trial_dir = manual_trial_dir(spec, args.state_dir)
    # judged against the baseline of the sweep of this state folder, as its own trials are
    state = sweep_state_dir(spec, args.state_dir)
    result = backend.run(config, trial_dir=trial_dir, trial_id=trial_dir.name, state_dir=state)
    quality = _quality_record(trial_dir)
    if args.dummy_weights:
        from spec_sweep.node.fidelity import QUALITY_NOT_JUDGED, dummy_result

        result = dummy_result(spec, config, result)
        quality = {
            "judged": False,
            "passed": None,
            "quality_class": None,
            "deficit": None,
            "reason": QUALITY_NOT_JUDGED,
            "reference": None,
        }
    if uri is not None:
        _log_manual(
            spec,
            result,
            tracking_uri=uri,
            allow_insecure=args.allow_insecure_tracking,
            fidelity=fidelity,
        )
    if args.json:
        print(
            json.dumps(
                {
                    "failure_mode": result.failure_mode.value,
                    "reason": result.reason,
                    "metrics": result.metrics,
                    "command": list(result.command),
                    "log_excerpt": result.log_excerpt,
                    "elapsed_s": result.elapsed_s,
                    "trial_dir": str(trial_dir),
                    "quality": quality,
                    "fidelity": fidelity,
                }
            )
        )
        return EXIT_OK
    _print_result(result)
    _print_quality(quality)
    if args.dummy_weights:
        from spec_sweep.node.fidelity import DUMMY_TELLS

        _out.print(DUMMY_TELLS, markup=False)
    return EXIT_OK


def _dummy_weights_spec(
    spec: SweepSpec, config: Mapping[str, Any], args: argparse.Namespace
) -> SweepSpec:
    """`trial --dummy-weights`: the spec whose boot of `config` loads no weights, refused
    (nothing launched) where a dummy boot would mean nothing or could enter a sweep's record."""
    from spec_sweep.node.fidelity import dummy_boot_spec
    from spec_sweep.store.paths import sweep_state_dir

    if args.state_dir:
        raise SpecError(
            f"--dummy-weights with --state-dir {args.state_dir}: a dummy-weight boot is never "
            "judged against or recorded into a sweep's state (its acceptance and outputs mean "
            "nothing): drop --state-dir"
        )
    if args.replay:
        raise SpecError(
            f"--dummy-weights with --replay {args.replay}: a replayed trial boots nothing, so "
            "there are no weights to leave out: drop one of the two"
        )
    # the manifest the spec was checked against (bundled, or built for the node)
    return dummy_boot_spec(spec, config, manifest_dir=sweep_state_dir(spec, None) / "manifests")


def _quality_record(trial_dir: Path) -> dict[str, Any] | None:
    """What the quality gate said of a trial (None: the spec has no gate, or it did not run):
    whether it was judged, the verdict, its class and deficit, its reason, and the reference it
    was judged against."""
    from spec_sweep.node.quality import QUALITY_NAME

    try:
        data = json.loads((trial_dir / QUALITY_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    keys = ("judged", "passed", "quality_class", "deficit", "reason", "reference")
    return {key: data.get(key) for key in keys}


def _print_quality(record: dict[str, Any] | None) -> None:
    if record is None:
        return
    if record["judged"]:
        verdict = "passed" if record["passed"] else "failed"
        _out.print(
            f"quality: judged against {record['reference']}: {verdict} ({record['reason']})",
            markup=False,
        )
    elif str(record["reason"]).startswith("not judged"):  # says so itself (dummy weights)
        _out.print(f"quality: {record['reason']}", markup=False)
    else:
        _out.print(f"quality: not judged ({record['reason']})", markup=False)


def _log_manual(
    spec: SweepSpec,
    result: TrialResult,
    *,
    tracking_uri: str | None,
    allow_insecure: bool,
    fidelity: str,
) -> None:
    """Record a `spec-sweep trial` run in the sweep's experiment (no parent run), tagged with
    the weights it booted with (`TAG_FIDELITY`)."""
    from spec_sweep.core.config import baseline_config
    from spec_sweep.node.command import ServerCommand
    from spec_sweep.present.names import run_name
    from spec_sweep.store.sweeps import log_manual_trial

    kind = "manual" if fidelity == FIDELITY_REAL else f"manual {fidelity}-weights"
    log_manual_trial(
        spec,
        result,
        tracking_uri=tracking_uri,
        run_name=f"{kind} {run_name(result.trial_id, result.config, baseline_config(spec))}",
        command=ServerCommand(result.command, result.env).shell(),
        allow_insecure_tracking=allow_insecure,
        tags={TAG_FIDELITY: fidelity},
    )


def _print_result(result: TrialResult) -> None:
    from rich.table import Table

    style = "green" if result.ok else "red"
    _out.print(f"[{style}]failure_mode: {result.failure_mode.value}[/] ({result.reason})")
    _out.print(f"config: {json.dumps(result.config)}")
    if result.metrics:
        table = Table("metric", "value", title="metrics")
        for name, value in sorted(result.metrics.items()):
            table.add_row(name, f"{value:.4g}")
        _out.print(table)
    if result.prompt_source:
        _out.print(f"prompts: {result.prompt_source}")
    if result.log_excerpt and not result.ok:
        _out.print("log excerpt:")
        _out.print(result.log_excerpt, markup=False)
    _out.print(f"server log: {result.log_path}  ({result.elapsed_s:.1f} s)")


def _cmd_report(args: argparse.Namespace) -> int:
    """Rebuild the report and log it to the sweep's parent run."""
    spec = _load(args)
    from spec_sweep.present.report import publish_report
    from spec_sweep.store.sweeps import budget_in_force, find_sweep

    tracker, parent, state_path = find_sweep(
        spec,
        tracking_uri=args.tracking_uri,
        state_dir=args.state_dir,
        allow_insecure_tracking=args.allow_insecure_tracking,
    )
    out_dir = Path(args.output) if args.output else state_path / "report"
    with _output(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    # the budget the sweep ran with (a `--trials` override), not the file's
    spec = budget_in_force(spec, tracker, parent)
    result = publish_report(spec, tracker, parent, out_dir=out_dir)
    best = result.best_trial_id or "none"
    which = "recommended" if result.recommended else "best"
    print(
        f"report of {spec.name}: {result.html.resolve()} ({len(result.figures)} figures, "
        f"{which} trial {best}); logged to MLflow run {parent} under 'report/'"
    )
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    """Write every finished trial as a row of a replay table."""
    spec = _load(args)
    from spec_sweep.core.history import History, is_dummy
    from spec_sweep.store.replay import export_columns, export_rows, write_csv
    from spec_sweep.store.sweeps import find_sweep

    tracker, parent, _ = find_sweep(
        spec,
        tracking_uri=args.tracking_uri,
        state_dir=args.state_dir,
        allow_insecure_tracking=args.allow_insecure_tracking,
    )
    # One row per searched configuration, then (--repeats) one per confirmation boot: a replay
    # reads a configuration's first row, so the repeats only add the boots' spread. A boot with
    # dummy weights (budget.fidelity.mode: two) measured no throughput: never a row.
    history = History(spec, tracker.trials(parent))
    repeats = history.repeat_boots if args.repeats else []
    real = [r for r in history.done if not is_dummy(r)]
    rows = export_rows(spec, [*real, *repeats])
    path = Path(args.output)
    with _output(path):
        count = write_csv(path, export_columns(spec), rows)
    extra = f" and {len(repeats)} repeat boots" if args.repeats else ""
    print(
        f"wrote {count - len(repeats)} trials{extra} of {spec.name} to {path} "
        f"(replay with --replay {path})"
    )
    return EXIT_OK


def _cmd_ui(args: argparse.Namespace) -> int:
    if args.sweep is not None:
        spec = _load(args)
        args.experiment = spec.experiment
        args.tracking_uri = args.tracking_uri or spec.tracking.uri
    from spec_sweep.ui import ui_command

    return ui_command(args)


def _cmd_docs(args: argparse.Namespace) -> int:
    """Write (or with --check, compare) the files generated from the code: the reference
    pages of the docs site and the JSON Schema the package ships."""
    from spec_sweep.present.reference import reference_pages
    from spec_sweep.present.schema import schema_text

    out, schema_file = Path(args.out), Path(args.schema_file)
    for option, folder in (("--out", out.parent), ("--schema-file", schema_file.parent)):
        if not folder.is_dir():
            raise SpecError(
                f"{option}: {folder} is not a folder here: run spec-sweep docs in the "
                f"repository's root, or pass {option}"
            )
    wanted = {out / name: text for name, text in reference_pages(_parser()).items()}
    wanted[schema_file] = schema_text()
    stale = [
        path
        for path, text in wanted.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    if args.check:
        if stale:
            raise SpecSweepError(
                f"{', '.join(map(str, stale))}: not what the code generates: run spec-sweep "
                "docs in the repository's root and commit the result"
            )
        print(f"{len(wanted)} generated files match the code")
        return EXIT_OK
    for path in stale:
        with _output(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted[path], encoding="utf-8")
    print(f"wrote {len(stale)} of {len(wanted)} generated files (the others were up to date)")
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    """Print (or write with -o) the JSON Schema of a sweep spec."""
    from spec_sweep.present.schema import schema_text

    if args.output is None:
        sys.stdout.write(schema_text())
        return EXIT_OK
    path = Path(args.output)
    with _output(path):
        path.write_text(schema_text(), encoding="utf-8")
    print(f"wrote the sweep spec's JSON Schema to {path}")
    return EXIT_OK


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "docs": _cmd_docs,
    "export": _cmd_export,
    "manifest": _cmd_manifest,
    "report": _cmd_report,
    "run": _cmd_run,
    "schema": _cmd_schema,
    "trial": _cmd_trial,
    "ui": _cmd_ui,
    "validate": _cmd_validate,
}


if __name__ == "__main__":
    sys.exit(main())
