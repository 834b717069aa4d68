"""Hostile model input against the built-in tools: each tool answers every input with a
ToolOutput (an error or not) that the log can store, never an exception and never a hang; the
siblings of the catastrophic-regex defect found on the way each have a test here."""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import shlex
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.tools import (
    InvalidPathError,
    Tool,
    ToolContext,
    ToolOutput,
    bash,
    default_tools,
    edit_file,
    glob,
    grep,
    read_file,
    resolve_in_workspace,
    write_file,
)
from liteagent.tools._edit import MATCH_COUNT_CAP
from liteagent.tools._files import MAX_EDIT_BYTES
from liteagent.tools._search import make_glob, make_grep

pytestmark = pytest.mark.processes

_GUARD_SECONDS = 120.0


@contextlib.contextmanager
def hang_guard(seconds: float = _GUARD_SECONDS) -> Iterator[None]:
    """Ends the whole test process, printing every thread's stack, if the body has not
    finished after ``seconds``: a hang guard that fires even while a thread holds the GIL."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _ctx(ws: Path, cancel: CancelToken | None = None) -> ToolContext:
    return ToolContext(ws, "s1", "call-1", cancel=cancel or CancelToken())


def _storable(out: ToolOutput) -> bool:
    """Whether ``out`` is a ToolOutput whose text the log can store (valid UTF-8)."""
    try:
        out.content.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return isinstance(out, ToolOutput) and isinstance(out.is_error, bool)


# -- glob and the walk ------------------------------------------------------------------------


def test_glob_with_many_stars_answers(ws: Path) -> None:
    """A pattern of many stars against a long name is answered (a naive regex translation
    backtracks for ever on it)."""
    (ws / ("a" * 60)).write_text("x")
    with hang_guard():
        out = glob.run({"pattern": "*a" * 30 + "b"}, _ctx(ws))
    assert ToolOutput(f"no files match {'*a' * 30 + 'b'!r}") == out


def test_glob_with_many_double_stars_answers(ws: Path) -> None:
    """Many ** components against a deep path are answered."""
    deep = ws.joinpath(*["a"] * 40)
    deep.mkdir(parents=True)
    with hang_guard():
        out = glob.run({"pattern": "**/a/" * 20 + "b"}, _ctx(ws))
    assert ToolOutput(f"no files match {'**/a/' * 20 + 'b'!r}") == out


def test_glob_star_matching_is_still_exact(ws: Path) -> None:
    """Stars, sets and ** keep their meaning under the new matcher."""
    for rel in ["src/a1.py", "src/b/c2.py", "src/b/x.txt", "ab.py"]:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("")
    out = glob.run({"pattern": "src/**/[a-c]?.py"}, _ctx(ws))
    assert ToolOutput("src/a1.py\nsrc/b/c2.py") == out


def test_glob_with_a_reversed_range_is_an_error(ws: Path) -> None:
    """A set with a reversed range is an error naming it."""
    out = glob.run({"pattern": "[z-a]*"}, _ctx(ws))
    assert ToolOutput("pattern '[z-a]*': the range z-a is reversed", is_error=True) == out


_DEPTH = 1100  # deeper than Python's default recursion limit (1000)


@pytest.fixture
def deep_ws(ws: Path) -> Iterator[Path]:
    """``ws`` with ``d/d/.../d/end.txt``, :data:`_DEPTH` folders deep. Made and removed
    through open folders, level by level: recursive helpers (shutil.rmtree, pytest's clean-up
    of old temporary folders) fail on a tree this deep, so the fixture leaves none behind."""
    fds = [os.open(ws, os.O_RDONLY)]
    try:
        for _ in range(_DEPTH):
            os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
        os.close(os.open("end.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fds[-1]))
        yield ws
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink("end.txt", dir_fd=fds[-1])
        while len(fds) > 1:
            os.close(fds.pop())
            os.rmdir("d", dir_fd=fds[-1])
        os.close(fds.pop())


def test_glob_walks_a_very_deep_tree(deep_ws: Path) -> None:
    """A tree deeper than Python's recursion limit is walked to the bottom."""
    out = glob.run({"pattern": "**/end.txt"}, _ctx(deep_ws))
    assert ToolOutput("d/" * _DEPTH + "end.txt") == out


def test_glob_stops_at_its_time_limit(ws: Path) -> None:
    """Past its time limit glob stops with an error output."""
    (ws / "a.txt").write_text("")
    out = make_glob(0.0).run({"pattern": "**"}, _ctx(ws))
    assert (True, "[glob stopped after 0 s") == (out.is_error, out.content[:23])


