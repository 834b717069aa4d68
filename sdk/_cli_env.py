"""What the CLI's global options open: the session store, the model provider and the agent.

``--backend file`` (default) keeps sessions in ``<home>/projects/<hash of workdir>/sessions``;
``--backend sqlite`` in one database (``--db``, default ``<home>/projects/<hash>/sessions.db``).
``--provider`` is ``anthropic`` (``$ANTHROPIC_API_KEY``), ``scripted:FILE`` (see
:mod:`._cli_script`) or ``replay:SESSION`` (answers from a stored session of the same store).

An agent with a model compacts by summarizing (its ``compact`` calls the model with the
instructions, after moving large tool results to the blob store); an agent without one (the
commands that never call the model) compacts mechanically, and the instructions are not used.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from liteagent import providers
from liteagent.context import (
    Compactor,
    Pass,
    SpillStore,
    blob_spill_store,
    default_compactor,
    llm_compactor,
    micro_pass,
    snip_pass,
    tool_result_budget_pass,
)
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    file_checkpointer,
    project_dir,
    sqlite_checkpointer,
    validate_session_id,
)
from liteagent.eventlog._messages import message_text
from liteagent.eventlog.errors import (
    InvalidArgumentError,
    InvalidSessionIdError,
    NotADatabaseError,
    OperationCancelledError,
    StorageIOError,
)
from liteagent.eventlog.types import ModelRequest, StreamEvent
from liteagent.providers import ModelProvider, ProviderAuthError, ProviderRequestError, replay
from liteagent.providers._contract import ModelResponse
from liteagent.tools import Tool, default_tools
from liteagent.tools import context as context_tool

from ._agent import LiteAgent
from ._cli_errors import NoApiKeyError, UsageError, one_line, shown_arg
from ._cli_script import script_provider
from ._cli_terminal import main_thread_signals
from ._factory import create_lite_agent
from ._validate import check_workdir

__all__ = [
    "DEFAULT_MODEL",
    "KEEP_TAIL_TURNS",
    "CliEnv",
    "NoStoreError",
    "SummaryModel",
    "check_on_folders",
    "cli_tools",
    "expanded",
    "mechanical_compactor",
    "summarizing_compactor",
]

DEFAULT_MODEL = "claude-sonnet-4-5"
KEEP_TAIL_TURNS = 2  # the last turns a summarizing compaction keeps as they are
_SPILL_BUDGET_BYTES = 200_000
_PROVIDERS = "anthropic, scripted:FILE or replay:SESSION"


class NoStoreError(UsageError):
    """Raised by :attr:`CliEnv.checkpointer` for a command that only reads when there is no
    session store where the options point (nothing is created there); each command says what
    fits (no sessions, no such session)."""


class NoModel(ModelProvider):
    """The provider of commands that never call the model (restore, compact, checkpoints)."""

    def stream(
        self,
        request: ModelRequest,  # noqa: ARG002 -- refused whatever it asks
        *,
        cancel: CancelToken | None = None,  # noqa: ARG002 -- nothing to cancel
    ) -> Iterator[StreamEvent]:
        """Refuse: this command does not call the model."""
        raise ProviderRequestError("this command does not call the model")


class SummaryModel:
    """The model a summarizing compaction calls, remembering what happened (so the CLI can say
    whether the instructions were used): the successful calls, the last summary, the failures.
    The compaction calls it from one thread at a time."""

    def __init__(self, provider: ModelProvider) -> None:
        self.provider = provider
        self.calls = 0
        self.last_summary = ""
        self.failures: list[str] = []

    def reset(self) -> None:
        """Forget the previous compaction."""
        self.calls, self.last_summary, self.failures = 0, "", []

    def complete(
        self, request: ModelRequest, *, cancel: CancelToken | None = None
    ) -> ModelResponse:
        """Call the provider."""
        try:
            response = self.provider.complete(request, cancel=cancel)
        except OperationCancelledError:
            raise
        except Exception as e:
            self.failures.append(one_line(e))
            raise
        self.calls += 1
        self.last_summary = message_text(response.message.content).strip()
        return response


def cli_tools() -> list[Tool]:
    """The tools of the CLI's agents (what ``replay --view`` shows their requests with): the
    default tools and the ``context`` reader, which the spill and archive markers of their
    compactions and context engine name."""
    return [*default_tools(), context_tool]


def _spill(store: SpillStore) -> Pass:
    return tool_result_budget_pass(_SPILL_BUDGET_BYTES, store)


def _drop() -> list[Pass]:
    return [snip_pass(max_tokens=None), micro_pass(max_tokens=None)]


def mechanical_compactor(store: SpillStore) -> Compactor:
    """What ``compact`` runs without a model: large tool results move to ``store``, then the
    older turns are dropped and old tool results cleared."""
    return default_compactor([_spill(store), *_drop()])


def summarizing_compactor(model: SummaryModel, model_name: str, store: SpillStore) -> Compactor:
    """What ``compact`` runs with a model: large tool results move to ``store``, then the
    older turns become the model's summary. When no summary can be had (the model fails), the
    older turns are dropped and old tool results cleared instead: the compaction reduces as
    :func:`mechanical_compactor` does."""
    return llm_compactor(
        model=model,
        model_name=model_name,
        token_threshold=0,
        keep_tail_turns=KEEP_TAIL_TURNS,
        base=default_compactor([_spill(store)]),
        fallback=default_compactor(_drop()),
    )


def check_provider_spec(spec: str) -> None:
    """Refuse a ``--provider`` value of no known form (:class:`UsageError`)."""
    for prefix in ("scripted:", "replay:"):
        if spec.startswith(prefix):
            if not spec.removeprefix(prefix):
                raise UsageError(
                    f"--provider {shown_arg(spec)}: name the {prefix[:-1]} source after the colon"
                )
            return
    if spec != "anthropic":
        raise UsageError(f"--provider {shown_arg(spec)}: expected {_PROVIDERS}")


def expanded(option: str, path: str | Path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; :class:`UsageError` naming
    ``option`` when it cannot be (no such user, no home folder)."""
    try:
        return Path(path).expanduser()
    except RuntimeError as e:  # what pathlib raises for ~nosuchuser
        user = str(path).split("/", 1)[0]
        given = f"{option}{'=' if option.isupper() else ' '}{shown_arg(str(path))}"
        raise UsageError(f"{given}: {user} is no home folder on this machine") from e


