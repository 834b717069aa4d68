"""The checks the session commands share: a session that exists, a seq that is one of its
checkpoints (each a usage error, exit code 2, otherwise)."""

from __future__ import annotations

from liteagent.eventlog import validate_session_id
from liteagent.eventlog._branches import is_branch_session
from liteagent.eventlog.errors import InvalidSessionIdError

from ._agent import LiteAgent
from ._cli_env import CliEnv, NoStoreError
from ._cli_errors import UsageError, shown_arg

__all__ = ["checkpoint_seq", "existing_session", "not_a_branch", "session_id_arg"]

_ID_FORM = "use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"


def session_id_arg(value: str, option: str = "", *, what: str = "session") -> str:
    """``value`` when it is a session id, else :class:`UsageError` naming the argument
    (``option``, e.g. ``--session``; "" for the positional ID) and the value as given (quoted
    when it holds whitespace or is empty: see :func:`shown_arg`)."""
    try:
        return validate_session_id(value)
    except InvalidSessionIdError as e:
        if option:
            raise UsageError(f"{option} {shown_arg(value)}: not a {what} id ({_ID_FORM})") from e
        raise UsageError(f"{shown_arg(value)} is not a {what} id: {_ID_FORM}") from e


def not_a_branch(session_id: str, option: str = "") -> str:
    """``session_id``, refused (:class:`UsageError`) when it is the reserved id of a branch
    (what a restore keeps, ``branch..*``): no command makes or continues a session there."""
    if is_branch_session(session_id):
        where = f"{option} " if option else ""
        raise UsageError(
            f"{where}{session_id} is a branch a restore or an undo keeps, not a session: "
            "`lite-agent branches ID` lists a session's branches, and `lite-agent restore "
            "--undo ID --branch BRANCH` brings one back"
        )
    return session_id


def existing_session(env: CliEnv, session_id: str) -> str:
    """``session_id`` validated, refused (:class:`UsageError`) when it is not a session id or
    the store has no such session."""
    sid = session_id_arg(session_id)
    not_a_branch(sid)
    try:
        head = env.checkpointer.head(sid)
    except NoStoreError:
        head = 0  # nothing is stored there (and a command that reads creates nothing)
    if head == 0:
        raise UsageError(f"no session {sid} in {env.location} (`lite-agent sessions` lists them)")
    return sid


def checkpoint_seq(agent: LiteAgent, session_id: str, seq: int) -> int:
    """``seq`` when it is one of the session's checkpoints, else :class:`UsageError`."""
    checkpoints = [c.seq for c in agent.list_checkpoints(session_id)]
    if seq not in checkpoints:
        listed = ", ".join(map(str, checkpoints)) or "none"
        raise UsageError(
            f"seq {seq} is not a checkpoint of session {session_id} (its "
            f"checkpoints: {listed}; `lite-agent checkpoints {session_id}` shows "
            "them)"
        )
    return seq
