"""Every error the context layer (and the turn loop's helpers around it) raises is a liteagent
error: wrong argument types and extreme values, the archive's formats, spill stores, the log
reader, the provider's compaction."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liteagent import context
from liteagent.actors._context import LogArchiveReader
from liteagent.context import (
    ContextEngine,
    ContextOptions,
    NativeCompactionError,
    blob_spill_store,
    memory_spill_store,
)
from liteagent.context._archive import archive_marker, render_slice, slice_text
from liteagent.eventlog import SessionState, StoredEvent, fold, memory_checkpointer
from liteagent.eventlog.errors import (
    BlobNotFoundError,
    CodecError,
    InvalidArgumentError,
    LiteAgentError,
)
from liteagent.eventlog.types import ContentArchived, Message, TextBlock
from liteagent.tools import UnknownReferenceError

MODULES = [
    *(
        f"liteagent.context.{p.stem}"
        for p in sorted((Path(context.__file__).parent).glob("_*.py"))
        if p.stem != "__init__"
    ),
    "liteagent.actors._turn",
    "liteagent.actors._turn_tools",
    "liteagent.actors._context",
    "liteagent.actors._compactor",
    "liteagent.providers._anthropic_convert",
    "liteagent.providers._scripted",
    "liteagent.providers._replay",
]


@pytest.mark.parametrize("module", MODULES)
def test_every_exception_class_defined_here_is_a_liteagent_error(module: str) -> None:
    """No module of the context layer or the turn loop defines an exception outside the
    tree."""
    loaded = importlib.import_module(module)
    outside = [
        name
        for name, obj in vars(loaded).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == loaded.__name__
        and not issubclass(obj, LiteAgentError)
    ]
    assert [] == outside


def test_native_compaction_error_is_a_liteagent_error() -> None:
    """NativeCompactionError derives from LiteAgentError (and still from RuntimeError)."""
    assert issubclass(NativeCompactionError, LiteAgentError)
    assert issubclass(NativeCompactionError, RuntimeError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: archive_marker("sha256:" + "0" * 64, "text", preview_chars=-1),
        lambda: slice_text("text", 5, 1),
        lambda: slice_text("text", 0, 0),
        lambda: slice_text("text", -1, 3),
        lambda: render_slice("sha256:" + "0" * 64, "t", 2, 1),
    ],
    ids=["preview", "offset-past", "limit", "offset-negative", "render"],
)
def test_the_archive_formats_refuse_bad_numbers_with_invalid_argument(call: Any) -> None:
    """What used to be a ValueError is InvalidArgumentError (still a ValueError)."""
    with pytest.raises(InvalidArgumentError):
        call()


def test_spill_stores_report_a_missing_key_as_blob_not_found() -> None:
    """Both spill stores raise BlobNotFoundError (a KeyError) for a key they do not hold."""
    with memory_checkpointer() as cp:
        for store in (memory_spill_store(), blob_spill_store(cp.blobs)):
            with pytest.raises(BlobNotFoundError):
                store.get("sha256:" + "1" * 64)


def test_non_utf8_content_is_a_codec_error() -> None:
    """Archived or spilled bytes that are not UTF-8 read as CodecError, not UnicodeDecodeError."""
    with memory_checkpointer() as cp:
        ref = cp.blobs.put(b"\xff\xfe not text")
        with pytest.raises(CodecError):
            blob_spill_store(cp.blobs).get(ref)
        state = fold(
            [
                StoredEvent(
                    1,
                    1.0,
                    "content_archived",
                    ContentArchived(tool_use_id="t", ref=ref, chars=1, size=1),
                )
            ]
        )
        with pytest.raises(CodecError):
            LogArchiveReader(lambda: state, cp.blobs).read_archived(ref)


def test_the_log_reader_refuses_a_reference_that_is_not_a_string() -> None:
    """A non-str reference is an unknown reference, not a TypeError."""
    with memory_checkpointer() as cp, pytest.raises(UnknownReferenceError):
        LogArchiveReader(SessionState, cp.blobs).read_archived(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [2**62 + 1, 2**70], ids=["2**62+1", "2**70"])
def test_context_options_refuse_integers_the_log_cannot_record(value: int) -> None:
    """Budgets and sizes are recorded in every context status: beyond 2**62 they are refused
    at creation."""
    with pytest.raises(InvalidArgumentError):
        ContextOptions(budget_tokens=value)


def test_a_context_engine_needs_settings() -> None:
    """ContextEngine(5) is InvalidArgumentError, not an AttributeError later."""
    with pytest.raises(InvalidArgumentError):
        ContextEngine(5)  # type: ignore[arg-type]


_WRONG: list[Any] = [
    None,
    0,
    -1,
    2**70,
    1.5,
    float("nan"),
    float("inf"),
    "x",
    "\ud800",
    b"x",
    [],
    {},
    (),
    object(),
    True,
    [None],
    (Message("user", (TextBlock("a"),)),),
    [Message("assistant", ())],
    {"role": "user"},
]
_FUNCTIONS = sorted(name for name in context.__all__ if inspect.isfunction(getattr(context, name)))


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(_FUNCTIONS), data=st.data())
def test_public_functions_raise_only_liteagent_errors(name: str, data: st.DataObject) -> None:
    """Every public function of liteagent.context, called with wrong types and extreme values,
    returns or raises a LiteAgentError, never a foreign exception."""
    fn = getattr(context, name)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    kwargs = {
        p.name: data.draw(st.sampled_from(_WRONG), label=p.name)
        for p in params
        if p.default is p.empty or data.draw(st.booleans(), label=f"set {p.name}")
    }
    try:
        result = fn(**kwargs)
        if inspect.isgenerator(result):
            list(result)
    except LiteAgentError:
        pass


_MSGS = [Message("user", (TextBlock("hello"),)), Message("assistant", (TextBlock("hi"),))]


@pytest.mark.parametrize(
    "call",
    [
        lambda: context.micro_pass()(None),
        lambda: context.snip_pass()([None]),
        lambda: context.tool_result_budget_pass(10)("not messages"),
        lambda: context.token_budget_compactor(5).maybe_compact(None),
        lambda: context.default_compactor().run(_MSGS, cancel=5),
        lambda: context.default_compactor().run(None),
        lambda: memory_spill_store().put(5),
        lambda: blob_spill_store(None),
        lambda: ContextOptions().budget_for(None),
        lambda: context.compaction(context.default_compactor()).before_model(None, None),
        lambda: context.token_budget_compactor(float("nan")),
        lambda: context.micro_pass(keep_recent=2.5),
        lambda: context.snip_pass(keep_head_turns=1.5),
        lambda: context.default_compactor(store=5),
        lambda: context.default_compactor(passes=[1]),
        lambda: context.default_compactor(budget_bytes=-1.0),
    ],
    ids=[
        "micro(None)",
        "snip([None])",
        "budget(str)",
        "token_budget.maybe_compact(None)",
        "run(cancel=5)",
        "run(None)",
        "spill.put(5)",
        "blob_spill_store(None)",
        "budget_for(None)",
        "before_model(None)",
        "token_budget(nan)",
        "micro(2.5)",
        "snip(1.5)",
        "default(store=5)",
        "default(passes=[1])",
        "default(budget=-1.0)",
    ],
)
def test_what_the_factories_return_checks_its_arguments_too(call: Any) -> None:
    """The passes, compactors, spill stores, middleware and options the public factories
    return check what they are given (InvalidArgumentError, where TypeError or AttributeError
    escaped), and the factories take no float, NaN or wrong type for a count or a store (a NaN
    budget was taken and cut everything)."""
    with pytest.raises(InvalidArgumentError):
        call()
