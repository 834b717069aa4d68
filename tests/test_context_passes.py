"""The structural passes: tool-result budget (spill), snip and micro — units and properties."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import pytest
from _context_checks import (
    assistant,
    conversations,
    count_changed,
    invariant_problems,
    pass_subjects,
    results,
    turn,
    user,
)
from hypothesis import HealthCheck, given, settings
from msgspec import UNSET

from liteagent.context import (
    estimate_tokens,
    memory_spill_store,
    micro_pass,
    snip_pass,
    tool_result_budget_pass,
)
from liteagent.context._spill import spill_marker
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Message, RawBlock, TextBlock, ToolResultBlock


def body_of(messages: Sequence[Message], index: int, block: int = 0) -> object:
    b = messages[index].content[block]
    assert isinstance(b, ToolResultBlock)
    return b.content


def with_body(message: Message, block: int, content: str) -> Message:
    blocks = list(message.content)
    blocks[block] = msgspec.structs.replace(blocks[block], content=content)
    return msgspec.structs.replace(message, content=tuple(blocks))


def lead(message: Message, note: str) -> Message:
    return msgspec.structs.replace(message, content=(TextBlock(text=note), *message.content))


def trail(message: Message, note: str) -> Message:
    return msgspec.structs.replace(message, content=(*message.content, TextBlock(text=note)))


# ---------------------------------------------------------------------------------------------
# tool_result_budget_pass


def test_budget_changes_nothing_within_budget() -> None:
    """Bodies that fit the budget stay, and the detail is empty."""
    conv = turn("a", t1="x" * 3000) + turn("b")
    assert (conv, "") == tool_result_budget_pass(5000, memory_spill_store())(conv)


def test_budget_spills_the_largest_body_first() -> None:
    """Over budget, the largest body goes first and the smaller one stays."""
    store = memory_spill_store()
    conv = turn("a", t1="b" * 3000, t2="a" * 5000) + turn("b")
    out, _ = tool_result_budget_pass(4000, store)(conv)
    expected = with_body(conv[2], 1, spill_marker(store.put("a" * 5000), "a" * 5000))
    assert expected == out[2]


def test_budget_stops_once_within_budget() -> None:
    """Only as many bodies move as it takes to get within budget."""
    conv = turn("a", t1="a" * 5000, t2="b" * 4000, t3="c" * 100) + turn("b")
    out, _ = tool_result_budget_pass(5000, memory_spill_store())(conv)
    assert ["spilled", "b" * 4000, "c" * 100] == [
        "spilled"
        if str(body_of(out, 2, k)).startswith("[liteagent:spilled ")
        else body_of(out, 2, k)
        for k in range(3)
    ]


def test_budget_breaks_ties_by_position() -> None:
    """Of two equally large bodies, the earlier one is spilled."""
    conv = turn("a", t1="a" * 3000) + turn("b", t2="b" * 3000) + turn("c")
    out, _ = tool_result_budget_pass(3500, memory_spill_store())(conv)
    assert (True, "b" * 3000) == (
        str(body_of(out, 2)).startswith("[liteagent:spilled "),
        body_of(out, 6),
    )


def test_budget_spilled_text_reads_back_from_the_store() -> None:
    """The marker's key reads the original body back from the store."""
    store = memory_spill_store()
    conv = turn("a", t1="é" * 4000) + turn("b")
    out, _ = tool_result_budget_pass(1000, store)(conv)
    key = str(body_of(out, 2)).split()[1]
    assert "é" * 4000 == store.get(key)


def test_budget_counts_utf8_bytes() -> None:
    """1,500 two-byte characters are 3,000 bytes: over a 2,500-byte budget."""
    conv = turn("a", t1="é" * 1500) + turn("b")
    out, _ = tool_result_budget_pass(2500, memory_spill_store())(conv)
    assert str(body_of(out, 2)).startswith("[liteagent:spilled ")


