"""The session lease end to end: real OS processes racing for one session, holders killed with
SIGKILL mid-turn, maintenance refused while another process runs the session, background
results waiting for another process's turn, the CLI, and leases never left held.

Processes come from one fork server (``_lease_procs``); they coordinate through files, so every
overlap below is certain, never a matter of timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from _cli_runner import Cli, two_prompts
from _lease_procs import (
    WAIT,
    ForkServer,
    open_store,
    result,
    signal_file,
    wait_file,
    wait_until,
)

from liteagent.eventlog import (
    CancelToken,
    Checkpointer,
    StoredEvent,
    file_checkpointer,
    fold,
    memory_checkpointer,
)
from liteagent.eventlog.errors import LiteAgentError
from liteagent.eventlog.types import (
    AssistantMessage,
    BackgroundCompleted,
    RestoreStarted,
    TextBlock,
    ToolResult,
    ToolUseBlock,
    TurnAborted,
    UserPrompt,
)
from liteagent.providers import ProviderRequestError, scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import (
    AgentBusyError,
    LiteAgent,
    create_agent,
    create_async_lite_agent,
    create_lite_agent,
)
from liteagent.tools import bash, write_file

BACKENDS = ("file", "sqlite")
RACE_TRIALS = 15
SOAK_RACE_TRIALS = 200


# -- fixtures and helpers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fork_server() -> Iterator[ForkServer]:
    """One fork server per module (importing liteagent takes seconds)."""
    server = ForkServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def procs(fork_server: ForkServer) -> Iterator[ForkServer]:
    """The fork server; children a failed test left behind are killed afterwards."""
    yield fork_server
    fork_server.kill_all()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty workspace."""
    path = tmp_path / "work"
    path.mkdir()
    return path


class Store:
    """A shared session store (file or SQLite) and a folder for one scenario's signals."""

    def __init__(self, backend: str, root: Path, workdir: Path) -> None:
        self.backend = backend
        self.root = root
        self.path = root / ("sessions" if backend == "file" else "sessions.db")
        self.workdir = workdir
        self._trials = 0

    def open(self) -> Checkpointer:
        """A checkpointer of this process on the store."""
        return open_store(self.backend, self.path)

    def folder(self) -> Path:
        """A fresh folder for one scenario's signal files."""
        self._trials += 1
        folder = self.root / f"signals{self._trials}"
        folder.mkdir()
        return folder

    def job(
        self,
        folder: Path,
        name: str,
        session: str,
        prompt: str,
        steps: list[dict[str, Any]],
        *,
        barrier: bool = False,
    ) -> dict[str, Any]:
        """The job of a child sending ``prompt`` to ``session`` with a model following
        ``steps`` (see ``_lease_procs``)."""
        return {
            "name": name,
            "dir": str(folder),
            "work": str(self.workdir),
            "backend": self.backend,
            "store": str(self.path),
            "session": session,
            "prompt": prompt,
            "steps": steps,
            "barrier": barrier,
        }


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, workdir: Path) -> Store:
    """A file or SQLite store shared by this process and the children."""
    return Store(request.param, tmp_path, workdir)


def rows(cp: Checkpointer, session_id: str) -> list[list[Any]]:
    """The session's log as ``[seq, kind, repr(body)]`` rows (as the children report it)."""
    return [[e.seq, e.kind, repr(e.body)] for e in cp.read(session_id)]


def prompts(events: list[StoredEvent]) -> list[str]:
    """The texts of the user prompts in ``events``."""
    return [
        " ".join(b.text for b in e.body.content if isinstance(b, TextBlock))
        for e in events
        if isinstance(e.body, UserPrompt)
    ]


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def call(tool: str, **input: Any) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{tool}_{time.monotonic_ns()}", tool, input),),
        stop_reason="tool_use",
    )


def held_model(
    entered: threading.Event, release: threading.Event, text: str = "held"
) -> Callable[[ModelRequest], AssistantMessage]:
    """A scripted answer that signals ``entered`` and waits for ``release``."""

    def answer(request: ModelRequest) -> AssistantMessage:
        entered.set()
        assert release.wait(WAIT), "the test never released the model"
        return reply(text)

    return answer


