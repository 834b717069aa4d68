"""The child process of the ``grep`` tool: it compiles the model's regex and matches it, so that
a regex that backtracks for ever, or needs gigabytes, costs a process that can be killed and
never the host's GIL, memory or event loop (see ``_grep_process``).

It runs as ``python -I -S -W ignore -c <the text of this file> liteagent-grep`` and uses the
standard library only (it is not imported as part of liteagent, so it starts in ~20 ms). Its
address space is capped at the header's ``memory_bytes``.

Protocol, one JSON value per line. In (stdin): a header object ``{"pattern", "ignore_case",
"memory_bytes", "max_file_bytes", "sniff_bytes", "line_chars", "max_matches", "max_chars"}``,
then one ``[rel, path_hex]`` per file to search (``path_hex``: the real path's bytes in hex),
then end of file. Out (stdout): ``["m", "rel:line:text"]`` per matching line, ``["large"]`` per
file over the size limit, ``["unreadable", rel, errno, strerror]``, and one final message:
``["done"]`` (all files searched), ``["full"]`` (the output caps were reached), ``["bad",
message]`` (the regex does not compile) or ``["fail", message]`` (anything else went wrong).
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from typing import IO, Any

_TAG = "liteagent-grep"


def _emit(out: IO[bytes], message: list[Any]) -> None:
    out.write(json.dumps(message).encode("ascii") + b"\n")
    out.flush()


def _limit_memory(limit: int) -> None:
    try:
        import resource  # noqa: PLC0415 -- POSIX only; without it the cap is skipped
    except ImportError:
        return
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        return


class _Search:
    def __init__(self, regex: re.Pattern[str], header: dict[str, Any], out: IO[bytes]) -> None:
        self.regex = regex
        self.out = out
        self.max_file_bytes: int = header["max_file_bytes"]
        self.sniff_bytes: int = header["sniff_bytes"]
        self.line_chars: int = header["line_chars"]
        self.max_matches: int = header["max_matches"]
        self.max_chars: int = header["max_chars"]
        self.matches = 0
        self.chars = 0

    def file(self, rel: str, path: bytes) -> bool:
        """Search one file; return False once the output is full."""
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                return True  # a FIFO or device would block or never end
            if st.st_size > self.max_file_bytes:
                _emit(self.out, ["large"])
                return True
            with open(path, "rb") as f:
                data = f.read(self.max_file_bytes + 1)
        except OSError as e:
            _emit(self.out, ["unreadable", rel, e.errno or 0, e.strerror or str(e)])
            return True
        if len(data) > self.max_file_bytes:  # it grew since the stat
            _emit(self.out, ["large"])
            return True
        if b"\x00" in data[: self.sniff_bytes]:
            return True
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return True
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        search = self.regex.search
        for lineno, line in enumerate(lines, start=1):
            if search(line) is None:
                continue
            shown = line.rstrip("\r")
            if len(shown) > self.line_chars:
                shown = shown[: self.line_chars] + "…"
            found = f"{rel}:{lineno}:{shown}"
            if self.matches >= self.max_matches or self.chars + len(found) > self.max_chars:
                return False
            _emit(self.out, ["m", found])
            self.matches += 1
            self.chars += len(found) + 1
        return True


def main() -> None:
    """Read the header and the files from stdin, write the results to stdout (docstring)."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        header = json.loads(inp.readline())
        _limit_memory(header["memory_bytes"])
        try:
            regex = re.compile(header["pattern"], re.IGNORECASE if header["ignore_case"] else 0)
        except Exception as e:  # noqa: BLE001 -- re.error, OverflowError, RecursionError...
            reason = str(e) if isinstance(e, re.error) else f"{type(e).__name__}: {e}"
            _emit(out, ["bad", reason])
            return
        search = _Search(regex, header, out)
        for raw in inp:
            rel, path_hex = json.loads(raw)
            if not search.file(rel, bytes.fromhex(path_hex)):
                _emit(out, ["full"])
                return
        _emit(out, ["done"])
    except BrokenPipeError:
        return  # the parent stopped listening
    except Exception as e:  # noqa: BLE001 -- MemoryError above all: report, do not trace
        try:
            _emit(out, ["fail", f"{type(e).__name__}: {e}"])
        except OSError:
            return


if __name__ == "__main__" and sys.argv[1:] == [_TAG]:
    main()
