"""Secrets: what is secret, and the one way every writer keeps it out of files and outputs.

This module owns the rule for what a secret is and every function that hides one
(docs/running/security.md):

- a secret is the value of a `node.env` variable or a `node.server_args` flag that the spec
  marks (`node.secrets`) or whose name looks like one (`is_secret_name`: `*_TOKEN`, `*_KEY`,
  `*PASSWORD*`, `*SECRET*`, so `api-key` and `HF_TOKEN`), and the tracking server's
  credentials (`MLFLOW_TRACKING_PASSWORD`, `MLFLOW_TRACKING_TOKEN`, the password of a
  tracking URI's userinfo);
- `seal` (run by `spec_load.load_spec`) replaces each secret of a spec by its placeholder
  (`<secret: api-key>`), so the spec every module sees, writes (state.json, the MLflow params
  and spec.json), pickles (Ray Tune's snapshot, what Ray ships to a worker) and shows (the
  terminal, the report, the export, `spec-sweep trial --json`) holds no secret value. The
  values stay in a `Secrets` attached to the spec, which lives in its process only: pickled,
  it carries the secrets' names, never their values;
- `Secrets.resolve` puts the values back into the one command that launches a server; a Ray
  worker first fills them (`Secrets.fill`) from the spec file or the node's environment
  (`SecretRef.variable`), so no value travels through Ray;
- `redact` (a text: a server log, a reason), `redact_argv` and `redact_env` (a command that did
  not come from a sealed spec) hide what is left.

Standard library and the spec only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from spec_sweep.core.config import render_value
from spec_sweep.errors import SpecSweepError
from spec_sweep.spec import SweepSpec

__all__ = [
    "REDACTED",
    "TRACKING_SECRET_VARS",
    "MissingSecretError",
    "SecretRef",
    "Secrets",
    "bare_uri",
    "is_secret_name",
    "placeholder",
    "redact",
    "redact_argv",
    "redact_env",
    "seal",
    "secret_values",
    "secrets_of",
    "take_credentials",
    "tracking_secrets",
]

#: What a secret in a text (a log, a reason) is replaced by.
REDACTED = "***"
#: The environment variables that hold the tracking server's credentials (MLflow's own).
TRACKING_SECRET_VARS = ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
#: Prefix of the node environment variable that carries a secret server argument to a trial
#: node that cannot read the spec file (`--api-key` -> `SPEC_SWEEP_SECRET_API_KEY`).
ARG_VARIABLE_PREFIX = "SPEC_SWEEP_SECRET_"
#: Secrets shorter than this are hidden where they stand (commands, env) but not searched for
#: in free text, where they would mangle ordinary words and numbers.
_MIN_TEXT_LEN = 4

_PLACEHOLDER_RE = re.compile(r"<secret: [^>]+>")
# `api_key='...'` (SGLang prints its ServerArgs so), `"api_key": "..."` (as JSON),
# `--api-key VALUE`, `--api-key=VALUE`, `HF_TOKEN=VALUE`: a value next to a secret name,
# whatever its value is.
_QUOTED_RE = re.compile(r"\b([A-Za-z_][\w-]*)=(['\"])(.*?)\2")
_JSON_RE = re.compile(r'"([A-Za-z_][\w-]*)"(\s*:\s*)"((?:[^"\\]|\\.)*)"')
_VALUE = r"('<secret: [^>]+>'|<secret: [^>]+>|\S+)"
_FLAG_RE = re.compile(r"(--([A-Za-z][\w-]*))(=|[ \t]+)(?!--)" + _VALUE)
_ASSIGN_RE = re.compile(r"\b([A-Z][A-Z0-9_]*)=(?!['\"])" + _VALUE)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or server flag of this name holds a secret.

    `*_TOKEN`, `*_KEY` (so `api-key`, `admin-api-key`, `OPENAI_API_KEY`), `*PASSWORD*` and
    `*SECRET*`, in any case, `-` read as `_`. `max-total-tokens` or `tokenizer-path` are not.
    """
    upper = name.upper().replace("-", "_").lstrip("_")
    if "PASSWORD" in upper or "SECRET" in upper:
        return True
    return upper in ("TOKEN", "KEY", "APIKEY") or upper.endswith(("_TOKEN", "_KEY", "APIKEY"))


def placeholder(name: str) -> str:
    """What stands for the secret `name` in a command or a spec: `<secret: name>`."""
    return f"<secret: {name}>"


def _hidden(value: str) -> bool:
    return not value or value == REDACTED or bool(_PLACEHOLDER_RE.fullmatch(value))


