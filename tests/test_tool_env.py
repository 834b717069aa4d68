"""What the model's commands see of the host's environment: credentials are withheld by default,
an allow list or a replacement environment is exact, in the foreground and in the background
(real shells), and the name rules hold for random names."""

from __future__ import annotations

import os
import string
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolResultBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent
from liteagent.tools import (
    ToolContext,
    ToolEnv,
    ToolOutput,
    bash,
    bash_tool,
    default_tools,
    tool_env,
)
from liteagent.tools._env import (
    PROVIDER_CREDENTIALS,
    SECRET_NAME_PARTS,
    SECRET_NAME_WORDS,
    is_withheld,
)

pytestmark = pytest.mark.processes

#: Variables bash itself adds to what it was given.
_BASH_OWN = {"PWD", "SHLVL", "_"}
_SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-secret",
    "ANTHROPIC_AUTH_TOKEN": "tok-secret",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth-secret",
    "OPENAI_API_KEY": "sk-openai-secret",
    "MY_API_KEY_2": "k2-secret",
    "my_service_token": "lower-secret",
    "GH_TOKEN": "ghp-secret",
    "GITHUB_TOKEN": "ghs-secret",
    "AWS_ACCESS_KEY_ID": "AKIA-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_SESSION_TOKEN": "aws-session-secret",
    "GOOGLE_APPLICATION_CREDENTIALS": "/keys/gcp-secret.json",
    "AZURE_CLIENT_SECRET": "azure-secret",
    "AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=azure-key-secret",
    "PGPASSWORD": "pg-secret",
    "MYSQL_PWD": "mysql-secret",
    "SENTRY_DSN": "https://sentry-secret@o1.ingest.sentry.io/1",
    "DATABASE_URL": "postgres://app:db-secret@db.internal:5432/app",
    "SSH_AUTH_SOCK": "/run/user/0/ssh-agent-secret.sock",
}


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    """A context for calls in a fresh workspace."""
    return ToolContext(workdir=tmp_path, session_id="s1", tool_call_id="call-1")


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The host environment holds credentials of every documented kind, and a harmless
    variable, ``LITEAGENT_TEST_PLAIN``."""
    for name, value in _SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LITEAGENT_TEST_PLAIN", "visible")
    return _SECRETS


def _shell_env(tool_output: ToolOutput) -> dict[str, str]:
    """The variables an ``env -0`` command printed."""
    assert not tool_output.is_error, tool_output.content
    body = tool_output.content.rsplit("\n", 1)[0]
    pairs = (item.split("=", 1) for item in body.split("\0") if "=" in item)
    return dict(pairs)


_ENV = {"command": "env -0"}


def test_env_shows_no_provider_key_by_default(secrets: dict[str, str], ctx: ToolContext) -> None:
    """``env`` in the model's shell does not print ANTHROPIC_API_KEY or its value."""
    out = bash.run({"command": "env"}, ctx)
    assert (False, False) == ("ANTHROPIC_API_KEY" in out.content, "sk-ant-api03" in out.content)


def test_no_documented_credential_reaches_the_shell(
    secrets: dict[str, str], ctx: ToolContext
) -> None:
    """None of the documented credential kinds, by name or by value, reaches the shell."""
    out = bash.run(_ENV, ctx)
    leaked = sorted(n for n in secrets if n in out.content or secrets[n] in out.content)
    assert [] == leaked


def test_ordinary_variables_still_pass(
    secrets: dict[str, str], monkeypatch: pytest.MonkeyPatch, ctx: ToolContext
) -> None:
    """PATH, HOME, LANG and other harmless variables reach the shell as they are."""
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Someone")
    env = _shell_env(bash.run(_ENV, ctx))
    names = ["PATH", "HOME", "LANG", "HTTP_PROXY", "GIT_AUTHOR_NAME", "LITEAGENT_TEST_PLAIN"]
    assert {n: os.environ[n] for n in names} == {n: env.get(n) for n in names}


def test_the_environment_is_read_when_the_command_starts(
    monkeypatch: pytest.MonkeyPatch, ctx: ToolContext
) -> None:
    """A variable set after the tool was made is seen by the next command."""
    tool = bash_tool()
    monkeypatch.setenv("LITEAGENT_TEST_LATE", "late")
    assert "late" == _shell_env(tool.run(_ENV, ctx)).get("LITEAGENT_TEST_LATE")


