"""What an atomic ``write_file`` costs against the in-place write it replaced.

``write_file`` and ``edit_file`` replace a file atomically: a temp file beside it, fsynced and
renamed over it, and the folder fsynced (a kill never leaves the file half written, a hard link
is never written through). This measures that write (``write_bytes``, the part of the tools
that changed); the baseline is the write they used to do, in place: open, truncate, write, no
fsync. Both write the same content over the same existing file, interleaved
by rounds; reported: microseconds per write and the ratio atomic / in place (most of the
difference is the two fsyncs, which the in-place write never did).

    python bench/bench_file_tools.py            # 5 rounds
    python bench/bench_file_tools.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import add_common_args, interleave, print_header

from liteagent.tools import ToolContext, write_file
from liteagent.tools._files import write_bytes


def _in_place(path: Path, data: bytes) -> None:
    """The write ``write_file`` did before: truncate and write the file where it is."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.truncate(0)
        f.write(data)


def _loop(write: Callable[[], object], n: int) -> Callable[[], float]:
    def run() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            write()
        return time.perf_counter() - t0

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    args = p.parse_args()
    args.rounds = args.rounds or (2 if args.quick else args.default_rounds)
    print_header("write_file: atomic replace vs in-place write", args)
    n = 50 if args.quick else 400
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        root = Path(folder)
        ctx = ToolContext(workdir=root, session_id="s", tool_call_id="c")
        for size in (1_000, 100_000):
            data = b"x" * size
            (root / "f.txt").write_bytes(data)

            def atomic(data: bytes = data) -> None:
                write_bytes(root / "f.txt", data)

            def in_place(data: bytes = data) -> None:
                _in_place(root / "f.txt", data)

            got = interleave(
                {
                    "atomic": _loop(atomic, n),
                    "in place": _loop(in_place, n),
                },
                n,
                args.rounds,
            )
            us = {k: statistics.median(m.times) / n * 1e6 for k, m in got.items()}
            ratio = us["atomic"] / us["in place"]
            print(
                f"{size:>7} bytes: atomic {us['atomic']:8.1f} µs, "
                f"in place {us['in place']:7.1f} µs; atomic / in place {ratio:5.1f}x"
            )
        check = write_file.run({"path": "f.txt", "content": "end"}, ctx)
        assert not check.is_error
        assert (root / "f.txt").read_text() == "end"


if __name__ == "__main__":
    main()
