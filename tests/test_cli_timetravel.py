"""The time-travel commands in a real process: restore --undo, restore --dry-run, branches,
fork and gc, their output (human and --json), exit codes, and what they did to files and logs."""

from __future__ import annotations

import json

import pytest
from _cli_runner import Cli, two_prompts

from liteagent.actors._switch import Switch
from liteagent.eventlog import file_checkpointer
from liteagent.eventlog._branches import is_branch_session
from liteagent.eventlog.types import Forked
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent

pytestmark = pytest.mark.processes


def content(cli: Cli, sid: str) -> list[tuple[int, str, object]]:
    """A session's log without its times."""
    return [(e.seq, e.kind, e.body) for e in cli.events(sid)]


def test_undo_brings_the_restore_back(cli: Cli) -> None:
    """restore, then restore --undo: the file and the log are as before the restore; the
    restore's output says how to undo it; branches lists the branch until it is brought
    back, and sessions never lists it."""
    two_prompts(cli)
    before = content(cli, "s1")
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    restored = cli.ok("restore", "s1", str(seq))
    assert "`lite-agent restore --undo s1` brings it all back" in restored.out
    (branch,) = cli.ok("branches", "s1", "--json").json()
    assert {"made_by": "restore", "at_seq": seq, "available": True}.items() <= branch.items()
    assert ["s1"] == [s["id"] for s in cli.ok("sessions", "--json").json()]
    assert "branch.." not in cli.ok("sessions").out
    undone = cli.ok("restore", "--undo", "s1", "--json").json()
    assert {"session_id": "s1", "restored_files": ["a.txt"]}.items() <= undone.items()
    assert "two\n" == (cli.work / "a.txt").read_text()
    assert before == content(cli, "s1")
    (again,) = cli.ok("branches", "s1", "--json").json()
    assert ("undo", undone["branch"]) == (again["made_by"], again["id"])
    human = cli.ok("restore", "--undo", "s1", "--branch", again["id"]).out
    assert "undone: put back 1 files (a.txt); `lite-agent restore --undo s1` undoes this" in human
    assert "one\n" == (cli.work / "a.txt").read_text()


def test_a_refused_undo_names_the_file(cli: Cli) -> None:
    """A file changed since the restore: exit 1, one line naming it, nothing changed; with
    --json one error document."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    cli.ok("restore", "s1", str(seq))
    (cli.work / "a.txt").write_text("mine\n")
    log = content(cli, "s1")
    result = cli("restore", "--undo", "s1")
    assert 1 == result.code
    [line] = result.err.splitlines()
    assert line.startswith("lite-agent: undo refused, nothing was changed: a.txt: it was changed")
    error = cli("restore", "--undo", "s1", "--json").json()["error"]
    assert "refused" == error["type"]
    assert "mine\n" == (cli.work / "a.txt").read_text()
    assert log == content(cli, "s1")


def test_undo_without_a_branch_exits_1(cli: Cli) -> None:
    """Nothing to bring back: exit 1 with the reason, as one JSON document with --json."""
    two_prompts(cli)
    result = cli("restore", "--undo", "s1", "--json")
    assert 1 == result.code
    assert "no_branch" == result.json()["error"]["type"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["restore", "s1"], "the following arguments are required: SEQ"),
        (["restore", "--undo", "s1", "2"], "--undo takes no SEQ"),
        (["restore", "--undo", "s1", "--dry-run"], "--undo cannot be combined"),
        (["restore", "s1", "2", "--branch", "b"], "--branch needs --undo"),
        (["gc", "--grace", "soon"], "--grace soon: not a duration"),
    ],
)
def test_usage_errors_exit_2(cli: Cli, argv: list[str], message: str) -> None:
    """Contradictory or missing arguments exit 2 with a usage line; --json gives one
    document of type usage."""
    two_prompts(cli)
    result = cli(*argv)
    assert 2 == result.code
    assert message in result.err
    doc = cli(*argv, "--json").json()
    assert "usage" == doc["error"]["type"]


def test_dry_run_shows_what_a_restore_would_do(cli: Cli) -> None:
    """--dry-run: the file it would put back with a diff summary, the events it would take
    out, no side effects (only file tools ran); nothing changes and no branch is made; a
    refusal shows as would_refuse with exit 0."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    log = content(cli, "s1")
    human = cli.ok("restore", "s1", str(seq), "--dry-run").out
    assert "  overwrite a.txt (4 B → 4 B, +1 -1 lines)\n" in human
    assert "no side effects it cannot undo" in human
    assert human.endswith("nothing was changed (dry run)\n")
    doc = cli.ok("restore", "s1", str(seq), "--dry-run", "--json").json()
    assert {"would_refuse": False, "events_removed": len(log) - seq + 1}.items() <= doc.items()
    assert [{"path": "a.txt", "action": "overwrite"}] == [
        {k: c[k] for k in ("path", "action")} for c in doc["changes"]
    ]
    assert log == content(cli, "s1")
    assert [] == cli.ok("branches", "s1", "--json").json()
    (cli.work / "a.txt").write_text("mine\n")
    refused = cli.ok("restore", "s1", str(seq), "--dry-run", "--json").json()
    assert refused["would_refuse"]
    assert ["a.txt"] == [path for path, _ in refused["refused"]]