def agent_on(cp: Checkpointer, workdir: Path, responses: list[Any], **kw: Any) -> LiteAgent:
    """An agent on ``cp`` (which it does not own) answering from ``responses``."""
    return create_lite_agent(
        model=scripted(responses),
        model_name="m",
        workdir=workdir,
        checkpointer=cp,
        context=False,
        **kw,
    )


def hold_in_child(procs: ForkServer, store: Store, session: str) -> tuple[Path, int]:
    """Start a child whose turn on ``session`` waits in its model call until ``release`` is
    signalled; return its folder and pid once it is there (holding the session's lease)."""
    folder = store.folder()
    pid = procs.start(
        **store.job(
            folder,
            "C",
            session,
            "from the other process",
            [{"enter": "model-C", "block": "release", "text": "C done"}],
        )
    )
    wait_file(folder, "model-C")
    return folder, pid


def finish_child(procs: ForkServer, folder: Path, pid: int) -> dict[str, Any]:
    """Release the held child; its report once it exited normally."""
    signal_file(folder, "release")
    report = result(folder, "C")
    assert 0 == procs.wait(pid), report
    return report


# -- 1. two processes race for one session --------------------------------------------------------


def _race(procs: ForkServer, store: Store, cp: Checkpointer, trial: int) -> tuple[int, str]:
    """Two processes send to one fresh session at once (released together from a barrier);
    the winner's model call waits until the loser has reported, so the two overlap. Checks
    that one won and the other wrote nothing; returns the winner's pid and the loser's error
    message."""
    folder = store.folder()
    session = f"race-{trial}"
    pids = {}
    for name in ("A", "B"):
        steps = [
            {
                "enter": f"model-{name}",
                "block": "release",
                "tools": [{"name": "mark", "input": {"label": name}}],
            },
            {"text": f"{name} done"},
        ]
        pids[name] = procs.start(
            **store.job(folder, name, session, f"prompt from {name}", steps, barrier=True)
        )
    wait_file(folder, "ready-A")
    wait_file(folder, "ready-B")
    signal_file(folder, "go")

    def settled() -> bool:
        def seen(name: str) -> bool:
            return (folder / name).exists()

        # a refusal was reported, or both are in their model call (no lease kept them apart)
        return seen("out-A.json") or seen("out-B.json") or (seen("model-A") and seen("model-B"))

    wait_until(settled, "a refusal (or both processes in their model call)")
    signal_file(folder, "release")
    reports = {name: result(folder, name) for name in pids}
    assert {"A": 0, "B": 0} == {name: procs.wait(pid) for name, pid in pids.items()}, reports
    winners = [name for name, r in reports.items() if r["outcome"] == "ok"]
    assert 1 == len(winners), reports
    winner = winners[0]
    loser = "B" if winner == "A" else "A"
    assert ("error", "AgentBusyError") == (reports[loser]["outcome"], reports[loser]["type"])
    events = list(cp.read(session))
    assert [f"prompt from {winner}"] == prompts(events)
    assert not (folder / f"model-{loser}").exists()
    assert not (folder / f"tool-{loser}").exists()
    assert (folder / f"tool-{winner}").exists()
    state = fold(events)
    assert (False, ()) == (state.turn_open, state.open_tool_calls)
    assert cp.lease_holder(session) is None
    return reports[winner]["pid"], reports[loser]["message"]


@pytest.mark.processes
def test_two_processes_racing_for_a_session_one_wins_the_other_writes_nothing(
    procs: ForkServer, store: Store
) -> None:
    """Two processes send to one session at once, many times: exactly one wins; the other's
    send is AgentBusyError, its prompt never enters the log and its tool never runs."""
    with store.open() as cp:
        for trial in range(RACE_TRIALS):
            _race(procs, store, cp, trial)


@pytest.mark.processes
def test_the_loser_of_a_race_is_told_which_process_runs_the_session(
    procs: ForkServer, store: Store
) -> None:
    """The refusal of the process that lost a race names the winner (its pid), however close
    the two acquisitions were."""
    with store.open() as cp:
        races = [_race(procs, store, cp, trial) for trial in range(RACE_TRIALS)]
    unnamed = [message for pid, message in races if f"(pid {pid} on " not in message]
    assert [] == unnamed


