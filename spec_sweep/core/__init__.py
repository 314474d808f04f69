"""The domain core: one record of a sweep, and one set of answers about it.

Standard library and the spec only (an import-linter contract forbids Ray, Optuna, MLflow,
rich, httpx, matplotlib and Jinja2 here, and a test imports every module in a Python that has
none of them):

- `names`: every MLflow tag, derived metric and Ray Tune result key spec_sweep writes;
- `outcome`: the failure modes, a trial's `TrialResult` (result.json) and `TrialReport` (Tune);
- `record`: `TrialRecord`, a trial as the store holds it, and its MLflow tags both ways;
- `config`: configuration identity and equality, `when:` order, the baseline's configuration;
- `secrets`: what is never shown in clear; `ids`: trial ids of search trials and repeats;
- `objective`: `Objective`, what "better" means (value, direction, speed-up, constraints);
- `history`: `History`, a sweep's records and the one ranking rule;
- `confirm` and `verdict`: the confirmation boots to run next, and what they decided;
- `loads` and `cost`: the winner per concurrency level, the crossover, and what it all cost;
- `adaptive_rules`, `adaptive` and `adaptive_judge`: one configuration for every load (SGLang's
  adaptive rules, the adaptive configuration built from per-level results, its boots and verdict).

This package imports nothing on its own.
"""
