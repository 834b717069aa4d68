"""The tools the restore tests drive: the file tools, and ``write_bytes`` for binary content."""

from __future__ import annotations

from typing import Annotated

import msgspec

from liteagent.tools import (
    ToolContext,
    delete_file,
    edit_file,
    resolve_in_workspace,
    tool,
    write_file,
)


@tool(name="write_bytes", changes_param="path")
def write_bytes(
    path: Annotated[str, msgspec.Meta(description="The file, relative to the workspace.")],
    data_hex: Annotated[str, msgspec.Meta(description="The content, as hex digits.")],
    *,
    ctx: ToolContext,
) -> str:
    """Write binary content (given as hex) to a file of the workspace."""
    target = resolve_in_workspace(ctx.workdir, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = bytes.fromhex(data_hex)
    target.write_bytes(data)
    return f"wrote {len(data)} bytes"


TOOLS = [write_file, edit_file, delete_file, write_bytes]