@pytest.mark.processes
@pytest.mark.soak
def test_two_processes_racing_for_a_session_soak(procs: ForkServer, store: Store) -> None:
    """The race above, 200 times per backend."""
    with store.open() as cp:
        for trial in range(SOAK_RACE_TRIALS):
            _race(procs, store, cp, trial)


# -- 2. SIGKILL of the holder mid-turn ------------------------------------------------------------

# Where the holder is killed: its model's steps, the file whose content is the log as the holder
# had it acknowledged at that point, and the file that says it is there.
KILL_POINTS: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    "first model call": ([{"enter": "at-kill", "block": "forever"}], "at-kill", "at-kill"),
    "tool run": (
        [
            {
                "tools": [
                    {
                        "name": "mark",
                        "input": {"label": "A", "enter": "at-kill", "block": "forever"},
                    }
                ]
            }
        ],
        "at-kill",
        "at-kill",
    ),
    "second of two tools": (
        [
            {
                "tools": [
                    {"name": "mark", "input": {"label": "A"}},
                    {
                        "name": "mark",
                        "input": {"label": "A2", "enter": "at-kill", "block": "forever"},
                    },
                ]
            }
        ],
        "at-kill",
        "at-kill",
    ),
    "model call after a tool": (
        [
            {"tools": [{"name": "mark", "input": {"label": "A"}}]},
            {"enter": "at-kill", "block": "forever"},
        ],
        "at-kill",
        "at-kill",
    ),
    "shell command outliving the holder": (
        [
            {
                "tools": [
                    {"name": "mark", "input": {"label": "A", "enter": "acked"}},
                    {"name": "bash", "input": {"command": "{shell}"}},
                ]
            }
        ],
        "acked",
        "bash.pid",
    ),
}


def _shell(folder: Path) -> str:
    """A command that records its pid and then sleeps in that same process (it survives its
    agent's SIGKILL: it runs in its own process group)."""
    return (
        f"echo $$ > {folder}/.bash.pid && mv {folder}/.bash.pid {folder}/bash.pid && exec sleep 120"
    )


def _check_request(messages: list[list[Any]]) -> None:
    """A request the Messages API accepts: roles alternate from the user's, and every tool
    call is answered in the next message, whose tool results come first."""
    roles = [m[0] for m in messages]
    assert ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2) == roles
    for i, (role, blocks) in enumerate(messages):
        if role == "assistant":
            calls = [b[1] for b in blocks if b[0] == "ToolUseBlock"]
            first = messages[i + 1][1][: len(calls)]
            assert [["ToolResultBlock", c] for c in calls] == [b[:2] for b in first], messages


