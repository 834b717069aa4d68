"""``lite-agent doctor [--repair]`` on damage made for real: a log cut in the middle of its
last write, a restore whose process was SIGKILLed after it recorded its intent, events of a
kind from a newer writer, damaged logs salvaged by --repair, and every kind of damage the
corruption suite makes, on both backends."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from _cli_runner import Cli, two_prompts

from liteagent.eventlog import file_checkpointer, project_dir, sqlite_checkpointer
from liteagent.eventlog._frames import FILE_HEADER_SIZE, FRAME_HEAD_SIZE, FrameScanner
from liteagent.eventlog.conformance import damage_file_log, damage_sqlite, prompts
from liteagent.eventlog.types import OpaqueEvent

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
    kinds = [e.kind for e in cli.events("s1")]  # the log is cut back to before the intent
    assert "restore_started" not in kinds
    assert "assistant_message" == kinds[-1]
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


def _sessions(cli: Cli) -> Path:
    return project_dir(cli.work, cli.home) / "sessions"


def _frame_offsets(log: Path) -> list[int]:
    """Where each frame of a log starts."""
    with log.open("rb") as f:
        return [
            item.offset for item in FrameScanner(f.fileno(), FILE_HEADER_SIZE, log.stat().st_size)
        ]


def test_repair_salvages_a_damaged_session(cli: Cli) -> None:
    """A flipped byte inside a session's log: doctor reports it corrupt (exit 1); --repair
    keeps the readable prefix, names the lost seqs and the quarantine file, and the session
    takes new turns."""
    two_prompts(cli)
    events = cli.events("s1")
    log = _sessions(cli) / "s1.log"
    data = bytearray(log.read_bytes())
    frames = _frame_offsets(log)
    data[frames[len(frames) // 2] + FRAME_HEAD_SIZE] ^= 0x40  # a middle frame's payload
    log.write_bytes(bytes(data))
    found = cli("doctor", "--json")
    assert 1 == found.code
    assert ["corrupt"] == [f["kind"] for f in found.json()["findings"]]
    repaired = cli("doctor", "--repair", "--json")
    assert 0 == repaired.code, repaired
    [finding] = repaired.json()["findings"]
    kept = finding["kept_head"]
    assert 0 < kept < len(events)
    assert [[kept + 1, len(events)]] == finding["lost"]
    quarantine = Path(finding["quarantine"])
    assert quarantine.parent == log.parent
    assert data[-quarantine.stat().st_size :] == quarantine.read_bytes()
    assert finding["action"].startswith(f"salvaged: kept seqs 1..{kept}, lost seqs {kept + 1}..")
    assert [e.seq for e in events[:kept]] == [e.seq for e in cli.events("s1")]
    assert cli.ok("doctor", "--json").json()["ok"] is True
    cli.ok("run", "go on", "--session", "s1", provider=cli.script({"text": "ok"}))


def test_repair_leaves_a_session_another_process_runs_alone(cli: Cli) -> None:
    """--repair does not touch a damaged session whose lease another process holds: it says
    the session is running there, exits 1 and changes no byte; once the lease is free, the
    same command salvages it."""
    two_prompts(cli)
    log = _sessions(cli) / "s1.log"
    with log.open("ab") as f:
        f.write(b"garbage that is not a frame" * 3)
    before = log.read_bytes()
    with (
        file_checkpointer(project_dir(cli.work, cli.home) / "sessions") as cp,
        cp.acquire_lease("s1"),
    ):
        refused = cli("doctor", "--repair", "--json")
        assert before == log.read_bytes()
    assert 1 == refused.code
    [finding] = refused.json()["findings"]
    assert (False, "corrupt") == (finding["repaired"], finding["kind"])
    assert finding["action"].startswith("not repaired: the session is running in pid ")
    assert [] == list(log.parent.glob("s1.log.quarantine-*"))
    assert 0 == cli("doctor", "--repair").code


def test_repair_prints_what_was_kept_lost_and_where(cli: Cli) -> None:
    """The text report of --repair says what was kept, what was lost and where the damaged
    bytes went."""
    two_prompts(cli)
    log = _sessions(cli) / "s1.log"
    with log.open("ab") as f:
        f.write(b"garbage that is not a frame" * 3)
    out = cli("doctor", "--repair").out
    assert "corrupt" in out
    assert "→ salvaged: kept seqs 1.." in out
    assert "and any after it (how far the log went is unknown)" in out
    assert f"the damaged bytes are in {log}.quarantine-" in out


def test_a_log_cut_below_its_header_is_reported(cli: Cli) -> None:
    """A session log cut to fewer bytes than its header is damage (exit 1), not "0 sessions,
    no problems"; --repair quarantines it and the session can start again."""
    two_prompts(cli)
    log = _sessions(cli) / "s1.log"
    log.write_bytes(log.read_bytes()[:10])
    found = cli("doctor")
    assert 1 == found.code
    assert "1 sessions" in found.out
    assert "corrupt" in found.out
    assert "shorter than its header" in found.out
    repaired = cli("doctor", "--repair", "--json")
    assert 0 == repaired.code, repaired
    assert [[1, None]] == repaired.json()["findings"][0]["lost"]
    cli.ok("run", "again", "--session", "s1", provider=cli.script({"text": "ok"}))


def _damaged_home(cli: Cli, backend: str, seed: int) -> list[str]:
    """A random history in 1-3 sessions, damaged once; the backend's CLI options."""
    rng = random.Random(seed)
    if backend == "sqlite":
        db = cli.root / "store" / "sessions.db"
        db.parent.mkdir(exist_ok=True)
        factory, options, store = sqlite_checkpointer, ["--backend", "sqlite", "--db", str(db)], db
    else:
        factory, options, store = file_checkpointer, [], _sessions(cli)
        store.mkdir(parents=True, exist_ok=True)
    sessions = [f"s{i}" for i in range(rng.randint(1, 3))]
    with factory(store) as cp:
        for i in range(rng.randint(1, 10)):
            batch = prompts(*(f"p{i}.{j}" for j in range(rng.randint(1, 3))))
            cp.append(rng.choice(sessions), batch)
        target = rng.choice([s for s in sessions if cp.head(s)])
    damage = damage_sqlite if backend == "sqlite" else damage_file_log
    damage(store.parent if backend == "sqlite" else store, target, rng)
    return options


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_doctor_prints_no_traceback_on_any_damaged_home(cli: Cli, backend: str) -> None:
    """On stores damaged by the corruption suite's damage functions, doctor and doctor --repair
    exit 0 or 1 with a report and never a traceback; on the file backend --repair leaves a
    healthy store."""
    for seed in range(40):
        for store in (cli.root / "store", _sessions(cli)):
            shutil.rmtree(store, ignore_errors=True)
        options = _damaged_home(cli, backend, seed)
        for argv in (["doctor", "--json"], ["doctor", "--repair", "--json"], ["doctor"]):
            result = cli(*options, *argv)
            assert result.code in (0, 1), (seed, argv, result)
            assert "Traceback" not in result.err + result.out, (seed, argv, result)
            if "--json" in argv and result.out:
                result.json()
        if backend == "file":
            assert 0 == result.code, (seed, result)
