"""liteagent.providers — the ModelProvider contract and its providers: anthropic, scripted,
replay. Built by a later issue.

This package is part of the repository skeleton (DESIGN §1); it exports nothing yet.
"""

__all__: list[str] = []
