"""Where the command line finds the API and its token: flags, then environment, then config file, then default.

The config file (`$FLOTILLA_CONFIG`, else `~/.flotilla/config.yaml`) names contexts the way
armadactl's and kubectl's do, so one user can switch between servers with one command:

    currentContext: local
    contexts:
      local: {url: "http://127.0.0.1:8080"}
      prod: {url: "https://flotilla.example.com", token: "..."}

Each setting is resolved on its own, so `--url` with the current context's token is allowed (as
kubectl's `--server` is); the token then goes to that URL.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_URL = "http://127.0.0.1:8080"
CONFIG_ENV = "FLOTILLA_CONFIG"
URL_ENV = "FLOTILLA_URL"
TOKEN_ENV = "FLOTILLA_TOKEN"
CONTEXT_FIELDS = ("url", "token")


class ConfigError(Exception):
    """The config file cannot be read or does not say what is asked of it; the message is for the user."""


@dataclass(frozen=True)
class Context:
    name: str
    url: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class ClientConfig:
    """The parsed config file; ``path`` is where it was (or would be) read from."""

    path: Path
    current: str | None = None
    contexts: dict[str, Context] = field(default_factory=dict)

    @property
    def current_context(self) -> Context | None:
        """The context settings come from; none when the file names no current context."""
        if self.current is None:
            return None
        if self.current not in self.contexts:
            raise ConfigError(f"{self.path}: currentContext {self.current!r} is not one of its contexts ({self._names()})")
        return self.contexts[self.current]

    def _names(self) -> str:
        return ", ".join(sorted(self.contexts)) or "none"

    def with_current(self, name: str) -> ClientConfig:
        if name not in self.contexts:
            raise ConfigError(f"{self.path}: no context {name!r} (contexts: {self._names()})")
        return ClientConfig(self.path, name, self.contexts)


@dataclass(frozen=True)
class Endpoint:
    """What a client command connects to, and with which token (none: the server decides if that is allowed)."""

    url: str
    token: str | None


def config_path(environ: Mapping[str, str]) -> tuple[Path, bool]:
    """(the config file's path, whether the user named it): a file the user named must exist."""
    named = environ.get(CONFIG_ENV)
    if named:
        return Path(named).expanduser(), True
    return Path.home() / ".flotilla" / "config.yaml", False


def parse_config(path: Path, text: str) -> ClientConfig:
    """The config file's contents; unknown keys are refused by name so a typo is not silently ignored."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if document is None:
        return ClientConfig(path)
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping with currentContext and contexts")
    unknown = set(document) - {"currentContext", "contexts"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (expected currentContext, contexts)")
    current = document.get("currentContext")
    if current is not None and not isinstance(current, str):
        raise ConfigError(f"{path}: currentContext must be a context name")
    contexts = document.get("contexts") or {}
    if not isinstance(contexts, dict):
        raise ConfigError(f"{path}: contexts must map names to {{url, token}}")
    return ClientConfig(path, current, {str(name): _context(path, str(name), raw) for name, raw in contexts.items()})


def _context(path: Path, name: str, raw: Any) -> Context:
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: context {name!r} must be a mapping with url and/or token")
    unknown = set(raw) - set(CONTEXT_FIELDS)
    if unknown:
        raise ConfigError(f"{path}: context {name!r} has unknown key(s) {', '.join(sorted(map(str, unknown)))} (expected url, token)")
    for key in CONTEXT_FIELDS:
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ConfigError(f"{path}: context {name!r}: {key} must be a string")
    return Context(name, raw.get("url") or None, raw.get("token") or None)


def load_config(environ: Mapping[str, str]) -> tuple[ClientConfig, list[str]]:
    """(the config file, warnings for the user); a missing default file is an empty config."""
    path, named = config_path(environ)
    try:
        text = path.read_text()
        mode = path.stat().st_mode
    except FileNotFoundError as exc:
        if named:
            raise ConfigError(f"{path} (${CONFIG_ENV}) does not exist") from exc
        return ClientConfig(path), []
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    config = parse_config(path, text)
    return config, exposure_warnings(config, mode)


def exposure_warnings(config: ClientConfig, mode: int) -> list[str]:
    """A token in a file others can read is a token others hold."""
    if not any(context.token for context in config.contexts.values()) or not mode & (stat.S_IRGRP | stat.S_IROTH):
        return []
    return [
        f"{config.path} holds tokens and can be read by {'group and others' if mode & stat.S_IROTH else 'its group'} "
        f"(mode {stat.S_IMODE(mode):o}): chmod 600 {config.path}"
    ]


def resolve(flag_url: str | None, flag_token: str | None, environ: Mapping[str, str], context: Context | None) -> Endpoint:
    """Each setting from the first place that gives it: flag, environment, current context, default."""
    url = flag_url or environ.get(URL_ENV) or (context.url if context else None) or DEFAULT_URL
    token = flag_token or environ.get(TOKEN_ENV) or (context.token if context else None)
    return Endpoint(url.rstrip("/"), token)


def save_current_context(config: ClientConfig, name: str) -> ClientConfig:
    """Rewrite the file with ``name`` as its current context, keeping its mode; comments are not kept."""
    updated = config.with_current(name)
    document: dict[str, Any] = {
        "currentContext": name,
        "contexts": {
            context.name: {key: value for key in CONTEXT_FIELDS if (value := getattr(context, key)) is not None}
            for context in updated.contexts.values()
        },
    }
    mode = stat.S_IMODE(config.path.stat().st_mode)
    handle, temporary = tempfile.mkstemp(dir=config.path.parent, prefix=".config-", suffix=".yaml")
    try:
        with os.fdopen(handle, "w") as out:
            os.fchmod(out.fileno(), mode)
            yaml.safe_dump(document, out, sort_keys=False)
        os.replace(temporary, config.path)  # readers see the old file or the new one, never half of it
    except BaseException:
        os.unlink(temporary)
        raise
    return updated
