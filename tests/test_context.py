"""The context budget: every request fits, the latest turn is intact, the history stays valid, and what is
sent only grows at its end between rare trims (so prompt caching keeps working)."""

import functools
import json

import pytest
from conftest import assert_valid_history

from context import (INTERRUPTED_RESULT, MESSAGE_OVERHEAD_TOKENS, TRIM_TO, estimate_tokens, fit_to_budget,
                     repair_history, text_tokens)

SYSTEM = {"role": "system", "content": "You help with notes."}
LONG_SESSION_BUDGET = 20_000  # tokens
ELIDED = "[… elided, "


def turn(i: int, tool_chars: int = 8000, calls: int = 1, cjk: bool = False) -> list[dict]:
    """One question answered after `calls` tool calls, each returning a big note."""
    filler = ("笔记内容" if cjk else "note text ") * (tool_chars // (4 if cjk else 10))
    messages = [{"role": "user", "content": f"question {i}"}]
    for c in range(calls):
        call_id = f"call_{i}_{c}"
        messages.append({"role": "assistant", "content": "", "reasoning_content": f"need note {i}.{c}",
                         "tool_calls": [{"id": call_id, "type": "function", "function": {
                             "name": "read_note", "arguments": json.dumps({"path": f"n{i}.md"})}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": f"[{i}.{c}] " + filler})
    messages.append({"role": "assistant", "content": f"answer {i}", "reasoning_content": "done"})
    return messages


def assert_valid(messages: list[dict]) -> None:
    """A valid conversation whose tool calls keep their reasoning_content: DeepSeek rejects one without it."""
    assert_valid_history(messages)
    assert all("reasoning_content" in m for m in messages if m.get("tool_calls")), messages


def session_requests(turns: int, budget: int, cjk: bool = False, tool_chars: int = 6000):
    """Replays an agent loop, fitting before every request as the agent does: yields (request, sent)."""
    stored = [SYSTEM]
    for i in range(turns):
        full_turn = turn(i, tool_chars, calls=1 + i % 3, cjk=cjk)
        for end in range(1, len(full_turn)):
            if full_turn[end - 1]["role"] in ("user", "tool") and full_turn[end]["role"] != "tool":
                request = stored + full_turn[:end]  # after the question and after each round of results
                sent = fit_to_budget(request, budget)
                assert len(request) == len(stored) + end
                yield request, sent
        stored += full_turn
    # The requests shared their message dicts with `stored`: any change made to one would show here.
    assert stored == [SYSTEM] + [m for i in range(turns) for m in turn(i, tool_chars, 1 + i % 3, cjk)]


@functools.cache
def long_session(cjk: bool, tool_chars: int = 6000) -> list[tuple[list, list]]:
    """Every (request, sent) of a 120-turn session at a 20,000-token budget: replayed once, read by each test
    that looks at it from its own side."""
    return list(session_requests(120, LONG_SESSION_BUDGET, cjk, tool_chars))


def test_estimate_counts_cjk_per_character_and_latin_per_three_and_a_half():
    assert text_tokens("a" * 350) == 100
    assert text_tokens("知识库" * 100) == 300
    assert text_tokens("知识 base " * 30) == 60 + 52  # 60 CJK characters, then 180 others / 3.5
    assert estimate_tokens([{"role": "user", "content": "a" * 350}]) == 100 + MESSAGE_OVERHEAD_TOKENS
    tools = [{"type": "function", "function": {"name": "read_note"}}]
    assert estimate_tokens([], tools) == text_tokens(json.dumps(tools))


def test_history_under_budget_is_sent_as_is():
    history = [SYSTEM] + turn(0, 1000)[:-1]
    history.append({"role": "assistant", "content": "answer"})
    history.append({"role": "user", "content": "next"})
    assert fit_to_budget(history, 10_000) == history


def test_old_tool_results_are_shortened_before_any_turn_is_dropped():
    history = [SYSTEM] + [m for i in range(6) for m in turn(i, 3500)] + [{"role": "user", "content": "and now?"}]
    budget = estimate_tokens(fit_to_budget(history, 10**9)) - 1  # only this last request goes over
    sent = fit_to_budget(history, budget)
    assert [m["content"] for m in sent if m["role"] == "user"] == [f"question {i}" for i in range(6)] + ["and now?"]
    tool_results = [m["content"] for m in sent if m["role"] == "tool"]
    assert all(ELIDED in text for text in tool_results[:4])
    assert tool_results[0].startswith("[0.0] note text")  # the head is kept for the model to recognise
    assert tool_results[0].endswith(f"{ELIDED}{len(turn(0, 3500)[2]['content']) - 300} chars]")
    assert not any(ELIDED in text for text in tool_results[4:])  # the last two turns stay whole
    assert estimate_tokens(sent) <= budget * TRIM_TO  # cut back in one go, so the next trims are far off


def test_oldest_turns_go_whole_when_shortening_is_not_enough():
    history = [SYSTEM] + [m for i in range(30) for m in turn(i, calls=3)]
    history.append({"role": "user", "content": "latest"})
    sent = fit_to_budget(history, 4000)
    assert sent[0] == SYSTEM and sent[-1] == {"role": "user", "content": "latest"}
    questions = [m["content"] for m in sent if m["role"] == "user"]
    assert questions[0] != "question 0" and questions[-2] == "question 29"
    assert_valid(sent)
    assert estimate_tokens(sent) <= 4000


@pytest.mark.parametrize("cjk", [False, True])
def test_long_session_every_request_fits_and_latest_turn_is_intact(cjk):
    for request, sent in long_session(cjk):
        assert estimate_tokens(sent) <= LONG_SESSION_BUDGET
        assert_valid(sent)
        assert sent[0] == SYSTEM
        current = request[max(i for i, m in enumerate(request) if m["role"] == "user"):]
        assert sent[-len(current):] == current


@pytest.mark.parametrize("cjk", [False, True])
def test_what_is_sent_only_grows_at_its_end_between_rare_trims(cjk):
    """Prompt caching bills a repeated prefix cheaply: request k+1 starts with request k unchanged, except
    at a trim, which cuts back to about half the budget; what was shortened or dropped never comes back."""
    previous, trims, dropped, requests = None, 0, set(), long_session(cjk, tool_chars=2000 if cjk else 6000)
    shortened: set[str] = set()
    for request, sent in requests:  # each tool result ~1,700 tokens
        if previous and sent[:len(previous)] != previous:
            trims += 1
            assert estimate_tokens(sent) <= LONG_SESSION_BUDGET * TRIM_TO
        for m in sent:
            if m["role"] == "tool":
                assert m["tool_call_id"] not in shortened or ELIDED in m["content"]
                shortened |= {m["tool_call_id"]} if ELIDED in m["content"] else set()
            assert m["role"] != "assistant" or m.get("tool_calls") or "reasoning_content" not in m
        questions = {m["content"] for m in sent if m["role"] == "user"}
        dropped |= {m["content"] for m in previous or () if m["role"] == "user"} - questions
        assert not questions & dropped  # a dropped turn never comes back
        previous = sent
    assert 0 < trims <= len(requests) / 8
    request, sent = requests[len(requests) // 2]
    assert fit_to_budget(request, LONG_SESSION_BUDGET) == sent  # the same history, the same request, come what may


@pytest.mark.parametrize("cjk", [False, True])
def test_a_trim_keeps_the_head_of_the_conversation_so_its_cached_prefix_survives(cjk):
    """A trim used to rewrite everything after the system prompt, so the provider's cache of the whole
    conversation was lost each time; the first turns now stay, shortened, ahead of every later request."""
    previous, kept_at_trims = None, []
    for _, sent in long_session(cjk, tool_chars=2000 if cjk else 6000):
        if previous and sent[:len(previous)] != previous:  # a trim: how much of the last request still leads
            kept_at_trims.append(next(i for i, (a, b) in enumerate(zip(sent, previous + [None])) if a != b))
        previous = sent
    assert len(kept_at_trims) > 2
    head = kept_at_trims[1]  # the first trim shortened the head's results; from then on it never changes
    assert head > 1 and sent[1] == {"role": "user", "content": "question 0"}
    assert all(kept >= head for kept in kept_at_trims[1:])


def test_a_current_turn_too_big_alone_has_its_older_tool_results_shortened():
    big = turn(0, tool_chars=30_000, calls=4)[:-1]  # still working: the last message is a tool result
    sent = fit_to_budget([SYSTEM] + big, 12_000)
    assert_valid(sent)
    assert estimate_tokens(sent) <= 12_000
    assert sent[-1] == big[-1]  # the result the model is about to read stays whole
    assert ELIDED in sent[2 + 1]["content"]


def test_reasoning_is_kept_where_the_api_needs_it_and_dropped_where_it_is_ignored():
    history = [SYSTEM] + turn(0, 100) + [{"role": "user", "content": "next"}]
    history[2]["reasoning_content"] = ""  # empty reasoning on a tool-call message must still be sent
    sent = fit_to_budget(history, 100_000)
    assert sent[2]["reasoning_content"] == ""
    assert "reasoning_content" not in sent[4]  # a finished answer in an earlier turn
    assert history[4]["reasoning_content"] == "done"


def test_repair_answers_interrupted_calls_and_drops_orphans():
    calls = {"role": "assistant", "content": "", "reasoning_content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "read_note", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "read_note", "arguments": "{}"}}]}
    history = [SYSTEM, {"role": "assistant", "content": "stray"},
               {"role": "tool", "tool_call_id": "zz", "content": "orphan before any user"},
               {"role": "user", "content": "q"}, calls,
               {"role": "tool", "tool_call_id": "a", "content": "A"},
               # killed here: "b" never ran
               {"role": "user", "content": "q2"},
               {"role": "tool", "tool_call_id": "a", "content": "late duplicate"},
               {"role": "user", "content": "q3 (killed while the answer streamed)"},
               {"role": "user", "content": "q4"}]
    repaired = repair_history(history)
    assert_valid(repaired)
    assert [m.get("content") for m in repaired] == ["You help with notes.", "q", "", "A",
                                                    INTERRUPTED_RESULT, "q4"]
    assert repaired[2] is calls  # messages are not copied unless changed


def test_the_turns_just_before_keep_their_tool_results_while_older_ones_go():
    history = [SYSTEM] + [m for i in range(30) for m in turn(i, calls=2)]
    history.append({"role": "user", "content": "and what else does it say?"})
    sent = fit_to_budget(history, 16_000)
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    whole = [text[:6] for text in tools if ELIDED not in text]
    assert whole[-4:] == ["[28.0]", "[28.1]", "[29.0]", "[29.1]"]  # the last two turns, read in full
    assert tools[:len(tools) - len(whole)] == [t for t in tools if ELIDED in t]  # older turns shortened
    assert len(tools) > len(whole)
    assert estimate_tokens(sent) <= 16_000
