"""liteagent.context — pure functions over messages and folded state: tokens, turns,
compaction, ContextEngine. Built by a later issue.

This package is part of the repository skeleton (DESIGN §1); it exports nothing yet.
"""

__all__: list[str] = []