def test_names_that_are_not_utf8_are_shown_escaped(ws: Path) -> None:
    """A file name that is not UTF-8 is listed with its undecodable byte escaped, so the
    output is valid text."""
    (ws / os.fsdecode(b"caf\xe9.txt")).write_text("NEEDLE\n")
    assert (ToolOutput("caf\\udce9.txt"), ToolOutput("caf\\udce9.txt:1:NEEDLE")) == (
        glob.run({"pattern": "*.txt"}, _ctx(ws)),
        grep.run({"pattern": "NEEDLE"}, _ctx(ws)),
    )


def test_a_name_that_is_not_utf8_is_addressed_as_the_tools_print_it(ws: Path) -> None:
    """A name glob printed with ``\\udcXX`` escapes, given back to the file tools, names that
    file (read, and a new file in a folder so named); a file really named with the escape
    text wins; a path where neither exists is taken as written."""
    (ws / os.fsdecode(b"caf\xe9.txt")).write_text("NEEDLE\n")
    (ws / os.fsdecode(b"d\xff")).mkdir()
    printed = glob.run({"pattern": "*.txt"}, _ctx(ws)).content
    assert "1\tNEEDLE" in read_file.run({"path": printed}, _ctx(ws)).content
    assert not write_file.run({"path": "d\\udcff/new.txt", "content": "x"}, _ctx(ws)).is_error
    assert "x" == (ws / os.fsdecode(b"d\xff") / "new.txt").read_text()
    assert resolve_in_workspace(ws, "caf\\udce9.txt") == ws / os.fsdecode(b"caf\xe9.txt")
    (ws / "caf\\udce9.txt").write_text("literal")
    assert resolve_in_workspace(ws, "caf\\udce9.txt") == ws / "caf\\udce9.txt"
    assert resolve_in_workspace(ws, "x\\udcff/y") == ws / "x\\udcff" / "y"
    assert resolve_in_workspace(ws, "\\udc41.txt") == ws / "\\udc41.txt"  # not a byte escape


def test_a_name_with_a_newline_stays_on_one_line(ws: Path) -> None:
    """A file name holding a newline (or another control character) is printed by glob and
    grep with it written as ``\\x0a``, one name per line, and that spelling reads the file."""
    (ws / "two\nlines.txt").write_text("NEEDLE\n")
    (ws / "tab\there.txt").write_text("NEEDLE\n")
    listed = glob.run({"pattern": "*.txt"}, _ctx(ws))
    found = grep.run({"pattern": "NEEDLE"}, _ctx(ws))
    assert ["tab\\x09here.txt", "two\\x0alines.txt"] == listed.content.splitlines()
    assert ["tab\\x09here.txt:1:NEEDLE", "two\\x0alines.txt:1:NEEDLE"] == sorted(
        found.content.splitlines()
    )
    assert "1\tNEEDLE" in read_file.run({"path": "two\\x0alines.txt"}, _ctx(ws)).content
    edited = edit_file.run(
        {"path": "two\\x0alines.txt", "old_string": "NEEDLE", "new_string": "found"}, _ctx(ws)
    )
    assert "two\\x0alines.txt" in edited.content
    assert "found\n" == (ws / "two\nlines.txt").read_text()
    assert ws / "x\\x00" == resolve_in_workspace(ws, "x\\x00")  # never a NUL byte


_NAME_BYTES = st.binary(min_size=1, max_size=12).filter(
    lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b"..")
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(_NAME_BYTES, min_size=1, max_size=4, unique=True))
@example(names=[b"\xc2\x85"])  # U+0085, a line break to str.splitlines
@example(names=[b"\xc2\x85\x01", b"a\xe2\x80\xa8b", b"p\xe2\x80\xa9", b"\\x85", b"\xc2\x9f"])
def test_every_name_glob_prints_reads_back(
    tmp_path_factory: pytest.TempPathFactory, names: list[bytes]
) -> None:
    """Any file names (random bytes, UTF-8 or not, ``\\`` included): each name glob prints,
    given to read_file, reads that file's own content."""
    ws = tmp_path_factory.mktemp("ws")
    for n, name in enumerate(names):
        (ws / os.fsdecode(name)).write_text(f"content {n}\n")
    printed = glob.run({"pattern": "*"}, _ctx(ws)).content.splitlines()
    assert len(names) == len(printed)
    contents = {read_file.run({"path": p}, _ctx(ws)).content.split("\t", 1)[-1] for p in printed}
    assert {f"content {n}" for n in range(len(names))} == {c.strip() for c in contents}


