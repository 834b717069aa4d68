"""The ``edit_file`` tool: replace an exact string in a text file of the workspace.

``old_string`` must occur exactly once (overlapping occurrences count), unless ``replace_all``
is true, in which case every non-overlapping occurrence is replaced. No occurrence, several
occurrences without ``replace_all``, an empty ``old_string``, or ``old_string == new_string``
are ``is_error`` outputs that say so (with the number of matches); the file is then not
written. The match is exact: no whitespace or newline normalization (a ``\\r\\n`` file needs
``\\r\\n`` in ``old_string``). ``changed_paths`` is the resolved path of ``path``.

Bounds: a ``new_string`` that is not valid text (a lone surrogate) and an edit whose result
would exceed ``MAX_EDIT_BYTES`` (``replace_all`` of a short string by a long one) are refused
before anything is written; the number of matches reported for an ambiguous edit is counted up
to :data:`MATCH_COUNT_CAP` (``"100+"``), so counting stays linear in the file size.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from ._contract import ToolContext, ToolOutput
from ._decorator import tool
from ._errors import os_error_message
from ._files import MAX_EDIT_BYTES, encode_text, read_text, resolve_for_tool, write_bytes
from ._paths import relative_display, workspace_root

__all__ = ["MATCH_COUNT_CAP", "edit_file"]

#: An ambiguous edit reports at most this many matches (then "100+").
MATCH_COUNT_CAP = 100


@tool(name="edit_file", changes_param="path")
def edit_file(
    path: Annotated[str, Meta(description="The file, relative to the workspace.")],
    old_string: Annotated[
        str, Meta(description="The exact text to replace; it must occur exactly once.")
    ],
    new_string: Annotated[str, Meta(description="The text to put in its place.")],
    replace_all: Annotated[
        bool, Meta(description="Replace every occurrence instead of requiring one.")
    ] = False,
    *,
    ctx: ToolContext,
) -> ToolOutput:
    """Replace an exact string in a text file of the workspace. old_string must match exactly
    once (include surrounding lines to make it unique) unless replace_all is true. Read the
    file first: the match is exact, including whitespace and indentation."""
    if old_string == "":
        return ToolOutput(
            "old_string is empty; use write_file to create or replace a whole file", is_error=True
        )
    if old_string == new_string:
        return ToolOutput(
            "old_string and new_string are the same; nothing to change", is_error=True
        )
    new_bytes = encode_text(new_string, "new_string")
    if isinstance(new_bytes, ToolOutput):
        return new_bytes
    target = resolve_for_tool(ctx, path)
    if isinstance(target, ToolOutput):
        return target
    text = read_text(target, path, MAX_EDIT_BYTES)
    if isinstance(text, ToolOutput):
        return text
    matches = _occurrences(text, old_string, stop_after=2)
    if matches == 0:
        return ToolOutput(
            f"old_string not found in {path} (0 matches); nothing changed", is_error=True
        )
    if replace_all:
        count = text.count(old_string)
    elif matches > 1:
        total = _occurrences(text, old_string, stop_after=MATCH_COUNT_CAP)
        shown_total = f"{total}+" if total >= MATCH_COUNT_CAP else str(total)
        return ToolOutput(
            f"old_string matches {shown_total} times in {path}; include more surrounding text "
            "to make it unique, or set replace_all; nothing changed",
            is_error=True,
        )
    else:
        count = 1
    size = len(text.encode("utf-8")) + count * (len(new_bytes) - len(old_string.encode("utf-8")))
    if size > MAX_EDIT_BYTES:
        return ToolOutput(
            f"the edit would make {path} {size} bytes, over the {MAX_EDIT_BYTES}-byte limit; "
            "nothing changed",
            is_error=True,
        )
    new_text = text.replace(old_string, new_string, -1 if replace_all else 1)
    try:
        write_bytes(target, new_text.encode("utf-8"))
    except OSError as e:
        return ToolOutput(os_error_message(e, path), is_error=True)
    shown = relative_display(workspace_root(ctx.workdir), target)
    plural = "occurrence" if count == 1 else "occurrences"
    return ToolOutput(f"replaced {count} {plural} in {shown}")


def _occurrences(text: str, needle: str, stop_after: int | None = None) -> int:
    """How many positions ``needle`` occurs at in ``text`` (overlapping ones included),
    counting no further than ``stop_after``."""
    count = 0
    start = text.find(needle)
    while start != -1:
        count += 1
        if stop_after is not None and count >= stop_after:
            break
        start = text.find(needle, start + 1)
    return count
