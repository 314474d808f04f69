"""The simulated SGLang node: a real HTTP server process that behaves like the write-up's node.

This package owns ``python -m spec_sweep.sim``: a process launched like
``python -m sglang.launch_server`` that accepts SGLang's ``launch_server`` flags (checked against
the SGLang flag manifest), boots with SGLang's log lines in scaled time, fails with SGLang's,
PyTorch's, NCCL's and FlashInfer's real error texts and exit behaviour, and serves SGLang's HTTP
API with real-time token pacing from a performance model driven by a hardware profile (YAML data
in ``profiles/``). The public API here is the pure part (profiles and the model); the server
lives in :mod:`spec_sweep.sim.server`.
"""

from __future__ import annotations

from spec_sweep.sim.model import NodeConfig, NodePlan, SpecSettings, plan_node
from spec_sweep.sim.perf import PerfModel
from spec_sweep.sim.profiles import Profile, ProfileError, builtin_profiles, load_profile

__all__ = [
    "NodeConfig",
    "NodePlan",
    "PerfModel",
    "Profile",
    "ProfileError",
    "SpecSettings",
    "builtin_profiles",
    "load_profile",
    "plan_node",
]
