"""The search: which configuration runs next, and the sweep that runs them.

- `objective`: the objective value, speed-up over the baseline, constraints and the best trial
  of a list of records (pure; the report and the live display use it too);
- `sampling` and `tpe`: the Optuna samplers, the screening design and the local steps (`tpe`
  holds every use of Optuna's private API, pinned by a contract test);
- `tree_rules`, `spec_model` and `spec_guide`: the searcher's knowledge of speculative decoding
  (SGLang's EAGLE tree rules before launch, a fitted performance model of EAGLE trees, and the
  speculative branch's turns and share of the trials);
- `searcher`: `SweepSearcher`, the Optuna side of the sweep (ask and tell, no Ray);
- `cluster`: starting, joining and checking the Ray cluster;
- `trainable`: what runs one trial inside a Ray worker and records it;
- `driver`: `sweep()`, the Ray Tune run from start (or resume) to the report.

This package imports nothing on its own, so `spec_sweep.search.objective` stays free of Ray.
"""
