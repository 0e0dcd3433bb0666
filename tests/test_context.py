"""The context budget: every request fits, the latest turn is intact, the history stays valid."""

import copy
import json

import pytest

import config
from context import (Calibration, INTERRUPTED_RESULT, estimate_tokens, fit_to_budget, repair_history,
                     text_tokens)

SYSTEM = {"role": "system", "content": "You help with notes."}


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
    """What the chat API checks: user first after system, every call answered at once, no orphans."""
    i = 0
    while messages[i]["role"] == "system":
        i += 1
    assert messages[i]["role"] == "user"
    pending = []
    for m in messages[i:]:
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"orphan tool message {m['tool_call_id']}"
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, f"unanswered tool calls {pending}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            assert "reasoning_content" in m  # DeepSeek rejects a tool-call message without it
            pending = [c["id"] for c in m["tool_calls"]]
    assert not pending


def test_estimate_counts_cjk_per_character_and_latin_per_four():
    assert text_tokens("a" * 400) == 100
    assert text_tokens("知识库" * 100) == 300
    assert text_tokens("知识 base " * 30) == 60 + 180 // 4
    assert estimate_tokens([{"role": "user", "content": "a" * 400}]) == 100 + config.MESSAGE_OVERHEAD_TOKENS


def test_history_under_budget_is_sent_as_is():
    history = [SYSTEM] + turn(0, 1000)[:-1]
    history.append({"role": "assistant", "content": "answer"})
    history.append({"role": "user", "content": "next"})
    assert fit_to_budget(history, 10_000) == history


def test_old_tool_results_are_shortened_before_any_turn_is_dropped():
    history = [SYSTEM] + [m for i in range(6) for m in turn(i)] + [{"role": "user", "content": "and now?"}]
    sent = fit_to_budget(history, 6000)
    assert [m["content"] for m in sent if m["role"] == "user"] == [f"question {i}" for i in range(6)] + ["and now?"]
    tool_results = [m["content"] for m in sent if m["role"] == "tool"]
    assert all("[… elided, " in text for text in tool_results[:4])
    assert tool_results[0].startswith("[0.0] note text")  # the head is kept for the model to recognise
    assert not any("[… elided, " in text for text in tool_results[4:])  # the last two turns stay whole
    assert estimate_tokens(sent) <= 6000


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
    """Replays a 120-turn agent loop, fitting before every request as the agent does."""
    budget = 20_000
    stored = [SYSTEM]
    for i in range(120):
        full_turn = turn(i, tool_chars=6000, calls=1 + i % 3, cjk=cjk)
        for end in range(1, len(full_turn)):
            if full_turn[end - 1]["role"] not in ("user", "tool"):
                continue  # requests go out after the question and after each round of tool results
            stored_before = copy.deepcopy(stored + full_turn[:end])
            request = stored + full_turn[:end]
            sent = fit_to_budget(request, budget)
            assert request == stored_before  # the stored history is never changed
            assert estimate_tokens(sent) <= budget
            assert_valid(sent)
            assert sent[0] == SYSTEM
            current = full_turn[:end]
            if estimate_tokens([SYSTEM] + current) <= budget:
                assert sent[-len(current):] == current
        stored += full_turn


def test_a_current_turn_too_big_alone_has_its_older_tool_results_shortened():
    big = turn(0, tool_chars=30_000, calls=4)[:-1]  # still working: the last message is a tool result
    sent = fit_to_budget([SYSTEM] + big, 12_000)
    assert_valid(sent)
    assert estimate_tokens(sent) <= 12_000
    assert sent[-1] == big[-1]  # the result the model is about to read stays whole
    assert "[… elided, " in sent[2 + 1]["content"]


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


def test_calibration_learns_from_the_api_count_within_bounds():
    gauge = Calibration()
    gauge.observe(10, 500)  # too small a request to learn from
    assert gauge.factor == 1.0
    gauge.observe(10_000, 13_000)
    assert gauge.factor == pytest.approx(1.3)
    gauge.observe(10_000, 15_000)  # a request the estimate under-counted more: follow it at once
    assert gauge.factor == pytest.approx(1.5)
    gauge.observe(10_000, 11_000)  # a lower ratio is believed only slowly
    assert 1.4 < gauge.factor < 1.5
    gauge.observe(10_000, 4_000)  # an over-count (Chinese text) never lets requests grow past the estimate
    assert gauge.factor >= config.TOKEN_FACTOR_MIN == 1.0
    gauge.observe(10_000, 1_000_000)
    assert gauge.factor <= config.TOKEN_FACTOR_MAX


def test_learnt_factor_shrinks_what_is_sent():
    history = [SYSTEM] + [m for i in range(20) for m in turn(i)] + [{"role": "user", "content": "x"}]
    plain = fit_to_budget(history, 10_000)
    corrected = fit_to_budget(history, 10_000, factor=1.5)
    assert estimate_tokens(corrected) * 1.5 <= 10_000 < estimate_tokens(plain) * 1.5


def test_the_turns_just_before_keep_their_tool_results_while_older_ones_go():
    history = [SYSTEM] + [m for i in range(30) for m in turn(i, calls=2)]
    history.append({"role": "user", "content": "and what else does it say?"})
    sent = fit_to_budget(history, 15_000)
    tools = [m for m in sent if m["role"] == "tool"]
    whole = [m["content"][:6] for m in tools if "[… elided, " not in m["content"]]
    assert whole == ["[28.0]", "[28.1]", "[29.0]", "[29.1]"]  # the last two turns, read in full
    assert len(tools) > len(whole)  # older turns are still there, shortened
    assert estimate_tokens(sent) <= 15_000