@dataclass(frozen=True)
class SecretRef:
    """One secret of a spec, by name.

    Attributes:
        kind: `env` (a `node.env` variable) or `arg` (a `node.server_args` flag).
        name: The variable or flag name (`HF_TOKEN`, `api-key`).
    """

    kind: Literal["env", "arg"]
    name: str

    @property
    def field(self) -> str:
        """The spec field that holds it."""
        return f"node.{'env' if self.kind == 'env' else 'server_args'}.{self.name}"

    @property
    def placeholder(self) -> str:
        """`<secret: NAME>`."""
        return placeholder(self.name)

    @property
    def variable(self) -> str:
        """The environment variable of a trial node that holds its value when the node cannot
        read the spec file: the variable itself, or `SPEC_SWEEP_SECRET_<FLAG>` for a flag."""
        if self.kind == "env":
            return self.name
        return ARG_VARIABLE_PREFIX + re.sub(r"[^A-Z0-9]", "_", self.name.upper())


class MissingSecretError(SpecSweepError):
    """A trial node has no value for a secret of the spec."""


class Secrets:
    """The values of a sealed spec's secrets, in this process only.

    Pickled (into Ray's object store, Tune's snapshot), it carries the secrets' names and the
    spec file's path, never a value: the process that unpickles it fills the values
    (`fill`) before it launches anything.
    """

    def __init__(self, refs: Sequence[SecretRef], values: Mapping[str, str], source: str) -> None:
        """Secrets `refs` with their `values` (by name), of the spec file `source`."""
        self.refs = tuple(refs)
        self.source = source
        self._values = dict(values)

    def __getstate__(self) -> dict[str, Any]:
        return {"refs": self.refs, "source": self.source}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.refs = tuple(state["refs"])
        self.source = str(state.get("source", ""))
        self._values = {}

    def __copy__(self) -> Secrets:
        return Secrets(self.refs, self._values, self.source)  # a copy in this process keeps them

    def __deepcopy__(self, memo: dict[int, Any]) -> Secrets:
        return self.__copy__()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secrets) and other.refs == self.refs

    def __hash__(self) -> int:
        return hash(self.refs)

    def __repr__(self) -> str:
        return f"Secrets({', '.join(r.name for r in self.refs)})"

    def values(self) -> list[str]:
        """The values known in this process."""
        return [v for v in self._values.values() if v]

    def missing(self) -> list[SecretRef]:
        """The secrets whose value this process does not know."""
        return [r for r in self.refs if r.name not in self._values]

    def fill(self, lookup: Callable[[SecretRef], str | None]) -> None:
        """Learn the missing values from `lookup` (None: it does not know one)."""
        for ref in self.missing():
            value = lookup(ref)
            if value is not None:
                self._values[ref.name] = value

    def fill_from_environment(self, environ: Mapping[str, str] | None = None) -> None:
        """Learn the missing values from this node's environment (`SecretRef.variable`)."""
        env = os.environ if environ is None else environ
        self.fill(lambda ref: env.get(ref.variable) or None)

    def value_of(self, ref: SecretRef) -> str | None:
        """A secret's value, if this process knows it."""
        return self._values.get(ref.name)

    def resolve(
        self, argv: Sequence[str], env: Mapping[str, str]
    ) -> tuple[tuple[str, ...], dict[str, str]]:
        """A command and environment with every placeholder replaced by its value.

        Raises:
            MissingSecretError: a placeholder whose value this process does not know (one line
                naming the field and what to set on the node).
        """
        return tuple(self._put(a) for a in argv), {k: self._put(v) for k, v in env.items()}

    def _put(self, text: str) -> str:
        if "<secret: " not in text:
            return text
        for ref in self.refs:
            if ref.placeholder in text:
                value = self._values.get(ref.name)
                if value is None:
                    where = f" or make {self.source} readable there" if self.source else ""
                    raise MissingSecretError(
                        f"{ref.field}: this node has no value for the secret: set {ref.variable} "
                        f"in the environment Ray starts in on this node{where}"
                    )
                text = text.replace(ref.placeholder, value)
        return text


def _spec_refs(spec: SweepSpec) -> list[tuple[SecretRef, Any]]:
    node = spec.node
    marked = set(node.secrets)
    refs: list[tuple[SecretRef, Any]] = []
    for name, env_value in node.env.items():
        if env_value is not None and (name in marked or is_secret_name(name)):
            refs.append((SecretRef("env", name), env_value))
    for name, arg in node.server_args.items():
        scalar = isinstance(arg, str | int | float) and not isinstance(arg, bool)
        if scalar and (name in marked or is_secret_name(name)):
            refs.append((SecretRef("arg", name), arg))
    return refs


