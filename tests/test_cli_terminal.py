"""Ctrl-C in the CLI's main thread is counted, not raised wherever it lands
(``liteagent.sdk._cli_terminal``): real SIGINTs sent to this process and to ``lite-agent``
reading its prompt from a pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from _cli_runner import LITE_AGENT, clean_env, write_script

from liteagent.sdk._cli_terminal import counted_ctrl_c


def interrupt_self() -> None:
    """A real SIGINT to this process; its Python handler runs before this returns."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.01)  # the handler runs at the next bytecode boundary at the latest


def test_presses_are_counted_and_the_old_handler_comes_back() -> None:
    """Inside ``counted_ctrl_c`` a SIGINT raises nothing; ``take`` returns the presses since
    the last call; outside, Python's default handler raises KeyboardInterrupt again."""
    before = signal.getsignal(signal.SIGINT)
    assert before is signal.default_int_handler
    with counted_ctrl_c() as ctrl_c:
        assert not ctrl_c.pending
        interrupt_self()
        interrupt_self()
        assert ctrl_c.pending
        assert 2 == ctrl_c.take()
        assert 0 == ctrl_c.take()
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):
        interrupt_self()


def test_raising_raises_once_so_a_second_press_cannot_land_in_the_except_block() -> None:
    """Armed by ``raising()``, the first press raises out of the blocking call; the handler
    disarms itself before raising, so a press while the caller handles it is only counted."""
    with counted_ctrl_c() as ctrl_c:
        raised = False
        with ctrl_c.raising():
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            try:
                time.sleep(10)
            except KeyboardInterrupt:
                raised = True
                interrupt_self()  # the second press, inside the except block
        assert raised
        assert 2 == ctrl_c.take()
        with ctrl_c.raising():
            pass
        interrupt_self()  # disarmed after the block: counted
        assert 1 == ctrl_c.take()


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
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
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
def test_piped_prompt_end_of_input_quits_with_zero(tmp_path: Path) -> None:
    """Ctrl-D (end of the piped input) after a slash command quits with exit code 0."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    provider = write_script(tmp_path / "script.json", [{"text": "unused"}])
    run = subprocess.run(
        [str(LITE_AGENT), "--workdir", str(work), "--home", str(home), "--provider", provider],
        input=b"/help\n", capture_output=True, env=clean_env(), timeout=60, check=False)
    assert 0 == run.returncode, run.stderr
    assert b"/checkpoints" in run.stdout
