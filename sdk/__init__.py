"""liteagent.sdk — the public facade (create_lite_agent, LiteAgent, AsyncLiteAgent,
create_agent) and the lite-agent CLI. Built by a later issue.

This package is part of the repository skeleton (DESIGN §1); it exports nothing yet.
"""

__all__: list[str] = []
