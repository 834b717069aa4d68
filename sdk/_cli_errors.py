"""How ``lite-agent`` reports a failure: a kind, a one-line reason in the CLI's words, the exit
code, and what ``--json`` prints (``{"error": {"type": ..., "message": ...}}``).

Exit codes: 2 for a usage error (the command line asks for something that cannot be: a bad
option value, a session or checkpoint that is not there, ``--at`` outside the log), 1 for
everything that was refused or failed, 0 only for success. The reason names what to do next in
the CLI's terms (an environment variable, a command to run), never a Python class, a repr or a
traceback; an error that is none of liteagent's own (a defect) is reported as an internal error
whose traceback is logged at DEBUG.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from liteagent.actors._host import AgentBusyError, HostSaturatedError
from liteagent.actors._restore_plan import (
    InterruptedRestoreError,
    InvalidCheckpointError,
    NoBranchError,
    RestoreRefusedError,
)
from liteagent.eventlog.errors import (
    BlobError,
    CheckpointConflictError,
    CodecError,
    CorruptLogError,
    InvalidArgumentError,
    InvalidSessionIdError,
    LiteAgentError,
    NotADatabaseError,
    OperationCancelledError,
    SchemaVersionError,
    SessionLeasedError,
)
from liteagent.providers import ProviderAuthError, ProviderError
from liteagent.tools._paths import printed_name

__all__ = [
    "NO_API_KEY",
    "EndOfInputError",
    "Failure",
    "NoApiKeyError",
    "OutputClosedError",
    "OutputWriteError",
    "SessionLeftError",
    "UsageError",
    "cli_words",
    "failure",
    "one_line",
    "plain_error",
    "shown_arg",
]

_log = logging.getLogger("liteagent.cli")

NO_API_KEY = (
    "no ANTHROPIC_API_KEY set: set it to talk to Claude, or try `lite-agent demo` "
    "(offline, no key needed) or --provider scripted:FILE"
)


class UsageError(InvalidArgumentError):
    """Raised when the command line asks for something that cannot be (a bad option value, a
    session or checkpoint that does not exist, a seq outside the log); exit code 2. ``usage``
    is the command's usage line when the parser refused the arguments."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class NoApiKeyError(ProviderAuthError):
    """Raised when the default provider (Claude) is asked for and ``ANTHROPIC_API_KEY`` is not
    set."""

    def __init__(self) -> None:
        super().__init__(NO_API_KEY)


class EndOfInputError(LiteAgentError):
    """Raised when the interactive prompt's input ends (Ctrl-D at an empty line, the end of a
    pipe); the session ends with exit code 0."""


class OutputClosedError(LiteAgentError):
    """Raised when the reader of the CLI's output went away (``| head -1``); the entry point
    ends the command quietly."""


class OutputWriteError(LiteAgentError):
    """Raised when the CLI's output could not be written while an operation ran (a full disk,
    an I/O error); the operation itself went on to its end and is stored."""


class SessionLeftError(LiteAgentError):
    """Raised for an ``error`` of a command that left a new session behind (a failed ``run``
    without ``--session``): the report names it, so a script can resume it."""

    def __init__(self, error: BaseException, session_id: str) -> None:
        super().__init__(one_line(error))
        self.error = error
        self.session_id = session_id


@dataclass
class Failure:
    """A failure as the CLI reports it: ``type`` (a stable word for machines), ``message`` (one
    line for people), the exit ``code`` and, for some failures, ``details`` (one line each)."""

    type: str
    message: str
    code: int = 1
    details: list[str] = field(default_factory=list)
    usage: str = ""
    session_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document of this failure."""
        error: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.details:
            error["details"] = self.details
        if self.session_id is not None:
            error["session_id"] = self.session_id
        return {"error": error}


def one_line(error: BaseException) -> str:
    """``error``'s message on one line (its class name only when it has no message)."""
    return " ".join(str(error).split()) or type(error).__name__


def shown_arg(text: str) -> str:
    """A value from the command line as a message shows it: as it is, or in double quotes
    with JSON escapes when it is empty or holds whitespace or characters that are not
    printable (a message is one line: ``"s1\\n"`` must not read as ``s1``, nor ``""`` as
    nothing)."""
    if text and all(c.isprintable() and not c.isspace() for c in text):
        return text
    shown = "".join(
        c
        if c == " " or (c.isprintable() and not c.isspace() and c not in '"\\')
        else json.dumps(c)[1:-1]
        for c in text
    )
    return f'"{shown}"'


_ERRNO_PREFIX = re.compile(r"^\[Errno -?\d+\]\s*")


def plain_error(error: BaseException) -> str:
    """``error``'s one-line message without Python's words: an operating-system error is
    said as what it is about and the system's reason (``cannot create X: Not a directory``),
    never ``[Errno 20] ...``."""
    text = one_line(error)
    if isinstance(error, OSError):
        text = _ERRNO_PREFIX.sub("", text)
        if not text.strip() or text == type(error).__name__:
            what = error.strerror or "input/output error"
            text = f"{what}: {error.filename}" if error.filename else what
    return text


def _busy(error: AgentBusyError) -> str:
    cause = error.__cause__
    if isinstance(cause, SessionLeasedError):
        holder = cause.holder
        who = (
            "another process"
            if holder is None
            else f"another process (pid {holder.pid} on {holder.host})"
        )
        return (
            f"session {cause.session_id} is running in {who}, which holds its lease; "
            "nothing was changed: try again when it has finished"
        )
    return one_line(error)


