"""Every marker the library writes names a tool the agent has, and that tool reads the content
back: checked over every compactor, middleware and engine combination the README shows
("Context compaction", "Context engine", "Lower level: create_agent"), each driven with the
scripted model until a large tool result was moved out of the view."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from liteagent.context import (
    Compactor,
    CompactResult,
    ContextOptions,
    compaction,
    default_compactor,
    llm_compactor,
    memory_spill_store,
    micro_pass,
    reactive_compaction,
    snip_pass,
    token_budget_compactor,
    tool_result_budget_pass,
)
from liteagent.context._archive import archive_ref
from liteagent.context._bodies import cleared_marker, spilled_text
from liteagent.eventlog import memory_checkpointer
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from liteagent.providers import ContextOverflowError, scripted
from liteagent.providers._contract import ModelRequest
from liteagent.sdk import LiteAgent, create_agent, create_lite_agent
from liteagent.tools import context, default_tools, tool

#: Over default_compactor()'s 200,000-byte budget (202,500 bytes), yet one slice of the context
#: tool (77,500 characters, under its 100,000): 2,500 lines of mostly CJK characters.
BIG = "".join(
    f"{i:04d}" + "東京の天気は晴れです。大阪は雨が降っていま" + "す。京都!\n" for i in range(2500)
)
_REFERENCE = re.compile(r"sha256:[0-9a-f]{64}")
_NAMES_A_TOOL = re.compile(r"read it with the (\w+) tool")
#: The marker kinds, by how their line starts.
_KINDS = [
    (re.compile(pattern), kind)
    for pattern, kind in (
        (r"\[liteagent:spilled ", "spilled"),
        (r"\[liteagent:archived ", "archived"),
        (r"\[liteagent:cleared ", "cleared"),
        (r"\[liteagent:superseded ", "superseded"),
        (r"\[liteagent: tool result of about ", "trimmed"),
        (r"\[liteagent: summary", "summary"),
        (r"\[liteagent: \d+ earlier turns? \(", "removed turns"),
        (r"\[liteagent: \d+ earlier messages? (is|are) left out", "left out"),
        (r"\[liteagent: \d+ earlier message\(s\) dropped", "dropped"),
    )
]
_SLICE = re.compile(
    r"\[liteagent:context ref=(sha256:[0-9a-f]{64}) chars (\d+)-(\d+) of (\d+); "
    r"next_offset=(\d+|none \(end\))\][^\n]*\n<<<DATA ([0-9a-f]{16})\n",
)


@tool
def dump() -> str:
    """Print a large text."""
    return BIG


def _texts(message: Message) -> Iterator[str]:
    for b in message.content:
        if type(b) is TextBlock:
            yield b.text
        elif type(b) is ToolResultBlock:
            if isinstance(b.content, str):
                yield b.content
            elif isinstance(b.content, tuple):
                yield from (x.text for x in b.content if type(x) is TextBlock)


@dataclass
class Marker:
    kind: str
    ref: str  # "" when it names none
    tool: str | None  # the tool it tells the model to read it with


def markers(request: ModelRequest) -> list[Marker]:
    """Every line of ``request`` that the library wrote as a marker (a line starting with
    ``[liteagent``, except the context tool's own answers) or that tells the model to read
    something with a tool."""
    out: list[Marker] = []
    for m in request.messages:
        for text in _texts(m):
            for line in text.splitlines():
                named = _NAMES_A_TOOL.search(line)
                if not line.startswith("[liteagent") and named is None:
                    continue
                if line.startswith("[liteagent:context ref="):
                    continue  # an answer of the context tool, not a marker
                kind = next((k for pattern, k in _KINDS if pattern.match(line)), "other")
                ref = _REFERENCE.search(line)
                out.append(
                    Marker(kind, ref.group(0) if ref else "", named.group(1) if named else None)
                )
    return out


def _slice_data(content: object) -> tuple[str, str] | None:
    """(reference, data) of a context-tool answer read to the end in one slice."""
    if not isinstance(content, str):
        return None
    found = _SLICE.match(content)
    if found is None or not found.group(5).startswith("none"):
        return None
    fence = found.group(6)
    data = content[found.end() :].removesuffix(f"\nDATA {fence}>>>")
    return found.group(1), data


@dataclass
class ReadingModel:
    """The model: ``dump`` calls the dump tool; ``read`` calls, for every marker it is shown,
    the tool the marker names with the marker's reference (``overflow`` first raises one
    context overflow at the first ``read`` request)."""

    overflow: bool = False
    asked: dict[str, str] = field(default_factory=dict)  # tool_use_id -> reference
    read: dict[str, str] = field(default_factory=dict)  # reference -> the text read back

    def __call__(self, request: ModelRequest) -> AssistantMessage:
        last = request.messages[-1]
        for b in last.content:
            if type(b) is ToolResultBlock and b.tool_use_id in self.asked:
                ref = self.asked.pop(b.tool_use_id)
                answer = _slice_data(b.content)
                self.read[ref] = (
                    answer[1]
                    if answer is not None and answer[0] == ref
                    else (f"not read: {str(b.content)[:200]}")
                )
        prompts = [
            t
            for m in request.messages
            if m.role == "user"
            for t in (b.text for b in m.content if type(b) is TextBlock)
            if t in ("dump", "read")
        ]
        if prompts[-1] == "dump":
            if any(type(b) is ToolResultBlock for b in last.content):
                return _reply("dumped")
            return _use("dump")
        if self.overflow:
            self.overflow = False
            raise ContextOverflowError("prompt is too long")
        for marker in markers(request):
            if (
                marker.tool
                and marker.ref
                and marker.ref not in self.read
                and marker.ref not in self.asked.values()
            ):
                use = _use(marker.tool, ref=marker.ref, limit=100_000)
                block = use.content[0]
                assert isinstance(block, ToolUseBlock)
                self.asked[block.id] = marker.ref
                return use
        return _reply("read")


def _reply(words: str) -> AssistantMessage:
    return AssistantMessage(content=(TextBlock(words),), stop_reason="end_turn")


_IDS = itertools.count()


def _use(name: str, **input: Any) -> AssistantMessage:
    return AssistantMessage(
        content=(ToolUseBlock(f"toolu_{next(_IDS)}", name, input),), stop_reason="tool_use"
    )


def _summarizer() -> Any:
    return scripted([_reply("the earlier turns, summarized")] * 20, name="summarizer")


Build = Callable[[Any, Path], LiteAgent]

#: (id, how the agent is built, whether agent.compact() runs between the sends, whether the
#: model overflows once, the marker kinds the requests must show).
COMBINATIONS: list[tuple[str, Build, bool, bool, set[str]]] = [
    (
        "compaction-readme",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[*default_tools(), dump],
            use=[compaction(default_compactor()), reactive_compaction()],
        ),
        False,
        False,
        {"spilled"},
    ),
    (
        "reactive-only",
        lambda m, w: create_agent(
            model=m, model_name="m", workdir=w, tools=[dump], use=[reactive_compaction()]
        ),
        False,
        True,
        {"trimmed"},
    ),
    (
        "default-max-tokens-none",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            use=[compaction(default_compactor(max_tokens=None))],
        ),
        False,
        False,
        {"spilled"},
    ),
    (
        "budget-pass",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            use=[
                compaction(
                    default_compactor([tool_result_budget_pass(200_000, memory_spill_store())])
                )
            ],
        ),
        False,
        False,
        {"spilled"},
    ),
    (
        "snip-micro-passes",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            use=[compaction(default_compactor([snip_pass(), micro_pass(keep_recent=0)]))],
        ),
        False,
        False,
        {"cleared"},
    ),
    (
        "token-budget",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            use=[compaction(token_budget_compactor(max_tokens=2_000))],
        ),
        False,
        False,
        {"removed turns"},
    ),
    (
        "llm-over-default",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            use=[
                compaction(
                    llm_compactor(
                        model=_summarizer(),
                        model_name="s",
                        token_threshold=100_000,
                        base=default_compactor(),
                    )
                )
            ],
        ),
        False,
        False,
        {"spilled"},
    ),
    (
        "llm-summarizing",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            use=[
                compaction(
                    llm_compactor(
                        model=_summarizer(),
                        model_name="s",
                        token_threshold=0,
                        base=default_compactor(),
                    )
                )
            ],
        ),
        False,
        False,
        {"summary"},
    ),
    (
        "create-agent-compact",
        lambda m, w: create_agent(model=m, model_name="m", workdir=w, tools=[dump]),
        True,
        False,
        {"cleared"},
    ),
    (
        "create-agent-compactor",
        lambda m, w: create_agent(
            model=m, model_name="m", workdir=w, tools=[dump], compactor=default_compactor()
        ),
        True,
        False,
        {"spilled"},
    ),
    (
        "create-agent-engine",
        lambda m, w: create_agent(
            model=m, model_name="m", workdir=w, tools=[dump], context=ContextOptions()
        ),
        False,
        False,
        {"archived"},
    ),
    (
        "lite-engine",
        lambda m, w: create_lite_agent(
            model=m, model_name="m", workdir=w, tools=[dump], checkpointer=memory_checkpointer()
        ),
        False,
        False,
        {"archived"},
    ),
    (
        "lite-engine-readme",
        lambda m, w: create_lite_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            checkpointer=memory_checkpointer(),
            context=ContextOptions(budget_tokens=120_000, idle_compact_after=300),
        ),
        False,
        False,
        {"archived"},
    ),
    (
        "lite-engine-compact",
        lambda m, w: create_lite_agent(
            model=m, model_name="m", workdir=w, tools=[dump], checkpointer=memory_checkpointer()
        ),
        True,
        False,
        {"archived", "spilled"},
    ),
    (
        "lite-no-engine-compact",
        lambda m, w: create_lite_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            checkpointer=memory_checkpointer(),
            context=False,
        ),
        True,
        False,
        {"spilled"},
    ),
    (
        "lite-no-engine-memory-store",
        lambda m, w: create_lite_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump],
            checkpointer=memory_checkpointer(),
            context=False,
            compactor=default_compactor(max_tokens=None),
        ),
        True,
        False,
        {"spilled"},
    ),
]


@pytest.mark.parametrize(
    ("build", "compact", "overflow", "kinds"),
    [c[1:] for c in COMBINATIONS],
    ids=[c[0] for c in COMBINATIONS],
)
def test_every_marker_names_a_tool_the_agent_has_and_it_reads_the_content(
    tmp_path: Path, build: Build, compact: bool, overflow: bool, kinds: set[str]
) -> None:
    """Each marker in each request names a tool of that request, and calling it with the
    marker's reference returns the original content; the expected markers were shown."""
    model = ReadingModel(overflow=overflow)
    provider = scripted([model] * 40)
    with build(provider, tmp_path) as agent:
        agent.send("dump")
        if compact:
            assert agent.compact().changed
        agent.send("read")
        agent.send("read")
    shown: list[Marker] = []
    dangling: list[tuple[int, str | None]] = []
    bodies = {archive_ref(BIG): BIG}  # every tool output, by reference (the model saw them)
    for k, request in enumerate(provider.requests):
        names = {t.name for t in request.tools}
        for marker in markers(request):
            shown.append(marker)
            if marker.tool is not None and marker.tool not in names:
                dangling.append((k, marker.tool))
        for b in request.messages[-1].content:
            if type(b) is ToolResultBlock and isinstance(b.content, str):
                bodies[archive_ref(b.content)] = b.content
    assert [] == dangling
    assert kinds == {m.kind for m in shown}
    refs = {m.ref for m in shown if m.tool is not None}
    assert ({archive_ref(BIG)} if kinds & {"spilled", "archived"} else set()) == (
        refs & {archive_ref(BIG)}
    )
    assert {ref: bodies[ref] for ref in refs} == model.read


def test_an_agent_that_cannot_show_a_marker_has_exactly_its_tools(tmp_path: Path) -> None:
    """create_agent adds the context tool only when something given can show a marker naming
    it; the README's compaction example does, a bare kernel or a non-spilling one does not."""

    def names(**kwargs: Any) -> list[str]:
        provider = scripted([_reply("ok")])
        with create_agent(model=provider, model_name="m", workdir=tmp_path, **kwargs) as agent:
            agent.send("hi")
        return [t.name for t in provider.requests[0].tools]

    assert ["dump"] == names(tools=[dump])
    assert ["dump"] == names(
        tools=[dump], use=[reactive_compaction(), compaction(token_budget_compactor(1000))]
    )
    assert ["dump"] == names(tools=[dump], compactor=default_compactor([snip_pass()]))
    assert ["dump", "context"] == names(
        tools=[dump], use=[compaction(default_compactor()), reactive_compaction()]
    )
    assert ["dump", "context"] == names(tools=[dump], context=True)


def test_which_compactors_and_middleware_spill() -> None:
    """Compactor.spills (and the middleware's) is true exactly where a spill marker can come
    from: a budget pass with a store, or a compactor or pass that does not say."""

    class Custom(Compactor):
        def maybe_compact(
            self, messages: Any, usage: Any = None, instructions: str | None = None
        ) -> CompactResult:
            return CompactResult(
                messages=tuple(messages), changed=False, tokens_before=0, tokens_after=0
            )

    def custom_pass(messages: Any) -> tuple[list[Message], str]:
        return list(messages), ""

    custom_pass.name = "custom"  # type: ignore[attr-defined]
    summarizer = _summarizer()
    assert [True, True, False, False, True, False, True, True, False] == [
        default_compactor().spills,
        default_compactor([tool_result_budget_pass(1, memory_spill_store())]).spills,
        default_compactor([tool_result_budget_pass(1, None), snip_pass(), micro_pass()]).spills,
        token_budget_compactor(100).spills,
        llm_compactor(
            model=summarizer, model_name="s", token_threshold=0, base=default_compactor()
        ).spills,
        llm_compactor(model=summarizer, model_name="s", token_threshold=0).spills,
        Custom().spills,
        default_compactor([custom_pass]).spills,  # type: ignore[list-item]
        token_budget_compactor(100).spills,
    ]
    assert (True, False, False) == (
        compaction(default_compactor()).spills,
        compaction(token_budget_compactor(100)).spills,
        reactive_compaction().spills,
    )


def test_a_budget_pass_without_a_store_clears_instead() -> None:
    """tool_result_budget_pass(budget, None) drops the largest bodies, leaving the cleared
    placeholder (no reference, no tool named), and reports them as cleared."""
    messages = [
        Message("user", (TextBlock("go"),)),
        Message("assistant", (ToolUseBlock("t1", "dump", {}),)),
        Message("user", (ToolResultBlock("t1", "x" * 5000),)),
        Message("assistant", (TextBlock("done"),)),
    ]
    out, detail = tool_result_budget_pass(1000, None)(messages)
    assert ToolResultBlock("t1", cleared_marker("t1", 5000)) == out[2].content[0]
    assert "cleared 1 tool result (5000 bytes); tool results now" in detail


def test_spilled_text_finds_only_the_given_bodies() -> None:
    """spilled_text returns the text form of the body whose reference is asked (a tuple of
    text blocks joined by newlines), and None for any other reference."""
    messages = [
        Message("user", (ToolResultBlock("t1", (TextBlock("a"), TextBlock("b"))),)),
        Message("user", (ToolResultBlock("t2", "plain"),)),
    ]
    assert ("a\nb", "plain", None) == (
        spilled_text(messages, archive_ref("a\nb")),
        spilled_text(messages, archive_ref("plain")),
        spilled_text(messages, archive_ref("elsewhere")),
    )


def test_a_middleware_spill_reads_back_only_in_its_own_session(tmp_path: Path) -> None:
    """A reference compaction(...) spilled in one session reads back there; in another session
    of the same agent (whose log never held that body) it is refused, content unseen."""
    ref = archive_ref(BIG)
    provider = scripted(
        [
            _use("dump"),
            _reply("dumped"),
            _use("context", ref=ref, limit=100_000),
            _reply("read"),
            _use("context", ref=ref),
            _reply("refused"),
        ]
    )
    with create_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[dump],
        use=[compaction(default_compactor())],
    ) as agent:
        agent.send("dump")
        agent.send("read")
        agent.clear()
        agent.send("read another session's")
    answers = [
        b
        for r in provider.requests
        for b in r.messages[-1].content
        if type(b) is ToolResultBlock and b.tool_use_id.startswith("toolu_")
    ]
    mine, theirs = answers[-2].content, answers[-1].content
    assert _slice_data(mine) == (ref, BIG)
    assert isinstance(theirs, str)
    assert theirs.startswith(f"reference {ref} is not recorded in this session")