def seal(spec: SweepSpec) -> SweepSpec:
    """The spec with each secret replaced by its placeholder, the values attached in-process.

    A user and password in `tracking.uri` leave it for MLflow's `MLFLOW_TRACKING_USERNAME` /
    `MLFLOW_TRACKING_PASSWORD` of this process (`take_credentials`). A spec already sealed is
    returned as it is; one without secrets gets an empty `Secrets`.
    """
    if secrets_of(spec) is not None:
        return spec
    if spec.tracking.uri:
        tracking = spec.tracking.model_copy(update={"uri": take_credentials(spec.tracking.uri)})
        spec = spec.model_copy(update={"tracking": tracking})
    # A value written as its own placeholder (`HF_TOKEN: <secret: HF_TOKEN>`) is a secret
    # whose value only the trial node's environment holds.
    refs = [r for r, v in _spec_refs(spec) if not _hidden(str(v)) or str(v) == r.placeholder]
    found = [(r, v) for r, v in _spec_refs(spec) if not _hidden(str(v))]
    values = {ref.name: render_value(value) for ref, value in found}
    env = dict(spec.node.env)
    args = dict(spec.node.server_args)
    for ref, _ in found:
        (env if ref.kind == "env" else args)[ref.name] = ref.placeholder
    node = spec.node.model_copy(update={"env": env, "server_args": args})
    sealed = spec.model_copy(update={"node": node})
    sealed._secrets = Secrets(refs, values, spec.source)
    return sealed


def secrets_of(spec: SweepSpec) -> Secrets | None:
    """The `Secrets` of a sealed spec (None: a spec `seal` never saw)."""
    found = getattr(spec, "_secrets", None)
    return found if isinstance(found, Secrets) else None


def tracking_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The tracking server's credentials set in this process's environment."""
    env = os.environ if environ is None else environ
    return [env[name] for name in TRACKING_SECRET_VARS if env.get(name)]


def secret_values(spec: SweepSpec) -> list[str]:
    """Every secret value this process knows for `spec`, longest first (for `redact`).

    The sealed spec's values, any secret-looking value a spec `seal` never saw holds in clear,
    and the tracking credentials of this process's environment.
    """
    values = [render_value(v) for _, v in _spec_refs(spec)]
    known = secrets_of(spec)
    if known is not None:
        values += known.values()
    values += tracking_secrets()
    return sorted({v for v in values if not _hidden(v)}, key=len, reverse=True)


def _mask_named(text: str) -> str:
    def quoted(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(1)) or _hidden(m.group(3)):
            return m.group(0)
        return f"{m.group(1)}={m.group(2)}{REDACTED}{m.group(2)}"

    def json_pair(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(1)) or _hidden(m.group(3)):
            return m.group(0)
        return f'"{m.group(1)}"{m.group(2)}"{REDACTED}"'

    def flag(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(2)) or _hidden(m.group(4).strip("'\"")):
            return m.group(0)
        return f"{m.group(1)}{m.group(3)}{REDACTED}"

    def assign(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(1)) or _hidden(m.group(2)):
            return m.group(0)
        return f"{m.group(1)}={REDACTED}"

    text = _JSON_RE.sub(json_pair, _QUOTED_RE.sub(quoted, text))
    return _ASSIGN_RE.sub(assign, _FLAG_RE.sub(flag, text))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret value, and every value written next to a secret name
    (`api_key='...'`, `"api_key": "..."`, `--api-key VALUE`, `HF_TOKEN=VALUE`), replaced by
    `***`."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_TEXT_LEN:
            text = text.replace(secret, REDACTED)
    return _mask_named(text)


def redact_argv(argv: Sequence[str], secrets: Iterable[str] = ()) -> list[str]:
    """A command line with the value of each secret flag (`--api-key VALUE`,
    `--api-key=VALUE`) replaced by its placeholder, and secret values elsewhere by `***`."""
    values = [s for s in secrets if s]
    out: list[str] = []
    hide_next: str | None = None
    for token in argv:
        if hide_next is not None:
            out.append(token if _hidden(token) else placeholder(hide_next))
            hide_next = None
            continue
        name, eq, value = token.partition("=")
        if token.startswith("--") and is_secret_name(name[2:]):
            if eq:
                out.append(token if _hidden(value) else f"{name}={placeholder(name[2:])}")
            else:
                out.append(token)
                hide_next = name[2:]
            continue
        for secret in sorted(values, key=len, reverse=True):
            token = token.replace(secret, REDACTED)
        out.append(token)
    return out


def redact_env(env: Mapping[str, str], secrets: Iterable[str] = ()) -> dict[str, str]:
    """An environment with each secret variable's value replaced by its placeholder and
    secret values elsewhere by `***`."""
    values = list(secrets)
    return {
        name: (
            (value if _hidden(value) else placeholder(name))
            if is_secret_name(name)
            else redact(value, values)
        )
        for name, value in env.items()
    }


def take_credentials(uri: str) -> str:
    """A tracking URI without the user and password of its userinfo, which become this
    process's `MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD` (MLflow's own, which a
    local Ray cluster inherits): the URI is written to state.json and shipped to Ray."""
    bare, user, password = bare_uri(uri)
    if user:
        os.environ["MLFLOW_TRACKING_USERNAME"] = user
    if password:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = password
    return bare


def bare_uri(uri: str) -> tuple[str, str | None, str | None]:
    """A tracking URI without its userinfo, and the user name and password it held."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return uri, None, None
    host = parts.netloc.rpartition("@")[2]
    bare = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    user = unquote(parts.username) if parts.username else None
    return bare, user, unquote(parts.password) if parts.password else None
