"""FileSnapshotActor: one per workspace, shared by the sessions working there.

Before a file-changing tool runs, the session asks it for the pre-images of the paths the tool
declared: each file's content goes to the blob store (or is recorded as absent) with its SHA-256.
After the tool ran, the session asks for the post-hashes. The session appends both, as
``FileSnapshot`` events, in the same atomic append as the tool's result.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import msgspec

from liteagent.eventlog import BlobStore
from liteagent.eventlog.types import FileSnapshot, RestoreFile

from ._envelope import ActorBase, ActorMessage, Envelope
from ._hub import EventHub, LiveEvent
from ._live import CheckpointRestore
from ._restore_files import apply_files
from ._restore_plan import current_hash, read_regular

__all__ = [
    "MAX_SNAPSHOT_BYTES",
    "ApplyRestore",
    "FileSnapshotActor",
    "PostHashes",
    "PreImages",
    "snapshot_event",
]

MAX_SNAPSHOT_BYTES = 8 * 1024 * 1024
"""The default snapshot cap (8 MiB): a larger file is recorded as truncated — changed, but not
restorable (it shows in a checkpoint's ``unavailable_files`` and blocks a file restore)."""


class PreImages(ActorMessage, tag="pre_images", frozen=True):
    """Store the current content of ``paths`` (absolute, inside the workspace)."""

    paths: tuple[str, ...]


class PostHashes(ActorMessage, tag="post_hashes", frozen=True):
    """Hash the current content of ``paths``."""

    paths: tuple[str, ...]


class ApplyRestore(ActorMessage, tag="apply_restore", frozen=True):
    """Put ``files`` to their targets (``to_target``) or back to their backups; reply with the
    paths. A failed write while going to the targets rolls back and raises RestoreFailedError.
    The restore's cancel token and session lease travel beside the message."""

    session_id: str
    files: tuple[RestoreFile, ...]
    to_target: bool


SnapshotMessage = PreImages | PostHashes | ApplyRestore


class PreImage(msgspec.Struct, frozen=True):
    """A file as it was before a tool call: its blob ref, hash and permission bits, or ``None``
    when absent."""

    path: str
    ref: str | None
    sha256: str | None
    truncated: bool = False
    mode: int | None = None
    missing_folders: tuple[str, ...] = ()  # absent: the folders on its path that are absent


class FileSnapshotActor(ActorBase):
    """Snapshots files of one workspace into one blob store."""

    decoder = msgspec.msgpack.Decoder(SnapshotMessage)

    def __init__(
        self,
        workdir: Path,
        blobs: BlobStore,
        hub: EventHub | None = None,
        max_bytes: int = MAX_SNAPSHOT_BYTES,
    ) -> None:
        super().__init__()
        self.workdir = workdir
        self.blobs = blobs
        self.hub = hub
        self.max_bytes = max_bytes

    def handle(self, message: Any, envelope: Envelope) -> Any:
        if isinstance(message, PreImages):
            return [self._pre_image(p) for p in message.paths]
        if isinstance(message, PostHashes):
            return [current_hash(p) for p in message.paths]
        assert isinstance(message, ApplyRestore)
        cancel = envelope.cancel
        return apply_files(
            self.workdir,
            message.files,
            self.blobs,
            to_target=message.to_target,
            progress=lambda done, total: self._progress(message.session_id, done, total),
            stop=(lambda: cancel.reason or "cancelled" if cancel.cancelled else None)
            if cancel is not None
            else None,
            lease=envelope.lease,
        )

    def _progress(self, session_id: str, done: int, total: int) -> None:
        if self.hub is not None:
            self.hub.publish(
                LiveEvent(
                    session_id, CheckpointRestore(phase="progress", completed=done, total=total)
                )
            )

    def _pre_image(self, path: str) -> PreImage:
        now = read_regular(path, self.max_bytes)  # a FIFO is not read: it never blocks
        if now is None:
            return PreImage(path, None, None, missing_folders=_missing_folders(self.workdir, path))
        if len(now.data) > self.max_bytes:
            return PreImage(path, None, current_hash(path), truncated=True, mode=now.mode)
        return PreImage(
            path, self.blobs.put(now.data), hashlib.sha256(now.data).hexdigest(), mode=now.mode
        )


def _missing_folders(workdir: Path, path: str) -> tuple[str, ...]:
    """The folders between the workspace and the file ``path`` that do not exist, outermost
    first (a tool that writes the file creates them)."""
    inside = os.path.join(workdir, "")
    missing: list[str] = []
    folder = os.path.dirname(path)
    while folder.startswith(inside) and not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return tuple(reversed(missing))


def snapshot_event(
    pre: PreImage, post_hash: str | None, tool_call_id: str, workdir: Path
) -> FileSnapshot:
    """The ``FileSnapshot`` event for one file a tool call changed (path relative to the
    workspace), with the folders the call created for it."""
    rel = os.path.relpath(pre.path, workdir)
    created = tuple(
        os.path.relpath(folder, workdir)
        for folder in pre.missing_folders
        if os.path.isdir(folder) and not os.path.islink(folder)
    )
    return FileSnapshot(
        path=rel,
        tool_call_id=tool_call_id,
        pre_image=pre.ref,
        pre_hash=pre.sha256,
        post_hash=post_hash,
        truncated=pre.truncated,
        pre_mode=pre.mode,
        created_folders=created,
    )