@tool(name="context")
def my_context(topic: str) -> str:
    """The user's own tool that happens to be named like the library's reader."""
    return f"nothing about {topic}"


#: (id, how the agent is built, what shows the model markers naming the ``context`` tool).
CLASHES: list[tuple[str, Build, str]] = [
    (
        "create-agent-compaction",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump, my_context],
            use=[compaction(default_compactor())],
        ),
        "use[0] (a middleware that spills)",
    ),
    (
        "create-agent-engine",
        lambda m, w: create_agent(
            model=m, model_name="m", workdir=w, tools=[my_context], context=True
        ),
        "the context engine (context=...)",
    ),
    (
        "create-agent-compactor",
        lambda m, w: create_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[my_context],
            compactor=default_compactor(),
        ),
        "the compactor (it spills)",
    ),
    (
        "lite-engine",
        lambda m, w: create_lite_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump, my_context],
            checkpointer=memory_checkpointer(),
        ),
        "the context engine (context=...)",
    ),
]


@pytest.mark.parametrize(("build", "source"), [c[1:] for c in CLASHES], ids=[c[0] for c in CLASHES])
def test_a_tool_of_ones_own_named_context_is_refused_where_markers_name_it(
    tmp_path: Path, build: Build, source: str
) -> None:
    """A tool named ``context`` that is not the library's reader, beside something that shows
    markers naming the ``context`` tool: InvalidArgumentError at creation, naming both and
    what to do."""
    with pytest.raises(InvalidArgumentError) as raised:
        build(scripted([]), tmp_path)
    assert (
        f"tools: the tool named 'context' is not liteagent's context reader, but {source} "
        "shows the model markers telling it to read moved-out content with the 'context' "
        "tool: rename that tool, or pass liteagent.tools.context instead of it"
    ) == str(raised.value)


