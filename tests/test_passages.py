"""The question's passages: before the first model call of a turn, what a search for the question finds goes with it,
so a model that calls no tool can still answer from the notes and cite their lines (a 0.5B model almost never calls
one). Through run_agent, the real search and the stub client; the terminal and /sent through the real chat."""

import pytest
from conftest import Recorder, StubClient, make_notebook, tool_call, write

import sent
import sessions
from agent import run_agent

TOMATOES = "# Garden\n\nSome intro.\n\n## Tomatoes\nWater the tomatoes every two days, in the morning.\n"


@pytest.fixture
def garden(kb):
    write(kb, "garden.md", TOMATOES)
    write(kb, "diary.md", "---\nprivate: true\n---\nI water my tomatoes with the neighbour's hose.\n")
    return make_notebook(kb, passages=True)


def question_sent(request: dict) -> str:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def test_the_first_request_carries_the_question_with_its_passages(garden):
    client = StubClient([{"content": "Every two days (garden.md:6)."}])
    history = []
    answer = run_agent("how often should I water my tomatoes?", history, client=client, notebook=garden)
    asked = question_sent(client.requests[0])  # the passages first, the question last: a small model answers it
    assert asked.startswith("<<<data ") and asked.endswith(">>>end " + asked[8:18] + "\n\nhow often should I water "
                                                                                    "my tomatoes?")
    assert "garden.md\n" in asked and "  6: Water the tomatoes every two days, in the morning." in asked
    assert "neighbour" not in asked and "diary.md" not in asked  # a private note is no passage
    assert history[0]["content"] == "how often should I water my tomatoes?"  # what the person asked, as kept
    assert answer.citations.failed() == [] and [c.text for c in answer.citations.checks] == ["garden.md:6"]
    assert answer.citations.unread == ""  # the answer rests on what went with the question


def test_a_model_that_calls_tools_loses_nothing_and_later_requests_keep_the_prefix(garden):
    client = StubClient([{"tool_calls": [tool_call("read_note", file_path="garden.md")]},
                         {"content": "Every two days."}, {"content": "In the morning."}])
    history = []
    run_agent("how often should I water my tomatoes?", history, client=client, notebook=garden)
    run_agent("and when?", history, client=client, notebook=garden)
    first, second, third = (request["messages"] for request in client.requests)
    assert second[:len(first)] == first and third[:len(second) + 1] == second + [third[len(second)]]
    assert "garden.md (lines 1-6 of 6)" in second[-1]["content"]  # the tool ran as ever


def test_passages_fit_a_small_window_and_a_setting_turns_them_off(kb):
    write(kb, "long.md", "# Long\n\n" + "".join(f"Tomatoes line {i} about watering.\n" for i in range(400)))
    small = StubClient([{"content": "ok"}])
    run_agent("watering tomatoes", client=small, notebook=make_notebook(kb, passages=True, context_tokens=2000))
    passages = question_sent(small.requests[0]).split("<<<data", 1)[1]
    assert 0 < len(passages) < 2000 * 0.1 * 4  # a tenth of the window at most
    off = StubClient([{"content": "ok"}])
    run_agent("watering tomatoes", client=off, notebook=make_notebook(kb, passages=False))
    assert question_sent(off.requests[0]) == "watering tomatoes"
    nothing = StubClient([{"content": "hello"}])
    run_agent("hi there", client=nothing, notebook=make_notebook(kb, passages=True))
    assert question_sent(nothing.requests[0]) == "hi there"  # nothing found: the question alone


def test_passages_count_as_sent_in_the_store_and_the_chat_says_what_went(garden, tmp_path, call_main, fake_llm):
    store = sessions.SessionStore(tmp_path / "sessions.db")
    conversation = sessions.Conversation(store, garden.kb)
    ui = Recorder()
    ui.passages = lambda lines: ui.results.append(lines)
    run_agent("how often should I water my tomatoes?", conversation.history, client=StubClient([{"content": "ok"}]),
              notebook=garden, ui=ui)
    assert ui.results == [{"garden.md": [1, 3, 5, 6]}]
    report = sent.report(store, conversation.session_id, garden.kb)
    assert "garden.md  lines 1, 3, 5-6" in report, report
    resumed = sessions.Conversation(store, garden.kb)
    assert resumed.resume(conversation.session_id) and resumed.history[0]["shown"]["lines"] == {"garden.md": [1, 3, 5, 6]}

    chat = call_main("how often should I water my tomatoes?", kb=garden.kb, base_url=fake_llm.base_url,
                     extra_env={"PASSAGES": "1"})
    assert "(with the question: garden.md:1-6)" in chat.stderr and "with the question" not in chat.stdout


def test_the_first_note_cannot_crowd_out_the_next_and_a_title_stands_for_the_opening(kb):
    """On the knowledge-garden vault, "我第一次买域名是在哪买的，花了多少钱？" ranked a daily note of long lines first:
    it filled the room, and the note that answers (second, its best line its title) was left out."""
    write(kb, "daily.md", "# 2022-07-01\n\n" + "".join(f"- 域名 line {i} " + "闲聊" * 60 + "\n" for i in range(30)))
    write(kb, "domain.md", "---\ntitle: 第一次购买域名的经验\n---\n- 在阿里云，9元1年，买了这个域名\n- 然后备案\n"
          + "".join(f"- 其他 {i}\n" for i in range(40)))
    client = StubClient([{"content": "阿里云，9元"}])
    run_agent("我第一次买域名是在哪买的，花了多少钱？", client=client,
              notebook=make_notebook(kb, passages=True, context_tokens=8192))
    asked = question_sent(client.requests[0])
    assert "domain.md\n" in asked and "  4: - 在阿里云，9元1年，买了这个域名" in asked and "daily.md\n" in asked
