"""The persisted event vocabulary (version 1) and the stored-event envelope.

Every event is a frozen ``msgspec.Struct`` tagged with its ``kind``; :data:`Event` is the closed
union of this version. A checkpointer stores each event as ``StoredEvent(seq, ts, kind, body)``
and decodes the body per kind, so an event of a kind this version does not know (written by a
newer liteagent) is read back as an :class:`OpaqueEvent` holding its exact bytes, instead of
failing the whole session. Evolution rules: new fields get defaults; no field ever changes type.

High-rate live events (text deltas, progress) are not persisted and are not defined here.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from ._messages import Block, Message, ToolResultBlock, message_text

__all__ = [
    "AssistantMessage",
    "BackgroundCompleted",
    "BackgroundStarted",
    "BranchCreated",
    "Compaction",
    "ContentArchived",
    "ContextSettings",
    "ContextStatus",
    "Event",
    "FileSnapshot",
    "Forked",
    "ModelRequestRecord",
    "OpaqueEvent",
    "Origin",
    "PassRecord",
    "RestoreFile",
    "RestoreFinished",
    "RestoreStarted",
    "SessionStarted",
    "StoredEvent",
    "ToolResult",
    "TranscriptImported",
    "TurnAborted",
    "Usage",
    "UserPrompt",
]

Origin: TypeAlias = Literal["user", "reminder", "repair", "background"]


class _EventBase(
    msgspec.Struct, frozen=True, tag_field="kind", omit_defaults=True, gc=False, kw_only=True
):
    """Base of every persisted event; encoded with a ``kind`` tag."""


class Usage(msgspec.Struct, frozen=True, omit_defaults=True, gc=False, kw_only=True):
    """Token usage of one model response, including the prompt-cache fields."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
        )


class SessionStarted(_EventBase, tag="session_started", frozen=True):
    """A session began in ``workdir`` with ``model``."""

    workdir: str
    model: str
    system_prompt: str | None = None


class UserPrompt(_EventBase, tag="user_prompt", frozen=True):
    """A user-role message entered the conversation.

    Only ``origin="user"`` makes a checkpoint; reminders, repair messages and background
    completion notices are conversation content but not points to restore to.
    """

    content: tuple[Block, ...]
    origin: Origin = "user"

    @property
    def text(self) -> str:
        """The prompt's text blocks joined by newlines."""
        return message_text(self.content)


class AssistantMessage(_EventBase, tag="assistant_message", frozen=True):
    """One complete model response: its blocks, usage, stop reason and model."""

    content: tuple[Block, ...]
    usage: Usage = Usage()
    stop_reason: str | None = None
    model: str | None = None


class ToolResult(_EventBase, tag="tool_result", frozen=True):
    """The result of one tool call, as the block the model will see.

    ``untracked`` is true when the call ran a tool that declares no paths and is not read-only
    (a shell command, a custom tool): what it did is outside the file snapshots, so a restore
    cannot undo it.
    """

    block: ToolResultBlock
    tool_name: str | None = None
    untracked: bool = False


class FileSnapshot(_EventBase, tag="file_snapshot", frozen=True):
    """A file's state captured before a tool call changed it.

    ``pre_image`` is the blob reference of the content before the call, or ``None`` when the file
    was absent; ``pre_hash`` and ``post_hash`` are SHA-256 hex digests before and after (``None``:
    absent). ``truncated`` marks a pre-image that was not stored in full, which cannot be restored.
    ``pre_mode`` is the file's permission bits before the call (``None``: absent, or not
    recorded), which a restore that recreates the file gives it back. ``created_folders`` are
    the folders (relative paths, outermost first) the call created to hold a file that was
    absent, which a restore to before the call removes again when they are empty.
    """

    path: str
    tool_call_id: str
    pre_image: str | None
    pre_hash: str | None
    post_hash: str | None = None
    truncated: bool = False
    pre_mode: int | None = None
    created_folders: tuple[str, ...] = ()


class PassRecord(msgspec.Struct, frozen=True, omit_defaults=True, gc=False, kw_only=True):
    """What one compaction pass did."""

    name: str
    tokens_before: int
    tokens_after: int
    detail: str = ""


