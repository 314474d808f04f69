"""The cluster files under docker/ (issue #9), checked without a Docker engine.

The images cannot be built here, so these tests check what can be checked statically: the Ray
cluster-launcher config passes Ray's own preparation and JSON schema (what `ray up` runs first), the
head and worker start commands reserve whole nodes the way `spec_sweep.orchestrate.cluster` asks for
them, the compose file's services are wired as the README describes, and every path a Dockerfile
copies exists and survives its `.dockerignore`.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DOCKER / name).read_text())
    assert isinstance(data, dict)
    return data


def _ray_start_args(commands: list[str]) -> dict[str, str]:
    """`--flag=value` / `--flag` arguments of the `ray start` command in a command list."""
    starts = [c for c in commands if c.strip().startswith("ray start")]
    assert len(starts) == 1, commands
    args: dict[str, str] = {}
    for token in shlex.split(starts[0])[2:]:
        key, _, value = token.partition("=")
        args[key] = value
    return args


# ---------------------------------------------------------------------------------------------
# Ray cluster launcher


def test_cluster_config_passes_rays_own_validation() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = _load("ray-cluster.yaml")
    prepared = prepare_config(copy.deepcopy(raw))
    validate_config(prepared)  # raises on any schema error, like `ray up`
    workers = raw["provider"]["worker_ips"]
    assert workers, "at least one GPU node"
    node_type = prepared["available_node_types"][prepared["head_node_type"]]
    assert node_type["min_workers"] == node_type["max_workers"] == len(workers)


def test_cluster_config_reserves_whole_nodes_for_trials() -> None:
    from spec_sweep.orchestrate.cluster import NODE_RESOURCE

    raw = _load("ray-cluster.yaml")
    head = _ray_start_args(raw["head_start_ray_commands"])
    assert "--head" in head
    assert head["--num-gpus"] == "0"
    assert "--resources" not in head, "the head must not offer the trial resource"

    worker = _ray_start_args(raw["worker_start_ray_commands"])
    assert worker["--address"] == "$RAY_HEAD_IP:6379"
    assert worker["--num-gpus"] == "8"
    assert json.loads(worker["--resources"]) == {NODE_RESOURCE: 1}


def test_cluster_config_runs_mlflow_and_shares_the_ray_token() -> None:
    raw = _load("ray-cluster.yaml")
    mlflow = [c for c in raw["head_start_ray_commands"] if "mlflow server" in c]
    assert len(mlflow) == 1
    assert "--host 0.0.0.0" in mlflow[0]
    assert "--artifacts-destination /mlflow/artifacts" in mlflow[0]
    assert any(o.endswith(":/mlflow") for o in raw["docker"]["head_run_options"])
    assert "--env RAY_AUTH_MODE=token" in raw["docker"]["run_options"]
    assert raw["file_mounts"] == {"/root/.ray/auth_token": "~/.ray/auth_token"}
    assert "--gpus all" in raw["docker"]["worker_run_options"]
    assert raw["docker"]["head_image"].endswith("/spec-sweep-head:0.1.0")
    assert raw["docker"]["worker_image"].endswith("/spec-sweep-gpu-node:0.1.0")


# ---------------------------------------------------------------------------------------------
# Compose file of the head node


def test_compose_file_runs_ray_head_and_mlflow_server() -> None:
    compose = _load("docker-compose.head.yml")
    services = compose["services"]
    assert set(services) == {"mlflow", "ray-head"}
    for service in services.values():
        assert service["image"] == "spec-sweep-head:0.1.0"
        dockerfile = ROOT / service["build"]["dockerfile"]
        assert (DOCKER / service["build"]["context"]).resolve() == ROOT
        assert dockerfile.is_file(), dockerfile

    mlflow = services["mlflow"]
    command = mlflow["command"]
    assert command[:2] == ["mlflow", "server"]
    options = dict(c.split("=", 1) for c in command[2:])
    mounts = {m.split(":")[1]: m.split(":")[0] for m in mlflow["volumes"]}
    assert options["--backend-store-uri"] == "sqlite:////mlflow/mlflow.db"
    assert options["--artifacts-destination"] == "/mlflow/artifacts"
    assert options["--host"] == "0.0.0.0"
    assert mounts["/mlflow"] in compose["volumes"], "the store lives on a named volume"
    assert "5000:5000" in mlflow["ports"]

    head = services["ray-head"]
    args = {c.partition("=")[0]: c.partition("=")[2] for c in head["command"][2:]}
    assert head["command"][:2] == ["ray", "start"]
    assert "--head" in args
    assert args["--num-gpus"] == "0"
    assert "--resources" not in args
    assert head["network_mode"] == "host"
    assert head["environment"]["RAY_AUTH_MODE"] == "token"
    assert head["environment"]["RAY_ADDRESS"] == "127.0.0.1:6379"
    assert "${RAY_AUTH_TOKEN:?" in head["environment"]["RAY_AUTH_TOKEN"]
    assert head["depends_on"]["mlflow"]["condition"] == "service_healthy"


# ---------------------------------------------------------------------------------------------
# Dockerfiles


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins (`!` re-includes)."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path.split("/")[0], pat):
            ignored = not negate
    return ignored


@pytest.mark.parametrize("name", ["Dockerfile.gpu-node", "Dockerfile.head"])
def test_dockerfile_copies_only_what_exists_and_is_not_ignored(name: str) -> None:
    dockerfile = DOCKER / name
    ignore = (DOCKER / f"{name}.dockerignore").read_text().splitlines()
    patterns = [p.strip() for p in ignore if p.strip() and not p.startswith("#")]
    copies = [rest.split()[:-1] for word, rest in _instructions(dockerfile) if word == "COPY"]
    assert copies
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"{name}: COPY {source}: not in the repository"
            assert not _ignored(source, patterns), f"{name}: COPY {source}: .dockerignore'd"


def test_gpu_node_image_pins_an_sglang_release_with_a_flag_manifest() -> None:
    instructions = _instructions(DOCKER / "Dockerfile.gpu-node")
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    bases = [rest for word, rest in instructions if word == "FROM"]
    assert len(bases) == 1
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], bases[0])
    match = re.fullmatch(r"lmsysorg/sglang:v(\d+\.\d+\.\d+)(\.post\d+)?(-cu\d+)?", base)
    assert match, f"FROM {base}: pin an official SGLang release tag"
    version = match.group(1)
    assert (ROOT / "spec_sweep" / "manifests" / f"sglang-{version}.json").is_file(), (
        f"SGLang {version} has no flag manifest: generate it with scripts/gen_sglang_manifest.py"
    )
    cmd = next(rest for word, rest in instructions if word == "CMD")
    assert "spec_sweep_node" in cmd
    assert "--block" in cmd


def test_head_image_uses_the_gpu_images_python() -> None:
    base = next(rest for word, rest in _instructions(DOCKER / "Dockerfile.head") if word == "FROM")
    # SGLang's images run Python 3.12; Ray refuses nodes of another Python minor version.
    assert re.fullmatch(r"python:3\.12(\.\d+)?-slim-\w+", base), base


# ---------------------------------------------------------------------------------------------
# The tracking server's authentication (docs/running/security.md)


def test_the_tracking_server_requires_authentication_with_no_secret_in_the_recipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow.server.auth.config import read_auth_config

    compose = _load("docker-compose.head.yml")
    mlflow = compose["services"]["mlflow"]
    assert "--app-name=basic-auth" in mlflow["command"]
    # the admin password and the CSRF key come from the environment compose runs in
    env = mlflow["environment"]
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"].startswith("${MLFLOW_AUTH_ADMIN_PASSWORD:?")
    assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"].startswith("${MLFLOW_FLASK_SERVER_SECRET_KEY:?")
    head = compose["services"]["ray-head"]["environment"]
    assert head["MLFLOW_TRACKING_USERNAME"] == "admin"
    assert head["MLFLOW_TRACKING_PASSWORD"].startswith("${MLFLOW_AUTH_ADMIN_PASSWORD:?")

    raw = _load("ray-cluster.yaml")
    server = next(c for c in raw["head_start_ray_commands"] if "mlflow server" in c)
    assert "--app-name basic-auth" in server
    assert "--env-file /etc/spec-sweep/head.env" in raw["docker"]["head_run_options"]
    assert "--env-file /etc/spec-sweep/node.env" in raw["docker"]["worker_run_options"]
    assert "runtime_env" not in json.dumps(raw)

    # the image installs the auth extra and MLflow reads its configuration, without a password
    instructions = _instructions(DOCKER / "Dockerfile.head")
    assert any(w == "RUN" and '".[auth]"' in rest for w, rest in instructions)
    assert ("ENV", "MLFLOW_AUTH_CONFIG_PATH=/etc/mlflow/basic_auth.ini") in instructions
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(DOCKER / "mlflow-basic-auth.ini"))
    config = read_auth_config()
    assert config.admin_username == "admin"
    assert config.admin_password is None
    assert config.database_uri == "sqlite:////mlflow/basic_auth.db"
