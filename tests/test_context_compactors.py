"""The structural compactors: default_compactor and token_budget_compactor — units and
properties."""

from __future__ import annotations

import msgspec
import pytest
from _context_checks import (
    assistant,
    compactor_subjects,
    conversations,
    count_changed,
    invariant_problems,
    results,
    turn,
    user,
)
from hypothesis import HealthCheck, given, settings

from liteagent.context import (
    CompactResult,
    PassReport,
    default_compactor,
    estimate_tokens,
    memory_spill_store,
    micro_pass,
    snip_pass,
    token_budget_compactor,
)
from liteagent.eventlog.errors import InvalidArgumentError
from liteagent.eventlog.types import Message, TextBlock, ToolResultBlock, Usage


def big_turns(n: int, size: int = 3000) -> list[Message]:
    return [m for k in range(n) for m in turn(str(k), **{f"t{k}": str(k % 10) * size})]


def lead(message: Message, block: object) -> Message:
    assert isinstance(block, TextBlock)
    return msgspec.structs.replace(message, content=(block, *message.content))


def marker(turns: int, messages: int) -> Message:
    t = "1 earlier turn" if turns == 1 else f"{turns} earlier turns"
    verb = "was" if turns == 1 else "were"
    note = f"[liteagent: {t} ({messages} messages) {verb} removed to save context]"
    return Message(role="assistant", content=(TextBlock(text=note),))


# ---------------------------------------------------------------------------------------------
# default_compactor


def test_default_with_nothing_to_reduce_returns_the_input_unchanged() -> None:
    """A short conversation comes back as is, with changed=False."""
    conv = turn("a", t1="ok") + turn("b")
    result = default_compactor().maybe_compact(conv)
    assert (False, tuple(conv)) == (result.changed, result.messages)


def test_default_below_its_triggers_changes_nothing() -> None:
    """With the default settings, a conversation under 200 KB of tool results and 120,000
    estimated tokens is left alone, however many turns it has."""
    conv = big_turns(30)
    assert estimate_tokens(conv) < 120_000
    result = default_compactor().maybe_compact(conv)
    assert (False, tuple(conv)) == (result.changed, result.messages)


def test_default_above_its_token_trigger_snips_the_oldest_turns_to_fit() -> None:
    """Above ``max_tokens``, only the oldest middle turns go, until the estimate fits."""
    conv = big_turns(40, size=20_000)
    result = default_compactor(budget_bytes=10**9, max_tokens=200_000).maybe_compact(conv)
    assert estimate_tokens(conv) > 200_000 >= result.tokens_after
    assert (True, ["snip"]) == (result.changed, [r.name for r in result.passes if r.changed])
    assert result.messages[-30:] == tuple(conv[-30:])


def test_default_clears_old_results_when_snipping_is_not_enough() -> None:
    """When the first prompt and the kept tail are still too large, micro clears the oldest
    tool-result bodies too."""
    conv = [user("task")]
    for k in range(10):
        conv += [assistant(f"step {k}", f"t{k}"), results((f"t{k}", str(k) * 20_000))]
    result = default_compactor(budget_bytes=10**9, max_tokens=5_000).maybe_compact(conv)
    assert ["snip", "micro"] == [r.name for r in result.passes if r.changed]
    kept = [b.content for m in result.messages for b in m.content if type(b) is ToolResultBlock]
    assert ["cleared", "cleared", "7", "8", "9"] == [
        "cleared" if str(c).startswith("[liteagent:cleared") else str(c)[0] for c in kept
    ]


def test_default_runs_budget_then_snip_then_micro() -> None:
    """The default passes, in order, each reported."""
    result = default_compactor(max_tokens=None).maybe_compact(big_turns(2))
    assert ["tool_result_budget", "snip", "micro"] == [r.name for r in result.passes]


def test_default_result_is_the_pipeline_result() -> None:
    """maybe_compact returns what the passes did, with before and after estimates."""
    conv = big_turns(8)
    result = default_compactor(budget_bytes=10_000).maybe_compact(conv)
    assert (True, estimate_tokens(conv), estimate_tokens(result.messages)) == (
        result.changed,
        result.tokens_before,
        result.tokens_after,
    )


def test_default_spills_into_the_given_store() -> None:
    """Spilled bodies read back from the store passed in."""
    store = memory_spill_store()
    result = default_compactor(budget_bytes=1000, store=store).maybe_compact(big_turns(2))
    body = result.messages[2].content[0]
    assert isinstance(body, ToolResultBlock)
    assert "0" * 3000 == store.get(str(body.content).split()[1])


