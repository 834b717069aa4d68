"""What the restore tests share: the tools they drive (the file tools, and ``write_bytes`` for
binary content) and ``workspace``, the files of a folder."""

from __future__ import annotations

import os
from pathlib import Path
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


def workspace(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (relative posix path -> content); folders are not listed."""
    out = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out