def test_budget_spills_a_tuple_body_as_its_joined_text() -> None:
    """A body of text blocks is spilled as the texts joined by newlines."""
    store = memory_spill_store()
    conv = turn("a", t1=(TextBlock(text="a" * 2000), TextBlock(text="b" * 2000))) + turn("b")
    out, _ = tool_result_budget_pass(1000, store)(conv)
    joined = "a" * 2000 + "\n" + "b" * 2000
    assert spill_marker(store.put(joined), joined) == body_of(out, 2)


def test_budget_leaves_bodies_with_images() -> None:
    """A body holding an image cannot be read back as text, so it stays."""
    image = RawBlock(data={"type": "image", "source": {"type": "base64", "data": "QUJD" * 2000}})
    conv = turn("a", t1=(TextBlock(text="see"), image)) + turn("b")
    assert (conv, "") == tool_result_budget_pass(1000, memory_spill_store())(conv)


def test_budget_never_touches_the_most_recent_turn() -> None:
    """A large body in the most recent turn (the last step and its results) stays, even over
    budget."""
    conv = [*turn("a"), user("b"), assistant("go", "t1"), results(("t1", "x" * 9000))]
    assert (conv, "") == tool_result_budget_pass(1000, memory_spill_store())(conv)


def test_budget_leaves_bodies_shorter_than_their_marker() -> None:
    """Many small bodies over budget stay: a marker would be longer than each."""
    conv = turn("a", **{f"t{k}": "x" * 100 for k in range(20)}) + turn("b")
    assert (conv, "") == tool_result_budget_pass(500, memory_spill_store())(conv)


def test_budget_keeps_id_error_flag_and_extra() -> None:
    """Only the content of a spilled tool result changes."""
    block = ToolResultBlock(
        tool_use_id="t1",
        content="x" * 5000,
        is_error=True,
        extra={"cache_control": {"type": "ephemeral"}},
    )
    conv = [
        user("p"),
        assistant("go", "t1"),
        Message(role="user", content=(block,)),
        assistant("done"),
        user("next"),
    ]
    out, _ = tool_result_budget_pass(1000, memory_spill_store())(conv)
    new = out[2].content[0]
    assert isinstance(new, ToolResultBlock)
    assert ("t1", True, block.extra) == (new.tool_use_id, new.is_error, new.extra)


def test_budget_detail_names_bodies_and_bytes() -> None:
    """The detail says how many bodies and bytes moved."""
    conv = turn("a", t1="x" * 5000) + turn("b")
    _, detail = tool_result_budget_pass(1000, memory_spill_store())(conv)
    assert detail.startswith("spilled 1 tool result (5000 bytes) to the store")


def test_budget_second_run_changes_nothing() -> None:
    """Spill markers are not spilled again."""
    store = memory_spill_store()
    conv = turn("a", t1="x" * 5000) + turn("b")
    once, _ = tool_result_budget_pass(0, store)(conv)
    assert (once, "") == tool_result_budget_pass(0, store)(once)


def test_budget_rejects_a_negative_budget() -> None:
    """A negative budget is an invalid argument."""
    with pytest.raises(InvalidArgumentError, match="budget_bytes"):
        tool_result_budget_pass(-1, memory_spill_store())


# ---------------------------------------------------------------------------------------------
# snip_pass


def note(turns: int, messages: int) -> str:
    t, verb = ("turn", "was") if turns == 1 else ("turns", "were")
    m = "message" if messages == 1 else "messages"
    return f"[liteagent: {turns} earlier {t} ({messages} {m}) {verb} removed to save context]"


def task(steps: int, size: int = 3000) -> list[Message]:
    """One prompt, ``steps`` model steps each calling a tool, then a final reply. Its turns (one
    agent step each): ``[prompt, call 0, results 0]``, ``[call k, results k]`` for each further
    step, ``[final reply]``."""
    conv = [user("task")]
    for k in range(steps):
        conv += [assistant(f"step {k}", f"t{k}"), results((f"t{k}", str(k % 10) * size))]
    return [*conv, assistant("done")]


