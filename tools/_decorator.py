"""``@tool``: turn a typed Python function into a :class:`~liteagent.tools.Tool`.

::

    @tool
    def add(a: int, b: int = 1) -> int:
        '''Add two numbers.'''
        return a + b

- **Name**: the function's name, or ``@tool(name=...)``; it must match ``[a-zA-Z0-9_-]{1,64}``.
- **Description**: the first paragraph of the docstring (whitespace collapsed), or
  ``@tool(description=...)``. A tool without either is refused.
- **Input schema**: a msgspec ``Struct`` is built with ``msgspec.defstruct`` from the parameters
  (annotation → field type, default → field default; keyword-only, unknown fields forbidden),
  and ``msgspec.json.schema`` describes it. The top-level object is inlined (no ``$ref``);
  nested types stay under ``$defs``. ``Annotated[T, msgspec.Meta(description=..., ge=...)]``
  adds field descriptions and constraints. One parameter annotated ``ToolContext`` (any name)
  receives the call's context and is not part of the schema. ``*args``, ``**kwargs``,
  positional-only and unannotated parameters are refused with :class:`ToolDefinitionError`.
- **Calling** (``run``): the input must be a mapping and is converted with ``msgspec.convert``
  (strict: ``"1"`` is not an ``int``); an input that is not a mapping or does not validate is
  an ``is_error`` output naming the problem. The return value becomes the output: a ``str`` is
  the content, a ``ToolOutput`` is used as is, anything else is JSON-encoded with msgspec. An
  ``Exception`` raised by the function (or by encoding) becomes an ``is_error`` output
  ``"<ExceptionType>: <message>"``; ``BaseException``s that are not ``Exception``
  (``KeyboardInterrupt``...) propagate. The content is always valid text: a lone surrogate
  (a file name that is not UTF-8, ``"\\udcff"``) is written as its ``\\u`` escape, so the output
  can be recorded.
- **Changed paths**: ``@tool(changes_param="path")`` declares that the parameter ``path`` (a
  ``str``, or a ``list[str]``) names the workspace files the call may change.
  ``changed_paths`` returns them resolved with :func:`resolve_in_workspace`, raising
  :class:`PathOutsideWorkspaceError` for one outside the workspace (the runtime then fails the
  call without running it); a missing or ill-typed value gives ``[]`` and ``run`` reports it.
  A tool whose paths cannot be named by one parameter subclasses ``Tool`` instead.
- **Read-only**: ``@tool(read_only=True)`` says the tool changes nothing. A call of a tool that
  neither declares paths nor is read-only is recorded as a side effect a restore cannot undo
  (it shows in a restore's preview and in each checkpoint's count).

The decorated object is a :class:`FunctionTool`; calling it calls the original function.
"""

from __future__ import annotations

import copy
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypeVar, overload

import msgspec

from liteagent.eventlog._shown import shown

from ._contract import Tool, ToolContext, ToolOutput
from ._errors import ToolDefinitionError
from ._paths import resolve_in_workspace

