"""Property: restoring one of two sessions that share a workspace matches a model of the files.

Two agents (two sessions, so each sees the other's writes as foreign) work on one workspace and
one checkpointer through the real file tools and a binary-writing custom tool, over random
prompts. A model (path -> bytes) records what each tool call did. Restoring one session to one
of its checkpoints must then either put back exactly the files that session's tools touched
since (and nothing else), or — when a file it would put back no longer holds what the session
last left there — refuse naming exactly those files and change nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _restore_tools import TOOLS, workspace
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import (
    AssistantMessage,
    TextBlock,
    ToolUseBlock,
    memory_checkpointer,
)
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, RestoreRefusedError, create_lite_agent

_IDS = itertools.count()
SESSIONS = ("session-a", "session-b")

#: Unusual names: spaces, unicode, leading dashes, dots, nested folders. No name is a folder of
#: another, so every tool call is about a file.
NAMES = (
    "plain.txt",
    "with space.md",
    "ünïcødé-文件.txt",
    "-leading-dash",
    "--rf",
    ".hidden",
    "..dots",
    "trailing.dot.",
    "nested/deep er/leaf.bin",
    "nested/-x.y.z",
    "ä/ö/ü.dat",
)

TEXT = st.text(st.characters(codec="utf-8"), max_size=24)
CONTENT = st.one_of(TEXT.map(str.encode), st.binary(max_size=48))


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def call(name: str, input: dict[str, Any]) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


# -- the model of the tools -----------------------------------------------------------------------


def _is_text(data: bytes) -> bool:
    if b"\x00" in data[:8192]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _occurrences(text: str, needle: str) -> int:
    return sum(text.startswith(needle, i) for i in range(len(text)))


def apply(files: dict[str, bytes], name: str, input: dict[str, Any]) -> None:
    """What the tool call does to the files (a failing call changes nothing)."""
    path = input["path"]
    if name == "write_file":
        files[path] = input["content"].encode()
    elif name == "write_bytes":
        files[path] = bytes.fromhex(input["data_hex"])
    elif name == "delete_file":
        files.pop(path, None)
    else:
        old, new, data = input["old_string"], input["new_string"], files.get(path)
        if data is None or not old or old == new or not _is_text(data):
            return
        text = data.decode()
        if _occurrences(text, old) == 1:
            files[path] = text.replace(old, new, 1).encode()


def draw_call(
    data: st.DataObject, names: list[str], files: dict[str, bytes]
) -> tuple[str, dict[str, Any]]:
    """One random tool call on one of ``names``, given the files as they are now."""
    name = data.draw(st.sampled_from(["write_file", "write_bytes", "edit_file", "delete_file"]))
    path = data.draw(st.sampled_from(names))
    if name == "write_file":
        return name, {"path": path, "content": data.draw(TEXT)}
    if name == "write_bytes":
        return name, {"path": path, "data_hex": data.draw(st.binary(max_size=48)).hex()}
    if name == "delete_file":
        return name, {"path": path}
    current = files.get(path)
    if current is not None and current and _is_text(current):
        text = current.decode()
        start = data.draw(st.integers(0, len(text) - 1))
        end = data.draw(st.integers(start + 1, len(text)))
        old = text[start:end]
    else:
        old = data.draw(TEXT)
    return name, {"path": path, "old_string": old, "new_string": data.draw(TEXT)}


@dataclass(frozen=True)
class Touch:
    """One tool call on one file: which session, in which prompt, the file before and after."""

    session: int
    prompt: int
    path: str
    pre: bytes | None
    post: bytes | None


@dataclass
class Plan:
    """The random run: the user's files, the session of each prompt, and its tool calls."""

    initial: dict[str, bytes]
    sessions: list[int]
    calls: list[list[tuple[str, dict[str, Any]]]]
    touches: list[Touch]
    before: list[dict[str, bytes]]  # the model before each prompt
    final: dict[str, bytes]


def draw_plan(data: st.DataObject) -> Plan:
    names = data.draw(st.lists(st.sampled_from(NAMES), min_size=2, max_size=5, unique=True))
    initial = data.draw(st.dictionaries(st.sampled_from(names), CONTENT, max_size=3))
    sessions = data.draw(st.lists(st.integers(0, 1), min_size=2, max_size=6))
    files = dict(initial)
    calls: list[list[tuple[str, dict[str, Any]]]] = []
    touches: list[Touch] = []
    before: list[dict[str, bytes]] = []
    for index, session in enumerate(sessions):
        before.append(dict(files))
        prompt_calls = []
        for _ in range(data.draw(st.integers(0, 4))):
            name, input = draw_call(data, names, files)
            pre = files.get(input["path"])
            apply(files, name, input)
            touches.append(Touch(session, index, input["path"], pre, files.get(input["path"])))
            prompt_calls.append((name, input))
        calls.append(prompt_calls)
    return Plan(initial, sessions, calls, touches, before, dict(files))