@pytest.mark.processes
@pytest.mark.parametrize("engine", [False, True], ids=["raw view", "context engine"])
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_sigkill_of_the_holder_mid_turn_another_process_takes_over(
    procs: ForkServer, store: Store, point: str, engine: bool
) -> None:
    """The lease holder is killed with SIGKILL mid-turn; another process's send (its model
    shown the raw conversation or the context engine's view) then takes the lease at once,
    closes the killed turn's open tool calls as interrupted and continues; the log folds and
    keeps every event the killed process had acknowledged."""
    steps, acked_file, trigger = KILL_POINTS[point]
    folder = store.folder()
    steps = json.loads(json.dumps(steps).replace("{shell}", _shell(folder)))
    holder_pid = procs.start(**store.job(folder, "A", "s", "the killed prompt", steps))
    wait_file(folder, trigger)
    acked = json.loads(wait_file(folder, acked_file))
    orphan = int(wait_file(folder, "bash.pid")) if trigger == "bash.pid" else None
    try:
        with store.open() as cp:
            held = cp.lease_holder("s")
            assert held is not None
            assert holder_pid == held.pid
            assert -signal.SIGKILL == procs.kill(holder_pid)
            assert cp.lease_holder("s") is None
            pid = procs.start(
                **store.job(
                    folder, "C", "s", "continue", [{"record": "request-C", "text": "C done"}]
                ),
                context=engine,
            )
            report = result(folder, "C")
            assert 0 == procs.wait(pid), report
            assert {"outcome": "ok", "text": "C done", "pid": pid} == report
            if held.expires_at is not None:  # taken over before the dead holder's lease expired
                assert time.time() < held.expires_at
            events = list(cp.read("s"))
            assert cp.lease_holder("s") is None
            if orphan is not None:  # the holder's shell command outlived it, holding nothing
                os.kill(orphan, 0)
    finally:
        if orphan is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(orphan, signal.SIGKILL)
    assert acked == [[e.seq, e.kind, repr(e.body)] for e in events[: len(acked)]]
    open_calls = fold(events[: len(acked)]).open_tool_calls
    after = [e.body for e in events[len(acked) :]]
    closed = after[: len(open_calls)]
    assert list(open_calls) == [r.block.tool_use_id for r in closed if isinstance(r, ToolResult)]
    assert all(
        r.block.is_error and "interrupted" in str(r.block.content)
        for r in closed
        if isinstance(r, ToolResult)
    )
    rest = after[len(open_calls) :]
    if open_calls:
        assert isinstance(rest[0], TurnAborted)
        rest = rest[1:]
    assert isinstance(rest[0], UserPrompt)
    assert (TextBlock("continue"),) == rest[0].content
    state = fold(events)
    assert (False, ()) == (state.turn_open, state.open_tool_calls)
    assert ["the killed prompt", "continue"] == prompts(events)
    request = json.loads(wait_file(folder, "request-C"))
    _check_request(request)
    assert "the killed prompt" in json.dumps(request)


# -- 3. work on a session another agent or process runs is refused, nothing written ---------------


@pytest.fixture(params=("memory", *BACKENDS))
def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Checkpointer, Checkpointer]]:
    """Two checkpointers of this process on one store (one shared object for memory)."""
    if request.param == "memory":
        cp = memory_checkpointer()
        with cp:
            yield cp, cp
        return
    store = Store(request.param, tmp_path, tmp_path)
    with store.open() as a, store.open() as b:
        yield a, b


def test_a_send_on_a_session_another_agent_runs_is_busy_and_writes_nothing(
    two_stores: tuple[Checkpointer, Checkpointer], workdir: Path
) -> None:
    """In one process, a second agent's send on a session the first agent is running raises
    AgentBusyError before anything is written, and its model is never called."""
    cp_a, cp_b = two_stores
    entered, release = threading.Event(), threading.Event()
    other = scripted([reply("never")])
    with (
        agent_on(cp_a, workdir, [held_model(entered, release)]) as a,
        create_lite_agent(
            model=other, model_name="m", workdir=workdir, checkpointer=cp_b, context=False
        ) as b,
    ):
        worker = threading.Thread(target=a.send, args=("from a",), kwargs={"session_id": "s"})
        worker.start()
        try:
            assert entered.wait(WAIT)
            before = rows(cp_b, "s")
            with pytest.raises(AgentBusyError, match="running elsewhere"):
                b.send("from b", session_id="s")
            assert before == rows(cp_b, "s")
        finally:
            release.set()
            worker.join(WAIT)
    assert [] == other.requests
    assert ["from a"] == prompts(list(cp_a.read("s")))


def test_an_async_send_on_a_session_another_agent_runs_is_busy_and_writes_nothing(
    two_stores: tuple[Checkpointer, Checkpointer], workdir: Path
) -> None:
    """The asyncio API refuses the same way: ``await send`` on a session another agent is
    running raises AgentBusyError, nothing written, its model never called."""
    cp_a, cp_b = two_stores
    entered, release = threading.Event(), threading.Event()
    other = scripted([reply("never")])

    async def refused() -> None:
        async with create_async_lite_agent(
            model=other, model_name="m", workdir=workdir, checkpointer=cp_b, context=False
        ) as b:
            with pytest.raises(AgentBusyError):
                await b.send("from b", session_id="s")

    with agent_on(cp_a, workdir, [held_model(entered, release)]) as a:
        worker = threading.Thread(target=a.send, args=("from a",), kwargs={"session_id": "s"})
        worker.start()
        try:
            assert entered.wait(WAIT)
            before = rows(cp_b, "s")
            asyncio.run(refused())
            assert before == rows(cp_b, "s")
        finally:
            release.set()
            worker.join(WAIT)
    assert [] == other.requests


