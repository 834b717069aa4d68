"""liteagent.tools — the Tool contract, file tools, shell, the context reader and path
safety. Built by a later issue.

This package is part of the repository skeleton (DESIGN §1); it exports nothing yet.
"""

__all__: list[str] = []
