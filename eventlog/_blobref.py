"""Blob references: ``sha256:<hex>`` of a blob's plain content, and what a blob store lists."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from typing import NamedTuple

from ._errors import CorruptBlobError, InvalidArgumentError, InvalidBlobRefError
from ._shown import shown

__all__ = [
    "BLOB_REF_PATTERN",
    "BlobInfo",
    "blob_ref",
    "check_blob_data",
    "check_blob_refs",
    "check_written_before",
    "is_blob_ref",
    "parse_blob_ref",
    "verify_blob",
]

BLOB_REF_PATTERN = r"sha256:[0-9a-f]{64}"
_REF = re.compile(BLOB_REF_PATTERN)


def blob_ref(data: bytes) -> str:
    """Return the reference a blob store gives ``data``: ``sha256:`` + the hex digest."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_blob_ref(value: object) -> bool:
    """Whether ``value`` is a blob reference (a store lists nothing else: a row or file of
    another name is not a blob)."""
    return type(value) is str and _REF.fullmatch(value) is not None


def parse_blob_ref(ref: object) -> str:
    """Return the hex digest of ``ref``; raise :class:`InvalidBlobRefError` if malformed."""
    if type(ref) is not str or _REF.fullmatch(ref) is None:
        raise InvalidBlobRefError(f"not a blob reference (sha256:<64 hex digits>): {shown(ref)}")
    return ref[7:]


def check_blob_data(data: object) -> bytes:
    """Return ``data`` as ``bytes``; raise :class:`InvalidArgumentError` unless it is bytes-like
    (what every ``BlobStore.put`` accepts)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"blob data must be bytes, got {type(data).__name__}")
    return bytes(data)


def check_blob_refs(refs: object) -> list[str]:
    """``refs`` (what ``touch`` and ``delete_blobs`` take) as a list, each checked with
    :func:`parse_blob_ref`; :class:`InvalidArgumentError` unless it is an iterable of
    references (a single ``str`` is not one: it would be taken character by character)."""
    if isinstance(refs, (str, bytes, bytearray)) or not isinstance(refs, Iterable):
        raise InvalidArgumentError(
            f"refs must be an iterable of blob references, got {type(refs).__name__}"
        )
    wanted = list(refs)
    for ref in wanted:
        parse_blob_ref(ref)
    return wanted


def check_written_before(value: object) -> float:
    """``written_before`` (``delete_blobs``) as a float; :class:`InvalidArgumentError` unless
    it is a finite ``int`` or ``float`` (a time in seconds since the epoch). A store must check
    it before it deletes anything: a text compared with numbers in SQL is greater than all."""
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise InvalidArgumentError(
            f"written_before must be a finite number of seconds, got {shown(value)}"
        )
    return float(value)  # type: ignore[arg-type]


class BlobInfo(NamedTuple):
    """A stored blob: its reference, its write time (Unix seconds: the last ``put`` or
    ``touch`` of it) and its stored size in bytes."""

    ref: str
    written: float
    size: int


def verify_blob(ref: str, data: bytes) -> bytes:
    """Return ``data`` if it hashes to ``ref``, else raise :class:`CorruptBlobError`."""
    if blob_ref(data) != ref:
        raise CorruptBlobError(f"blob {ref} is damaged: its content no longer matches its hash")
    return data
