"""liteagent.actors — pykka actors: session, compactor, file-snapshot, maintenance-lock,
session host. Built by a later issue.

This package is part of the repository skeleton (DESIGN §1); it exports nothing yet.
"""

__all__: list[str] = []