def four_turns(size: int = 3000) -> list[Message]:
    """Four prompts, each answered by one tool call and a reply: eight turns, starting at
    messages 0, 3, 4, 7, 8, 11, 12 and 15."""
    return [m for k in range(4) for m in turn(str(k), **{f"t{k}": str(k) * size})]


def test_snip_removes_middle_steps_of_a_long_task() -> None:
    """One long task is many turns: its middle steps go, the marker ends the results before
    the cut, and the head and the last two steps stay verbatim."""
    conv = task(4)
    out, _ = snip_pass(keep_head_turns=1, keep_tail_turns=2)(conv)
    assert [*conv[:2], trail(conv[2], note(2, 4)), *conv[7:]] == out


def test_snip_removes_middle_turns_and_marks_the_next_prompt() -> None:
    """Across prompts, a cut that ends before a prompt puts the marker at its front."""
    conv = four_turns()
    out, _ = snip_pass(keep_head_turns=2, keep_tail_turns=2)(conv)
    assert [*conv[:4], lead(conv[12], note(4, 8)), *conv[13:]] == out


def test_snip_between_two_user_messages_adds_an_assistant_marker() -> None:
    """A cut between tool results and a prompt gets a marker message of its own, so roles
    alternate."""
    conv = four_turns()
    out, _ = snip_pass(keep_head_turns=1, keep_tail_turns=2)(conv)
    marker = Message(role="assistant", content=(TextBlock(text=note(5, 9)),))
    assert [*conv[:3], marker, *conv[12:]] == out


def test_snip_marker_counts_turns_and_messages() -> None:
    """The marker names the number of removed turns and messages."""
    conv = task(5)
    out, _ = snip_pass(keep_head_turns=1, keep_tail_turns=1)(conv)
    assert [*conv[:2], trail(conv[2], note(4, 8)), conv[11]] == out


def test_snip_keeps_a_conversation_with_no_middle() -> None:
    """With no more turns than head plus tail, nothing changes."""
    conv = task(2)
    assert (conv, "") == snip_pass(keep_head_turns=1, keep_tail_turns=2)(conv)


def test_snip_with_one_tail_turn_marks_the_reply_before_the_cut() -> None:
    """A pending prompt is the most recent turn and stays verbatim; the marker ends the last
    kept reply instead."""
    conv = [*four_turns(), user("next")]
    out, _ = snip_pass(keep_head_turns=2, keep_tail_turns=1)(conv)
    assert [*conv[:3], trail(conv[3], note(6, 12)), conv[16]] == out


def test_snip_with_max_tokens_changes_nothing_that_fits() -> None:
    """When the estimate already fits, nothing is removed."""
    conv = task(4)
    snip = snip_pass(keep_head_turns=1, keep_tail_turns=1, max_tokens=estimate_tokens(conv))
    assert (conv, "") == snip(conv)


def test_snip_with_max_tokens_removes_only_the_oldest_turns_needed() -> None:
    """Just enough of the oldest middle turns go to fit."""
    conv = task(4)
    limit = estimate_tokens(conv) - estimate_tokens(conv[3:5]) + 100
    out, _ = snip_pass(keep_head_turns=1, keep_tail_turns=1, max_tokens=limit)(conv)
    assert [*conv[:2], trail(conv[2], note(1, 2)), *conv[5:]] == out


def test_snip_with_max_tokens_removes_every_middle_turn_when_it_never_fits() -> None:
    """An unreachable budget removes all middle turns and keeps head and tail."""
    conv = task(4)
    out, _ = snip_pass(keep_head_turns=1, keep_tail_turns=1, max_tokens=1)(conv)
    assert [*conv[:2], trail(conv[2], note(3, 6)), conv[9]] == out


def test_snip_does_nothing_when_the_marker_costs_more_than_it_saves() -> None:
    """Removing one tiny turn would raise the estimate, so nothing happens."""
    conv = [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]
    assert (conv, "") == snip_pass(keep_head_turns=1, keep_tail_turns=1)(conv)


