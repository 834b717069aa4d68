"""``lite-agent doctor [--repair]`` on damage made for real: a log cut in the middle of its
last write, a restore whose process was SIGKILLed after it recorded its intent, and events of
a kind from a newer writer."""

from __future__ import annotations

import pytest
from _cli_runner import Cli, two_prompts

from liteagent.eventlog import OpaqueEvent, file_checkpointer, project_dir

pytestmark = pytest.mark.processes

# Run in the CLI's process before main(): the restore dies (SIGKILL) right after it appended its
# intent and before it changed any file, as a crash at that moment would.
_DIE_IN_RESTORE = """
import os, signal
import liteagent.actors._restore as restore_module
from liteagent.actors._snapshots import ApplyRestore
_ask = restore_module.ask
def _dying_ask(ref, message, **kwargs):
    if isinstance(message, ApplyRestore):
        os.kill(os.getpid(), signal.SIGKILL)
    return _ask(ref, message, **kwargs)
restore_module.ask = _dying_ask
"""


def interrupted_restore(cli: Cli) -> int:
    """Session s1 with a restore to its second checkpoint killed mid-way; returns that seq."""
    two_prompts(cli)
    seq = cli.ok("checkpoints", "s1", "--json").json()[1]["seq"]
    killed = cli("restore", "s1", str(seq), prelude=_DIE_IN_RESTORE)
    assert -9 == killed.code
    assert "restore_started" == cli.events("s1")[-1].kind
    return int(seq)


def test_a_healthy_project(cli: Cli) -> None:
    """No problems: exit 0, and says so."""
    two_prompts(cli)
    result = cli.ok("doctor")
    assert "1 sessions" in result.out
    assert "no problems found" in result.out
    assert cli.ok("doctor", "--json").json()["ok"] is True


def test_finds_and_cuts_a_torn_tail(cli: Cli) -> None:
    """A log whose last write was cut short: doctor reports it and exits 1, changing nothing;
    --repair cuts it back to the last whole write and says so; the session works again."""
    two_prompts(cli)
    log = project_dir(cli.work, cli.home) / "sessions" / "s1.log"
    events = cli.events("s1")
    size = log.stat().st_size
    with log.open("r+b") as f:
        f.truncate(size - 5)  # the last append (one frame) lost its final bytes
    found = cli("doctor", "--json")
    assert 1 == found.code
    [finding] = found.json()["findings"]
    assert {"session_id": "s1", "kind": "torn_tail", "action": ""}.items() <= finding.items()
    assert size - 5 == log.stat().st_size
    repaired = cli("doctor", "--repair")
    assert 0 == repaired.code, repaired
    assert "torn_tail" in repaired.out
    assert "→ rewrote the log at its head" in repaired.out
    kept = cli.events("s1")
    assert [e.seq for e in events[: len(kept)]] == [e.seq for e in kept]
    assert len(kept) < len(events)
    assert cli.ok("doctor", "--json").json()["findings"] == []
    cli.ok("run", "go on", "--session", "s1", provider=cli.script({"text": "ok"}))


def test_finds_and_rolls_back_an_interrupted_restore(cli: Cli) -> None:
    """A restore killed after its intent: the session refuses turns and doctor exits 1;
    --repair rolls it back (the file as it was before the restore) and the session works."""
    interrupted_restore(cli)
    assert "two\n" == (cli.work / "a.txt").read_text()
    refused = cli("run", "more", "--session", "s1", provider=cli.script({"text": "x"}))
    assert 1 == refused.code
    assert "interrupted restore" in refused.err
    found = cli("doctor")
    assert 1 == found.code
    assert "interrupted_restore" in found.out
    assert "restore_started" == cli.events("s1")[-1].kind  # nothing changed without --repair
    repaired = cli("doctor", "--repair", "--json")
    assert 0 == repaired.code, repaired
    [finding] = repaired.json()["findings"]
    assert "rolled the restore back: a.txt as before it" == finding["action"]
    assert "two\n" == (cli.work / "a.txt").read_text()
    assert "restore_finished" == cli.events("s1")[-1].kind
    cli.ok("run", "more", "--session", "s1", provider=cli.script({"text": "ok"}))


def test_repair_can_finish_an_interrupted_restore_instead(cli: Cli) -> None:
    """--repair --finish-restores completes it: the file and the conversation as before the
    checkpoint."""
    seq = interrupted_restore(cli)
    repaired = cli.ok("doctor", "--repair", "--finish-restores")
    assert "finished the restore: put back a.txt" in repaired.out
    assert "one\n" == (cli.work / "a.txt").read_text()
    assert seq - 1 == cli.events("s1")[-1].seq


def test_unknown_kinds_are_reported_and_kept(cli: Cli) -> None:
    """Events of a newer writer are informational: exit 0, kept as they are by --repair."""
    two_prompts(cli)
    with file_checkpointer(workdir=cli.work, home=cli.home) as cp:
        cp.append("s1", [OpaqueEvent("from_the_future", b"\x81\xa1a\x01")])
    found = cli.ok("doctor", "--json").json()
    assert ["unknown_kind"] == [f["kind"] for f in found["findings"]]
    repaired = cli.ok("doctor", "--repair").out
    assert "kept as is (written by a newer liteagent)" in repaired
    assert "from_the_future" == cli.events("s1")[-1].kind
