"""What the CLI's global options open: the session store, the model provider and the agent.

``--backend file`` (default) keeps sessions in ``<home>/projects/<hash of workdir>/sessions``;
``--backend sqlite`` in one database (``--db``, default ``<home>/projects/<hash>/sessions.db``).
``--provider`` is ``anthropic`` (``$ANTHROPIC_API_KEY``), ``scripted:FILE`` (see
:mod:`._cli_script`) or ``replay:SESSION`` (answers from a stored session of the same store).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from liteagent import providers
from liteagent.context import blob_spill_store, default_compactor
from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    InvalidArgumentError,
    ModelRequest,
    StreamEvent,
    file_checkpointer,
    project_dir,
    sqlite_checkpointer,
    validate_session_id,
)
from liteagent.providers import ModelProvider, ProviderRequestError, replay

from ._agent import LiteAgent
from ._cli_output import LiveRenderer
from ._cli_script import script_provider
from ._cli_terminal import counted_ctrl_c, main_thread_signals
from ._factory import create_lite_agent

__all__ = ["DEFAULT_MODEL", "CliEnv", "run_live"]

DEFAULT_MODEL = "claude-sonnet-4-5"

T = TypeVar("T")


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


@dataclass
class CliEnv:
    """The global options, and what they open (lazily; :meth:`close` releases it all)."""

    workdir: Path
    home: str | None = None
    backend: str = "file"
    db: str | None = None
    provider_spec: str = "anthropic"
    model: str | None = None
    _cp: Checkpointer | None = field(default=None, repr=False)
    _agents: list[LiteAgent] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).expanduser().resolve()
        if not self.workdir.is_dir():
            raise InvalidArgumentError(f"--workdir {str(self.workdir)!r} is not a folder")

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

    @property
    def checkpointer(self) -> Checkpointer:
        """The session store (opened on first use)."""
        if self._cp is None:
            if self.backend == "sqlite":
                path = Path(self.location)
                path.parent.mkdir(parents=True, exist_ok=True)
                self._cp = sqlite_checkpointer(path)
            else:
                self._cp = file_checkpointer(workdir=self.workdir, home=self.home)
        return self._cp

    def provider(self) -> tuple[ModelProvider, str]:
        """The model provider ``--provider`` names, and the model name to call."""
        spec = self.provider_spec
        if spec == "anthropic":
            return providers.anthropic(), self.model or DEFAULT_MODEL
        if spec.startswith("scripted:"):
            return script_provider(spec.removeprefix("scripted:")), self.model or "scripted"
        if spec.startswith("replay:"):
            sid = validate_session_id(spec.removeprefix("replay:"))
            events = list(self.checkpointer.read(sid))
            if not events:
                raise InvalidArgumentError(f"--provider replay: session {sid!r} has no events")
            started = next((e.body for e in events if e.kind == "session_started"), None)
            name = self.model or getattr(started, "model", None) or "replay"
            return replay(events, stream_chunk=16, name=f"replay:{sid}"), name
        raise InvalidArgumentError(
            f"--provider {spec!r}: expected anthropic, scripted:FILE or replay:SESSION")

    def agent(self, *, model: bool = True) -> LiteAgent:
        """An agent on the workdir and the store; ``model=False`` for commands that never
        call the model (no provider is opened, so no API key is needed)."""
        provider, name = self.provider() if model else (NoModel(), self.model or DEFAULT_MODEL)
        with main_thread_signals():  # the agent's actor threads leave Ctrl-C to this one
            agent = create_lite_agent(
                model=provider, model_name=name, workdir=self.workdir,
                checkpointer=self.checkpointer,
                compactor=default_compactor(max_tokens=None,
                                            store=blob_spill_store(self.checkpointer.blobs)),
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


def run_live(
    agent: LiteAgent,
    work: Callable[[CancelToken], T],
    renderer: LiveRenderer,
    *,
    reason: str = "interrupted (Ctrl-C)",
) -> T:
    """Run ``work(cancel)`` in a worker thread while this thread shows the agent's live events;
    Ctrl-C cancels the token (and keeps showing events until the work has stopped). Returns
    its result or raises its error."""
    token = CancelToken()
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = work(token)
        except BaseException as e:  # noqa: BLE001 -- handed to the calling thread
            box["error"] = e

    with agent.subscribe(8192) as sub, counted_ctrl_c() as ctrl_c:
        worker = threading.Thread(target=target, name="lite-agent-cli", daemon=True)
        with main_thread_signals():
            worker.start()
        while True:
            if ctrl_c.take() and not token.cancelled:
                token.cancel(reason)
                renderer.finish()
                print("  cancelling…", file=renderer.out, flush=True)
            item = sub.get(0.05)
            if item is not None:
                renderer.feed(item)
            elif not worker.is_alive():
                break
    renderer.finish()
    error = box.get("error")
    if isinstance(error, BaseException):
        raise error
    return box["result"]  # type: ignore[return-value]
