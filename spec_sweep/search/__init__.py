"""The search: which configuration runs next (Optuna, and no Ray).

- `searcher`: `SweepSearcher`, the Optuna side of the sweep (ask and tell, one way to learn);
- `sampling` and `tpe`: the Optuna samplers, the screening design and the local steps (`tpe`
  holds every use of Optuna's private API, pinned by a contract test);
- `space`: the spec's parameters as an Optuna define-by-run function;
- `tree_rules`, `spec_model` and `spec_guide`: the searcher's knowledge of speculative decoding
  (SGLang's EAGLE tree rules before launch, a fitted performance model of EAGLE trees, and the
  speculative branch's turns and share of the trials);
- `importance`: Optuna's parameter importances, for the report.

The objective, the ranking and the confirmation plan it relies on are `spec_sweep.core`'s. This
package imports nothing on its own.
"""
