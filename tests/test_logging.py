"""The library never configures logging, and its events never land on a script's stdout.

Each case runs a real agent in a fresh interpreter (where structlog and stdlib logging are as the
application left them): a custom tool that breaks its contract by raising (a ``tool.failed``
warning) and an idle session passivated (a ``session.passivated`` debug event).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import sys, time
from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock
from liteagent.providers import scripted
from liteagent.sdk import configure_logging, create_lite_agent
from liteagent.tools import Tool

SETUP

class Explode(Tool):
    "A custom tool that breaks the contract: it raises instead of returning an error."
    name = "explode"
    description = "Fails."
    input_schema = {"type": "object"}

    def run(self, input, ctx):
        raise RuntimeError(input["reason"])

model = scripted([
    AssistantMessage(
        content=(ToolUseBlock("t1", "explode", {"reason": "boom"}),), stop_reason="tool_use"
    ),
    AssistantMessage(content=(TextBlock("done"),), stop_reason="end_turn"),
])
with create_lite_agent(
    model=model, model_name="scripted", workdir=sys.argv[1], sessions=False,
    tools=[Explode()], idle_timeout_s=0.1,
) as agent:
    print(agent.send("go").text)
    deadline = time.monotonic() + 30
    while agent.host_stats().live and time.monotonic() < deadline:
        time.sleep(0.05)
    print("live", agent.host_stats().live)
"""


def _run(tmp_path: Path, setup: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(_SCRIPT.replace("SETUP", setup))
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(work)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\nlive 0\n", "the library wrote to the script's stdout"
    return done


def test_unconfigured_warnings_reach_stderr_and_debug_events_nothing(tmp_path: Path) -> None:
    """Unconfigured, the tool.failed warning reaches stderr with its exception and session id; the
    session.passivated debug event does not."""
    err = _run(tmp_path, "").stderr
    assert "tool.failed" in err
    assert "RuntimeError('boom')" in err
    assert "session_id=" in err  # the session's bound id comes along
    assert "session.passivated" not in err  # a debug event: not shown by default


def test_stdlib_logging_of_the_application_receives_every_level(tmp_path: Path) -> None:
    """The application's stdlib logging at DEBUG receives tool.failed (liteagent.session) and
    session.passivated (liteagent.actors) with their fields."""
    setup = (
        "import logging\nlogging.basicConfig(level=logging.DEBUG, format='%(name)s %(message)s')"
    )
    err = _run(tmp_path, setup).stderr
    assert "liteagent.session tool.failed session_id=" in err
    assert "tool='explode'" in err
    assert "liteagent.actors session.passivated session_id=" in err


def test_configured_structlog_gets_the_events_with_their_fields(tmp_path: Path) -> None:
    """configure_logging(json=True, level=DEBUG) writes one tool.failed warning of
    liteagent.session with its tool and session id, and the session.passivated event."""
    err = _run(tmp_path, "configure_logging(json=True, level='DEBUG')").stderr
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "tool.failed"]
    assert len(failed) == 1
    assert failed[0]["tool"] == "explode"
    assert failed[0]["level"] == "warning"
    assert failed[0]["logger"] == "liteagent.session"
    assert failed[0]["session_id"]
    assert any(e["event"] == "session.passivated" for e in events)
