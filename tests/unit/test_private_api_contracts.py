"""Contract tests for the private APIs of our dependencies, pinned to the versions checked.

Three modules are allowed private uses, one per dependency: `spec_sweep.search.tpe` (Optuna),
`spec_sweep.orchestrate.cluster` (Ray) and `spec_sweep.store.mlflow_private` (MLflow's
system-metrics monitor and its UI's shared-view tag, pinned by tests/unit/test_ui_view.py).
Each test here checks one use against the installed library; an upgrade that changes any of
them fails here, naming what to re-check, before it can fail a sweep.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import optuna
import pytest
import ray

from spec_sweep.orchestrate import cluster
from spec_sweep.search import tpe

ROOT = Path(__file__).resolve().parents[2] / "spec_sweep"


def test_optuna_version_is_the_one_checked() -> None:
    assert optuna.__version__ in tpe.OPTUNA_VERSIONS, (
        f"Optuna {optuna.__version__} installed, spec_sweep/search/tpe.py was checked against "
        f"{tpe.OPTUNA_VERSIONS}: re-check its private uses, then add it to OPTUNA_VERSIONS and "
        "raise pyproject.toml's bound"
    )


def test_the_install_pins_admit_only_checked_versions() -> None:
    # A fresh machine installs the newest release the pins admit: it must be one checked here
    # (a new Optuna on the index once failed a fresh install's suite while ours stayed green).
    text = (ROOT.parent / "pyproject.toml").read_text()
    assert '"optuna>=5.0,<5.2"' in text
    assert max(tpe.OPTUNA_VERSIONS) < "5.2"
    assert f'"ray[tune]=={cluster.RAY_VERSION}"' in text


def test_tpe_acquisition_hook_has_the_signature_we_override() -> None:
    from optuna.samplers import TPESampler

    hook = TPESampler._compute_acquisition_func
    assert list(inspect.signature(hook).parameters) == [
        "self",
        "samples",
        "mpe_below",
        "mpe_above",
    ]
    ours = tpe.FailureAwareTPESampler._compute_acquisition_func
    assert list(inspect.signature(ours).parameters) == list(inspect.signature(hook).parameters)


def test_parzen_estimator_is_where_we_import_it_from() -> None:
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator

    assert inspect.isclass(_ParzenEstimator)


def test_study_get_trials_takes_the_arguments_tpe_passes() -> None:
    params = inspect.signature(optuna.Study._get_trials).parameters
    assert {"deepcopy", "states", "use_cache"} <= set(params)
    # TPE reads the history through `study._get_trials(...)`, which our view answers.
    source = inspect.getsource(optuna.samplers.TPESampler)
    assert "_get_trials(" in source


def test_ray_version_is_the_one_checked() -> None:
    assert ray.__version__ == cluster.RAY_VERSION, (
        f"Ray {ray.__version__} installed, spec_sweep/orchestrate/cluster.py was checked against "
        f"{cluster.RAY_VERSION}: re-check its private uses, then update RAY_VERSION"
    )


def test_ray_token_auth_helper_exists() -> None:
    from ray._private.authentication import authentication_token_setup as auth

    params = inspect.signature(auth.maybe_enable_token_auth_if_token_available).parameters
    assert "warn_if_disabled" in params


def test_ray_token_loader_answers_whether_a_token_is_at_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray._raylet import AuthenticationTokenLoader

    loader = AuthenticationTokenLoader.instance()
    token = tmp_path / "token"
    token.write_text("0" * 64)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    loader.reset_cache()
    try:
        assert loader.has_token(ignore_auth_mode=True) is True
        assert cluster._has_token() is True
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
        loader.reset_cache()
        assert cluster._has_token() is False  # Ray raises for a path without a token
        monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
        loader.reset_cache()
        assert cluster._has_token() is False  # no ~/.ray/auth_token in this home
    finally:
        monkeypatch.undo()
        loader.reset_cache()


def test_ray_init_takes_a_temp_dir() -> None:
    # `_temp_dir` reaches `ray.init` through **kwargs, which it reads by name.
    assert '"_temp_dir"' in inspect.getsource(ray.init)


#: How a private use of each dependency shows in our source.
_PRIVATE = {
    "optuna": re.compile(r"from optuna[\w.]*\._\w|from optuna[\w.]* import _\w|\._get_trials\("),
    "ray": re.compile(r"ray\._private|ray\._raylet|from ray[\w.]* import _\w|_ot_(study|trials)"),
    "mlflow": re.compile(r"mlflow\.(system_metrics|sharedViewState)|from mlflow[\w.]* import _"),
}


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("optuna", "search/tpe.py"),
        ("ray", "orchestrate/cluster.py"),
        ("mlflow", "store/mlflow_private.py"),
    ],
)
def test_private_uses_live_in_one_module(package: str, allowed: str) -> None:
    users = {
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        if _PRIVATE[package].search(path.read_text())
    }
    assert users == {allowed}