def _three_turns(cp: Checkpointer, workdir: Path) -> int:
    """Session "s": three turns rewriting a.txt ("one", "two", "three"); return the seq of
    the second prompt's checkpoint."""
    responses: list[Any] = []
    for word in ("one", "two", "three"):
        responses += [call("write_file", path="a.txt", content=f"{word}\n"), reply(word)]
    with agent_on(cp, workdir, responses, tools=[write_file]) as agent:
        agent.resume("s")
        for word in ("one", "two", "three"):
            agent.send(f"write {word}")
        return agent.list_checkpoints("s")[1].seq


def _store_files(store: Store) -> dict[str, bytes]:
    """Every file of a file store (nothing for SQLite: its rows are compared instead)."""
    if store.backend != "file":
        return {}
    return {
        str(p.relative_to(store.path)): p.read_bytes()
        for p in sorted(store.path.rglob("*"))
        if p.is_file()
    }


MAINTENANCE: dict[str, Callable[[LiteAgent, int], Any]] = {
    "restore": lambda agent, seq: agent.restore("s", seq),
    "compact": lambda agent, _: agent.compact(),
    "rollback_restore": lambda agent, _: agent.rollback_restore("s"),
    "finish_restore": lambda agent, _: agent.finish_restore("s"),
    "delete_session": lambda agent, _: agent.delete_session("s"),
}


@pytest.mark.processes
@pytest.mark.parametrize("operation", list(MAINTENANCE))
def test_maintenance_of_a_session_another_process_runs_is_refused(
    procs: ForkServer, store: Store, operation: str
) -> None:
    """restore, compact, finish/rollback of a restore and delete_session on a session another
    process is running raise AgentBusyError and change nothing: not the log, not the store's
    files, not the workspace; the other process's turn then completes undisturbed."""
    with store.open() as cp:
        seq = _three_turns(cp, store.workdir)
        folder, pid = hold_in_child(procs, store, "s")
        before = (rows(cp, "s"), _store_files(store), (store.workdir / "a.txt").read_text())
        with agent_on(cp, store.workdir, []) as agent:
            agent.resume("s")
            try:
                with pytest.raises(AgentBusyError):
                    MAINTENANCE[operation](agent, seq)
                assert before == (
                    rows(cp, "s"),
                    _store_files(store),
                    (store.workdir / "a.txt").read_text(),
                )
            finally:
                report = finish_child(procs, folder, pid)
        assert "ok" == report["outcome"], report
        events = list(cp.read("s"))
    assert ["write one", "write two", "write three", "from the other process"] == prompts(events)


# -- 4. a background result waits for another process's turn --------------------------------------

_RETRIES_SEEN = 2.5  # seconds: the background thread tries again every second while refused


@pytest.mark.processes
def test_a_background_result_is_recorded_after_another_process_releases_the_session(
    procs: ForkServer, store: Store
) -> None:
    """A background task finishes while another process runs a turn on its session: the
    result is not recorded into that turn; it is recorded, once, right after it."""
    folder = store.folder()
    command = (
        f"while [ ! -e {folder}/bg-go ]; do sleep 0.01; done; echo bg-output; "
        f"touch {folder}/bg-ended"
    )
    with (
        store.open() as cp,
        agent_on(
            cp,
            store.workdir,
            [call("bash", command=command, run_in_background=True), reply("started")],
            tools=[bash],
        ) as agent,
    ):
        agent.send("start it", session_id="s")
        assert 1 == len(agent.background_tasks())
        pid = procs.start(
            **store.job(
                folder,
                "B",
                "s",
                "from B",
                [{"enter": "model-B", "block": "release", "text": "B done"}],
            )
        )
        wait_file(folder, "model-B")
        during = rows(cp, "s")
        signal_file(folder, "bg-go")
        wait_file(folder, "bg-ended")
        time.sleep(_RETRIES_SEEN)  # let the finished task try (and be refused) a few times
        assert during == rows(cp, "s")
        assert 1 == len(agent.background_tasks())  # not lost: still waiting to be recorded
        signal_file(folder, "release")
        report = result(folder, "B")
        assert 0 == procs.wait(pid)
        assert {"outcome": "ok", "text": "B done", "pid": pid} == report
        wait_until(
            lambda: "background_completed" in [e.kind for e in cp.read("s")],
            "the background result recorded",
        )
        wait_until(lambda: not agent.background_tasks(), "the background task forgotten")
        events = list(cp.read("s"))
    tail = [e.kind for e in events[len(during) :]]
    assert ["model_request", "assistant_message", "background_completed", "user_prompt"] == tail
    assert ["start it", "from B"] == prompts(events)[:2]
    done = [e.body for e in events if isinstance(e.body, BackgroundCompleted)]
    assert 1 == len(done)
    assert done[0].ok
    assert "bg-output" in done[0].summary
    assert (False, ()) == (fold(events).turn_open, fold(events).open_tool_calls)


