"""The SGLang version of every node of the Ray cluster, asked before the first trial.

This module owns the cluster-wide check of docs/concepts/sglang-versions.md: one Ray task pinned
to each node that can hold a trial asks that node's launch environment which SGLang
`node.launch` starts (`node.sglang_env.find_sglang`, in the environment a trial's server gets
there). Nodes that disagree, or a node without SGLang, stop the sweep naming the nodes; a
written `node.sglang_version` the nodes do not run stops it naming both; `auto` takes the
nodes' version, and a version without a bundled manifest has its manifest read on a node
(its own parser) into the sweep's state folder. A custom launch prefix cannot be asked before
it boots: the baseline's server reports its version instead (`node.trial`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from spec_sweep.core.versions import newer_than_known
from spec_sweep.errors import SpecError, SpecSweepError
from spec_sweep.manifest import is_bundled
from spec_sweep.node.sglang_env import NodeSGLang, build_manifest, find_sglang
from spec_sweep.orchestrate.cluster import NODE_RESOURCE
from spec_sweep.spec import NodeSpec, SweepSpec
from spec_sweep.spec_load import resolve_node_version

__all__ = ["check_node_versions", "trial_nodes"]

#: Seconds the driver waits for every node's answer (an interpreter start and a metadata read).
_PROBE_TIMEOUT_S = 180.0
#: Seconds for reading SGLang's parser on a node (it imports SGLang's server arguments).
_MANIFEST_TIMEOUT_S = 900.0


def _ask(node: NodeSpec) -> NodeSGLang:
    return find_sglang(node)


def _read_manifest(node: NodeSpec, version: str) -> str:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="spec-sweep-manifest-") as folder:
        out = build_manifest(node, Path(folder) / f"sglang-{version}.json", version=version)
        return out.read_text(encoding="utf-8")


def trial_nodes(spec: SweepSpec) -> list[tuple[str, str]]:
    """(node id, address) of every live node that can hold a trial."""
    need = float(spec.node.gpus)
    return [
        (str(n["NodeID"]), str(n["NodeManagerAddress"]))
        for n in ray.nodes()  # type: ignore[no-untyped-call]
        if n.get("Alive")
        and n["Resources"].get(NODE_RESOURCE, 0) >= 1
        and n["Resources"].get("GPU", 0.0) >= need
    ]


def _get(refs: Any, *, timeout_s: float) -> Any:
    """`ray.get`, with a task's own error (a `SpecError` naming the fix) raised as itself."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, SpecSweepError):
            raise cause from None
        raise
    except ray.exceptions.GetTimeoutError as exc:
        raise SpecSweepError(
            f"a node did not say which SGLang it runs within {timeout_s:.0f} s: check the "
            "nodes' health (ray status)"
        ) from exc


def _pinned(node_id: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def check_node_versions(
    spec: SweepSpec, *, state_dir: Path, state_root: str | Path | None
) -> tuple[SweepSpec, list[str]]:
    """Ask every trial node which SGLang it launches; the spec resolved for it.

    Args:
        spec: The loaded spec.
        state_dir: The sweep's state folder (a manifest read on a node is kept under
            `manifests/`).
        state_root: The root of the state folders (`--state-dir`), for the spec's checks.

    Returns:
        The spec for the nodes' version, and the notes to show once (a version newer than
        any known one).

    Raises:
        SpecError: nodes that disagree, a node without SGLang, or a written version the nodes
            do not run (one line, naming the nodes and versions).
    """
    nodes = trial_nodes(spec)
    if not nodes:
        return spec, []
    ask = ray.remote(num_cpus=0)(_ask)
    refs = [ask.options(scheduling_strategy=_pinned(nid)).remote(spec.node) for nid, _ in nodes]
    answers: list[NodeSGLang] = _get(refs, timeout_s=_PROBE_TIMEOUT_S)
    if not all(a.askable for a in answers):
        return spec, []  # a custom prefix: the server reports its version on its first boot
    found = {f"{addr} ({nid[:8]})": a for (nid, addr), a in zip(nodes, answers, strict=True)}
    missing = [name for name, a in found.items() if a.version is None]
    if missing:
        where = answers[0].where
        raise SpecError(
            f"node.launch: no SGLang is installed where {where} runs on node(s) "
            f"{', '.join(missing)}: install it there (the same version on every node), or set "
            "node.env / node.launch to the environment that has it"
        )
    versions = sorted({str(a.version) for a in answers})
    if len(versions) > 1:
        listed = "; ".join(f"{name}: {a.version}" for name, a in sorted(found.items()))
        raise SpecError(
            f"the nodes of the Ray cluster run different SGLang versions ({listed}): install "
            "one version on every node (a sweep compares trials across nodes)"
        )
    version = versions[0]
    folder = state_dir / "manifests"
    target = folder / f"sglang-{version}.json"
    if not is_bundled(version) and not target.is_file():
        read = ray.remote(num_cpus=0)(_read_manifest)
        ref = read.options(scheduling_strategy=_pinned(nodes[0][0])).remote(spec.node, version)
        text = _get(ref, timeout_s=_MANIFEST_TIMEOUT_S)
        folder.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    notice = newer_than_known(version)
    notes = [notice] if notice else []
    if version == spec.node.sglang_version and spec.node.sglang_version_source != "auto":
        return spec, notes  # already checked against this version
    return resolve_node_version(spec, version, state_dir=state_root), notes
