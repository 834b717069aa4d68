"""Ctrl-C reaches the CLI through its event loop (``liteagent.sdk._cli_terminal``): real SIGINTs
sent to this process and to ``lite-agent`` reading its prompt from a pipe."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from _cli_runner import LITE_AGENT, clean_env, write_script

from liteagent.eventlog import CancelToken
from liteagent.eventlog.errors import OperationCancelledError
from liteagent.eventlog.types import AssistantMessage, TextBlock
from liteagent.providers import scripted
from liteagent.sdk import create_lite_agent
from liteagent.sdk._cli_output import LiveRenderer, make_console, quiet_console
from liteagent.sdk._cli_terminal import Interrupts, handling_ctrl_c, live, run_loop


def interrupt_self() -> None:
    """A real SIGINT to this process; its Python handler runs before this returns."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)  # the handler runs at the next bytecode boundary at the latest


def test_a_press_goes_to_the_route_or_is_kept_and_the_old_handler_comes_back() -> None:
    """A real SIGINT while a route is set calls it; without one it is kept for ``take``; no
    KeyboardInterrupt is raised meanwhile; afterwards Python's default handler is back."""
    routed: list[str] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()
        with handling_ctrl_c(loop) as interrupts:
            pressed = asyncio.Event()
            with interrupts.routed(lambda: (routed.append("press"), pressed.set())):
                os.kill(os.getpid(), signal.SIGINT)
                await asyncio.wait_for(pressed.wait(), 30)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            kept = 0
            for _ in range(3000):  # the loop handles them on its next turns
                kept += interrupts.take()
                if kept >= 2:
                    break
                await asyncio.sleep(0.01)
            return kept

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert 2 == asyncio.run(main())
    assert ["press"] == routed
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        interrupt_self()


def test_a_press_the_kernel_gives_another_thread_still_wakes_the_loop() -> None:
    """With SIGINT blocked in the loop's thread, the kernel delivers it to another thread: the
    loop still wakes and routes the press (no thread polls or signals the main thread)."""
    done = threading.Event()
    catcher_ready = threading.Event()

    def catcher() -> None:  # the only thread with SIGINT unblocked
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        catcher_ready.set()
        done.wait(30)

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        with handling_ctrl_c(loop) as interrupts:
            pressed = asyncio.Event()
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            thread = threading.Thread(target=catcher)
            thread.start()
            try:
                catcher_ready.wait(30)
                with interrupts.routed(pressed.set):
                    os.kill(os.getpid(), signal.SIGINT)
                    await asyncio.wait_for(pressed.wait(), 30)
                return pressed.is_set()
            finally:
                done.set()
                thread.join()
                signal.pthread_sigmask(signal.SIG_SETMASK, old)

    assert asyncio.run(main()) is True


def test_a_press_kept_before_a_turn_starts_cancels_it(tmp_path: Path) -> None:
    """A Ctrl-C pressed after a line was entered but before its turn started is not lost: the
    turn starts cancelled, and the log records the aborted turn."""
    model = scripted([], name="never-called")
    with create_lite_agent(model=model, model_name="m", workdir=tmp_path, sessions=False) as agent:

        async def main(interrupts: Interrupts) -> str:
            interrupts.keep()
            try:
                await live(
                    agent,
                    lambda token: agent.send("hi", cancel=token),
                    LiveRenderer(quiet_console()),
                    interrupts,
                )
            except OperationCancelledError as e:
                return str(e)
            return "not cancelled"

        assert "interrupted (Ctrl-C)" == run_loop(main)


def test_live_returns_the_result_after_showing_the_events(tmp_path: Path) -> None:
    """``live`` returns the work's result once the agent's events of it were shown."""
    model = scripted([AssistantMessage(content=(TextBlock("hello there"),))], stream_chunk=2)
    out = io.StringIO()
    with create_lite_agent(model=model, model_name="m", workdir=tmp_path, sessions=False) as agent:

        def work(token: CancelToken) -> str:
            return agent.send("hi", cancel=token).text

        renderer = LiveRenderer(make_console(out))
        text = run_loop(lambda interrupts: live(agent, work, renderer, interrupts))
    assert "hello there" == text
    assert "hello there\n" == out.getvalue()


def test_presses_while_the_work_is_cancelling_change_nothing(tmp_path: Path) -> None:
    """Real SIGINTs while the work is still stopping after the first one: the token is
    cancelled once, "cancelling" is said once, no KeyboardInterrupt escapes, and ``live``
    returns what the work returned when it stopped."""
    out = io.StringIO()

    def work(token: CancelToken) -> str:
        token.wait(60)
        for _ in range(3):  # still stopping: more presses arrive meanwhile
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        return f"stopped: {token.reason}"

    def first_press() -> None:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    with create_lite_agent(
        model=scripted([]), model_name="m", workdir=tmp_path, sessions=False
    ) as agent:
        threading.Thread(target=first_press, daemon=True).start()
        result = run_loop(
            lambda interrupts: live(agent, work, LiveRenderer(make_console(out)), interrupts)
        )
    assert "stopped: interrupted (Ctrl-C)" == result
    assert "  cancelling…\n" == out.getvalue()


@pytest.mark.processes
def test_piped_prompt_two_sigints_quit_with_zero(tmp_path: Path) -> None:
    """``lite-agent`` reading its prompt from a pipe: a SIGINT while it waits prints the hint
    and the prompt again; a second SIGINT quits with exit code 0; nothing is printed as a
    traceback."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    provider = write_script(tmp_path / "script.json", [{"text": "unused"}])
    proc = subprocess.Popen(
        [str(LITE_AGENT), "--workdir", str(work), "--home", str(home), "--provider", provider],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None
        while b"Type a request" not in proc.stdout.readline():  # the banner: it is reading
            pass
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline().startswith(b"> ")
        assert b"Ctrl-C again to quit" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.communicate()
    assert 0 == proc.returncode, err
    assert b"Traceback" not in err


@pytest.mark.processes
def test_piped_prompt_ctrl_c_cancels_a_turn_and_the_next_line_runs(tmp_path: Path) -> None:
    """A SIGINT while a piped prompt's turn waits for a slow model cancels that turn; the next
    line then runs, and the end of the input quits with exit code 0."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    provider = write_script(
        tmp_path / "script.json", [{"text": "too late", "delay": 60}, {"text": "Second answer."}]
    )
    proc = subprocess.Popen(
        [str(LITE_AGENT), "--workdir", str(work), "--home", str(home), "--provider", provider],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(b"take your time\n")
        proc.stdin.flush()
        while b"Type a request" not in proc.stdout.readline():
            pass
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        while b"cancelled: the log records the aborted turn" not in proc.stdout.readline():
            pass
        out, err = proc.communicate(b"again\n", timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert 0 == proc.returncode, err
    assert b"Second answer." in out
    assert b"Traceback" not in err


@pytest.mark.processes
def test_piped_prompt_end_of_input_quits_with_zero(tmp_path: Path) -> None:
    """Ctrl-D (end of the piped input) after a slash command quits with exit code 0."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    provider = write_script(tmp_path / "script.json", [{"text": "unused"}])
    run = subprocess.run(
        [str(LITE_AGENT), "--workdir", str(work), "--home", str(home), "--provider", provider],
        input=b"/help\n",
        capture_output=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert 0 == run.returncode, run.stderr
    assert b"/checkpoints" in run.stdout
