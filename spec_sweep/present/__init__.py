"""What a person sees of a sweep: one view, rendered on the terminal, in the report and in MLflow.

- `sweep_view`: `SweepView`, built once from `core.history.History` and the verdict: the ranking,
  the best trial, the configuration to launch, failures, per-load answers and cost;
- `names`: configuration summaries, MLflow run names, values with their intervals;
- `live`: the live table while a sweep runs; `terminal`: the end-of-run summary (rich);
- `report`: the HTML report and its figures (Jinja2, matplotlib).

The MLflow UI's trials view sorts on the metric `History.rank_metrics` logs
(`store.ui_view`), so the terminal, the report and the UI agree on rank 1. Nothing here imports
Ray, Optuna (importances are `search.importance`'s) or MLflow.
"""