@pytest.mark.processes
def test_a_background_result_after_a_turn_killed_elsewhere_keeps_the_conversation_valid(
    procs: ForkServer, store: Store
) -> None:
    """A background task finishes after another process was killed in the middle of a tool
    call on its session: the result is recorded, and the next request still answers that call
    (interrupted) right after it, before any other text."""
    folder = store.folder()
    command = f"while [ ! -e {folder}/bg-go ]; do sleep 0.01; done; echo bg-output"
    with (
        store.open() as cp,
        agent_on(
            cp,
            store.workdir,
            [call("bash", command=command, run_in_background=True), reply("started")],
            tools=[bash],
        ) as agent,
    ):
        agent.send("start it", session_id="s")
        pid = procs.start(
            **store.job(
                folder,
                "B",
                "s",
                "from B",
                [
                    {
                        "tools": [
                            {
                                "name": "mark",
                                "input": {"label": "B", "enter": "at-kill", "block": "forever"},
                            }
                        ]
                    }
                ],
            )
        )
        wait_file(folder, "at-kill")
        assert -signal.SIGKILL == procs.kill(pid)
        signal_file(folder, "bg-go")
        wait_until(lambda: not agent.background_tasks(), "the background result recorded")
        pid = procs.start(
            **store.job(folder, "C", "s", "continue", [{"record": "request-C", "text": "C done"}]),
            context=True,
        )
        report = result(folder, "C")
        assert 0 == procs.wait(pid)
        events = list(cp.read("s"))
    assert {"outcome": "ok", "text": "C done", "pid": pid} == report
    assert 1 == sum(isinstance(e.body, BackgroundCompleted) for e in events)
    assert (False, ()) == (fold(events).turn_open, fold(events).open_tool_calls)
    _check_request(json.loads(wait_file(folder, "request-C")))


# -- 5. the CLI, close(), failing turns -----------------------------------------------------------

CLI_COMMANDS: dict[str, Callable[[Cli, int], list[str]]] = {
    "run": lambda cli, _: [
        "run",
        "again",
        "--session",
        "s1",
        "--provider",
        cli.script({"text": "never"}),
    ],
    "restore": lambda _, seq: ["restore", "s1", str(seq)],
    "compact": lambda _, __: ["compact", "s1"],
}


@pytest.mark.processes
@pytest.mark.parametrize("command", list(CLI_COMMANDS))
def test_the_cli_on_a_session_running_in_another_process_exits_1_with_one_line(
    cli: Cli, command: str
) -> None:
    """``lite-agent run --session ID`` (and restore, compact) on a session another process is
    running exits 1 with a one-line reason naming that process, and changes nothing."""
    two_prompts(cli)
    entered, release = threading.Event(), threading.Event()
    with (
        file_checkpointer(workdir=cli.work, home=cli.home) as cp,
        agent_on(cp, cli.work, [held_model(entered, release)]) as agent,
    ):
        seq = agent.list_checkpoints("s1")[0].seq
        worker = threading.Thread(target=agent.send, args=("third",), kwargs={"session_id": "s1"})
        worker.start()
        try:
            assert entered.wait(WAIT)
            before = (rows(cp, "s1"), (cli.work / "a.txt").read_text())
            outcome = cli(*CLI_COMMANDS[command](cli, seq))
            after = (rows(cp, "s1"), (cli.work / "a.txt").read_text())
        finally:
            release.set()
            worker.join(WAIT)
    assert 1 == outcome.code, outcome
    assert 1 == len(outcome.err.splitlines()), outcome.err
    assert outcome.err.startswith("lite-agent: ")
    assert f"pid {os.getpid()}" in outcome.err  # names the process running the session
    assert before == after


