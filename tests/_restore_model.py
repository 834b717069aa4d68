"""The model of the file tools the restore property tests share: unusual file names, random
content, random tool calls given the files as they are, and what each call does to them."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from liteagent.eventlog.types import AssistantMessage, TextBlock, ToolUseBlock

__all__ = ["CONTENT", "NAMES", "TEXT", "apply", "call", "draw_call", "reply"]

_IDS = itertools.count()

#: Unusual names: spaces, unicode, leading dashes, dots, nested folders. No name is a folder of
#: another, so every tool call is about a file.
NAMES = (
    "plain.txt",
    "with space.md",
    "ünïcødé-文件.txt",
    "-leading-dash",
    "--rf",
    ".hidden",
    "..dots",
    "trailing.dot.",
    "nested/deep er/leaf.bin",
    "nested/-x.y.z",
    "ä/ö/ü.dat",
)

TEXT = st.text(st.characters(codec="utf-8"), max_size=24)
CONTENT = st.one_of(TEXT.map(str.encode), st.binary(max_size=48))


def reply(text: str) -> AssistantMessage:
    """A final assistant text."""
    return AssistantMessage(content=(TextBlock(text),), stop_reason="end_turn")


def call(name: str, input: dict[str, Any]) -> AssistantMessage:
    """An assistant message calling one tool."""
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


# -- the model of the tools -----------------------------------------------------------------------


def _is_text(data: bytes) -> bool:
    if b"\x00" in data[:8192]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _occurrences(text: str, needle: str) -> int:
    return sum(text.startswith(needle, i) for i in range(len(text)))


def apply(files: dict[str, bytes], name: str, input: dict[str, Any]) -> None:
    """What the tool call does to the files (a failing call changes nothing)."""
    path = input["path"]
    if name == "write_file":
        files[path] = input["content"].encode()
    elif name == "write_bytes":
        files[path] = bytes.fromhex(input["data_hex"])
    elif name == "delete_file":
        files.pop(path, None)
    else:
        old, new, data = input["old_string"], input["new_string"], files.get(path)
        if data is None or not old or old == new or not _is_text(data):
            return
        text = data.decode()
        if _occurrences(text, old) == 1:
            files[path] = text.replace(old, new, 1).encode()


def draw_call(
    data: st.DataObject, names: list[str], files: dict[str, bytes]
) -> tuple[str, dict[str, Any]]:
    """One random tool call on one of ``names``, given the files as they are now."""
    name = data.draw(st.sampled_from(["write_file", "write_bytes", "edit_file", "delete_file"]))
    path = data.draw(st.sampled_from(names))
    if name == "write_file":
        return name, {"path": path, "content": data.draw(TEXT)}
    if name == "write_bytes":
        return name, {"path": path, "data_hex": data.draw(st.binary(max_size=48)).hex()}
    if name == "delete_file":
        return name, {"path": path}
    current = files.get(path)
    if current is not None and current and _is_text(current):
        text = current.decode()
        start = data.draw(st.integers(0, len(text) - 1))
        end = data.draw(st.integers(start + 1, len(text)))
        old = text[start:end]
    else:
        old = data.draw(TEXT)
    return name, {"path": path, "old_string": old, "new_string": data.draw(TEXT)}