__all__ = ["FunctionTool", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_encoder = msgspec.json.Encoder()


class FunctionTool(Tool, Generic[P, R]):
    """A :class:`Tool` made from a function by :func:`tool`; calling it calls the function."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        changes_param: str | None = None,
        read_only: bool = False,
    ) -> None:
        if not callable(fn):
            raise ToolDefinitionError(f"a tool is made from a function, got {_kind(fn)}")
        self.name = _checked_name(fn, name)
        self.description = (
            _first_paragraph(fn) if description is None else _checked_text(description, self.name)
        )
        if type(read_only) is not bool:
            raise ToolDefinitionError(
                f"tool {self.name!r}: read_only must be True or False, got {shown(read_only)}"
            )
        if changes_param is not None and type(changes_param) is not str:
            raise ToolDefinitionError(
                f"tool {self.name!r}: changes_param must be None or a parameter's name, "
                f"got {shown(changes_param)}"
            )
        if not self.description:
            raise ToolDefinitionError(
                f"tool {self.name!r} has no description: give the function a docstring or "
                "pass @tool(description=...)"
            )
        self._fn = fn
        self._call: Callable[..., object] = fn
        self._struct, self._ctx_param = _input_struct(fn, self.name)
        self._fields: tuple[str, ...] = self._struct.__struct_fields__
        if changes_param is not None and changes_param not in self._fields:
            raise ToolDefinitionError(
                f"tool {self.name!r}: changes_param {shown(changes_param)} is not one of its "
                f"parameters {list(self._fields)}"
            )
        if read_only and changes_param is not None:
            raise ToolDefinitionError(
                f"tool {self.name!r}: a read-only tool changes no files (no changes_param)"
            )
        self._changes_param = changes_param
        self.read_only = read_only
        self._schema = _schema(self._struct, self.name)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the input (a fresh copy each time: callers may change it)."""
        return copy.deepcopy(self._schema)

    def changed_paths(self, input: Mapping[str, Any], ctx: ToolContext) -> list[Path]:
        """The resolved paths named by ``changes_param`` (``[]`` without one); raises
        :class:`PathOutsideWorkspaceError` for a path outside the workspace."""
        given: object = input  # typed as a Mapping, but it comes from the model's JSON
        if self._changes_param is None or not isinstance(given, Mapping):
            return []  # (run() reports an input that is not an object)
        value = input.get(self._changes_param)
        if isinstance(value, str):
            values = [value]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            values = value
        else:
            return []  # run() reports the invalid input
        return [resolve_in_workspace(ctx.workdir, v) for v in values]

    def run(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Validate ``input``, call the function, and convert its result (module docstring)."""
        return _valid_text(self._run(input, ctx))

    def _run(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        given: object = input  # typed as a Mapping, but it comes from the model's JSON
        if not isinstance(given, Mapping):
            return ToolOutput(
                f"invalid input for {self.name}: expected an object, got {type(given).__name__}",
                is_error=True,
            )
        try:
            args = msgspec.convert(dict(input), self._struct)
        except msgspec.ValidationError as e:
            return ToolOutput(f"invalid input for {self.name}: {e}", is_error=True)
        except Exception as e:  # noqa: BLE001 -- e.g. RecursionError on absurdly nested input
            return ToolOutput(f"invalid input for {self.name}: {type(e).__name__}", is_error=True)
        kwargs = {f: getattr(args, f) for f in self._fields}
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        try:
            result = self._call(**kwargs)
            if isinstance(result, ToolOutput):
                return result
            if isinstance(result, str):
                return ToolOutput(result)
            return ToolOutput(_encoder.encode(result).decode("utf-8"))
        except Exception as e:  # noqa: BLE001 -- the contract: a tool returns errors, never raises
            return ToolOutput(f"{type(e).__name__}: {e}", is_error=True)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.name!r}>"


@overload
def tool(fn: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    changes_param: str | None = None,
    read_only: bool = False,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    changes_param: str | None = None,
    read_only: bool = False,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a :class:`FunctionTool` from ``fn``; use bare (``@tool``) or with options
    (``@tool(name=..., description=..., changes_param=..., read_only=...)``). Raises
    :class:`ToolDefinitionError` when the function cannot be a tool (module docstring)."""

    def make(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(
            f,
            name=name,
            description=description,
            changes_param=changes_param,
            read_only=read_only,
        )

    return make if fn is None else make(fn)


def _valid_text(output: ToolOutput) -> ToolOutput:
    """``output`` with every lone surrogate of its content written as a ``\\u`` escape (the
    log stores UTF-8, which cannot carry them)."""
    try:
        output.content.encode("utf-8")
    except UnicodeEncodeError:
        text = output.content.encode("utf-8", "backslashreplace").decode("utf-8")
        return ToolOutput(text, is_error=output.is_error)
    except AttributeError:  # a ToolOutput built with a non-str content
        return ToolOutput(f"the tool returned {type(output.content).__name__}", is_error=True)
    return output


def _kind(value: object) -> str:
    return f"{type(value).__name__} {shown(value)}"


def _checked_name(fn: Callable[..., object], name: object) -> str:
    """The tool's name: ``name``, or the function's own; refused unless it matches
    ``[a-zA-Z0-9_-]{1,64}``."""
    if name is None:
        name = getattr(fn, "__name__", None)
        if not isinstance(name, str):
            raise ToolDefinitionError(
                f"{_kind(fn)} has no __name__ to name the tool by: pass name=..."
            )
    if not isinstance(name, str):
        raise ToolDefinitionError(f"a tool's name must be a str, got {_kind(name)}")
    if not _NAME.fullmatch(name):
        raise ToolDefinitionError(f"tool name {shown(name)} must match [a-zA-Z0-9_-]{{1,64}}")
    return str.__str__(name)  # a plain str (a subclass of it cannot be recorded)


def _checked_text(description: object, name: str) -> str:
    """``description`` as the model is sent it: a str that UTF-8 can encode."""
    if not isinstance(description, str):
        raise ToolDefinitionError(
            f"tool {name!r}: description must be None or a str, got {_kind(description)}"
        )
    try:
        description.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ToolDefinitionError(
            f"tool {name!r}: description is not valid text (a lone surrogate at index {e.start})"
        ) from None
    return str.__str__(description)


def _first_paragraph(fn: Callable[..., object]) -> str:
    try:
        doc = inspect.getdoc(fn) or ""
    except Exception:  # noqa: BLE001 -- a __doc__ that cannot be read: no description
        doc = ""
    text = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _input_struct(fn: Callable[..., object], name: str) -> tuple[type[msgspec.Struct], str | None]:
    """The input Struct type of ``fn``, and the name of its ``ToolContext`` parameter."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:
        raise ToolDefinitionError(f"tool {name!r}: cannot resolve its annotations: {e}") from e
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    ctx_param: str | None = None
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise ToolDefinitionError(f"tool {name!r}: its signature cannot be read: {e}") from e
    for param in signature.parameters.values():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ToolDefinitionError(
                f"tool {name!r}: parameter {param.name!r} is {param.kind.description}; "
                "only named parameters can come from the model's input"
            )
        if param.name not in hints:
            raise ToolDefinitionError(f"tool {name!r}: parameter {param.name!r} has no annotation")
        hint = hints[param.name]
        if hint is ToolContext:
            if ctx_param is not None:
                raise ToolDefinitionError(f"tool {name!r}: more than one ToolContext parameter")
            ctx_param = param.name
        elif param.default is param.empty:
            fields.append((param.name, hint))
        else:
            fields.append((param.name, hint, param.default))
    try:
        struct = msgspec.defstruct(
            f"{name}_input", fields, kw_only=True, forbid_unknown_fields=True
        )
    except (TypeError, ValueError) as e:
        raise ToolDefinitionError(f"tool {name!r}: {e}") from e
    except RecursionError as e:  # a default nested thousands of levels deep
        raise ToolDefinitionError(f"tool {name!r}: a default is nested too deeply") from e
    return struct, ctx_param


def _schema(struct: type[msgspec.Struct], name: str) -> dict[str, Any]:
    """``msgspec.json.schema(struct)`` with the top-level object inlined and untitled."""
    try:
        full = msgspec.json.schema(struct)
    except (TypeError, ValueError) as e:
        raise ToolDefinitionError(f"tool {name!r}: a parameter type has no schema: {e}") from e
    defs: dict[str, Any] = dict(full.get("$defs", {}))
    root: dict[str, Any] = dict(defs.pop(full["$ref"].rsplit("/", 1)[1]))
    root.pop("title", None)
    if defs:
        root["$defs"] = defs
    return root