_JSON_TYPES = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "list": "an array",
    "tuple": "an array",
    "dict": "an object",
    "NoneType": "null",
    "null": "null",
}
_TYPE = r"(?:str|int|float|bool|list|tuple|dict|NoneType|null)"
_EXPECTED_TYPES = re.compile(rf"\b(must be |got )({_TYPE}(?: or {_TYPE})*)\b")


def _json_types(match: re.Match[str]) -> str:
    """``must be str or list`` and ``got NoneType`` (what a JSON value of the wrong type is
    told in Python's names) in JSON's words."""
    names = [_JSON_TYPES[t] for t in match.group(2).split(" or ")]
    if match.group(1) == "got " and names == ["true or false"]:
        names = ["a boolean"]
    return match.group(1) + " or ".join(names)


_PYTHON_WORDS = (
    (re.compile(r"\brestore with files=False\b"), "restore with --conversation-only"),
    (
        re.compile(r"\blist_branches\(\) and undo_restore\(\)"),
        "`lite-agent branches ID` and `lite-agent restore --undo ID --branch BRANCH`",
    ),
    (re.compile(r"\((?:[A-Z][A-Za-z]*)?Error: "), "("),
    (re.compile(r"; use sys\.set_int_max_str_digits\(\) to increase the limit"), ""),
)


def cli_words(text: str) -> str:
    """``text`` (a message of the library's) with the Python API's words it may use put in
    the CLI's: options instead of keyword arguments, commands instead of methods, no class
    names."""
    for pattern, words in _PYTHON_WORDS:
        text = pattern.sub(words, text)
    return _EXPECTED_TYPES.sub(_json_types, text)


def failure(error: BaseException) -> Failure:
    """How the CLI reports ``error`` (see the module docstring), in the CLI's words."""
    found = _failure(error)
    found.message = cli_words(found.message)
    found.details = [cli_words(d) for d in found.details]
    return found


def _failure(error: BaseException) -> Failure:
    if isinstance(error, SessionLeftError):
        left = _failure(error.error)
        left.session_id = error.session_id
        left.message += (
            f" (session {error.session_id}; `lite-agent run PROMPT --session "
            f"{error.session_id}` continues it)"
        )
        return left
    if isinstance(error, UsageError):
        return Failure("usage", one_line(error), 2, usage=error.usage)
    if isinstance(error, OutputWriteError):
        return Failure("io", one_line(error))
    if isinstance(error, (InvalidSessionIdError, InvalidCheckpointError)):
        return Failure("usage", one_line(error), 2)
    if isinstance(error, AgentBusyError):
        return Failure("busy", _busy(error))
    if isinstance(error, HostSaturatedError):
        return Failure("busy", one_line(error))
    if isinstance(error, RestoreRefusedError):
        refused = [
            f"{printed_name(path) if path else 'session'}: {reason}"  # a name on one line
            for path, reason in error.problems
        ]
        return Failure(
            "refused",
            f"{error.operation} refused, nothing was changed: " + "; ".join(refused),
            details=refused,
        )
    if isinstance(error, NoBranchError):
        return Failure(
            "no_branch", one_line(error) + " (`lite-agent branches ID` lists what can come back)"
        )
    if isinstance(error, InterruptedRestoreError):
        return Failure(
            "interrupted_restore",
            "the session has an interrupted restore: run "
            "`lite-agent doctor --repair` to roll it back (or add --finish-restores)",
        )
    if isinstance(error, OperationCancelledError):
        return Failure("cancelled", f"cancelled ({one_line(error)})")
    if isinstance(error, NoApiKeyError):
        return Failure("no_api_key", NO_API_KEY)
    if isinstance(error, ProviderAuthError):
        return Failure("model", f"the model provider refused the credentials: {one_line(error)}")
    if isinstance(error, ProviderError):
        return Failure("model", one_line(error))
    if isinstance(error, CheckpointConflictError):
        return Failure(
            "conflict",
            one_line(error) + " (another process wrote to the session; run the command again)",
        )
    if isinstance(error, (CorruptLogError, CodecError, NotADatabaseError, BlobError)):
        message = one_line(error)
        if "lite-agent doctor" not in message:  # the store's own message may say it already
            message += " (`lite-agent doctor` checks the store)"
        return Failure("damaged", message)
    if isinstance(error, SchemaVersionError):
        return Failure("damaged", one_line(error) + " (it was written by a newer lite-agent)")
    listed: object = getattr(error, "problems", None)
    details = [p for p in listed if isinstance(p, str)] if isinstance(listed, list) else []
    if isinstance(error, InvalidArgumentError):
        return Failure("invalid", one_line(error), details=details)
    if isinstance(error, LiteAgentError) and isinstance(error, OSError):  # StorageIOError
        return Failure("io", plain_error(error), details=details)
    if isinstance(error, LiteAgentError):
        return Failure("failed", one_line(error), details=details)
    if isinstance(error, MemoryError):
        return Failure("failed", "out of memory (the input is too large for this machine)")
    if isinstance(error, OSError):
        what = error.strerror or one_line(error)
        return Failure("io", f"{what}: {error.filename}" if error.filename else what)
    _log.debug("internal error", exc_info=error)
    return Failure(
        "internal",
        f"internal error: {one_line(error)} (a bug in lite-agent; "
        "LITE_AGENT_LOG_LEVEL=DEBUG logs the traceback)",
    )
