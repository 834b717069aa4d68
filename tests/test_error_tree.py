"""Every exception the library raises derives from LiteAgentError: the classes it defines, and
every ``raise SomeClass(...)`` in its source, except the few protocol exceptions listed here."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from liteagent.eventlog.errors import LiteAgentError

PACKAGES = ("eventlog", "context", "providers", "tools", "actors", "sdk")
ROOT = Path(__file__).resolve().parent.parent

# (module, exception class name): why raising it is right there.
ALLOWED_RAISES = {
    # Python protocols: a sequence's __getitem__ raises IndexError, a module's __getattr__
    # AttributeError; callers (for loops, hasattr) depend on exactly these.
    ("liteagent.eventlog._pvec", "IndexError"),
    ("liteagent.eventlog", "AttributeError"),
    ("liteagent.providers", "AttributeError"),
    ("liteagent.providers.testing", "AttributeError"),
    # An async iterator ends by raising StopAsyncIteration (the async subscription's __anext__).
    ("liteagent.actors._hub", "StopAsyncIteration"),
    # A follower is an iterator and an async iterator: it ends with their protocol exceptions.
    ("liteagent.eventlog._follow", "StopIteration"),
    ("liteagent.eventlog._follow", "StopAsyncIteration"),
    # The CLI's terminal loop turns signals and end of input into the exceptions Python's
    # input() raises, caught a few lines up in the same module.
    ("liteagent.sdk._cli_terminal", "KeyboardInterrupt"),
    ("liteagent.sdk._cli_terminal", "EOFError"),
    # Reply is the subset of concurrent.futures.Future the host uses: its waits raise what a
    # Future's do, caught by the callers that wait on it (ask() turns them into ActorTimeoutError).
    ("liteagent.actors._reply", "TimeoutError"),
    ("liteagent.actors._reply", "CancelledError"),
    ("liteagent.actors._reply", "InvalidStateError"),
    # json.loads hooks of the CLI's strict JSON reader: json's own protocol for a refused value
    # is a ValueError, which its two callers (the transcript and script readers) catch and
    # report as TranscriptError / InvalidArgumentError.
    ("liteagent.sdk._cli_json", "ValueError"),
    # argparse's protocol for a ``type=`` function refusing a value: the parser turns it into
    # its usage error (the CLI's UsageError), naming the option.
    ("liteagent.sdk._cli", "ArgumentTypeError"),
    # An abstract hook a subclass must override: calling it is a programming error.
    ("liteagent.actors._envelope", "NotImplementedError"),
    # OSErrors raised inside the file backend's repair and the file tools' writes, caught at
    # their one boundary (StorageIOError, an error result) a few calls up.
    ("liteagent.eventlog._filerepair", "FileExistsError"),
    # open_regular refuses a symlink or a file that is not regular with an OSError naming it,
    # turned into StorageIOError / CorruptBlobError by the file backend's callers.
    ("liteagent.eventlog._fsutil", "OSError"),
    # A lease file hard-linked to a file that is no lease record is refused like an open that
    # failed: the file backend turns the OSError into StorageIOError.
    ("liteagent.eventlog._filelease", "OSError"),
    ("liteagent.tools._files", "OSError"),
}
# Test-support code run by pytest (the conformance suite): its failures are test failures.
TEST_SUPPORT = ("liteagent.eventlog.conformance",)


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        pkg = importlib.import_module(f"liteagent.{package}")
        names.append(pkg.__name__)
        names.extend(info.name for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))
    return [n for n in names if not n.startswith(TEST_SUPPORT)]


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_exception_classes_derive_from_lite_agent_error(name: str) -> None:
    """Every exception class a library module defines is a LiteAgentError."""
    module = importlib.import_module(name)
    foreign = [
        obj.__qualname__
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == name
        and not issubclass(obj, LiteAgentError)
    ]
    assert [] == foreign


def _raised_names(module_name: str) -> list[tuple[int, str]]:
    module = importlib.import_module(module_name)
    source = Path(inspect.getfile(module)).read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            out.append((node.lineno, ast.unparse(exc)))
    return out


@pytest.mark.parametrize("name", MODULES)
def test_raised_classes_derive_from_lite_agent_error(name: str) -> None:
    """Every ``raise X(...)`` in library code names a LiteAgentError (or an allowed protocol
    exception); re-raising a caught exception is not checked here."""
    module = importlib.import_module(name)
    foreign = []
    for line, expr in _raised_names(name):
        try:
            obj = eval(expr, vars(module))  # noqa: S307 -- a dotted name from our own source
        except Exception:  # noqa: BLE001 -- a local variable (a re-raise): not a class
            obj = None
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseException)
            and not issubclass(obj, LiteAgentError)
            and (name, obj.__name__) not in ALLOWED_RAISES
        ):
            foreign.append(f"line {line}: raise {expr}")
    assert [] == foreign