def test_allow_list_passes_only_those_variables(secrets: dict[str, str], ctx: ToolContext) -> None:
    """With an allow list the shell gets those variables (and what bash sets itself)."""
    tool = bash_tool(tool_env(allow=["PATH", "LITEAGENT_TEST_PLAIN", "NOT_SET_ANYWHERE"]))
    env = _shell_env(tool.run(_ENV, ctx))
    assert {"PATH", "LITEAGENT_TEST_PLAIN"} == set(env) - _BASH_OWN


def test_allow_list_can_name_a_withheld_variable(secrets: dict[str, str], ctx: ToolContext) -> None:
    """An allow list is explicit: a credential named in it is passed."""
    tool = bash_tool(tool_env(allow=["GH_TOKEN"]))
    assert "ghp-secret" == _shell_env(tool.run(_ENV, ctx)).get("GH_TOKEN")


def test_replacement_environment_is_exact(secrets: dict[str, str], ctx: ToolContext) -> None:
    """A replacement environment is exactly the mapping given: nothing from the host."""
    tool = bash_tool(tool_env(replace={"PATH": "/usr/bin:/bin", "ONLY": "this"}))
    env = _shell_env(tool.run(_ENV, ctx))
    assert {"PATH": "/usr/bin:/bin", "ONLY": "this"} == {
        k: v for k, v in env.items() if k not in _BASH_OWN
    }


def test_keep_passes_a_withheld_variable(secrets: dict[str, str], ctx: ToolContext) -> None:
    """``keep`` passes a variable the rule would withhold; the others stay withheld."""
    tool = bash_tool(tool_env(keep=["SSH_AUTH_SOCK"]))
    env = _shell_env(tool.run(_ENV, ctx))
    assert (_SECRETS["SSH_AUTH_SOCK"], None) == (env.get("SSH_AUTH_SOCK"), env.get("GH_TOKEN"))


def test_deny_patterns_withhold_more_in_any_case(secrets: dict[str, str], ctx: ToolContext) -> None:
    """Extra ``deny`` patterns withhold matching names, compared in any case."""
    tool = bash_tool(tool_env(deny=["liteagent_test_*"]))
    assert "LITEAGENT_TEST_PLAIN" not in _shell_env(tool.run(_ENV, ctx))


def _synchronous_starter(
    results: list[ToolOutput],
) -> Callable[[str, Callable[[CancelToken], ToolOutput]], str]:
    """A background starter that runs the work in a thread and keeps its output."""

    def start(description: str, work: Callable[[CancelToken], ToolOutput]) -> str:
        thread = threading.Thread(target=lambda: results.append(work(CancelToken())))
        thread.start()
        thread.join(60)
        return "task-1"

    return start


def test_background_commands_get_the_same_environment(
    secrets: dict[str, str], tmp_path: Path
) -> None:
    """A command run in the background is given the same environment as in the foreground."""
    results: list[ToolOutput] = []
    ctx = ToolContext(tmp_path, "s1", "c1", start_background=_synchronous_starter(results))
    tool = bash_tool(tool_env(allow=["PATH", "LITEAGENT_TEST_PLAIN"]))
    tool.run({"command": "env -0", "run_in_background": True}, ctx)
    assert {"PATH", "LITEAGENT_TEST_PLAIN"} == set(_shell_env(results[0])) - _BASH_OWN


def test_background_commands_withhold_credentials_by_default(
    secrets: dict[str, str], tmp_path: Path
) -> None:
    """The default policy applies to background commands too."""
    results: list[ToolOutput] = []
    ctx = ToolContext(tmp_path, "s1", "c1", start_background=_synchronous_starter(results))
    bash.run({"command": "env", "run_in_background": True}, ctx)
    assert [] == [n for n in secrets if n in results[0].content]


def test_default_tools_take_the_policy(secrets: dict[str, str], ctx: ToolContext) -> None:
    """``default_tools(env=...)`` gives a bash tool with that policy."""
    shell = next(t for t in default_tools(env=tool_env(replace={"X": "1"})) if t.name == "bash")
    assert {"X": "1"} == {
        k: v for k, v in _shell_env(shell.run(_ENV, ctx)).items() if k not in _BASH_OWN
    }