def check_on_folders(option: str, path: Path, *, folder: bool) -> None:
    """Refuse (:class:`UsageError`) a ``path`` that cannot be what ``option`` names: a file
    where a folder is wanted or the reverse, or a path under a file."""
    if path.exists():
        if folder and not path.is_dir():
            raise UsageError(f"{option}: '{path}' is a file, not a folder")
        if not folder and path.is_dir():
            raise UsageError(f"{option}: file '{path}' is a folder, not a database file")
        return
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                what = f"'{path}'" if folder else f"file '{path}'"
                raise UsageError(f"{option}: {what}: a part of its folder is a file, not a folder")
            return


@dataclass
class CliEnv:
    """The global options, and what they open (lazily; :meth:`close` releases it all)."""

    workdir: Path
    home: str | None = None
    backend: str = "file"
    db: str | None = None
    provider_spec: str = "anthropic"
    model: str | None = None
    create_store: bool = True
    summary_model: SummaryModel | None = field(default=None, repr=False)
    _cp: Checkpointer | None = field(default=None, repr=False)
    _agents: list[LiteAgent] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.workdir = expanded("--workdir", self.workdir).resolve()
        if not self.workdir.is_dir():
            raise UsageError(f"--workdir {self.workdir} is not a folder")
        try:
            check_workdir(self.workdir)  # what the agent will check (a path that is not UTF-8)
        except InvalidArgumentError as e:
            raise UsageError(f"--workdir: {e}") from e
        for option, value in (("--home", self.home), ("--db", self.db)):
            if value is not None and not value.strip():
                raise UsageError(f"{option}: an empty path (name a folder or a file)")
        if self.home is not None:
            check_on_folders("--home", expanded("--home", self.home), folder=True)
        elif os.environ.get("LITE_AGENT_HOME"):  # the default home, checked as --home is
            home = os.environ["LITE_AGENT_HOME"]
            check_on_folders("LITE_AGENT_HOME", expanded("LITE_AGENT_HOME", home), folder=True)
        if self.db is not None:
            if self.backend != "sqlite":  # it would be ignored: the sessions go elsewhere
                raise UsageError(
                    f"--db {shown_arg(self.db)} is the database of --backend sqlite: add "
                    "--backend sqlite (the file backend keeps the sessions under --home)"
                )
            check_on_folders("--db", expanded("--db", self.db), folder=False)
        check_provider_spec(self.provider_spec)

    @property
    def project(self) -> Path:
        """The project folder of the workdir under the home."""
        return project_dir(self.workdir, self.home)

    @property
    def location(self) -> str:
        """Where the sessions are stored."""
        if self.backend == "sqlite":
            return str(Path(self.db) if self.db else self.project / "sessions.db")
        return str(self.project / "sessions")

    def store_exists(self) -> bool:
        """Whether there is something at the store's location (a dangling link is nothing)."""
        return Path(self.location).exists()

    @property
    def checkpointer(self) -> Checkpointer:
        """The session store (opened on first use). Without ``create_store`` (a command that
        only reads) a store that does not exist is not created: :class:`NoStoreError`."""
        with self._lock:
            if self._cp is None:
                if not self.create_store and not self.store_exists():
                    raise NoStoreError(f"no session store at {self.location}")
                if self.backend == "sqlite":
                    try:  # it makes the folders it needs
                        self._cp = sqlite_checkpointer(Path(self.location))
                    except StorageIOError as e:
                        if self.db and e.errno in (errno.EISDIR, errno.ENOTDIR):  # a folder
                            raise UsageError(f"--db: {e.strerror}") from e
                        raise
                    except NotADatabaseError as e:
                        if self.db:  # named on the command line: the wrong file
                            raise UsageError(
                                f"--db {self.db}: not a SQLite database of lite-agent sessions"
                            ) from e
                        raise
                else:
                    self._cp = file_checkpointer(workdir=self.workdir, home=self.home)
            return self._cp

    def provider(self) -> tuple[ModelProvider, str]:
        """The model provider ``--provider`` names, and the model name to call;
        :class:`NoApiKeyError` for Claude without ``ANTHROPIC_API_KEY``, :class:`UsageError`
        for a script or a recorded session that cannot be used."""
        spec = self.provider_spec
        if spec == "anthropic":
            if not os.environ.get("ANTHROPIC_API_KEY"):  # known before importing the SDK
                raise NoApiKeyError
            try:
                return providers.anthropic(), self.model or DEFAULT_MODEL
            except ProviderAuthError as e:
                raise NoApiKeyError from e
        if spec.startswith("scripted:"):
            try:
                script = script_provider(spec.removeprefix("scripted:"))
            except InvalidArgumentError as e:
                raise UsageError(f"--provider {shown_arg(spec)}: {one_line(e)}") from e
            return script, self.model or "scripted"
        sid = spec.removeprefix("replay:")
        try:
            sid = validate_session_id(sid)
        except InvalidSessionIdError as e:
            raise UsageError(
                f"--provider {shown_arg(spec)}: {shown_arg(sid)} is not a session id"
            ) from e
        events = list(self.checkpointer.read(sid))
        if not events:
            raise UsageError(
                f"--provider {shown_arg(spec)}: no session {sid} in {self.location} "
                "(`lite-agent sessions` lists them)"
            )
        started = next((e.body for e in events if e.kind == "session_started"), None)
        name = self.model or getattr(started, "model", None) or "replay"
        return replay(events, stream_chunk=16, name=f"replay:{sid}"), name

    def agent(self, *, model: bool = True) -> LiteAgent:
        """An agent on the workdir and the store. With ``model`` (the default) it calls the
        provider ``--provider`` names and its ``compact`` summarizes; ``model=False`` is for
        commands that never call the model (no provider is opened, so no API key is needed)
        and compacts mechanically."""
        # the provider first: a script or key that cannot be used creates no store
        provider, name = self.provider() if model else (NoModel(), self.model or DEFAULT_MODEL)
        store = blob_spill_store(self.checkpointer.blobs)
        if model:
            self.summary_model = SummaryModel(provider)
            compactor = summarizing_compactor(self.summary_model, name, store)
        else:
            compactor = mechanical_compactor(store)
        with main_thread_signals():  # the agent's actor threads leave Ctrl-C to this one
            agent = create_lite_agent(
                model=provider,
                model_name=name,
                workdir=self.workdir,
                checkpointer=self.checkpointer,
                tools=cli_tools(),
                compactor=compactor,
            )
        self._agents.append(agent)
        return agent

    def close(self) -> None:
        """Close the agents, then the store."""
        for agent in self._agents:
            agent.close()
        self._agents.clear()
        if self._cp is not None:
            self._cp.close()
            self._cp = None