class Compaction(_EventBase, tag="compaction", frozen=True):
    """A compaction of the conversation over seqs ``first_seq..last_seq``.

    The events stay in the log; the projection uses ``replacement`` (the compacted messages) in
    place of the conversation up to ``last_seq``, then the entries after it. ``passes`` record
    what each pass did, ``summary`` an LLM summary when there was one. ``spilled`` are the
    blob references of the tool-result bodies this compaction moved to the blob store (each the
    reference of a body in this session's log); the ``context`` tool reads only references a
    session recorded in such structured fields, never ones named in message text.
    """

    first_seq: int
    last_seq: int
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    passes: tuple[PassRecord, ...] = ()
    instructions: str | None = None
    replacement: tuple[Message, ...] = ()
    spilled: tuple[str, ...] = ()


class ContextSettings(msgspec.Struct, frozen=True, omit_defaults=True, gc=False, kw_only=True):
    """The settings a context engine projected a request with, recorded beside its decision so
    the same view can be projected again offline (see ``liteagent.context.verify_replay``).
    ``native_edits`` names the provider's own context edits the engine may use
    (``clear_tool_uses``, ``clear_thinking``)."""

    budget_tokens: int
    archive_threshold_bytes: int = 16384
    keep_recent_results: int = 4
    preview_chars: int = 400
    fixed_tokens: int = 0
    native_edits: tuple[str, ...] = ()


class ContextStatus(_EventBase, tag="context_status", frozen=True):
    """The context engine's decision for one request: pressure level, tokens and actions.

    ``tokens`` is the estimate before the engine acted, ``tokens_after`` that of the view it
    projected, ``budget`` the budget it projected for (smaller than the settings' budget after
    an overflow), ``settings`` everything else the projection depended on.
    """

    level: str
    tokens: int
    budget: int
    tokens_after: int | None = None
    actions: tuple[str, ...] = ()
    settings: ContextSettings | None = None


class ContentArchived(_EventBase, tag="content_archived", frozen=True):
    """The body of the tool result answering ``tool_use_id`` is in the blob store as ``ref``
    (UTF-8, ``chars`` characters, ``size`` bytes); views show a reference in its place, and the
    ``context`` tool reads it back. Appended with the tool result, after the blob is durable."""

    tool_use_id: str
    ref: str
    chars: int
    size: int


class ModelRequestRecord(_EventBase, tag="model_request", frozen=True):
    """What the model was shown: the hash of the projected view and its token estimate.

    ``request_digest`` is the SHA-256 (hex) of the request without its messages (model, system
    prompt, tools, limits, context edits), so a replay can check the messages alone against the
    log; ``native_edits`` what the provider reported its own context editing cleared.
    """

    view_hash: str
    token_estimate: int
    model: str | None = None
    request_digest: str | None = None
    native_edits: tuple[str, ...] = ()


class BackgroundStarted(_EventBase, tag="background_started", frozen=True):
    """A tool call started a background task (recorded with the call's result); its
    :class:`BackgroundCompleted` comes when it ends.

    ``pid``, ``host`` and ``process`` (the machine's boot, the pid namespace and the process's
    start time) name the process running it, so that a later process can tell a task whose
    process is gone, which will never report, from one still running elsewhere."""

    task_id: str
    tool_call_id: str = ""
    description: str = ""
    pid: int = 0
    host: str = ""
    process: str = ""


class BackgroundCompleted(_EventBase, tag="background_completed", frozen=True):
    """A background task finished (``ok`` false when it failed, or when it was found never to
    finish: its process ended first)."""

    task_id: str
    ok: bool = True
    summary: str = ""


class TurnAborted(_EventBase, tag="turn_aborted", frozen=True):
    """A turn stopped before completing (cancelled, failed, or cut by a crash).

    ``notice``, when not empty, closes the turn in the conversation: the fold adds it as an
    assistant message (a text block), so the next prompt opens a turn of its own instead of
    joining the stopped turn's last user message. With ``None`` (the default) nothing is added.
    """

    reason: str
    notice: str | None = None


class RestoreFile(msgspec.Struct, frozen=True, omit_defaults=True, gc=False, kw_only=True):
    """One file of a restore: what it is put back to (``target``: a blob ref, ``None`` = the
    file must not exist) and what it was before the restore (``backup``, likewise), with the
    SHA-256 of each, so the restore can be finished or rolled back after a crash.
    ``target_mode`` and ``backup_mode`` are the permission bits each had (``None``: not
    recorded); a file the restore (or its rollback, its undo) creates gets them back, a file it
    overwrites keeps its own."""

    path: str
    target: str | None
    target_hash: str | None
    backup: str | None
    backup_hash: str | None
    target_mode: int | None = None
    backup_mode: int | None = None