def test_snip_keeps_the_first_prompt_turn_after_leading_tool_results() -> None:
    """A transcript that starts with tool results keeps the first prompt's turn too."""
    conv = [results(("t0", "x" * 3000)), assistant("a0"), *task(4)]
    out, _ = snip_pass(keep_head_turns=1, keep_tail_turns=1)(conv)
    assert [*conv[:4], trail(conv[4], note(3, 6)), conv[11]] == out


def test_snip_detail_names_turns_and_messages() -> None:
    """The detail says how many turns and messages went."""
    _, detail = snip_pass(keep_head_turns=1, keep_tail_turns=1)(task(4))
    assert "removed 3 middle turns (6 messages) after turn 1" == detail


@pytest.mark.parametrize(
    "settings_", [{"keep_head_turns": 0}, {"keep_tail_turns": 0}, {"max_tokens": -1}]
)
def test_snip_rejects_bad_settings(settings_: dict[str, int]) -> None:
    """Head and tail keep at least one turn; max_tokens is not negative."""
    with pytest.raises(InvalidArgumentError):
        snip_pass(**settings_)


# ---------------------------------------------------------------------------------------------
# micro_pass


def cleared(tool_use_id: str, size: int) -> str:
    return f"[liteagent:cleared {tool_use_id}: {size} bytes of tool output removed to save context]"


def three_turns() -> list[Message]:
    return turn("a", t1="a" * 500, t2="b" * 500) + turn("b", t3="c" * 500) + turn("c", t4="d" * 500)


def test_micro_clears_all_but_the_most_recent() -> None:
    """The two most recent results stay; older bodies become placeholders."""
    conv = three_turns()
    out, _ = micro_pass(keep_recent=2)(conv)
    expected = [
        *conv[:2],
        with_body(with_body(conv[2], 0, cleared("t1", 500)), 1, cleared("t2", 500)),
        *conv[3:],
    ]
    assert expected == out


def test_micro_never_clears_the_most_recent_turn() -> None:
    """With nothing to keep, results in the most recent turn (the step that called the tool and
    its results) still stay."""
    out, _ = micro_pass(keep_recent=0)(three_turns()[:-1])
    assert ["cleared", "cleared", "cleared", "d" * 500] == [
        "cleared" if str(body).startswith("[liteagent:cleared ") else body
        for body in (body_of(out, 2, 0), body_of(out, 2, 1), body_of(out, 6), body_of(out, 10))
    ]


def test_micro_keeps_ids_and_error_flags() -> None:
    """A cleared result keeps its tool_use_id and is_error."""
    block = ToolResultBlock(tool_use_id="t1", content="x" * 900, is_error=True)
    conv = [
        user("p"),
        assistant("go", "t1"),
        Message(role="user", content=(block,)),
        assistant("done"),
        user("next"),
    ]
    out, _ = micro_pass(keep_recent=0)(conv)
    expected = ToolResultBlock(tool_use_id="t1", content=cleared("t1", 900), is_error=True)
    assert expected == out[2].content[0]


def test_micro_leaves_spill_markers() -> None:
    """A spilled body keeps its marker, so its key stays readable."""
    marker = spill_marker("sha256:" + "0" * 64, "x" * 5000)
    conv = turn("a", t1=marker) + turn("b")
    assert (conv, "") == micro_pass(keep_recent=0)(conv)


def test_micro_leaves_short_bodies() -> None:
    """A body shorter than the placeholder stays."""
    conv = turn("a", t1="ok") + turn("b")
    assert (conv, "") == micro_pass(keep_recent=0)(conv)


def test_micro_leaves_absent_bodies() -> None:
    """A result without content stays as it is."""
    conv = [
        user("p"),
        assistant("go", "t1"),
        Message(role="user", content=(ToolResultBlock(tool_use_id="t1", content=UNSET),)),
        assistant("done"),
        user("next"),
    ]
    assert (conv, "") == micro_pass(keep_recent=0)(conv)


def test_micro_clears_an_image_body() -> None:
    """A body of blocks becomes one placeholder naming its size in bytes."""
    image = RawBlock(data={"type": "image", "source": {"type": "base64", "data": "QUJD" * 500}})
    conv = turn("a", t1=(TextBlock(text="see"), image)) + turn("b")
    size = 3 + len(msgspec.json.encode(image))
    out, _ = micro_pass(keep_recent=0)(conv)
    assert cleared("t1", size) == body_of(out, 2)