# -- what a restore must do -----------------------------------------------------------------------


@dataclass
class Expected:
    """A restore's outcome by the model: the files it refuses, or the files it puts back."""

    refused: dict[str, str]  # path -> "changed" | "deleted"
    targets: dict[str, bytes | None]  # path -> content put back (None: absent)


def expected_restore(plan: Plan, session: int, prompt: int) -> Expected:
    """Restoring ``session`` to before ``prompt`` undoes its tool calls from that prompt on."""
    mine = [t for t in plan.touches if t.session == session and t.prompt >= prompt]
    first: dict[str, Touch] = {}
    last: dict[str, Touch] = {}
    for t in mine:
        first.setdefault(t.path, t)
        last[t.path] = t
    refused = {
        path: "deleted" if plan.final.get(path) is None else "changed"
        for path, t in last.items()
        if plan.final.get(path) != t.post
    }
    targets = {path: t.pre for path, t in first.items()}
    foreign = {t.path for t in plan.touches if t.session != session and t.prompt >= prompt}
    for path, content in targets.items():
        if path not in foreign:  # untouched by the other session: exactly as before the prompt
            assert plan.before[prompt].get(path) == content
    return Expected(refused, targets)


def _agent(work: Path, cp: Any, session: int, plan: Plan) -> LiteAgent:
    script: list[AssistantMessage] = []
    for index, calls in enumerate(plan.calls):
        if plan.sessions[index] == session:
            script += [call(name, input) for name, input in calls]
            script.append(reply(f"prompt {index} done"))
    agent = create_lite_agent(
        model=scripted(script), model_name="m", workdir=work, checkpointer=cp, tools=TOOLS
    )
    agent.resume(SESSIONS[session])
    return agent


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_restore_of_one_of_two_sessions_matches_the_model(data: st.DataObject) -> None:
    """A restore puts back exactly the files its session's tools touched since the checkpoint
    (log head seq - 1), or refuses naming each file the other session changed afterwards and
    changes nothing."""
    plan = draw_plan(data)
    session = data.draw(st.sampled_from(sorted(set(plan.sessions))))
    mine = [i for i, s in enumerate(plan.sessions) if s == session]
    which = data.draw(st.integers(0, len(mine) - 1))
    expected = expected_restore(plan, session, mine[which])
    changed = min(len(expected.targets), 3)
    event("refused" if expected.refused else f"restore of {changed}{'+' * (changed == 3)} files")
    with (
        tempfile.TemporaryDirectory() as tmp,
        memory_checkpointer() as cp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        for path, content in plan.initial.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_bytes(content)
        agents = [stack.enter_context(_agent(work, cp, s, plan)) for s in (0, 1)]
        for index, s in enumerate(plan.sessions):
            assert plan.before[index] == workspace(work)
            agents[s].send(f"prompt {index}")
        assert plan.final == workspace(work)
        sid, other = SESSIONS[session], SESSIONS[1 - session]
        logs = {s: list(cp.read(s)) for s in SESSIONS}
        seq = agents[session].list_checkpoints(sid)[which].seq
        if expected.refused:
            with pytest.raises(RestoreRefusedError) as info:
                agents[session].restore(sid, seq)
            assert sorted(expected.refused) == [path for path, _ in info.value.problems]
            for path, reason in info.value.problems:
                assert reason.startswith(f"it was {expected.refused[path]} since the agent")
            assert plan.final == workspace(work)
            assert logs[sid] == list(cp.read(sid))
        else:
            result = agents[session].restore(sid, seq)
            want = dict(plan.final)
            for path, content in expected.targets.items():
                want.pop(path, None)
                if content is not None:
                    want[path] = content
            assert want == workspace(work)
            assert tuple(sorted(expected.targets)) == result.restored_files
            assert seq - 1 == cp.head(sid)
            assert logs[sid][: seq - 1] == list(cp.read(sid))
        assert logs[other] == list(cp.read(other))
