"""Shared parts of the turn tests: a model whose answers follow a plan, a store that fails on
demand, tools that fail in every way, and a check that a request is one the Messages API
accepts."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from liteagent.eventlog import BlobStore, CancelToken, Checkpointer, memory_checkpointer
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.providers._anthropic_convert import request_params
from liteagent.providers._contract import ModelRequest
from liteagent.tools import Tool, ToolContext, ToolOutput, tool

Action = AssistantMessage | BaseException | Callable[[ModelRequest], AssistantMessage]


def reply(words: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(words),), stop_reason="end_turn")


_IDS = iter(range(10**9))


def use(name: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool (a fresh id each time)."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


def api_problems(request: ModelRequest) -> list[str]:
    """What the Messages API would refuse in ``request`` (as the anthropic provider sends it):
    a first message that is not the user's, roles that do not alternate, an empty message, a
    text block without non-whitespace text, a tool_use not answered by a tool_result at the
    start of the next message, a tool_result answering nothing, a duplicate tool_use id."""
    return wire_problems(request_params(request)[0]["messages"])


def wire_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What the Messages API would refuse in ``messages``, the JSON of a request (see
    :func:`api_problems`)."""
    problems: list[str] = []
    if not messages or messages[0]["role"] != "user" or messages[-1]["role"] != "user":
        problems.append("the messages must start and end with a user message")
    seen: set[str] = set()
    for i, m in enumerate(messages):
        blocks = m["content"]
        if i and m["role"] == messages[i - 1]["role"]:
            problems.append(f"message {i}: two {m['role']} messages in a row")
        if not blocks:
            problems.append(f"message {i}: no content")
        problems.extend(
            f"message {i}: an empty text block"
            for b in blocks
            if b["type"] == "text" and not b["text"].strip()
        )
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if seen.intersection(uses) or len(set(uses)) != len(uses):
            problems.append(f"message {i}: a tool_use id used twice")
        seen.update(uses)
        answers = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        asked = (
            [b["id"] for b in messages[i - 1]["content"] if b["type"] == "tool_use"] if i else []
        )
        if sorted(answers) != sorted(asked):
            problems.append(f"message {i}: tool results {answers} do not answer {asked}")
        if answers and any(b["type"] != "tool_result" for b in blocks[: len(answers)]):
            problems.append(f"message {i}: tool results must come first")
    return problems


class PlannedModel:
    """A scripted model whose every call takes the next action of the current turn's plan (an
    answer, an exception to raise, or a function of the request), after checking the request
    against the Messages API rules. Actions left over from a turn are dropped when the next
    turn's plan is set."""

    def __init__(self, calls: int = 400) -> None:
        self.plan: deque[Action] = deque()
        self.problems: list[str] = []
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()
        self.provider = scripted([self._answer] * calls)

    def set_plan(self, *actions: Action) -> None:
        """The actions of the next turn's calls, in order."""
        with self._lock:
            self.plan = deque(actions)

    def _answer(self, request: ModelRequest) -> AssistantMessage:
        self.requests.append(request)
        self.problems.extend(api_problems(request))
        with self._lock:
            action = self.plan.popleft() if self.plan else reply("(unplanned)")
        if isinstance(action, BaseException):
            raise action
        if callable(action):
            return action(request)
        return action


class FailingBlobs(BlobStore):
    """A blob store whose next ``put`` raises the armed exception (once)."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.error: BaseException | None = None

    def put(self, data: bytes) -> str:
        error, self.error = self.error, None
        if error is not None:
            raise error
        return self.inner.put(data)

    def get(self, ref: str) -> bytes:
        return self.inner.get(ref)

    def has(self, ref: str) -> bool:
        return self.inner.has(ref)


class FailingStore(type(memory_checkpointer())):  # type: ignore[misc]
    """The in-memory reference backend, but the append after ``arm(...)``'s count fails once:
    with ``written=False`` before anything is stored, with ``written=True`` after the events
    were stored (a store that wrote and then reported an error). ``failing_blobs`` is its blob
    store, which can fail a put."""

    def __init__(self) -> None:
        super().__init__()
        self._countdown: int | None = None
        self._error: BaseException | None = None
        self._written = False
        self.failing_blobs = FailingBlobs(super()._blobs())

    def _blobs(self) -> BlobStore:
        return self.failing_blobs

    def arm(self, error: BaseException, *, after: int = 0, written: bool = False) -> None:
        """Make the append after ``after`` more successful ones raise ``error``."""
        self._countdown, self._error, self._written = after, error, written

    def _append(self, *args: Any, **kwargs: Any) -> int:
        if self._countdown is not None:
            if self._countdown == 0:
                self._countdown = None
                error = self._error
                assert error is not None
                if self._written:
                    super()._append(*args, **kwargs)
                raise error
            self._countdown -= 1
        head: int = super()._append(*args, **kwargs)
        return head


def as_checkpointer(store: FailingStore) -> Checkpointer:
    """``store`` typed as what it is."""
    assert isinstance(store, Checkpointer)
    return store


class CustomStop(BaseException):
    """A BaseException of a kind liteagent knows nothing about."""


class Raising(Tool):
    """A tool that raises the exception its input names (any BaseException)."""

    name = "raising"
    description = "Raise an exception."
    errors: ClassVar[dict[str, Callable[[], BaseException]]] = {
        "runtime": lambda: RuntimeError("tool bug"),
        "keyboard": KeyboardInterrupt,
        "exit": lambda: SystemExit(3),
        "custom": lambda: CustomStop("odd"),
        "generator": GeneratorExit,
    }

    @property
    def input_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {"kind": {"type": "string"}}}

    def run(self, input: Any, ctx: ToolContext) -> ToolOutput:
        raise self.errors[str(input.get("kind"))]()


@tool
def echo(text: str = "") -> str:
    """Return the text."""
    return f"echo: {text}"


@tool
def dump() -> str:
    """Print 12,000 characters (under the archive threshold)."""
    return "x" * 12_000


@tool
def cancel_me(ctx: ToolContext) -> str:
    """Cancel the turn that runs this tool."""
    ctx.cancel.cancel("the user stopped it")
    return "cancelled"


def all_tools() -> list[Tool]:
    """Every test tool."""
    return [echo, dump, cancel_me, Raising()]


class Tokens:
    """The cancel token of the turn running now (tools and model actions can fire it)."""

    def __init__(self) -> None:
        self.current = CancelToken()

    def fresh(self) -> CancelToken:
        """A new token for the next turn."""
        self.current = CancelToken()
        return self.current

    def cancelling(self, message: AssistantMessage) -> Callable[[ModelRequest], AssistantMessage]:
        """An action that fires the turn's token while the model answers ``message``."""

        def act(_request: ModelRequest) -> AssistantMessage:
            self.current.cancel("cancelled mid-stream")
            return message

        return act


def events_of(cp: Checkpointer, session_id: str) -> Iterator[Any]:
    """The bodies of a session's events."""
    return (e.body for e in cp.read(session_id))