def test_micro_detail_names_results_and_bytes() -> None:
    """The detail says how many results and bytes were cleared."""
    _, detail = micro_pass(keep_recent=0)(three_turns())
    assert "cleared 4 tool results (2000 bytes)" == detail


def test_micro_second_run_changes_nothing() -> None:
    """Placeholders are not cleared again."""
    once, _ = micro_pass(keep_recent=0)(three_turns())
    assert (once, "") == micro_pass(keep_recent=0)(once)


def test_micro_rejects_a_negative_count() -> None:
    """keep_recent is not negative."""
    with pytest.raises(InvalidArgumentError, match="keep_recent"):
        micro_pass(keep_recent=-1)


def test_passes_have_names() -> None:
    """Each pass names itself for reports."""
    assert ["tool_result_budget", "snip", "micro"] == [
        p.name
        for p in (tool_result_budget_pass(1, memory_spill_store()), snip_pass(), micro_pass())
    ]


# ---------------------------------------------------------------------------------------------
# Properties on generated conversations

SUBJECTS = pass_subjects(budget_bytes=3000, snip_tokens=800)
NAMES = sorted(SUBJECTS)
PROPERTY = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(conv=conversations())
def test_pass_keeps_the_contract_invariants(name: str, conv: list[Message]) -> None:
    """On any valid conversation, each invariant holds (the failure names the broken ones)."""
    assert {} == invariant_problems(name, SUBJECTS[name], conv)


def test_every_pass_changes_some_generated_conversations() -> None:
    """The properties are not vacuous: each pass changes some generated conversations."""
    counts = count_changed(SUBJECTS)
    assert [] == [name for name, n in counts.items() if n == 0]


# ---------------------------------------------------------------------------------------------
# The checkers themselves catch broken passes (so the properties above can fail)

_calls = iter(range(1_000_000))


def _drop_results(conv: list[Message]) -> list[Message]:
    return [*conv[:6], *conv[7:]]


def _drop_part_of_a_turn(conv: list[Message]) -> list[Message]:
    return [*conv[:5], *conv[7:]]


def _edit_last_turn(conv: list[Message]) -> list[Message]:
    return [*conv[:-1], assistant("something else")]


def _repeat_a_prompt(conv: list[Message]) -> list[Message]:
    return [*conv[:4], conv[4], *conv[4:]]


def _pad_a_reply(conv: list[Message]) -> list[Message]:
    return [*conv[:3], trail(conv[3], "x" * 300), *conv[4:]]


def _count_calls(conv: list[Message]) -> list[Message]:
    return [*conv[:3], trail(conv[3], f"call {next(_calls)}"), *conv[4:]]


def _spill_without_marker(conv: list[Message]) -> list[Message]:
    return [*conv[:2], with_body(conv[2], 0, "gone"), *conv[3:]]


@pytest.mark.parametrize(
    ("broken", "invariant"),
    [
        (_drop_results, "tool pairs"),
        (_drop_results, "whole turns"),
        (_drop_part_of_a_turn, "whole turns"),
        (_edit_last_turn, "first prompt and last turn verbatim"),
        (_repeat_a_prompt, "alternation"),
        (_pad_a_reply, "estimate non-increasing"),
        (_pad_a_reply, "kept in order"),
        (_spill_without_marker, "kept in order"),
        (_count_calls, "deterministic"),
    ],
)
def test_the_checkers_catch_a_broken_pass(
    broken: Callable[[list[Message]], list[Message]], invariant: str
) -> None:
    """A pass that breaks an invariant is reported under that invariant."""
    conv = turn("a", t1="x" * 500) + turn("b", t2="y" * 500) + turn("c")

    def run(messages: Sequence[Message]) -> tuple[list[Message], str]:
        return broken(list(messages)), ""

    assert invariant in invariant_problems("broken", run, conv)