@pytest.fixture(params=("memory", *BACKENDS))
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """A checkpointer of every backend (the agents on it do not own it)."""
    if request.param == "memory":
        with memory_checkpointer() as cp:
            yield cp
        return
    with Store(request.param, tmp_path, tmp_path).open() as cp:
        yield cp


class WaitForCancel:
    """Middleware holding every model call until its turn is cancelled."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self._lock = threading.Lock()

    def before_model(
        self, request: ModelRequest, state: Any, *, cancel: CancelToken
    ) -> ModelRequest:
        with self._lock:
            self.entered.append(str(state.head))
        cancel.wait(WAIT)
        return request


def test_close_releases_every_lease_the_agent_holds(any_store: Checkpointer, workdir: Path) -> None:
    """close() while the agent runs turns on two sessions releases both sessions' leases:
    another agent can then run both."""
    cp = any_store
    held = WaitForCancel()
    agent = create_agent(
        model=scripted([reply("never")] * 2),
        model_name="m",
        tools=[],
        use=[held],
        checkpointer=cp,
        workdir=workdir,
    )
    errors: list[BaseException] = []

    def send(session_id: str) -> None:
        try:
            agent.send("held", session_id=session_id)
        except BaseException as e:  # noqa: BLE001 -- collected for the test
            errors.append(e)

    workers = [threading.Thread(target=send, args=(s,)) for s in ("s1", "s2")]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: 2 == len(held.entered), "both turns in their model call")
        assert cp.lease_holder("s1") is not None
        assert cp.lease_holder("s2") is not None
    finally:
        agent.close()
        for w in workers:
            w.join(WAIT)
    assert 2 == len(errors)
    assert (None, None) == (cp.lease_holder("s1"), cp.lease_holder("s2"))
    with agent_on(cp, workdir, [reply("one"), reply("two")]) as other:
        assert ["one", "two"] == [other.send("after", session_id=s).text for s in ("s1", "s2")]


def _intruding(cp: Checkpointer) -> Callable[[ModelRequest], AssistantMessage]:
    """A model call during which a writer without the lease appends to session "s"."""

    def answer(request: ModelRequest) -> AssistantMessage:
        cp.append("s", [UserPrompt(content=(TextBlock("intruder"),))])
        return reply("late")

    return answer


def _cancelling(token: CancelToken) -> Callable[[ModelRequest], AssistantMessage]:
    """A model call that cancels its own turn and asks for a tool."""

    def answer(request: ModelRequest) -> AssistantMessage:
        token.cancel("the user stopped it")
        return call("write_file", path="b.txt", content="x")

    return answer


def _raising(error: BaseException) -> Callable[..., Any]:
    def answer(*args: Any, **kwargs: Any) -> Any:
        raise error

    return answer


class Raising:
    """Middleware whose before_model raises from its second call on."""

    def __init__(self) -> None:
        self.calls = 0

    def before_model(self, request: ModelRequest, state: Any) -> ModelRequest:
        self.calls += 1
        if self.calls > 1:
            raise ValueError("middleware failed")
        return request


# name -> (the failing turn's model answers and middleware, given the store and the turn's
# cancel token); "interrupted restore pending" records a restore's intent before the turn
FAILING_TURNS: dict[str, Callable[[Checkpointer, CancelToken], tuple[list[Any], list[Any]]]] = {
    "provider error": lambda cp, t: ([ProviderRequestError("the model is down")], []),
    "foreign exception in the model": lambda cp, t: ([RuntimeError("boom")], []),
    "KeyboardInterrupt in the model": lambda cp, t: ([_raising(KeyboardInterrupt())], []),
    "SystemExit in the model": lambda cp, t: ([_raising(SystemExit(3))], []),
    "middleware raising": lambda cp, t: ([], [Raising()]),
    "cancelled mid-turn": lambda cp, t: ([_cancelling(t)], []),
    "another writer moved the log": lambda cp, t: ([_intruding(cp)], []),
    "interrupted restore pending": lambda cp, t: ([], []),
}


@pytest.mark.parametrize("failure", list(FAILING_TURNS))
def test_no_lease_is_left_held_after_a_failing_turn(
    any_store: Checkpointer, workdir: Path, failure: str
) -> None:
    """However a turn fails, the session's lease is released: nobody holds it afterwards and
    another agent can take the session."""
    cp = any_store
    token = CancelToken()
    answers, middleware = FAILING_TURNS[failure](cp, token)
    with create_agent(
        model=scripted([reply("first"), *answers]),
        model_name="m",
        tools=[write_file],
        use=middleware,
        checkpointer=cp,
        workdir=workdir,
    ) as agent:
        agent.resume("s")
        agent.send("first")
        if failure == "interrupted restore pending":
            cp.append("s", [RestoreStarted(to_seq=2, conversation=True)])
        with pytest.raises(LiteAgentError):
            agent.send("failing", cancel=token)
        assert cp.lease_holder("s") is None
    with cp.acquire_lease("s"):
        pass


# -- a holder whose SQLite lease was taken over ---------------------------------------------------


def _expire(db: Path, session_id: str) -> None:
    """Make the session's lease row expired, as it is after its holder was stopped (SIGSTOP, a
    suspended machine) for longer than the ttl without renewing it."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute(
            "UPDATE leases SET expires_at = ? WHERE session_id = ?", (time.time() - 1, session_id)
        )
    finally:
        conn.close()