def test_checkpoints_show_the_side_effects(cli: Cli) -> None:
    """A bash command after a checkpoint counts in its effects column and in the dry run's
    ledger, with its exit code."""
    cli.ok(
        "run",
        "build it",
        "--session",
        "s1",
        provider=cli.script(
            {"tool": "bash", "input": {"command": "echo hi > built.txt"}}, {"text": "Built."}
        ),
    )
    (checkpoint,) = cli.ok("checkpoints", "s1", "--json").json()
    assert 1 == checkpoint["side_effects"]
    rows = cli.ok("checkpoints", "s1").out.splitlines()
    assert ["seq", "time", "prompt", "effects", "files"] == rows[0].split()
    assert rows[1].endswith("build it  1        -")
    doc = cli.ok("restore", "s1", str(checkpoint["seq"]), "--dry-run", "--json").json()
    (effect,) = doc["side_effects"]
    assert {"tool": "bash", "summary": "echo hi > built.txt", "exit_code": 0}.items() <= (
        effect.items()
    )


def test_fork_makes_a_new_session(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> None:
    """fork ID SEQ: a new session with the events before SEQ and a forked record; the
    original stays; --into puts the files back in a copy."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    log = content(cli, "s1")
    doc = cli.ok("fork", "s1", str(seq), "--json").json()
    new = doc["session_id"]
    assert {"forked_from": "s1", "seq": seq, "workdir": None}.items() <= doc.items()
    events = cli.events(new)
    assert log[: seq - 1] == [(e.seq, e.kind, e.body) for e in events[:-1]]
    assert Forked(origin="s1", at_seq=seq) == events[-1].body
    assert log == content(cli, "s1")
    copy = tmp_path_factory.mktemp("copy")
    (copy / "a.txt").write_text("two\n")
    out = cli.ok("fork", "s1", str(seq), "--into", str(copy)).out
    assert f"run it with --workdir {copy}" in out
    assert "one\n" == (copy / "a.txt").read_text()
    assert "two\n" == (cli.work / "a.txt").read_text()
    missing = cli("fork", "s1", str(seq), "--into", str(copy / "nope"))
    assert 2 == missing.code


def test_gc_removes_only_unreferenced_blobs(cli: Cli) -> None:
    """gc --dry-run reports an unreferenced blob and keeps it; gc --grace 0 removes it and
    keeps every blob a session or a branch references; the default grace keeps a fresh
    one."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    cli.ok("restore", "s1", str(seq))
    with file_checkpointer(workdir=cli.work, home=cli.home) as cp:
        stray = cp.blobs.put(b"nobody refers to me")
        kept = {b.ref for b in cp.blobs.list_blobs()} - {stray}
    assert kept
    fresh = cli.ok("gc", "--json").json()
    assert (0, 1) == (fresh["deleted"], fresh["young"])
    dry = cli.ok("gc", "--grace", "0", "--dry-run", "--json").json()
    assert (1, True) == (dry["deleted"], dry["dry_run"])
    human = cli.ok("gc", "--grace", "0").out
    assert "removed 1 unreferenced blobs" in human
    with file_checkpointer(workdir=cli.work, home=cli.home) as cp:
        assert kept == {b.ref for b in cp.blobs.list_blobs()}
        assert any(is_branch_session(i.id) for i in cp.list())
    cli.ok("restore", "--undo", "s1")
    assert "two\n" == (cli.work / "a.txt").read_text()


def test_doctor_puts_back_blobs_a_killed_gc_set_aside(cli: Cli) -> None:
    """A blob left set aside (as a gc killed half way leaves it) is a finding; --repair puts
    it back."""
    two_prompts(cli)
    with file_checkpointer(workdir=cli.work, home=cli.home) as cp:
        (ref,) = [b.ref for b in cp.blobs.list_blobs()][:1]
        blobs_root = cp.blobs.root  # type: ignore[attr-defined]
    path = blobs_root / ref[7:9] / ref[9:]
    path.rename(path.with_name(path.name + ".gc"))
    report = cli("doctor", "--json")
    assert 1 == report.code
    kinds = [f["kind"] for f in report.json()["findings"]]
    assert ["interrupted_gc"] == kinds
    repaired = cli.ok("doctor", "--repair", "--json").json()
    assert repaired["ok"]
    assert path.exists()
    assert json.loads(json.dumps(repaired))["findings"][0]["action"].startswith("put back 1")


@pytest.mark.parametrize("finish", [False, True])
def test_doctor_settles_an_interrupted_undo(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, finish: bool
) -> None:
    """An undo stopped right after its intent (as a kill leaves it) is a finding; doctor
    --repair rolls it back (the restored state) or, with --finish-restores, completes it (the
    state before the restore)."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    before = content(cli, "s1")
    cli.ok("restore", "s1", str(seq))
    restored = content(cli, "s1")

    def killed(*_: object) -> None:
        raise SystemExit("killed")

    monkeypatch.setattr(Switch, "_write_branch", killed)
    with (
        file_checkpointer(workdir=cli.work, home=cli.home) as cp,
        create_lite_agent(
            model=scripted([]), model_name="m", workdir=cli.work, checkpointer=cp
        ) as agent,
        pytest.raises(SystemExit),
    ):
        agent.undo_restore("s1")
    monkeypatch.undo()
    (finding,) = cli("doctor", "--json").json()["findings"]
    assert "interrupted_restore" == finding["kind"]
    assert finding["detail"].startswith("an undo of a restore was interrupted")
    argv = ["doctor", "--repair", "--json"] + (["--finish-restores"] if finish else [])
    assert cli.ok(*argv).json()["ok"]
    assert (before if finish else restored) == content(cli, "s1")
    assert ("two\n" if finish else "one\n") == (cli.work / "a.txt").read_text()