def test_default_uses_the_given_passes() -> None:
    """Given passes replace the default ones."""
    compactor = default_compactor([micro_pass(0), snip_pass(keep_tail_turns=1)])
    result = compactor.maybe_compact(big_turns(3))
    assert ["micro", "snip"] == [r.name for r in result.passes]


def test_default_ignores_instructions() -> None:
    """Instructions and usage do not change a structural compaction."""
    conv = big_turns(8)
    plain = default_compactor(budget_bytes=10_000).maybe_compact(conv)
    steered = default_compactor(budget_bytes=10_000).maybe_compact(
        conv, Usage(input_tokens=1), "keep the file names"
    )
    assert plain == steered


# ---------------------------------------------------------------------------------------------
# token_budget_compactor


def test_token_budget_changes_nothing_that_fits() -> None:
    """A conversation within the budget comes back unchanged."""
    conv = big_turns(3)
    result = token_budget_compactor(estimate_tokens(conv)).maybe_compact(conv)
    assert (False, tuple(conv)) == (result.changed, result.messages)


def test_token_budget_keeps_the_first_prompt_and_the_newest_turns_that_fit() -> None:
    """The first prompt, one marker, and as many newest whole turns as fit (turns are agent
    steps, so the newest that fit start with the final reply of turn 2, which takes the
    marker)."""
    conv = big_turns(5)
    limit = estimate_tokens(conv[:1]) + estimate_tokens(conv[12:]) + 100
    result = token_budget_compactor(limit).maybe_compact(conv)
    note = marker(5, 10).content[0]
    assert (conv[0], lead(conv[11], note), *conv[12:]) == result.messages


def test_token_budget_keeps_the_most_recent_turn_even_over_budget() -> None:
    """The most recent turn stays, whole, even when it alone is over the budget; here the
    marker cannot join the final reply (it is the most recent turn), so it stands before the
    last prompt, which stays with its turn."""
    conv = big_turns(3)
    result = token_budget_compactor(1).maybe_compact(conv)
    assert (conv[0], marker(4, 7), *conv[8:]) == result.messages


def test_token_budget_fits_when_it_can() -> None:
    """When first prompt, marker and last turn fit, the result is within the budget."""
    conv = big_turns(6)
    limit = estimate_tokens(conv[:1]) + estimate_tokens(conv[-4:]) + 100
    result = token_budget_compactor(limit).maybe_compact(conv)
    assert result.tokens_after <= limit < result.tokens_before


def test_token_budget_reports_one_pass() -> None:
    """The report holds one token_budget stage with its estimates."""
    conv = big_turns(3)
    result = token_budget_compactor(1).maybe_compact(conv)
    expected = PassReport(
        name="token_budget",
        changed=True,
        tokens_before=estimate_tokens(conv),
        tokens_after=result.tokens_after,
        detail="removed 7 messages from 4 turns after the first prompt; kept the newest 4 messages",
    )
    assert (expected,) == result.passes


def test_token_budget_ignores_instructions() -> None:
    """Instructions do not change the cut."""
    conv = big_turns(4)
    assert token_budget_compactor(500).maybe_compact(conv) == token_budget_compactor(
        500
    ).maybe_compact(conv, instructions="summarize the errors")


def test_token_budget_rejects_a_budget_below_one() -> None:
    """max_tokens is at least 1."""
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        token_budget_compactor(0)


def test_compact_results_encode() -> None:
    """A compaction result is plain data that msgpack encodes and decodes."""
    result = token_budget_compactor(1).maybe_compact(big_turns(3))
    data = msgspec.msgpack.encode(result)
    assert result == msgspec.msgpack.decode(data, type=CompactResult)


# ---------------------------------------------------------------------------------------------
# Properties on generated conversations

SUBJECTS = compactor_subjects(budget_bytes=3000, max_tokens=500)
NAMES = sorted(SUBJECTS)
PROPERTY = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(conv=conversations())
def test_compactor_keeps_the_contract_invariants(name: str, conv: list[Message]) -> None:
    """On any valid conversation, each invariant holds, and ``changed`` says whether the
    messages changed (the failure names the broken ones)."""
    assert {} == invariant_problems(name, SUBJECTS[name], conv)


def test_every_compactor_changes_some_generated_conversations() -> None:
    """The properties are not vacuous: each compactor changes some generated conversations."""
    counts = count_changed(SUBJECTS)
    assert [] == [name for name, n in counts.items() if n == 0]
