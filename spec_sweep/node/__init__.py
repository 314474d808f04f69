"""One trial on one node: what it launches, how it is measured and how it ended.

- `backends`: `TrialBackend` and its three answers (the node's own server, the simulated node,
  a recorded table), chosen once by `make_backend`;
- `command`: the server command line and what a trial launches (`launch_for`);
- `trial`: `run_trial`, one configuration end to end (GPU guard, launch, readiness, benchmark,
  teardown, classify);
- `server`, `procs`, `ports`, `gpu`: the server process, process groups, ports, NVML;
- `client`, `prompts`, `metrics`, `goodput`, `quality`, `divergence`: the benchmark, its
  prompts, its metrics, the SLA bisection, the output-quality gate and its rule;
- `classify` and `log_patterns`: how a trial ended, from real log texts.

No Ray, no Optuna, no MLflow. This package imports nothing on its own.
"""
