"""@tool: schema from the signature, validation, return conversion, errors as outputs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from liteagent.tools import (
    FunctionTool,
    PathOutsideWorkspaceError,
    ToolContext,
    ToolDefinitionError,
    ToolOutput,
    ToolSpec,
    tool,
)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    """A context for calls in a fresh workspace."""
    return ToolContext(workdir=tmp_path, session_id="s1", tool_call_id="call-9")


@tool
def add(a: int, b: int = 1) -> int:
    """Add two integers.

    This second paragraph is not part of the description.
    """
    return a + b


@tool(name="search-notes", description="Search the notes.")
def search_notes(
    query: Annotated[str, msgspec.Meta(description="What to look for.")],
    limit: int | None = None,
    exact: bool = False,
    weight: float = 0.5,
    tags: list[str] | None = None,
    *,
    ctx: ToolContext,
) -> dict[str, Any]:
    """Ignored: the description is given."""
    return {"query": query, "limit": limit, "exact": exact, "call": ctx.tool_call_id}


def test_name_and_description_come_from_the_function() -> None:
    """The function name, and the docstring's first paragraph."""
    assert ("add", "Add two integers.") == (add.name, add.description)


def test_name_and_description_can_be_given() -> None:
    """@tool(name=..., description=...) overrides both."""
    assert ("search-notes", "Search the notes.") == (search_notes.name, search_notes.description)


def test_schema_of_simple_parameters() -> None:
    """Types, defaults and required fields come from the signature."""
    assert {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}},
        "required": ["a"],
        "additionalProperties": False,
    } == add.input_schema


def test_schema_of_optional_and_annotated_parameters() -> None:
    """Optional types allow null, Meta adds descriptions, and ctx is left out."""
    assert {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "exact": {"type": "boolean", "default": False},
            "weight": {"type": "number", "default": 0.5},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    } == search_notes.input_schema


def test_spec_bundles_name_description_and_schema() -> None:
    """spec is what the model sees."""
    assert ToolSpec(name="add", description="Add two integers.", input_schema=add.input_schema) == (
        add.spec
    )


def test_input_schema_is_a_fresh_copy() -> None:
    """Changing a returned schema does not change the tool."""
    add.input_schema["properties"].clear()
    assert {"a", "b"} == set(add.input_schema["properties"])


def test_run_converts_the_input_and_passes_ctx(ctx: ToolContext) -> None:
    """Defaults fill missing fields; ctx reaches the function; a dict result is JSON."""
    out = search_notes.run({"query": "q"}, ctx)
    assert ToolOutput('{"query":"q","limit":null,"exact":false,"call":"call-9"}') == out


def test_int_result_is_json(ctx: ToolContext) -> None:
    """A non-string result is JSON-encoded."""
    assert ToolOutput("5") == add.run({"a": 2, "b": 3}, ctx)


def test_str_result_is_the_content(ctx: ToolContext) -> None:
    """A str result is the content as is."""

    @tool
    def hello(name: str) -> str:
        """Greet."""
        return f"hello {name}"

    assert ToolOutput("hello Ada") == hello.run({"name": "Ada"}, ctx)


def test_tooloutput_result_is_used_as_is(ctx: ToolContext) -> None:
    """A ToolOutput result passes through, is_error included."""

    @tool
    def refuse() -> ToolOutput:
        """Refuse."""
        return ToolOutput("no", is_error=True)

    assert ToolOutput("no", is_error=True) == refuse.run({}, ctx)


def test_none_result_is_json_null(ctx: ToolContext) -> None:
    """None becomes "null"."""

    @tool
    def nothing() -> None:
        """Do nothing."""

    assert ToolOutput("null") == nothing.run({}, ctx)


def test_missing_field_is_an_error_naming_it(ctx: ToolContext) -> None:
    """A missing required field is an is_error output naming the field."""
    assert ToolOutput("invalid input for add: Object missing required field `a`", True) == add.run(
        {}, ctx
    )


def test_wrong_type_is_an_error_naming_the_field(ctx: ToolContext) -> None:
    """Conversion is strict: a string is not an int."""
    out = add.run({"a": "1"}, ctx)
    assert ToolOutput("invalid input for add: Expected `int`, got `str` - at `$.a`", True) == out


