"""Two processes (here: two agents, each with a checkpointer of its own, on one store) take
turns on one session: each turn takes in only what the other appended since, instead of
folding the whole log again (which made every turn cost the whole session: 2 s a turn at
200,000 events, 10 to 40 s at a million). A log cut back meanwhile is still folded whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _restore_model import reply

from liteagent.eventlog import Checkpointer, file_checkpointer, sqlite_checkpointer
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, create_lite_agent


def _store(kind: str, root: Path) -> Checkpointer:
    return sqlite_checkpointer(root / "s.db") if kind == "sqlite" else file_checkpointer(root / "s")


def _reads(cp: Checkpointer) -> list[int]:
    """Record the ``since_seq`` of every read of ``cp``."""
    since: list[int] = []
    read = cp.read

    def recorded(session_id: str, since_seq: int = 0) -> Any:
        since.append(since_seq)
        return read(session_id, since_seq)

    cp.read = recorded  # type: ignore[method-assign]
    return since


def _agent(cp: Checkpointer, work: Path, n: int, name: str) -> LiteAgent:
    return create_lite_agent(
        model=scripted([reply(f"{name}{i}") for i in range(n)]),
        model_name="m",
        workdir=work,
        checkpointer=cp,
        context=False,
    )


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_turns_taken_in_turn_fold_only_what_the_other_appended(kind: str, tmp_path: Path) -> None:
    """Six turns each, alternating: after its first fold of the whole log, each agent reads
    only from where it was (every later read starts after seq 0), and the log holds every
    prompt in order."""
    with _store(kind, tmp_path) as one, _store(kind, tmp_path) as two:
        seen_one, seen_two = _reads(one), _reads(two)
        with _agent(one, tmp_path, 6, "a") as a, _agent(two, tmp_path, 6, "b") as b:
            for i in range(6):
                assert f"a{i}" == a.send(f"from a {i}", session_id="s").text
                assert f"b{i}" == b.send(f"from b {i}", session_id="s").text
        assert ([0], [0]) == (seen_one[:1], seen_two[:1])  # each folds the log whole once
        assert all(s > 0 for s in seen_one[1:] + seen_two[1:]), (seen_one, seen_two)
        prompts = [e.body.content[0].text for e in one.read("s") if e.kind == "user_prompt"]
        assert [p for i in range(6) for p in (f"from a {i}", f"from b {i}")] == prompts


def test_a_log_cut_back_by_the_other_is_folded_again(tmp_path: Path) -> None:
    """The other process restored the session (a new generation): the next turn folds the
    log whole and builds on the restored conversation."""
    with _store("sqlite", tmp_path) as one, _store("sqlite", tmp_path) as two:
        with _agent(one, tmp_path, 3, "a") as a, _agent(two, tmp_path, 2, "b") as b:
            a.send("first", session_id="s")
            a.send("second", session_id="s")
            b.restore("s", b.list_checkpoints("s")[1].seq)  # takes "second" away
            result = a.send("third", session_id="s")
            sent = [m.role for m in result.messages]
        assert ["user", "assistant"] == sent
        prompts = [e.body.content[0].text for e in two.read("s") if e.kind == "user_prompt"]
        assert ["first", "third"] == prompts
