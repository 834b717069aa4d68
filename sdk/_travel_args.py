"""The argument checks of the time-travel methods both shells share (undo, fork, gc)."""

from __future__ import annotations

from pathlib import Path

from liteagent.eventlog import CancelToken, validate_session_id

from ._core import AgentCore
from ._validate import (
    check_bool,
    check_cancel,
    check_grace,
    check_path,
    check_seq,
    check_session_id,
    check_workdir,
)

__all__ = ["fork_args", "gc_args", "undo_args"]


def undo_args(
    core: AgentCore, session_id: object, branch: object, cancel: object
) -> tuple[str, str | None, CancelToken | None]:
    """The checked session, branch id and cancel token of an ``undo_restore``."""
    core.check_open()
    sid = core.session_for(validate_session_id(session_id), "undo_restore")
    return sid, check_session_id(branch), check_cancel(cancel)


def fork_args(
    core: AgentCore, session_id: object, seq: object, workdir: object
) -> tuple[str, int, Path | None]:
    """The checked session, checkpoint and workdir of a ``fork``."""
    core.require_sessions("fork")
    sid = core.session_for(validate_session_id(session_id), "fork")
    folder = None if workdir is None else check_workdir(check_path(workdir, "workdir"))
    return sid, check_seq(seq), folder


def gc_args(
    core: AgentCore, grace: object, branch_retention: object, dry_run: object, cancel: object
) -> tuple[float, float | None, bool, CancelToken | None]:
    """The checked arguments of a ``collect_garbage``."""
    core.check_open()
    g = check_grace(grace, "grace")
    assert g is not None
    retention = check_grace(branch_retention, "branch_retention", optional=True)
    return g, retention, check_bool(dry_run, "dry_run"), check_cancel(cancel)
