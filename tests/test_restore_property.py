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
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _restore_model import CONTENT, NAMES, apply, call, draw_call, reply
from _restore_tools import TOOLS, workspace
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from liteagent.eventlog import memory_checkpointer
from liteagent.eventlog.types import AssistantMessage
from liteagent.providers import scripted
from liteagent.sdk import LiteAgent, RestoreRefusedError, create_lite_agent

SESSIONS = ("session-a", "session-b")


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
            if files.get(input["path"]) != pre:  # a call that changed nothing records nothing
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