def test_unknown_field_is_an_error(ctx: ToolContext) -> None:
    """A field the function does not take is refused (a typo would otherwise be ignored)."""
    out = add.run({"a": 1, "bb": 2}, ctx)
    assert ToolOutput("invalid input for add: Object contains unknown field `bb`", True) == out


def test_exception_becomes_an_error_output(ctx: ToolContext) -> None:
    """An exception raised by the function is an is_error output with its type and message."""

    @tool
    def boom() -> str:
        """Fail."""
        raise ValueError("it broke")

    assert ToolOutput("ValueError: it broke", is_error=True) == boom.run({}, ctx)


def test_unencodable_result_is_an_error(ctx: ToolContext) -> None:
    """A result msgspec cannot encode is an is_error output, not an exception."""

    @tool
    def weird() -> object:
        """Return something odd."""
        return object()

    assert weird.run({}, ctx).is_error


def test_the_tool_still_calls_the_function() -> None:
    """Calling the decorated object calls the original function."""
    assert (3, True) == (add(1, 2), isinstance(add, FunctionTool))


def test_changes_param_declares_a_resolved_path(tmp_path: Path, ctx: ToolContext) -> None:
    """changes_param names the parameter holding the changed path; it is resolved."""

    @tool(changes_param="path")
    def touch(path: str) -> str:
        """Touch a file."""
        return path

    assert [Path(os.path.realpath(tmp_path)) / "a" / "b.txt"] == touch.changed_paths(
        {"path": "a/./b.txt"}, ctx
    )


def test_changes_param_accepts_a_list(tmp_path: Path, ctx: ToolContext) -> None:
    """A list[str] parameter declares several paths."""

    @tool(changes_param="paths")
    def touch_all(paths: list[str]) -> str:
        """Touch files."""
        return ""

    root = Path(os.path.realpath(tmp_path))
    assert [root / "a", root / "b"] == touch_all.changed_paths({"paths": ["a", "b"]}, ctx)


def test_changes_param_outside_raises(ctx: ToolContext) -> None:
    """A declared path outside the workspace raises, so the runtime refuses the call."""

    @tool(changes_param="path")
    def touch(path: str) -> str:
        """Touch a file."""
        return path

    with pytest.raises(PathOutsideWorkspaceError):
        touch.changed_paths({"path": "../x"}, ctx)


def test_changes_param_missing_gives_no_paths(ctx: ToolContext) -> None:
    """An absent or ill-typed value declares nothing; run reports the bad input."""

    @tool(changes_param="path")
    def touch(path: str) -> str:
        """Touch a file."""
        return path

    assert [[], []] == [touch.changed_paths({}, ctx), touch.changed_paths({"path": 3}, ctx)]


def test_without_changes_param_no_paths(ctx: ToolContext) -> None:
    """A tool that declares nothing changes nothing the runtime snapshots."""
    assert [] == add.changed_paths({"a": 1}, ctx)


def _define(fn: Any, **options: Any) -> None:
    """Apply @tool to ``fn`` with ``options``."""
    tool(**options)(fn)


def _varargs(*items: int) -> int:
    """Sum."""
    return sum(items)


def _unannotated(x) -> int:  # type: ignore[no-untyped-def]
    """Use x."""
    return 0


def _undocumented(x: int) -> int:
    return x


def _pathy(p: Path) -> str:
    """Take a Path, which msgspec cannot describe."""
    return str(p)


def _two_contexts(a: ToolContext, b: ToolContext) -> str:
    """Two contexts."""
    return ""


@pytest.mark.parametrize(
    ("fn", "options"),
    [
        (_varargs, {}),
        (_unannotated, {}),
        (_undocumented, {}),
        (_pathy, {}),
        (_two_contexts, {}),
        (_undocumented, {"name": "bad name!", "description": "d"}),
        (_undocumented, {"description": "d", "changes_param": "nope"}),
    ],
    ids=[
        "varargs",
        "unannotated",
        "no-description",
        "path-type",
        "two-ctx",
        "bad-name",
        "bad-changes-param",
    ],
)
def test_functions_that_cannot_be_tools_are_refused(fn: Any, options: dict[str, Any]) -> None:
    """@tool raises ToolDefinitionError (also a TypeError) at definition time."""
    with pytest.raises(ToolDefinitionError):
        _define(fn, **options)