@pytest.mark.processes
def test_a_holder_whose_expired_lease_was_taken_over_appends_nothing(
    procs: ForkServer, tmp_path: Path, workdir: Path
) -> None:
    """A turn whose SQLite lease expired and was taken by another holder meanwhile appends
    nothing more, even before its renewer has noticed: the new holder's session stays as it
    took it."""
    store = Store("sqlite", tmp_path, workdir)
    folder = store.folder()
    pid = procs.start(
        **store.job(
            folder, "A", "s", "from A", [{"enter": "model-A", "block": "release", "text": "A done"}]
        )
    )
    wait_file(folder, "model-A")
    with store.open() as cp:
        _expire(store.path, "s")
        with cp.acquire_lease("s"):
            before = rows(cp, "s")
            signal_file(folder, "release")
            report = result(folder, "A")
            assert 0 == procs.wait(pid)
            after = rows(cp, "s")
    assert "error" == report["outcome"], report
    assert before == after


@pytest.mark.processes
@pytest.mark.soak
def test_a_holder_stopped_past_its_ttl_loses_the_session_to_another_process(
    procs: ForkServer, tmp_path: Path, workdir: Path
) -> None:
    """A holder stopped (SIGSTOP) for longer than the 30 s ttl: another process takes the
    session; once continued, the old holder finds its lease lost and appends nothing more."""
    store = Store("sqlite", tmp_path, workdir)
    folder = store.folder()
    pid = procs.start(
        **store.job(
            folder, "A", "s", "from A", [{"enter": "model-A", "block": "release", "text": "A done"}]
        )
    )
    wait_file(folder, "model-A")
    with store.open() as cp:
        held = cp.lease_holder("s")
        assert held is not None
        assert held.expires_at is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(
                lambda: cp.lease_holder("s") is None,
                "the stopped holder's lease expiring",
                timeout=held.expires_at - time.time() + WAIT,
            )
            lease = cp.acquire_lease("s")
        finally:
            os.kill(pid, signal.SIGCONT)
        with lease:
            time.sleep(_RETRIES_SEEN)  # the continued holder's renewer runs at once
            before = rows(cp, "s")
            signal_file(folder, "release")
            report = result(folder, "A")
            assert 0 == procs.wait(pid)
            after = rows(cp, "s")
    assert "error" == report["outcome"], report
    assert before == after