# -- paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["\ud800", "a/\udfff/b"])
def test_an_unencodable_path_is_an_invalid_path(ws: Path, path: str) -> None:
    """A path with a lone surrogate the file system cannot encode is InvalidPathError."""
    with pytest.raises(InvalidPathError):
        resolve_in_workspace(ws, path)


@pytest.mark.parametrize("path", [b"a.txt", 5, None])
def test_a_path_that_is_not_text_is_an_invalid_argument(ws: Path, path: object) -> None:
    """bytes, numbers and None are InvalidArgumentError, not a TypeError from os."""
    with pytest.raises(InvalidArgumentError):
        resolve_in_workspace(ws, path)  # type: ignore[arg-type]


def test_a_workdir_with_a_nul_byte_is_an_invalid_argument() -> None:
    """A workspace path with a NUL byte is InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        resolve_in_workspace("ws\x00b", "x")


def test_the_file_tools_answer_an_unencodable_path(ws: Path) -> None:
    """Every file tool answers a path with a lone surrogate with an error naming it."""
    outs = [
        read_file.run({"path": "\ud800"}, _ctx(ws)),
        write_file.run({"path": "\ud800", "content": "x"}, _ctx(ws)),
        edit_file.run({"path": "\ud800", "old_string": "a", "new_string": "b"}, _ctx(ws)),
    ]
    assert [True] * 3 == [o.is_error and "'\\ud800'" in o.content for o in outs]


def test_a_name_too_long_is_reported_plainly(ws: Path) -> None:
    """A path whose name is too long for the file system is reported as such."""
    out = write_file.run({"path": "x" * 300, "content": "hi"}, _ctx(ws))
    assert ToolOutput("x" * 300 + ": file name too long", is_error=True) == out


# -- writing --------------------------------------------------------------------------------------


def test_write_file_with_a_lone_surrogate_keeps_the_file(ws: Path) -> None:
    """Content that cannot be UTF-8 is refused before the file is touched."""
    (ws / "keep.txt").write_text("precious")
    out = write_file.run({"path": "keep.txt", "content": "new\ud800"}, _ctx(ws))
    assert (True, "precious") == (out.is_error, (ws / "keep.txt").read_text())


def test_edit_file_with_a_lone_surrogate_keeps_the_file(ws: Path) -> None:
    """A new_string that cannot be UTF-8 is refused before the file is touched."""
    (ws / "keep.txt").write_text("precious")
    out = edit_file.run(
        {"path": "keep.txt", "old_string": "precious", "new_string": "\udcff"}, _ctx(ws)
    )
    assert (True, "precious") == (out.is_error, (ws / "keep.txt").read_text())


def test_an_edit_that_would_blow_up_the_file_is_refused(ws: Path) -> None:
    """replace_all of a short string by a long one past the size limit is refused, and the
    file is unchanged."""
    (ws / "a.txt").write_text("a" * 1024 * 1024)
    out = edit_file.run(
        {"path": "a.txt", "old_string": "a", "new_string": "b" * 100, "replace_all": True},
        _ctx(ws),
    )
    expected = (
        f"the edit would make a.txt {100 * 1024 * 1024} bytes, over the {MAX_EDIT_BYTES}-byte "
        "limit; nothing changed"
    )
    assert (ToolOutput(expected, is_error=True), 1024 * 1024) == (
        out,
        (ws / "a.txt").stat().st_size,
    )


def test_an_ambiguous_edit_counts_up_to_a_cap(ws: Path) -> None:
    """The number of matches of an ambiguous edit is counted up to the cap."""
    (ws / "a.txt").write_text("a" * 100_000)
    out = edit_file.run({"path": "a.txt", "old_string": "a" * 50, "new_string": "b"}, _ctx(ws))
    assert f"old_string matches {MATCH_COUNT_CAP}+ times in a.txt" == out.content.split(";")[0]


def test_read_file_stops_when_cancelled(ws: Path) -> None:
    """A read through a long file stops when the call is cancelled."""
    (ws / "long.txt").write_text("line\n" * 100_000)
    token = CancelToken()
    token.cancel()
    out = read_file.run({"path": "long.txt", "offset": 99_000}, _ctx(ws, token))
    assert ToolOutput("long.txt: cancelled; the read was stopped", is_error=True) == out


# -- bash and the decorator ---------------------------------------------------------------------


def test_bash_refuses_a_nul_byte(ws: Path) -> None:
    """A command with a NUL byte is refused before a shell starts."""
    out = bash.run({"command": "touch made; echo a\x00b"}, _ctx(ws))
    assert (True, False) == (out.is_error, (ws / "made").exists())


def test_bash_refuses_a_lone_surrogate(ws: Path) -> None:
    """A command the file system encoding cannot carry is refused before a shell starts."""
    out = bash.run({"command": "touch made; echo \ud800"}, _ctx(ws))
    assert (True, False) == (out.is_error, (ws / "made").exists())


@pytest.mark.parametrize("given_input", [None, 5, "command", ["a"], b"x"])
def test_an_input_that_is_not_an_object_is_an_error(ws: Path, given_input: Any) -> None:
    """A tool given something other than a mapping answers with an error output."""
    assert [True] * 7 == [t.run(given_input, _ctx(ws)).is_error for t in default_tools()]


def test_absurdly_nested_input_is_an_error(ws: Path) -> None:
    """An input nested deeper than the interpreter can convert is an error output."""
    nested: Any = "x"
    for _ in range(100_000):
        nested = [nested]
    assert True is read_file.run({"path": nested}, _ctx(ws)).is_error


# -- every tool, random hostile input -------------------------------------------------------------

_PATHS = [
    "",
    ".",
    "..",
    "/",
    "/etc/passwd",
    "../outside",
    "a\x00b",
    "\ud800",
    "\udcff",
    "caf\udce9.txt",
    "pipe",
    "loop",
    "self",
    "self/self/self/a.txt",
    "out",
    "out/x",
    "dangling",
    "a.txt",
    "src",
    "src/app.py",
    "crlf.txt",
    "long.txt",
    "bin.dat",
    "deep",
    "x" * 300,
    "a" * 5000,
    "~/x",
    "src/../a.txt",
    "./a.txt//",
    "a.txt/",
    "\\",
    "\n",
    " ",
]
_PATTERNS = [
    "*",
    "**",
    "**/*",
    "*a" * 20 + "b",
    "**/" * 30 + "x",
    "[z-a]",
    "[",
    "[!",
    "[]]",
    "[!]a]",
    "a/**/b/**/c",
    "/abs",
    "../x",
    "**/..",
    "\x00",
    "\ud800",
    "?" * 300,
    "[\\]",
    "[a-]",
    "(a+)+$",
    "(a|aa)+$",
    "(",
    "a{99999999999}",
    "a{4294967294}",
    "(?<=a+)b",
    r"(\w)\1",
    "[[a]",
    "\\",
    "(?P<x>a)(?P=y)",
    "(?i)TODO",
    ".*" * 50,
    "x" * 4097,
]
_TEXT = st.one_of(
    st.sampled_from(_PATHS + _PATTERNS),
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc", "Zs", "Lo"]), max_size=10),
)
_NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**63, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
_ANY = st.recursive(
    st.none() | st.booleans() | _NUMBER | _TEXT | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_COMMANDS = st.one_of(
    st.sampled_from(
        [
            "true",
            "exit 3",
            "kill -KILL $$",
            "cat",
            "env",
            "ls -la",
            "yes | head -c 100000",
            "sleep 5",
            "printf '\\xff\\xfe'",
            "echo a\x00b",
            "echo \ud800",
            "cat bin.dat",
        ]
    ),
    _TEXT.map(lambda t: "printf '%s' " + shlex.quote(t.replace("\x00", ""))),
    _TEXT.map(lambda t: "cat -- " + shlex.quote(t.replace("\x00", ""))),
)


def _workspace(root: Path) -> Path:
    """A workspace full of awkward things: names that are not UTF-8, a FIFO, symlink loops,
    links outside and dangling, binary and CRLF files, a long line, a deep tree."""
    ws = root / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "a.txt").write_text("TODO one\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\n")
    (ws / "src" / "app.py").write_text("def main():\n    return 'TODO'\n")
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (ws / "long.txt").write_text("x" * 300_000 + "\n" + "line\n" * 1000)
    (ws / "bin.dat").write_bytes(b"\x00\xff" * 100)
    (ws / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"caf\xe9 latin-1\n")
    os.mkfifo(ws / "pipe")
    (ws / "loop").symlink_to("loop")
    (ws / "self").symlink_to(".")
    (ws / "out").symlink_to("/etc")
    (ws / "dangling").symlink_to("/nonexistent/target")
    (ws / "deep").mkdir()
    (ws / "deep").joinpath(*["d"] * 200).mkdir(parents=True)
    return ws


_CONTENT = st.sampled_from(["TODO", "a", "aa", "line\n", "\r\n", "x" * 1000, "\ud800", ""])


def _typed(draw: st.DrawFn, tool: str, name: str, schema: dict[str, Any]) -> Any:
    """A value of the field's own type, chosen to be awkward."""
    kinds = str(schema)
    if tool == "bash" and name == "command":
        return draw(_COMMANDS)
    if tool == "bash" and name == "timeout":
        return draw(st.floats(min_value=0.01, max_value=2))
    if "'boolean'" in kinds:
        return draw(st.booleans())
    if "'integer'" in kinds:
        return draw(st.sampled_from([1, 2, 3, 999, 2000, 10**6, 0, -1, 2**64]))
    if name in ("old_string", "new_string", "content"):
        return draw(_CONTENT | _TEXT)
    return draw(_TEXT)