def test_the_librarys_own_reader_passed_in_tools_is_taken_once(tmp_path: Path) -> None:
    """Passing liteagent.tools.context itself is no clash: the agent has it once."""
    provider = scripted([_reply("ok")])
    with create_agent(
        model=provider,
        model_name="m",
        workdir=tmp_path,
        tools=[dump, context],
        use=[compaction(default_compactor())],
    ) as agent:
        agent.send("hi")
    assert ["dump", "context"] == [t.name for t in provider.requests[0].tools]


@pytest.mark.parametrize(
    "build",
    [
        lambda m, w: create_agent(model=m, model_name="m", workdir=w, tools=[dump, my_context]),
        lambda m, w: create_lite_agent(
            model=m,
            model_name="m",
            workdir=w,
            tools=[dump, my_context],
            checkpointer=memory_checkpointer(),
            context=False,
        ),
    ],
    ids=["create-agent", "lite-no-engine"],
)
def test_with_ones_own_context_tool_compact_names_no_tool(tmp_path: Path, build: Build) -> None:
    """Where nothing given shows a marker, an own ``context`` tool is kept, and compact()
    clears the large results instead of spilling them: no marker names a tool."""
    model = ReadingModel()
    provider = scripted([model] * 10)
    with build(provider, tmp_path) as agent:
        agent.send("dump")
        assert agent.compact().changed
        agent.send("read")
    shown = [m for r in provider.requests for m in markers(r)]
    assert ({"cleared"}, []) == ({m.kind for m in shown}, [m for m in shown if m.tool])
    assert ["dump", "context"] == [t.name for t in provider.requests[-1].tools]
