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

from liteagent.eventlog import BlobStore, FileSnapshot

from ._envelope import ActorBase, Envelope, Message

__all__ = ["MAX_SNAPSHOT_BYTES", "FileSnapshotActor", "PostHashes", "PreImages", "snapshot_event"]

MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024
"""Files larger than this are recorded as truncated: changed, but not restorable."""


class PreImages(Message, tag="pre_images", frozen=True):
    """Store the current content of ``paths`` (absolute, inside the workspace)."""

    paths: tuple[str, ...]


class PostHashes(Message, tag="post_hashes", frozen=True):
    """Hash the current content of ``paths``."""

    paths: tuple[str, ...]


SnapshotMessage = PreImages | PostHashes


class PreImage(msgspec.Struct, frozen=True):
    """A file as it was before a tool call: its blob ref and hash, or ``None`` when absent."""

    path: str
    ref: str | None
    sha256: str | None
    truncated: bool = False


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_SNAPSHOT_BYTES + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _hash_file(path: str) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


class FileSnapshotActor(ActorBase):
    """Snapshots files of one workspace into one blob store."""

    decoder = msgspec.msgpack.Decoder(SnapshotMessage)

    def __init__(self, workdir: Path, blobs: BlobStore) -> None:
        super().__init__()
        self.workdir = workdir
        self.blobs = blobs

    def handle(self, message: Any, envelope: Envelope) -> Any:  # noqa: ARG002 -- no side data
        if isinstance(message, PreImages):
            return [self._pre_image(p) for p in message.paths]
        assert isinstance(message, PostHashes)
        return [_hash_file(p) for p in message.paths]

    def _pre_image(self, path: str) -> PreImage:
        data = _read(path)
        if data is None:
            return PreImage(path, None, None)
        if len(data) > MAX_SNAPSHOT_BYTES:
            return PreImage(path, None, _hash_file(path), truncated=True)
        return PreImage(path, self.blobs.put(data), hashlib.sha256(data).hexdigest())


def snapshot_event(
    pre: PreImage, post_hash: str | None, tool_call_id: str, workdir: Path
) -> FileSnapshot:
    """The ``FileSnapshot`` event for one file a tool call changed (path relative to the
    workspace)."""
    rel = os.path.relpath(pre.path, workdir)
    return FileSnapshot(
        path=rel,
        tool_call_id=tool_call_id,
        pre_image=pre.ref,
        pre_hash=pre.sha256,
        post_hash=post_hash,
        truncated=pre.truncated,
    )
