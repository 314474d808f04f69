"""What is secret and how it is hidden (core.secrets), and a sealed spec's life (spec_load, node).

docs/running/security.md: a secret is what the spec marks (`node.secrets`) or what looks like
one; the spec every module sees holds placeholders; the values live in one process and are put
back only into the command that launches the server.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
from harness import make_spec

from spec_sweep.core.outcome import FailureMode, TrialResult
from spec_sweep.core.secrets import (
    MissingSecretError,
    SecretRef,
    bare_uri,
    is_secret_name,
    redact,
    redact_argv,
    redact_env,
    seal,
    secret_values,
    secrets_of,
)
from spec_sweep.errors import SpecError
from spec_sweep.node.command import build_command
from spec_sweep.node.server import api_key_headers
from spec_sweep.spec_load import load_spec
from spec_sweep.store.state import fingerprint

HF = "hf_unit_planted_token"
KEY = "sk-unit-planted-key"


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "api-key",
        "admin-api-key",
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_TRACKING_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "db_password",
        "TOKEN",
    ],
)
def test_names_that_look_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "max-total-tokens",
        "tokenizer-path",
        "TOKENIZERS_PARALLELISM",
        "tp-size",
        "CUDA_VISIBLE_DEVICES",
        "kv-cache-dtype",
        "KEYBOARD",
    ],
)
def test_names_that_do_not(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_hides_values_and_whatever_stands_next_to_a_secret_name() -> None:
    text = (
        "server_args=ServerArgs(api_key='sk-xyz', max_total_tokens=8192, hf_token=None) "
        "--api-key abcd --api-key=efgh HF_TOKEN=ijkl --tp-size 8 the value hf_known here"
    )
    out = redact(text, ["hf_known"])
    for value in ("sk-xyz", "abcd", "efgh", "ijkl", "hf_known"):
        assert value not in out
    assert "api_key='***'" in out
    assert "--api-key ***" in out
    assert "--api-key=***" in out
    assert "HF_TOKEN=***" in out
    assert "max_total_tokens=8192" in out
    assert "--tp-size 8" in out
    assert "hf_token=None" in out
    assert redact('{"api_key": "sk-q", "tp_size": "8"}') == '{"api_key": "***", "tp_size": "8"}'
    # placeholders are left as they are; short values are not searched for in free text
    shown = "HF_TOKEN='<secret: HF_TOKEN>' x --api-key '<secret: api-key>'"
    assert redact(shown, ["ab"]) == shown


def test_redact_argv_and_env_show_placeholders() -> None:
    argv = ["python", "-m", "x", "--api-key", KEY, "--admin-api-key=zz", "--tp-size", "8", HF]
    assert redact_argv(argv, [HF]) == [
        *("python", "-m", "x", "--api-key", "<secret: api-key>"),
        *("--admin-api-key=<secret: admin-api-key>", "--tp-size", "8", "***"),
    ]
    env = {"HF_TOKEN": HF, "OTHER": f"a{KEY}b", "PLAIN": "1"}
    assert redact_env(env, [KEY]) == {
        "HF_TOKEN": "<secret: HF_TOKEN>",
        "OTHER": "a***b",
        "PLAIN": "1",
    }


def test_a_tracking_uri_gives_up_its_userinfo() -> None:
    assert bare_uri("http://alice:p%40ss@head:5000/x") == ("http://head:5000/x", "alice", "p@ss")
    assert bare_uri("http://head:5000") == ("http://head:5000", None, None)
    assert bare_uri("sqlite:///a@b/mlflow.db") == ("sqlite:///a@b/mlflow.db", None, None)


def _secret_spec(tmp_path: Path, **node: object) -> object:
    return make_spec(
        tmp_path,
        node={
            "sglang_version": "0.5.17",
            "env": {"HF_TOKEN": HF, "PLAIN": "yes"},
            "server_args": {"tp-size": 8, "api-key": KEY},
            **node,
        },
    )


def test_a_loaded_spec_holds_placeholders_and_keeps_the_values_in_its_process(
    tmp_path: Path,
) -> None:
    spec = _secret_spec(tmp_path)
    assert spec.node.env == {"HF_TOKEN": "<secret: HF_TOKEN>", "PLAIN": "yes"}
    assert spec.node.server_args["api-key"] == "<secret: api-key>"
    dumped = json.dumps(spec.model_dump(mode="json"))
    assert HF not in dumped
    assert KEY not in dumped
    assert HF not in json.dumps(fingerprint(spec, simulate=True))  # state.json
    assert set(secret_values(spec)) >= {HF, KEY}
    command = build_command(spec, {})
    assert "<secret: api-key>" in command.argv
    assert HF not in command.shell()
    secrets = secrets_of(spec)
    assert secrets is not None
    argv, env = secrets.resolve(command.argv, command.env)
    assert KEY in argv
    assert env["HF_TOKEN"] == HF
    # a copy (e.g. --trials) keeps them; sealing twice changes nothing
    copy = spec.model_copy(update={"description": "x"})
    assert secrets_of(copy) is secrets
    assert seal(copy) is copy
    deep = secrets_of(spec.model_copy(deep=True))  # a copy in this process keeps the values
    assert deep is not None
    assert HF in deep.values()


def test_pickled_the_spec_carries_names_only_and_a_worker_fills_the_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _secret_spec(tmp_path)
    data = pickle.dumps(spec)
    assert HF.encode() not in data
    assert KEY.encode() not in data
    worker = pickle.loads(data)
    secrets = secrets_of(worker)
    assert secrets is not None
    assert worker == spec
    assert [r.name for r in secrets.missing()] == ["HF_TOKEN", "api-key"]
    command = build_command(worker, {})
    with pytest.raises(
        MissingSecretError, match=r"^node\.server_args\.api-key: this node has no value"
    ):
        secrets.resolve(command.argv, command.env)
    # on a node without the spec file: the node's environment, by name
    assert SecretRef("arg", "api-key").variable == "SPEC_SWEEP_SECRET_API_KEY"
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_node")
    monkeypatch.setenv("SPEC_SWEEP_SECRET_API_KEY", "sk-from-the-node")
    secrets.fill_from_environment()
    argv, env = secrets.resolve(command.argv, command.env)
    assert "sk-from-the-node" in argv
    assert env["HF_TOKEN"] == "hf_from_the_node"


def test_the_spec_marks_more_secrets_and_names_only_what_it_sets(tmp_path: Path) -> None:
    spec = _secret_spec(tmp_path, secrets=["PLAIN"])
    assert spec.node.env["PLAIN"] == "<secret: PLAIN>"
    with pytest.raises(SpecError, match=r"secrets: 'NOPE' is neither in node\.env"):
        _secret_spec(tmp_path, secrets=["NOPE"])


def test_a_value_written_as_its_placeholder_comes_from_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _secret_spec(tmp_path, env={"HF_TOKEN": "<secret: HF_TOKEN>"})
    secrets = secrets_of(spec)
    assert secrets is not None
    assert [r.name for r in secrets.missing()] == ["HF_TOKEN"]
    monkeypatch.setenv("HF_TOKEN", "hf_node_value")
    secrets.fill_from_environment()
    assert secrets.resolve([], build_command(spec, {}).env)[1]["HF_TOKEN"] == "hf_node_value"


def test_a_result_never_writes_a_secret_named_value() -> None:
    result = TrialResult(
        trial_id="t0000",
        config={},
        failure_mode=FailureMode.NONE,
        reason="ok",
        command=("python", "--api-key", KEY),
        env={"HF_TOKEN": HF},
    )
    text = json.dumps(result.to_dict())
    assert KEY not in text
    assert HF not in text


def test_load_spec_seals_what_it_returns(tmp_path: Path) -> None:
    spec = _secret_spec(tmp_path)
    again = load_spec(spec.source)
    assert again.node == spec.node
    assert secrets_of(again) is not None
    assert HF in secrets_of(again).values()


def test_a_server_launched_with_an_api_key_is_asked_with_it() -> None:
    assert api_key_headers(["python", "--api-key", KEY, "--port", "1"]) == {
        "Authorization": f"Bearer {KEY}"
    }
    assert api_key_headers(["python", f"--api-key={KEY}"]) == {"Authorization": f"Bearer {KEY}"}
    assert api_key_headers(["python", "--admin-api-key", KEY]) == {}


def test_a_state_folder_from_before_sealing_resumes_and_loses_the_values(tmp_path: Path) -> None:
    from spec_sweep.store.state import open_state

    spec = _secret_spec(tmp_path)
    state = open_state(spec, state_dir=tmp_path / "state", fresh=False, simulate=True)
    state.close()
    path = state.path / "state.json"
    data = json.loads(path.read_text())
    data["fingerprint"]["node.env.HF_TOKEN"] = HF  # as an older spec_sweep wrote it
    path.write_text(json.dumps(data))
    again = open_state(spec, state_dir=tmp_path / "state", fresh=False, simulate=True)
    again.close()
    assert HF not in path.read_text()


def test_credentials_in_the_specs_tracking_uri_leave_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "")  # restored after the test
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "")
    spec = make_spec(tmp_path, tracking={"uri": "http://carol:trk-pw-1234@head:5000"})
    assert spec.tracking.uri == "http://head:5000"
    assert b"trk-pw-1234" not in pickle.dumps(spec)
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "carol"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "trk-pw-1234"
    assert "trk-pw-1234" in secret_values(spec)  # and redacted wherever this process writes
