"""The boundary of the package's public functions: a wrong argument is a library error.

The functions of :mod:`liteagent.context` are pure computations over the values they are given;
an argument of the wrong type or shape (a ``None`` where messages belong, an int where a text
does, a string no UTF-8 can carry) makes Python raise ``TypeError``, ``AttributeError``,
``ValueError`` (``UnicodeError`` included), ``OverflowError``, ``KeyError``, ``IndexError`` or
``RecursionError`` somewhere inside. :func:`public` wraps each exported function so that those
reach the caller as :class:`~liteagent.eventlog.errors.InvalidArgumentError` (a ``ValueError``),
naming the function, with the original as its cause; liteagent's own errors pass unchanged.
Inside the package the unwrapped functions are used, so the hot paths pay nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from liteagent.eventlog.errors import InvalidArgumentError, LiteAgentError

__all__ = ["public"]

P = ParamSpec("P")
R = TypeVar("R")

_ARGUMENT_ERRORS = (
    TypeError,
    AttributeError,
    ValueError,
    OverflowError,
    KeyError,
    IndexError,
    RecursionError,
)


def public(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with the argument errors it raises translated (module docstring)."""

    @functools.wraps(fn)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except LiteAgentError:
            raise
        except _ARGUMENT_ERRORS as e:
            raise InvalidArgumentError(
                f"{fn.__name__}: invalid argument ({type(e).__name__}: {e})"
            ) from e

    return checked
