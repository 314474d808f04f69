"""Configuration identity and equality (core.config) and what is secret (core.secrets)."""

from __future__ import annotations

from spec_sweep.core.config import changed_keys, config_hash, config_key, same_value
from spec_sweep.core.secrets import redact


def test_equal_configurations_have_equal_keys_whatever_the_order() -> None:
    a = {"mem-fraction-static": 0.88, "cuda-graph-max-bs": 64}
    b = {"cuda-graph-max-bs": 64, "mem-fraction-static": 0.88}
    assert config_key(a) == config_key(b)
    assert config_hash(a) == config_hash(b)
    assert config_key(a) != config_key({**a, "cuda-graph-max-bs": 64.0})


def test_values_are_the_same_only_to_the_letter() -> None:
    assert same_value(64, 64)
    assert not same_value(1, True)
    assert not same_value(1, 1.0)
    assert same_value(None, None)
    assert not same_value(None, False)


def test_changed_keys_count_a_missing_key_as_null() -> None:
    base = {"cuda-graph-max-bs": 512, "env.NCCL_ALGO": None}
    assert changed_keys({"cuda-graph-max-bs": 64}, base) == ["cuda-graph-max-bs"]
    assert changed_keys({"cuda-graph-max-bs": 512, "ep-size": 8}, base) == ["ep-size"]


def test_redact_replaces_every_secret() -> None:
    assert redact("a hf_x1234 b hf_x1234", ["hf_x1234"]) == "a *** b ***"
