"""A Griffe extension for the API reference: the docstrings use Sphinx roles
(``:class:`~liteagent.eventlog.CancelToken```), which Markdown shows as raw text; each becomes a
code span with the name the role would display (``CancelToken``)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|exc|mod|obj|const):`([^`]+)`")


def _shown(match: re.Match[str]) -> str:
    """The text Sphinx would show for a role: ``~a.b.C`` shows ``C``; ``.x`` shows ``x``."""
    target = match.group(1)
    if target.startswith("~"):
        target = target.rsplit(".", 1)[-1]
    return f"`{target.lstrip('.')}`"


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring before mkdocstrings parses it."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_shown, obj.docstring.value)