_CHOICES = st.sampled_from(["typed"] * 8 + ["absent", "any"])


@st.composite
def _inputs(draw: st.DrawFn, tool: Tool) -> dict[str, Any]:
    """An input for ``tool``: each field mostly of its own type but awkward, sometimes absent
    or of any type; now and then an unknown field. bash commands come from :data:`_COMMANDS`."""
    props: dict[str, Any] = tool.input_schema.get("properties", {})
    out: dict[str, Any] = {}
    for name, schema in props.items():
        choice = draw(_CHOICES)
        if choice == "typed":
            out[name] = _typed(draw, tool.name, name, schema)
        elif choice == "any":
            out[name] = draw(_ANY)
    if draw(_CHOICES) == "absent":
        out[draw(st.text(max_size=5))] = draw(_ANY)
    return out


def _run_inline(description: str, work: Callable[[CancelToken], ToolOutput]) -> str:
    """A background starter that runs the work at once, cancelled after two seconds, and
    checks its output as the foreground's."""
    token = CancelToken()
    timer = threading.Timer(2.0, token.cancel)
    timer.start()
    try:
        out = work(token)
    finally:
        timer.cancel()
    assert True is _storable(out), (description, out)
    return "task-1"


def _fuzzed_tools() -> list[Tool]:
    """default_tools(), with grep bounded to 1 s so a pathological regex costs a second."""
    return [make_grep(1.0) if t.name == "grep" else t for t in default_tools()]


