"""A Griffe extension for the API reference: the docstrings use Sphinx roles
(``:class:`~liteagent.eventlog.CancelToken```), which Markdown shows as raw text. Each becomes
a link to the object it names, showing the name the role would display (``CancelToken``): an
*optional* mkdocs-autorefs cross-reference, so a name the reference does not document (a
private helper, the standard library) is shown as plain code instead of failing the build."""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|exc|mod|obj|const):`([^`]+)`")


def _shown(target: str) -> str:
    """The text Sphinx would show for a role: ``~a.b.C`` shows ``C``; ``.x`` shows ``x``."""
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return target.lstrip(".")


def _identifier(obj: griffe.Object, target: str) -> str:
    """The full path ``target`` names, seen from ``obj`` (as written when it cannot tell)."""
    name = target.lstrip("~").lstrip(".")
    if name.startswith("liteagent."):
        return name
    head, _, rest = name.partition(".")
    try:
        resolved = obj.resolve(head)
    except griffe.NameResolutionError:
        return name
    return f"{resolved}.{rest}" if rest else resolved


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring before mkdocstrings parses it."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:  # noqa: ARG002
        if obj.docstring is None:
            return

        def link(match: re.Match[str]) -> str:
            target = match.group(1)
            identifier = html.escape(_identifier(obj, target), quote=True)
            shown = html.escape(_shown(target))
            return f'<autoref optional identifier="{identifier}"><code>{shown}</code></autoref>'

        obj.docstring.value = _ROLE.sub(link, obj.docstring.value)