def test_a_policy_does_not_change_what_the_model_sees_of_the_tool() -> None:
    """A bash tool with a policy has the same spec as the default one (requests, replays and
    view hashes do not depend on the policy)."""
    assert bash.spec == bash_tool(tool_env(replace={})).spec


def test_default_tools_without_a_policy_use_the_shared_bash() -> None:
    """Without ``env``, default_tools lists the module's ``bash`` instance."""
    assert bash in default_tools()


@pytest.mark.parametrize("env", ["PATH", {"PATH": "/bin"}, 5])
def test_bash_tool_refuses_what_is_not_a_policy(env: object) -> None:
    """A policy must be a ToolEnv: anything else is InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        bash_tool(env)  # type: ignore[arg-type]


def test_default_tools_refuse_what_is_not_a_policy() -> None:
    """default_tools(env=...) checks its argument like bash_tool."""
    with pytest.raises(InvalidArgumentError):
        default_tools(env="PATH")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"allow": ["PATH"], "replace": {"PATH": "/bin"}},
        {"allow": "PATH"},
        {"allow": [5]},
        {"allow": [""]},
        {"allow": ["A=B"]},
        {"replace": {"PATH": 5}},
        {"replace": {"PATH": "a\x00b"}},
        {"replace": {"X": "\ud800"}},
        {"replace": ["PATH"]},
        {"keep": ["X"], "allow": ["PATH"]},
        {"deny": ["X*"], "replace": {}},
        {"keep": None},
    ],
)
def test_tool_env_refuses_bad_arguments(kwargs: dict[str, object]) -> None:
    """Contradictory modes, bare strings, non-strings, '=' or NUL in names, NUL or unencodable
    values are refused with InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        tool_env(**kwargs)  # type: ignore[arg-type]


def test_withheld_lists_what_a_command_does_not_get() -> None:
    """``withheld`` names the variables of a host environment that a command does not get."""
    host = {"PATH": "/bin", "GH_TOKEN": "x", "DB": "mysql://u:p@h/d", "HOME": "/root"}
    assert ["DB", "GH_TOKEN"] == ToolEnv().withheld(host)


def test_modes_are_reported() -> None:
    """``mode`` says which of the three policies a ToolEnv is."""
    assert ("default", "allow", "replace") == (
        tool_env().mode,
        tool_env(allow=[]).mode,
        tool_env(replace={}).mode,
    )


def test_equal_policies_compare_equal() -> None:
    """Two policies built from the same arguments are equal and hash alike."""
    a, b = tool_env(keep=["A"], deny=["B*"]), tool_env(keep=("A",), deny={"B*"})
    assert (True, hash(a)) == (a == b, hash(b))


def test_provider_credentials_are_all_withheld() -> None:
    """Every provider credential variable is withheld by the name rules."""
    assert [] == [n for n in PROVIDER_CREDENTIALS if not is_withheld(n)]


# -- the name rules on random names ---------------------------------------------------------------

_WORD = st.text(alphabet=string.ascii_letters + string.digits, min_size=0, max_size=6)
_SEP = st.sampled_from(["_", "__", "-", "."])


@st.composite
def secret_names(draw: st.DrawFn, sep: st.SearchStrategy[str] = _SEP) -> str:
    """A name that contains a secret word anywhere, or a secret part between separators, in
    random case."""
    core = draw(
        st.one_of(st.sampled_from(SECRET_NAME_WORDS), st.sampled_from(sorted(SECRET_NAME_PARTS)))
    )
    if core in SECRET_NAME_PARTS:
        name = draw(_WORD) + draw(sep) + core + draw(sep) + draw(_WORD)
    else:
        name = draw(_WORD) + core + draw(_WORD)
    return "".join(c.lower() if draw(st.booleans()) else c for c in name)


_BENIGN_PARTS = [
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    "GIT",
    "AUTHOR",
    "NAME",
    "EDITOR",
    "PYTHON",
    "CACHE",
    "DIR",
    "XDG",
    "CONFIG",
    "NODE",
    "OPTIONS",
    "VIRTUAL",
    "ENV",
    "LC",
    "ALL",
    "USER",
    "SHELL",
    "TZ",
    "COLOR",
    "HOST",
    "PORT",
    "KEYMAP",
    "OLDPWD",
]


