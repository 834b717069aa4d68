"""write_file and edit_file replace a file atomically: never half written (a real process is
SIGKILLed mid-write), never written through a hard link, mode and owner kept."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from liteagent.tools import ToolContext, edit_file, write_file

pytestmark = pytest.mark.processes


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace folder beside an ``outside`` folder."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    return tmp_path / "ws"


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    """A context for calls in the workspace."""
    return ToolContext(workdir=ws, session_id="s1", tool_call_id="call-1")


def _temps(folder: Path) -> list[str]:
    """The temp files of a replace left in ``folder``."""
    return [n for n in os.listdir(folder) if n.startswith(".liteagent-put-")]


def test_write_file_breaks_a_hard_link_to_a_file_outside(ws: Path, ctx: ToolContext) -> None:
    """A workspace file that is a hard link to a file outside the workspace gets the new
    content; the file outside keeps its own (it used to be written through the link)."""
    outside = ws.parent / "outside" / "secret.txt"
    outside.write_text("secret\n")
    os.link(outside, ws / "linked.txt")
    out = write_file.run({"path": "linked.txt", "content": "new\n"}, ctx)
    assert (False, "new\n", "secret\n") == (
        out.is_error,
        (ws / "linked.txt").read_text(),
        outside.read_text(),
    )
    assert [] == _temps(ws)


def test_edit_file_breaks_a_hard_link_to_a_file_outside(ws: Path, ctx: ToolContext) -> None:
    """edit_file, like write_file, replaces the workspace name, not the shared content."""
    outside = ws.parent / "outside" / "config.py"
    outside.write_text("DEBUG = False\n")
    os.link(outside, ws / "config.py")
    out = edit_file.run({"path": "config.py", "old_string": "False", "new_string": "True"}, ctx)
    assert (False, "DEBUG = True\n", "DEBUG = False\n") == (
        out.is_error,
        (ws / "config.py").read_text(),
        outside.read_text(),
    )


def test_a_replaced_file_keeps_its_mode(ws: Path, ctx: ToolContext) -> None:
    """The permission bits of the file written over are kept (an executable stays one)."""
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\necho a\n")
    script.chmod(0o751)
    write_file.run({"path": "run.sh", "content": "#!/bin/sh\necho b\n"}, ctx)
    edit_file.run({"path": "run.sh", "old_string": "echo b", "new_string": "echo c"}, ctx)
    assert (0o751, "#!/bin/sh\necho c\n") == (
        stat.S_IMODE(script.stat().st_mode),
        script.read_text(),
    )


def test_a_read_only_file_is_written_only_where_in_place_writing_would_be(
    ws: Path, ctx: ToolContext
) -> None:
    """The rename would be allowed by the folder's permissions; the file's own decide, as for a
    write in place: refused with a permission error unless the process may write it (root
    may), and then replaced with its read-only mode kept."""
    locked = ws / "locked.txt"
    locked.write_text("keep\n")
    locked.chmod(0o444)
    may_write = os.access(locked, os.W_OK)
    out = write_file.run({"path": "locked.txt", "content": "changed\n"}, ctx)
    if may_write:
        assert (False, "changed\n") == (out.is_error, locked.read_text())
    else:
        assert (True, "keep\n") == (out.is_error, locked.read_text())
        assert "permission" in out.content.lower()
    assert 0o444 == stat.S_IMODE(locked.stat().st_mode)


def test_a_failed_write_leaves_the_file_and_no_temp_file(ws: Path, ctx: ToolContext) -> None:
    """Writing over a folder's place fails before anything changes: no temp file remains."""
    (ws / "d").mkdir()
    (ws / "d" / "inner.txt").write_text("x")
    out = write_file.run({"path": "d", "content": "y"}, ctx)
    assert (True, "x", []) == (out.is_error, (ws / "d" / "inner.txt").read_text(), _temps(ws))


_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from liteagent.tools import ToolContext, write_file

    ws = Path(sys.argv[1])
    ctx = ToolContext(workdir=ws, session_id="s1", tool_call_id="c")
    contents = ["a" * 4_000_000, "b" * 4_000_000]
    i = 0
    print("ready", flush=True)
    while True:
        i += 1
        out = write_file.run({"path": "big.txt", "content": contents[i % 2]}, ctx)
        assert not out.is_error, out.content
    """
)


def test_a_write_killed_at_any_moment_leaves_the_old_or_the_new_content(ws: Path) -> None:
    """A process writing a 4 MB file over and over is SIGKILLed at random moments: the file
    always holds one whole content (an in-place write used to leave it truncated or half
    written), and the next write removes the temp file the kill left."""
    rng = random.Random(20261205)
    whole = {b"a" * 4_000_000, b"b" * 4_000_000}
    (ws / "big.txt").write_bytes(b"a" * 4_000_000)
    seen = []
    for _ in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(ws)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            assert "ready" == proc.stdout.readline().strip()
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            if proc.stdout is not None:
                proc.stdout.close()
        data = (ws / "big.txt").read_bytes()
        seen.append(len(data))
        assert data in whole, f"a kill left {len(data)} bytes"
    ctx = ToolContext(workdir=ws, session_id="s1", tool_call_id="c")
    write_file.run({"path": "big.txt", "content": "done"}, ctx)
    assert ("done", []) == ((ws / "big.txt").read_text(), _temps(ws))


_RACER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from liteagent.tools import ToolContext, write_file

    ws, me = Path(sys.argv[1]), sys.argv[2]
    ctx = ToolContext(workdir=ws, session_id=me, tool_call_id="c")
    outs = [
        write_file.run({"path": "shared.txt", "content": f"{me} {i}" * 1000}, ctx)
        for i in range(300)
    ]
    failed = [out.content for out in outs if out.is_error]
    print(len(failed), failed[:1])
    """
)


def test_two_processes_writing_one_file_never_fail_each_other(ws: Path) -> None:
    """Two processes write the same file 300 times each: every write succeeds and no temp file
    is left. A write used to remove the other's temp file while it was being written (taking it
    for one a crash left), and the other's rename then failed (about 40 % of the writes)."""
    (ws / "shared.txt").write_text("start")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(ws), me], stdout=subprocess.PIPE, text=True
        )
        for me in ("A", "B")
    ]
    outputs = [p.communicate(timeout=240)[0].strip() for p in procs]
    assert ["0 []", "0 []"] == outputs
    assert ["shared.txt"] == os.listdir(ws)