@pytest.fixture(scope="module")
def hostile_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One awkward workspace shared by the fuzz examples (tools may change it as they go)."""
    return _workspace(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("tool", _fuzzed_tools(), ids=lambda t: t.name)
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_tool_answers_hostile_input(
    tool: Tool, hostile_ws: Path, data: st.DataObject
) -> None:
    """Whatever the input, every built-in tool returns a storable ToolOutput: no exception,
    no hang, no text the log cannot hold."""
    given_input = data.draw(_inputs(tool))
    ctx = ToolContext(hostile_ws, "s1", "call-1", start_background=_run_inline)
    with hang_guard():
        out = tool.run(given_input, ctx)
    assert True is _storable(out), (given_input, out)


@given(path=_TEXT | _ANY)
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_resolve_raises_only_its_own_errors(ws: Path, path: Any) -> None:
    """resolve_in_workspace returns a path inside the workspace or raises InvalidPathError /
    InvalidArgumentError, for any value."""
    try:
        resolved = resolve_in_workspace(ws, path)
    except (InvalidPathError, InvalidArgumentError):
        return
    assert True is (resolved == ws or ws in resolved.parents)


@given(pattern=_TEXT, name=st.text(alphabet="ab.*?[]!-", max_size=40))
@settings(max_examples=300, deadline=None)
def test_glob_patterns_compile_or_fail_plainly(pattern: str, name: str) -> None:
    """Any glob pattern compiles or raises ValueError, and matching any name answers."""
    from liteagent.tools._walk import compile_glob

    try:
        compiled = compile_glob(pattern)
    except ValueError:
        return
    with hang_guard():
        matched = compiled.matches(name or "x")
    assert matched in (True, False)


def test_nan_and_infinite_timeouts_are_invalid(ws: Path) -> None:
    """A timeout of nan or infinity is an invalid-input error, not a command without end."""
    outs = [bash.run({"command": "true", "timeout": t}, _ctx(ws)) for t in (math.nan, math.inf)]
    assert [True, True] == [o.content.startswith("invalid input for bash") for o in outs]
