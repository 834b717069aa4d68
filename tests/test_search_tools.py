"""glob and grep on a real tree: matching, sorting, caps, binary files, symlinks, escapes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from liteagent.eventlog import CancelToken
from liteagent.tools import ToolContext, ToolOutput, glob, grep
from liteagent.tools._search import GLOB_LIMIT, GREP_LINE_CHARS, GREP_MAX_MATCHES


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A small project, beside an ``outside`` folder that symlinks inside point to."""
    root = tmp_path / "ws"
    for rel, text in {
        "README.md": "# demo\nTODO: write docs\n",
        "setup.py": "import os\n",
        "src/app.py": "def main():\n    return 'TODO'\n",
        "src/util/helpers.py": "x = 1  # todo later\n",
        "src/web/index.ts": "// TODO ts\n",
        "tests/test_app.py": "def test():\n    pass\n",
        ".git/config": "TODO in git\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("TODO secret\n")
    (root / "outdir").symlink_to(outside)
    (root / "leak.py").symlink_to(outside / "leak.py")
    return root


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    """A context for calls in the workspace."""
    return ToolContext(workdir=ws, session_id="s1", tool_call_id="call-1")


def test_glob_double_star_finds_files_at_any_depth(ctx: ToolContext) -> None:
    """`**/*.py` matches .py files at every depth, sorted, relative to the workspace."""
    expected = "setup.py\nsrc/app.py\nsrc/util/helpers.py\ntests/test_app.py"
    assert ToolOutput(expected) == glob.run({"pattern": "**/*.py"}, ctx)


def test_glob_star_does_not_cross_folders(ctx: ToolContext) -> None:
    """`*.py` matches only top-level files."""
    assert ToolOutput("setup.py") == glob.run({"pattern": "*.py"}, ctx)


def test_glob_marks_folders_with_a_slash(ctx: ToolContext) -> None:
    """Matching folders are listed with a trailing /."""
    assert ToolOutput("src/app.py\nsrc/util/\nsrc/web/") == glob.run({"pattern": "src/*"}, ctx)


def test_glob_character_sets_and_question_mark(ctx: ToolContext) -> None:
    """[!...] and ? match one character of a name."""
    assert ToolOutput("src/app.py") == glob.run({"pattern": "src/[!h]p?.py"}, ctx)


def test_glob_literal_path(ctx: ToolContext) -> None:
    """A pattern without wildcards finds that path if it exists."""
    assert ToolOutput("src/app.py") == glob.run({"pattern": "src/app.py"}, ctx)


def test_glob_without_matches_is_not_an_error(ctx: ToolContext) -> None:
    """No match is a plain answer."""
    assert ToolOutput("no files match '**/*.rs'") == glob.run({"pattern": "**/*.rs"}, ctx)


def test_glob_caps_the_results(ws: Path, ctx: ToolContext) -> None:
    """Past the limit, the first results (sorted) are shown and the rest counted."""
    (ws / "many").mkdir()
    for i in range(GLOB_LIMIT + 100):
        (ws / "many" / f"f{i:04d}.txt").write_text("")
    lines = glob.run({"pattern": "many/*.txt"}, ctx).content.split("\n")
    note = "[100 more matches not shown; use a narrower pattern]"
    assert (GLOB_LIMIT + 1, "many/f0000.txt", note) == (len(lines), lines[0], lines[-1])


@pytest.mark.parametrize("pattern", ["../*", "/etc/*", "src/../../*", "outdir/*"])
def test_glob_patterns_that_leave_the_workspace_are_errors(pattern: str, ctx: ToolContext) -> None:
    """Absolute patterns, `..` and a prefix through a symlink outside are refused."""
    assert glob.run({"pattern": pattern}, ctx).is_error


def test_glob_leaves_out_symlinks_to_the_outside(ctx: ToolContext) -> None:
    """A symlinked file or folder leading outside is neither listed nor entered."""
    out = glob.run({"pattern": "**"}, ctx)
    assert [] == [line for line in out.content.split("\n") if "leak" in line or "outdir" in line]


def test_glob_stops_when_cancelled(ws: Path) -> None:
    """A cancelled call is an error output."""
    token = CancelToken()
    token.cancel()
    ctx = ToolContext(ws, "s1", "c", cancel=token)
    assert glob.run({"pattern": "**"}, ctx).is_error


def test_grep_prints_path_line_text(ctx: ToolContext) -> None:
    """Matches are path:line:text, walking the tree in name order, skipping .git and links out."""
    expected = (
        "README.md:2:TODO: write docs\n"
        "src/app.py:2:    return 'TODO'\n"
        "src/web/index.ts:1:// TODO ts"
    )
    assert ToolOutput(expected) == grep.run({"pattern": "TODO"}, ctx)


def test_grep_ignore_case(ctx: ToolContext) -> None:
    """ignore_case matches letters in either case."""
    out = grep.run({"pattern": "todo later", "ignore_case": True}, ctx)
    assert ToolOutput("src/util/helpers.py:1:x = 1  # todo later") == out


def test_grep_glob_filter_on_names(ctx: ToolContext) -> None:
    """A glob without / filters on file names."""
    assert ToolOutput("src/app.py:2:    return 'TODO'") == grep.run(
        {"pattern": "TODO", "glob": "*.py"}, ctx
    )


def test_grep_glob_filter_on_paths(ctx: ToolContext) -> None:
    """A glob with / filters on workspace-relative paths."""
    assert ToolOutput("src/web/index.ts:1:// TODO ts") == grep.run(
        {"pattern": "TODO", "glob": "src/**/*.ts"}, ctx
    )


def test_grep_in_one_folder(ctx: ToolContext) -> None:
    """path narrows the search to a folder."""
    assert ToolOutput("tests/test_app.py:1:def test():") == grep.run(
        {"pattern": "def", "path": "tests"}, ctx
    )


def test_grep_in_one_file(ctx: ToolContext) -> None:
    """path may name a single file."""
    out = grep.run({"pattern": "demo", "path": "README.md"}, ctx)
    assert ToolOutput("README.md:1:# demo") == out


def test_grep_skips_binary_files(ws: Path, ctx: ToolContext) -> None:
    """Files with NUL bytes or invalid UTF-8 are not searched."""
    (ws / "blob.bin").write_bytes(b"NEEDLE\x00\x01")
    (ws / "latin.txt").write_bytes("NEEDLE caf\xe9".encode("latin-1"))
    (ws / "ok.txt").write_text("NEEDLE\n")
    assert ToolOutput("ok.txt:1:NEEDLE") == grep.run({"pattern": "NEEDLE"}, ctx)


def test_grep_skips_fifos(ws: Path, ctx: ToolContext) -> None:
    """A named pipe is not read (it would block the search)."""
    os.mkfifo(ws / "pipe")
    (ws / "ok.txt").write_text("NEEDLE\n")
    assert ToolOutput("ok.txt:1:NEEDLE") == grep.run({"pattern": "NEEDLE"}, ctx)


def test_grep_bad_regex_is_an_error(ctx: ToolContext) -> None:
    """A regex that does not compile is an is_error output."""
    out = grep.run({"pattern": "(unclosed"}, ctx)
    assert (True, True) == (out.is_error, out.content.startswith("invalid regex"))


def test_grep_caps_the_matches(ws: Path, ctx: ToolContext) -> None:
    """Past the limit, output stops with a note."""
    (ws / "many.txt").write_text("hit\n" * (GREP_MAX_MATCHES + 50))
    lines = grep.run({"pattern": "hit", "path": "many.txt"}, ctx).content.split("\n")
    assert (GREP_MAX_MATCHES + 1, True) == (len(lines), lines[-1].startswith("[output stopped"))


def test_grep_cuts_long_lines(ws: Path, ctx: ToolContext) -> None:
    """A matched line is cut to a bounded length."""
    (ws / "min.js").write_text("hit" + "z" * 10_000 + "\n")
    out = grep.run({"pattern": "hit", "path": "min.js"}, ctx)
    assert len("min.js:1:") + GREP_LINE_CHARS + 1 == len(out.content)


@pytest.mark.parametrize("path", ["..", "/etc", "outdir", "leak.py"])
def test_grep_paths_outside_are_errors(path: str, ctx: ToolContext) -> None:
    """A search path outside the workspace, directly or through a symlink, is refused."""
    assert grep.run({"pattern": "TODO", "path": path}, ctx).is_error


def test_grep_without_matches_is_not_an_error(ctx: ToolContext) -> None:
    """No match is a plain answer."""
    assert ToolOutput("no matches") == grep.run({"pattern": "zzz_never"}, ctx)
