"""Where a sweep is kept: the MLflow store, the state folder and the replay table.

- `tracker`: `Tracker`, the MLflow client (parent run, one child run per trial attempt, reading
  them back); `sweeps`: finding a sweep in a store (`spec-sweep ui`, `report`, `export`,
  `trial`); `ui_view`: the MLflow UI's trials view of a sweep (as data);
- `state`: the sweep's state folder (identity, spec fingerprint, lock);
- `replay`: the replay table, both ways; `paths`: the default places on disk.

MLflow is imported here only (`tracker`, `sweeps`). This package imports nothing on its own.
"""
