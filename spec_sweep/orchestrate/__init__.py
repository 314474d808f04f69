"""Running a sweep on a Ray cluster: the only package that imports Ray.

- `driver`: `sweep()`, from the state folder and the cluster to the end of a run;
- `phases`: `SweepRun`, the run's phases (resume, search, confirm, finish) over one history;
- `tune`: one batch of trials through Ray Tune, and its adapters;
- `trainable`: one trial inside a Ray worker, recorded without losing it;
- `cluster`: starting, joining and checking the Ray cluster;
- `leftovers`: what a killed driver left behind; `sweep_outcome`: how a run ended.

This package imports nothing on its own, so `spec_sweep.orchestrate.driver` is imported (with
Ray) only by `spec-sweep run`.
"""
