"""Random damage to a closed file-backend log, for the corruption suite.

Every function here changes the bytes of ``<root>/<session_id>.log`` in one random way and
returns a description of what it did. A description that starts with :data:`TAIL_LOSS` says
the damage only removed (or zeroed) the end of the log, which the store cannot tell from an
unfinished last write: a read may then legitimately return an exact prefix of the history.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

from .._frames import FILE_HEADER_SIZE, Frame, FrameScanner

__all__ = ["TAIL_LOSS", "damage_file_log", "file_frames"]

TAIL_LOSS = "tail loss: "
"""The start of a damage description that only cut or zeroed the end of the stored history."""

_PAGE = 4096


def file_frames(log: Path) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of the whole frames at the start of a log file."""
    fd = os.open(log, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        spans = []
        for item in FrameScanner(fd, FILE_HEADER_SIZE, size):
            if not isinstance(item, Frame):
                break
            spans.append((item.offset, item.end))
        return spans
    finally:
        os.close(fd)


def _flip_bits(data: bytearray, rng: random.Random) -> str:
    n = rng.randint(1, 3)
    where = sorted(rng.randrange(len(data)) for _ in range(n))
    for off in where:
        data[off] ^= 1 << rng.randrange(8)
    return f"flipped {n} bits at bytes {where}"


def _truncate(data: bytearray, rng: random.Random) -> str:
    cut = rng.randrange(len(data))
    del data[cut:]
    return f"{TAIL_LOSS}cut the file to {cut} bytes"


def _append_garbage(data: bytearray, rng: random.Random) -> str:
    n = rng.randint(1, 300)
    style = rng.choice(["random", "zeros", "copy"])
    if style == "random":
        data += rng.randbytes(n)
    elif style == "zeros":
        data += bytes(n)
    else:
        start = rng.randrange(len(data))
        data += data[start : start + n]
    return f"appended {n} bytes of {style} garbage"


def _zero_range(data: bytearray, rng: random.Random) -> str:
    if rng.random() < 0.5:
        start = rng.randrange(len(data))
        end = rng.randint(start + 1, min(len(data), start + 200))
        what = "a range"
    else:
        page = rng.randrange((len(data) + _PAGE - 1) // _PAGE)
        start, end = page * _PAGE, min(len(data), (page + 1) * _PAGE)
        what = f"page {page}"
    data[start:end] = bytes(end - start)
    tail = TAIL_LOSS if end == len(data) else ""
    return f"{tail}zeroed {what}: bytes {start}..{end} of {len(data)}"


def _damage_header(data: bytearray, rng: random.Random) -> str:
    style = rng.choice(["flip", "zero", "magic"])
    if style == "flip":
        off = rng.randrange(min(FILE_HEADER_SIZE, len(data)))  # a log cut below its header
        data[off] ^= 1 << rng.randrange(8)
        return f"flipped a bit of the file header at byte {off}"
    if style == "zero":
        data[:FILE_HEADER_SIZE] = bytes(FILE_HEADER_SIZE)
        return "zeroed the file header"
    data[0:5] = b"XXXXX"
    return "overwrote the file header's magic"


def _frame_damage(data: bytearray, spans: list[tuple[int, int]], rng: random.Random) -> str:
    """Damage made of whole frames: duplicated, swapped, dropped or repeated frames."""
    style = rng.choice(
        ["duplicate", "duplicate_at_end", "swap", "swap_last", "drop", "repeat_last"]
    )
    if len(spans) < 2 and style in ("swap", "swap_last", "drop", "repeat_last"):
        style = "duplicate"
    frames = [bytes(data[a:b]) for a, b in spans]
    rest = bytes(data[spans[-1][1] :])
    i = rng.randrange(len(frames))
    if style == "duplicate":
        frames.insert(i + 1, frames[i])
        what = f"duplicated frame {i} in place"
    elif style == "duplicate_at_end":
        frames.append(frames[i])
        what = f"appended a copy of frame {i}"
    elif style in ("swap", "swap_last"):
        if style == "swap_last":
            i, j = len(frames) - 2, len(frames) - 1
        else:
            i, j = rng.sample(range(len(frames)), 2)
        frames[i], frames[j] = frames[j], frames[i]
        what = f"swapped frames {i} and {j}"
    elif style == "drop":
        i = rng.randrange(len(frames) - 1)  # the last one dropped would be a tail loss
        del frames[i]
        what = f"dropped frame {i} of {len(frames) + 1}"
    else:
        i = rng.randrange(len(frames) - 1)
        frames[-1] = frames[i]
        what = f"replaced the last frame by a copy of frame {i}"
    data[FILE_HEADER_SIZE:] = b"".join(frames) + rest
    return what


_BYTE_DAMAGE: list[Callable[[bytearray, random.Random], str]] = [
    _flip_bits,
    _truncate,
    _append_garbage,
    _zero_range,
    _damage_header,
]


def damage_file_log(path: Path, session_id: str, rng: random.Random) -> str:
    """Damage the file-backend log of ``session_id`` under the store folder ``path`` in one
    random way (bit flips, a truncation, appended garbage, duplicated, swapped, dropped or
    repeated frames, zeroed ranges or pages, a damaged header); return what was done.

    The store must be closed. A session without a log file gets a log of garbage bytes.
    """
    log = Path(path) / f"{session_id}.log"
    if not log.exists() or log.stat().st_size == 0:
        log.write_bytes(rng.randbytes(rng.randint(1, 100)))
        return f"wrote a log of garbage for a session that had none ({session_id})"
    data = bytearray(log.read_bytes())
    spans = file_frames(log) if len(data) > FILE_HEADER_SIZE else []
    if spans and rng.random() < 0.35:
        what = _frame_damage(data, spans, rng)
    else:
        what = rng.choice(_BYTE_DAMAGE)(data, rng)
    log.write_bytes(bytes(data))
    return f"{what} ({session_id}.log)"