class RestoreStarted(_EventBase, tag="restore_started", frozen=True):
    """A restore to the checkpoint at ``to_seq`` is about to change files (and, with
    ``conversation``, truncate the log to ``to_seq - 1``). Until a :class:`RestoreFinished` for
    it (or the truncate that removes it), the session has an interrupted restore.

    ``branch`` names the branch session that keeps what it takes away (the events it removes
    and the files as they were before it), written after this record and before the truncate;
    a rollback deletes it. An undo (``undo_of``: the branch it brings back) is recorded the
    same way, appended right after the events it brings back, with ``to_seq`` its own seq (so
    finishing it truncates only the record away) and ``rollback_to`` the seq a rollback cuts
    the log back to (taking the brought-back events away again).
    """

    to_seq: int
    conversation: bool
    files: tuple[RestoreFile, ...] = ()
    branch: str | None = None
    undo_of: str | None = None
    rollback_to: int | None = None


class RestoreFinished(_EventBase, tag="restore_finished", frozen=True):
    """The restore started at ``started_seq`` ended: ``completed`` (files put back, log kept) or
    ``rolled_back`` (files returned to how they were before it; written only when the log
    moved on during the restore: otherwise a rollback cuts the log back to before the
    intent)."""

    started_seq: int
    outcome: Literal["completed", "rolled_back"]
    reason: str = ""


class BranchCreated(_EventBase, tag="branch_created", frozen=True):
    """The first event of a branch session: what a restore (``made_by="restore"``) or an undo
    (``"undo"``) took out of session ``origin`` so that it can be brought back. The events
    after it are the ones removed from ``origin`` from seq ``at_seq`` on (none for an undo,
    which only adds). ``files`` are that operation's file records: bringing the branch back
    puts each file to its ``backup`` again, and refuses when it no longer holds ``target``.
    ``conversation`` is whether it changed the conversation. The branch can be brought back
    while ``origin`` is exactly as the operation left it: ``head_after`` events whose digest
    is ``digest_after``.
    """

    origin: str
    at_seq: int
    files: tuple[RestoreFile, ...] = ()
    conversation: bool = True
    head_after: int = 0
    digest_after: str = ""
    made_by: str = "restore"
    undo_of: str | None = None


class Forked(_EventBase, tag="forked", frozen=True):
    """The last event of a fork's first write: the events before it are session ``origin``'s
    before its checkpoint ``at_seq``. ``workdir`` is the folder its files were restored into
    (``None``: it shares the original's workspace)."""

    origin: str
    at_seq: int
    workdir: str | None = None


class TranscriptImported(_EventBase, tag="transcript_imported", frozen=True):
    """How the messages of an imported transcript (``lite-agent import``) were written where
    their events do not say, so that an export gives each back as it came; written right after
    the session's ``session_started``, before the messages' events. ``shapes`` holds ``(seq,
    extra, string_content)`` for each message that had keys besides ``role`` and ``content``
    (``extra``, else ``None``) or a string ``content`` (``string_content``); ``seq`` is its
    first event's. ``extra_json`` holds ``(seq, text)`` for each message whose other keys hold a
    value the log cannot store as it is, as :attr:`Message.extra_json` keeps them (its ``extra``
    in ``shapes`` is then ``None``). ``digests`` holds ``(seq, digest)`` of each such first
    event: a shape applies only while that event is still at its seq (a restore or a fork
    before it keeps the shapes of the messages before their checkpoint, and a later event at
    that seq gets none); a shape without its digest applies to nothing. The conversation does
    not change: the model is sent neither those keys nor a string for the content."""

    shapes: tuple[tuple[int, dict[str, Any] | None, bool], ...] = ()
    extra_json: tuple[tuple[int, str], ...] = ()
    digests: tuple[tuple[int, str], ...] = ()


Event: TypeAlias = (
    SessionStarted
    | UserPrompt
    | AssistantMessage
    | ToolResult
    | FileSnapshot
    | Compaction
    | ContextStatus
    | ModelRequestRecord
    | BackgroundStarted
    | BackgroundCompleted
    | TurnAborted
    | RestoreStarted
    | RestoreFinished
    | ContentArchived
    | BranchCreated
    | Forked
    | TranscriptImported
)


class OpaqueEvent(msgspec.Struct, frozen=True, gc=False):
    """An event of a kind this version does not know, kept as its exact stored bytes.

    Appending it again stores the same kind and bytes, so unknown events round-trip.
    """

    kind: str
    data: bytes


class StoredEvent(msgspec.Struct, frozen=True, gc=False):
    """An event as stored: its position ``seq`` (1-based), append time ``ts`` (Unix seconds),
    ``kind`` and decoded ``body``."""

    seq: int
    ts: float
    kind: str
    body: Event | OpaqueEvent
