"""The config file and where each client setting comes from: flag > environment > current context > default;
`flotilla config` commands; the token sent as a bearer header; refusals printed with their reason."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from streams.client.cli import main
from streams.client.contexts import (
    DEFAULT_URL,
    ClientConfig,
    ConfigError,
    Context,
    exposure_warnings,
    load_config,
    parse_config,
    resolve,
)
from tests.client.stub_api import StubApi

CONFIG = """\
currentContext: local
contexts:
  local:
    url: http://127.0.0.1:9999/
    token: local-token
  prod:
    url: https://flotilla.example.com
"""


def write_config(home: Path, text: str = CONFIG, mode: int = 0o600) -> Path:
    path = home / ".flotilla" / "config.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_parse_contexts() -> None:
    config = parse_config(Path("c.yaml"), CONFIG)
    assert config.current == "local"
    assert config.contexts == {
        "local": Context("local", "http://127.0.0.1:9999/", "local-token"),
        "prod": Context("prod", "https://flotilla.example.com", None),
    }
    assert config.current_context == config.contexts["local"]
    assert parse_config(Path("c.yaml"), "") == ClientConfig(Path("c.yaml"))
    assert parse_config(Path("c.yaml"), "contexts: {a: {url: u}}").current_context is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[1, 2]", "expected a mapping with currentContext and contexts"),
        ("currentContext: a\nserver: x\n", "unknown key(s) server"),
        ("contexts: [a, b]", "contexts must map names to {url, token}"),
        ("contexts: {a: {url: u, armadaUrl: v}}", "context 'a' has unknown key(s) armadaUrl"),
        ("contexts: {a: {token: 12}}", "context 'a': token must be a string"),
        ("contexts: {a: [u]}", "context 'a' must be a mapping"),
        ("currentContext: [a]", "currentContext must be a context name"),
        ("contexts: {a: {url: u}\n", "not valid YAML"),
    ],
)
def test_a_malformed_file_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ConfigError, match="^c.yaml: ") as refused:
        parse_config(Path("c.yaml"), text)
    assert reason in str(refused.value)


def test_a_current_context_that_is_not_defined_is_an_error() -> None:
    config = parse_config(Path("c.yaml"), "currentContext: gone\ncontexts: {a: {url: u}}")
    with pytest.raises(ConfigError, match="currentContext 'gone' is not one of its contexts \\(a\\)"):
        _ = config.current_context


LOCAL = Context("local", "http://from-file", "file-token")


@pytest.mark.parametrize(
    ("flags", "environ", "context", "expected"),
    [
        ((None, None), {}, None, (DEFAULT_URL, None)),
        ((None, None), {}, LOCAL, ("http://from-file", "file-token")),
        ((None, None), {"FLOTILLA_URL": "http://from-env/", "FLOTILLA_TOKEN": "env-token"}, LOCAL, ("http://from-env", "env-token")),
        (
            ("http://from-flag", "flag-token"),
            {"FLOTILLA_URL": "http://from-env", "FLOTILLA_TOKEN": "env-token"},
            LOCAL,
            ("http://from-flag", "flag-token"),
        ),
        # each setting on its own: a flag's URL with the file's token
        (("http://from-flag", None), {}, LOCAL, ("http://from-flag", "file-token")),
        ((None, None), {"FLOTILLA_TOKEN": "env-token"}, LOCAL, ("http://from-file", "env-token")),
        ((None, None), {"FLOTILLA_URL": "", "FLOTILLA_TOKEN": ""}, Context("c"), (DEFAULT_URL, None)),
    ],
)
def test_each_setting_comes_from_the_first_place_that_gives_it(
    flags: tuple[str | None, str | None], environ: dict[str, str], context: Context | None, expected: tuple[str, str | None]
) -> None:
    endpoint = resolve(*flags, environ, context)
    assert (endpoint.url, endpoint.token) == expected


def test_the_file_is_flotilla_config_or_the_home_default(home: Path, tmp_path: Path) -> None:
    assert load_config({}) == (ClientConfig(home / ".flotilla" / "config.yaml"), [])  # missing default: empty
    write_config(home)
    assert load_config({})[0].current == "local"
    named = tmp_path / "elsewhere.yaml"
    named.write_text("currentContext: x\ncontexts: {x: {url: http://x}}\n")
    assert load_config({"FLOTILLA_CONFIG": str(named)})[0].current == "x"
    with pytest.raises(ConfigError, match=r"missing.yaml \(\$FLOTILLA_CONFIG\) does not exist"):
        load_config({"FLOTILLA_CONFIG": str(tmp_path / "missing.yaml")})


@pytest.mark.parametrize(
    ("mode", "warned"),
    [
        (0o600, None),
        (0o400, None),
        (0o640, "can be read by its group (mode 640)"),
        (0o644, "can be read by group and others (mode 644)"),
        (0o604, "can be read by group and others (mode 604)"),
    ],
)
def test_a_file_with_tokens_that_others_can_read_is_warned_about(home: Path, mode: int, warned: str | None) -> None:
    path = write_config(home, mode=mode)
    warnings = load_config({})[1]
    assert warnings == ([] if warned is None else [f"{path} holds tokens and {warned}: chmod 600 {path}"])


def test_a_file_without_tokens_may_be_readable() -> None:
    config = parse_config(Path("c.yaml"), "contexts: {a: {url: u}}")
    assert exposure_warnings(config, stat.S_IFREG | 0o644) == []


# ---------------------------------------------------------------- through the command line


def test_the_current_contexts_url_and_token_are_used(
    home: Path, api: StubApi, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FLOTILLA_URL")  # the stub's URL comes from the file instead
    write_config(home, CONFIG.replace("http://127.0.0.1:9999/", api.url))
    api.answer("GET", "/api/v1/queues", 200, {"queues": []})
    assert main(["get", "queues"]) == 0
    assert api.authorizations == ["Bearer local-token"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("where", ["before", "after"])
def test_flags_win_before_or_after_the_command(home: Path, api: StubApi, where: str) -> None:
    write_config(home)  # its URL points nowhere: the flag must win
    api.answer("GET", "/api/v1/queues", 200, {"queues": []})
    flags = ["--url", api.url, "--token", "flag-token"]
    assert main([*flags, "get", "queues"] if where == "before" else ["get", "queues", *flags]) == 0
    assert api.authorizations == ["Bearer flag-token"]


def test_no_token_no_header(api: StubApi) -> None:
    api.answer("GET", "/api/v1/queues", 200, {"queues": []})
    assert main(["get", "queues"]) == 0
    assert api.authorizations == [None]


def test_the_watch_stream_carries_the_token_too(api: StubApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOTILLA_TOKEN", "env-token")
    api.stream("/api/v1/queues/demo/jobsets/first/events?watch=false", b"")
    assert main(["watch", "demo", "first", "--no-follow"]) == 0
    assert api.authorizations == ["Bearer env-token"]


def test_a_readable_token_file_warns_on_every_command(home: Path, api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(home, mode=0o644)
    api.answer("GET", "/api/v1/queues", 200, {"queues": []})
    assert main(["get", "queues"]) == 0  # the URL from the environment, the token from the file
    assert api.authorizations == ["Bearer local-token"]
    assert capsys.readouterr().err == (f"warning: {path} holds tokens and can be read by group and others (mode 644): chmod 600 {path}\n")


def test_a_command_given_url_and_token_does_not_need_the_file(home: Path, api: StubApi) -> None:
    write_config(home, "currentContext: nowhere\n")  # broken, but nothing is needed from it
    api.answer("GET", "/api/v1/queues", 200, {"queues": []})
    assert main(["get", "queues", "--token", "t"]) == 0
    assert api.authorizations == ["Bearer t"]


@pytest.mark.parametrize(
    ("status", "reason", "token", "printed"),
    [
        (401, "invalid token", "bad", "error: invalid token (HTTP 401)\n"),
        (
            401,
            "no credentials: send 'Authorization: Bearer <token>'",
            None,
            "error: no credentials: send 'Authorization: Bearer <token>' (HTTP 401); no token was sent: "
            "give one with --token, $FLOTILLA_TOKEN or a context in the config file\n",
        ),
        (403, "user 'bob' may not create queue 'demo'", "bob", "error: user 'bob' may not create queue 'demo' (HTTP 403)\n"),
    ],
)
def test_a_refused_call_prints_the_servers_reason_and_exits_1(
    api: StubApi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    reason: str,
    token: str | None,
    printed: str,
) -> None:
    if token:
        monkeypatch.setenv("FLOTILLA_TOKEN", token)
    api.answer("POST", "/api/v1/queues", status, {"error": reason})
    assert main(["create", "queue", "demo"]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", printed)


def test_a_broken_config_file_is_an_error_naming_it(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(home, "currentContext: nowhere\n")
    assert main(["get", "queues"]) == 1
    assert capsys.readouterr().err == f"error: {path}: currentContext 'nowhere' is not one of its contexts (none)\n"


def test_get_contexts_and_current_context(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(home)
    assert main(["config", "get-contexts"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "CURRENT  NAME   URL                           TOKEN",
        "*        local  http://127.0.0.1:9999/        yes",
        "         prod   https://flotilla.example.com  no",
    ]
    assert main(["config", "current-context"]) == 0
    assert capsys.readouterr().out == "local\n"


def test_use_context_rewrites_the_current_context_and_keeps_the_files_mode(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(home, mode=0o600)
    assert main(["config", "use-context", "prod"]) == 0
    assert capsys.readouterr().out == f"switched to context prod in {path}\n"
    config = parse_config(path, path.read_text())
    assert config.current == "prod"
    assert config.contexts == parse_config(path, CONFIG).contexts
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["config.yaml"]  # no temporary file left behind


def test_use_context_of_an_unknown_name_changes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(home)
    assert main(["config", "use-context", "staging"]) == 1
    assert capsys.readouterr().err == f"error: {path}: no context 'staging' (contexts: local, prod)\n"
    assert path.read_text() == CONFIG


def test_current_context_without_one(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(home, "contexts: {a: {url: u}}\n")
    assert main(["config", "current-context"]) == 1
    assert capsys.readouterr().err == f"error: {path} names no currentContext\n"


def test_config_commands_need_no_server(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "get-contexts"]) == 0
    assert capsys.readouterr().out == f"no contexts in {home / '.flotilla' / 'config.yaml'}\n"
    assert not os.path.exists(home / ".flotilla")