@given(name=secret_names(), value=st.text(max_size=20))
@settings(max_examples=300, deadline=None)
def test_secret_names_are_withheld_whatever_the_case(name: str, value: str) -> None:
    """A name with a secret word or part is withheld, whatever its case and value."""
    assert {} == ToolEnv().environment({name: value})


@given(
    parts=st.lists(st.sampled_from(_BENIGN_PARTS), min_size=1, max_size=4),
    value=st.text(alphabet=string.ascii_letters + string.digits + "/:._-", max_size=30),
)
@settings(max_examples=300, deadline=None)
def test_benign_names_pass(parts: list[str], value: str) -> None:
    """A name made of ordinary parts, with an ordinary value, passes unchanged."""
    name = "_".join(parts)
    assert {name: value} == ToolEnv().environment({name: value})


@given(
    user=st.text(alphabet=string.ascii_letters, min_size=1, max_size=8),
    password=st.text(alphabet=string.ascii_letters + string.digits + "%!", min_size=1, max_size=12),
    scheme=st.sampled_from(["postgres", "mysql", "redis", "https", "amqp", "mongodb+srv"]),
)
@settings(max_examples=200, deadline=None)
def test_urls_with_a_password_are_withheld(user: str, password: str, scheme: str) -> None:
    """A value that is a URL with a password is withheld, whatever the variable's name."""
    host = {"SOME_URL": f"{scheme}://{user}:{password}@host.example:1/x"}
    assert {} == ToolEnv().environment(host)


_SHELL_NAME = secret_names(sep=st.just("_")).filter(lambda n: n[0].isalpha() or n[0] == "_")


@given(names=st.sets(_SHELL_NAME, min_size=1, max_size=30))
@settings(max_examples=15, deadline=None)
def test_the_real_shell_sees_no_random_secret(
    tmp_path_factory: pytest.TempPathFactory, names: set[str]
) -> None:
    """Secret-like names drawn at random, all set at once, are absent from a real ``env``."""
    ctx = ToolContext(tmp_path_factory.mktemp("ws"), "s1", "c1")
    saved = {n: os.environ.get(n) for n in names}
    try:
        os.environ.update({n: f"value-{i}" for i, n in enumerate(sorted(names))})
        env = _shell_env(bash.run(_ENV, ctx))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert [] == sorted(names & set(env))


def _agent_env(tmp_path: Path, **kwargs: Any) -> dict[str, str]:
    """What ``env -0`` prints when the model of a create_lite_agent agent runs it."""
    model = scripted(
        [
            AssistantMessage(content=(ToolUseBlock("t1", "bash", _ENV),), stop_reason="tool_use"),
            AssistantMessage(content=(TextBlock("done"),), stop_reason="end_turn"),
        ]
    )
    with create_lite_agent(
        model=model, model_name="m", workdir=tmp_path, sessions=False, **kwargs
    ) as agent:
        result = agent.send("show the environment")
    blocks = [b for m in result.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert 1 == len(blocks)
    assert isinstance(blocks[0].content, str)
    return _shell_env(ToolOutput(blocks[0].content))


def test_an_agents_shell_does_not_see_the_provider_key(
    secrets: dict[str, str], tmp_path: Path
) -> None:
    """create_lite_agent's bash withholds the provider key from the model's commands."""
    env = _agent_env(tmp_path)
    assert "ANTHROPIC_API_KEY" not in env
    assert os.environ["PATH"] == env["PATH"]


def test_an_agent_takes_a_tool_env(secrets: dict[str, str], tmp_path: Path) -> None:
    """create_lite_agent(tool_env=tool_env(replace=...)) gives the model's commands exactly
    that environment."""
    policy = tool_env(replace={"ONLY": "this", "PATH": "/usr/bin:/bin"})
    env = _agent_env(tmp_path, tool_env=policy)
    assert {"ONLY": "this", "PATH": "/usr/bin:/bin"} == {
        k: v for k, v in env.items() if k in ("ONLY", "PATH", "ANTHROPIC_API_KEY")
    }


def test_tool_env_with_explicit_tools_is_refused(tmp_path: Path) -> None:
    """tool_env applies to the default tools; given with tools=..., it is refused before
    anything is created."""
    with pytest.raises(InvalidArgumentError, match="bash_tool"):
        create_lite_agent(
            model=scripted([]),
            model_name="m",
            workdir=tmp_path,
            sessions=False,
            tools=[],
            tool_env=tool_env(),
        )
