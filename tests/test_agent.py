"""The tool loop against a stubbed OpenAI client: round trips, parallel calls, limits, history validity."""

import json
import httpx2
import openai
import pytest
from conftest import Recorder, StubClient, api_error, assert_valid_history, make_settings, run_tool, tool_call

from agent import run_agent
from model import AgentError
from notebook import Notebook
from config import ConfigError, load_settings
from page import no_key
from context import INTERRUPTED_RESULT as CANCELLED


@pytest.mark.parametrize("stream", [True, False])
def test_search_read_answer_round_trip(kb, stream):
    client = StubClient([
        {"tool_calls": [tool_call("search_notes", query="装饰器")]},
        {"tool_calls": [tool_call("read_note", file_path="python.md")]},
        {"content": "你的笔记说：装饰器很有用。"},
    ])
    ui = Recorder()
    answer = run_agent("帮我找关于 Python 的笔记", settings=make_settings(kb, stream=stream), client=client, ui=ui)
    assert answer == "你的笔记说：装饰器很有用。" == "".join(ui.texts)
    assert ui.calls == ["search_notes", "read_note"]
    last_request = client.requests[-1]
    assert last_request["messages"][0]["role"] == "system"
    assert "装饰器很有用" in last_request["messages"][-1]["content"]  # the model saw the note's text
    assert last_request["tools"] and last_request["model"] == "test-model"


def test_parallel_calls_each_get_one_answer(kb):
    history = []
    client = StubClient([
        {"tool_calls": [tool_call("read_note", file_path="python.md"), tool_call("read_note", file_path="vim.md"),
                        tool_call("list_notes")]},
        {"content": "done"},
    ])
    run_agent("compare", history, settings=make_settings(kb), client=client)
    assert_valid_history(history)
    results = [m["content"] for m in history if m["role"] == "tool"]
    assert "装饰器" in results[0] and "dd" in results[1] and "note(s)" in results[2]


def test_malformed_calls_are_survived(kb):
    history = []
    client = StubClient([
        {"tool_calls": [{"name": "read_note", "arguments": "{broken"}, {"name": "no_such_tool", "arguments": "{}"},
                        {"name": "read_note", "arguments": ""}]},
        {"content": "sorry"},
    ])
    assert run_agent("x", history, settings=make_settings(kb), client=client) == "sorry"
    assert_valid_history(history)
    results = [m["content"] for m in history if m["role"] == "tool"]
    assert "not valid JSON" in results[0] and "unknown tool" in results[1] and "missing" in results[2]
    # what goes back to the API is always a JSON object, even when the model sent garbage
    assert history[1]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_round_cap_gives_a_clear_notice(kb):
    history = []
    client = StubClient([{"tool_calls": [tool_call("search_notes", query=f"word{i}")]} for i in range(5)])
    answer = run_agent("loop forever", history, settings=make_settings(kb, max_rounds=3), client=client)
    assert len(client.requests) == 3 and "limit of 3 model calls" in answer
    assert_valid_history(history)


def test_follow_up_question_sees_earlier_turns(kb):
    history = []
    client = StubClient([{"content": "Python notes are in python.md"}, {"content": "one line"}])
    run_agent("find python", history, settings=make_settings(kb), client=client)
    run_agent("summarise it in one line", history, settings=make_settings(kb), client=client)
    sent = [m["content"] for m in client.requests[1]["messages"]]
    assert "find python" in sent and "Python notes are in python.md" in sent


def test_finish_reason_length_is_reported_as_cut(kb):
    answer = run_agent("x", settings=make_settings(kb), client=StubClient([{"content": "half an", "finish_reason": "length"}]))
    assert answer.startswith("half an") and "cut off" in answer


def test_tool_calls_with_stop_finish_reason_still_run(kb):
    client = StubClient([{"tool_calls": [tool_call("list_notes")], "finish_reason": "stop"}, {"content": "ok"}])
    assert run_agent("x", settings=make_settings(kb), client=client) == "ok"
    assert len(client.requests) == 2


def test_reasoning_is_sent_back_only_with_tool_calls(kb):
    history = []
    client = StubClient([
        {"reasoning": "I should search.", "tool_calls": [tool_call("search_notes", query="vim")]},
        {"reasoning": "Now answer.", "content": "dd deletes a line"},
        {"content": "ok"},
    ])
    thoughts = []
    ui = Recorder()
    run_agent("vim?", history, settings=make_settings(kb), client=client, ui=ui)
    thoughts.extend(ui.reasonings)
    run_agent("thanks", history, settings=make_settings(kb), client=client)
    sent = client.requests[2]["messages"]
    with_calls = [m for m in sent if m.get("tool_calls")]
    assert with_calls[0]["reasoning_content"] == "I should search."
    assert all("reasoning_content" not in m for m in sent if m["role"] == "assistant" and not m.get("tool_calls"))
    assert "".join(thoughts) == "I should search.Now answer."


def test_thinking_settings_pass_through_only_when_set(kb):
    client = StubClient([{"content": "a"}, {"content": "b"}])
    run_agent("x", settings=make_settings(kb), client=client)
    run_agent("x", settings=make_settings(kb, thinking="disabled", reasoning_effort="high"), client=client)
    assert "extra_body" not in client.requests[0]
    assert client.requests[1]["extra_body"] == {"thinking": {"type": "disabled"}, "reasoning_effort": "high"}


def test_a_local_server_is_asked_for_a_low_temperature_unless_one_is_set(kb, monkeypatch):
    """llama.cpp and Ollama sample at 0.8 unless told: Qwen2.5-Coder-1.5B, shown "## Slice" under the question
    what FAST's S stands for, answered "Time". A provider's server gets a temperature only when TEMPERATURE is set
    (some of its models refuse one)."""
    client = StubClient([{"content": "a"}] * 4)
    for base_url, temperature in [("http://127.0.0.1:8080/v1", None), ("http://192.168.1.5:11434/v1", 0.0),
                                  ("https://api.deepseek.com", None), ("https://api.openai.com/v1", 1.0)]:
        run_agent("x", settings=make_settings(kb, base_url=base_url, temperature=temperature), client=client)
    assert [request.get("temperature") for request in client.requests] == [0.2, 0.0, None, 1.0]
    monkeypatch.setenv("TEMPERATURE", "warm")
    with pytest.raises(ConfigError, match="TEMPERATURE must be a number from 0 to 2, not 'warm'"):
        load_settings()


@pytest.mark.parametrize("status, message, expected", [
    (401, "bad key", "DEEPSEEK_API_KEY"),
    (404, "no model", "'test-model'"),
    (400, "This model's maximum context length is 65536 tokens", "do not fit the model's context window (65,536"),
    (429, "slow down", "Rate limited"),
    (500, "boom", "HTTP 500"),
])
def test_api_errors_become_one_readable_line(kb, status, message, expected):
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "answer"}]
    with pytest.raises(AgentError) as info:
        # "context too long" is retried with shorter requests before it is reported
        replies = [api_error(status, message)] * 2
        run_agent("x", history, settings=make_settings(kb), client=StubClient(replies))
    assert expected in str(info.value) and "\n" not in str(info.value)
    assert history == [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "answer"}]


def test_failure_after_tools_ran_keeps_a_valid_history(kb):
    history = []
    client = StubClient([{"tool_calls": [tool_call("list_notes")]}, api_error(500, "boom")])
    with pytest.raises(AgentError):
        run_agent("x", history, settings=make_settings(kb), client=client)
    assert_valid_history(history)
    assert history[0] == {"role": "user", "content": "x"} and history[-1]["role"] == "tool"


def test_ctrl_c_during_a_tool_answers_every_call(kb, monkeypatch):
    import tools
    history = []
    real = tools.execute_tool

    def interrupted(name, *args, **kwargs):
        if name == "read_note":
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(tools, "execute_tool", interrupted)
    client = StubClient([{"tool_calls": [tool_call("list_notes"), tool_call("read_note", file_path="vim.md"),
                                         tool_call("list_notes")]}])
    with pytest.raises(KeyboardInterrupt):
        run_agent("x", history, settings=make_settings(kb), client=client)
    assert_valid_history(history)
    results = [m["content"] for m in history if m["role"] == "tool"]
    assert results[1].startswith("stopped: the user pressed Ctrl+C after") and results[2] == CANCELLED


def test_ctrl_c_while_streaming_drops_the_turn(kb):
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "answer"}]
    with pytest.raises(KeyboardInterrupt):
        run_agent("x", history, settings=make_settings(kb), client=StubClient([KeyboardInterrupt()]))
    assert len(history) == 2


def test_missing_key_is_a_clear_error(kb):
    with pytest.raises(AgentError, match="DEEPSEEK_API_KEY"):
        run_agent("x", settings=make_settings(kb, api_key=None))


@pytest.mark.parametrize("error, expected", [
    (openai.APITimeoutError(request=httpx2.Request("POST", "http://x")), "sent nothing for 600 s"),  # a local server: 5 x 120 s
    (openai.APIConnectionError(request=httpx2.Request("POST", "http://x")), "Could not connect"),
])
def test_timeouts_and_refused_connections_are_explained(kb, error, expected):
    with pytest.raises(AgentError, match=expected):
        run_agent("x", settings=make_settings(kb, stream=False), client=StubClient([error]))


def test_a_rejected_request_does_not_poison_the_conversation(kb):
    history = []
    client = StubClient([{"tool_calls": [tool_call("list_notes")]}, api_error(400, "invalid message"),
                         {"content": "fine"}])
    with pytest.raises(AgentError):
        run_agent("first", history, settings=make_settings(kb), client=client)
    assert history == []  # the turn the API refused is not sent again
    assert run_agent("second", history, settings=make_settings(kb), client=client) == "fine"


def test_streamed_reasoning_field_that_is_always_null_is_kept_as_empty(kb):
    """DeepSeek needs the key back with tool calls even when no reasoning text ever arrived."""
    from openai.types.chat import ChatCompletionChunk

    def chunk(delta, finish):
        return ChatCompletionChunk.model_validate({"id": "c", "object": "chat.completion.chunk", "created": 0,
                                                   "model": "m", "choices": [{"index": 0, "delta": delta,
                                                                              "finish_reason": finish}]})

    call_chunk = chunk({"reasoning_content": None, "tool_calls": [
        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "list_notes", "arguments": None}}]},
        "tool_calls")
    client = StubClient([iter([call_chunk]), iter([chunk({"content": "ok"}, "stop")])])
    client.create = lambda **params: client.requests.append(params) or client.replies.pop(0)
    history = []
    run_agent("x", history, settings=make_settings(kb), client=client)
    assert history[1]["reasoning_content"] == "" and history[1]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_question_with_undecodable_bytes_is_sent_with_replacements(kb):
    client = StubClient([{"content": "ok"}])
    run_agent("find \udcff vim", settings=make_settings(kb), client=client)
    assert client.requests[0]["messages"][-1]["content"] == "find \ufffd vim"


def test_a_400_that_only_mentions_a_maximum_is_not_taken_for_a_long_context(kb):
    client = StubClient([api_error(400, "tools[0].description: string too long, maximum length 1024")])
    with pytest.raises(AgentError) as info:
        run_agent("x", settings=make_settings(kb), client=client)
    assert "rejected the request (HTTP 400)" in str(info.value) and len(client.requests) == 1


def test_ctrl_c_mid_answer_keeps_the_text_already_shown(kb):
    from openai.types.chat import ChatCompletionChunk

    def cut_stream():
        for piece in ("Vim: dd deletes", " a line"):
            yield ChatCompletionChunk.model_validate({"id": "c", "object": "chat.completion.chunk", "created": 0,
                                                      "model": "m", "choices": [{"index": 0, "delta": {"content": piece},
                                                                                 "finish_reason": None}]})
        raise KeyboardInterrupt

    client = StubClient([cut_stream(), {"content": "In one line: dd deletes a line."}])
    client_create = client.create
    client.create = lambda **p: client.replies.pop(0) if not isinstance(client.replies[0], dict) else client_create(**p)
    history = []
    with pytest.raises(KeyboardInterrupt):
        run_agent("vim?", history, settings=make_settings(kb), client=client)
    assert_valid_history(history)
    assert history[-1] == {"role": "assistant", "content": "Vim: dd deletes a line\n[cut off before the end]"}
    run_agent("summarise it", history, settings=make_settings(kb), client=client)
    assert "Vim: dd deletes a line" in [m.get("content", "").split("\n")[0] for m in client.requests[-1]["messages"]]


def test_only_a_malformed_answer_is_told_as_a_wrong_base_url_and_a_bug_of_ours_surfaces_as_one(kb):
    from openai.types.chat import ChatCompletion

    client = StubClient([])
    client.create = lambda **params: ChatCompletion.model_construct(choices=[{"message": "?"}])  # as the SDK builds
    with pytest.raises(AgentError, match=r"not an OpenAI-compatible answer \(AttributeError\)\. Check the base URL"):
        run_agent("q", [], make_settings(kb, stream=False), client, Recorder())

    class Broken(Recorder):
        def text(self, text):
            raise TypeError("a bug in a UI")

    for stream in (True, False):
        with pytest.raises(TypeError, match="a bug in a UI"):
            run_agent("q", [], make_settings(kb, stream=stream), StubClient([{"content": "hi"}]), Broken())


def test_the_no_key_hint_names_the_config_file_really_read(call_main, tmp_path, kb, monkeypatch):
    """XDG_CONFIG_HOME moves the user config file; the advice to put the key there must follow it."""
    elsewhere = {"XDG_CONFIG_HOME": str(tmp_path / "elsewhere")}
    expected = str(tmp_path / "elsewhere" / "knowledge-agent" / "config.env")
    chat = call_main(kb=kb, base_url=None, key=None, stdin="what is in my notes?\n", extra_env=elsewhere)
    assert "no API key" in chat.stderr and expected in chat.stderr, chat.stderr
    monkeypatch.setenv("XDG_CONFIG_HOME", elsewhere["XDG_CONFIG_HOME"])
    page = no_key()
    assert expected in page and "~/.config" not in page, page


def test_a_model_stuck_on_failing_calls_is_asked_without_tools(kb):
    """Qwen2.5-Coder-0.5B answered "how do I quit vim" with a call to a tool named "vim", then called "tool" five times,
    each failing, until the round limit, and never answered. After two rounds of nothing but failed calls the next
    request offers no tools, so the model answers; if it still only calls, the turn ends saying so."""
    client = StubClient([{"tool_calls": [tool_call("vim", file_path="x")]}, {"tool_calls": [tool_call("tool")]},
                         {"content": "Type :q! to quit without saving."}])
    answer = run_agent("how do I quit vim without saving", settings=make_settings(kb), client=client)
    assert answer == "Type :q! to quit without saving." and answer.complete
    assert [bool(request.get("tools")) for request in client.requests] == [True, True, False]
    stuck = StubClient([{"tool_calls": [tool_call("vim")]}, {"tool_calls": [tool_call("tool")]},
                        {"tool_calls": [tool_call("tool")]}])
    history = []
    answer = run_agent("quit vim?", history, settings=make_settings(kb), client=stuck)
    assert not answer.complete and "kept making tool calls that failed" in answer.notice
    assert_valid_history(history)
    assert "vim" not in json.dumps(stuck.requests[2]["messages"][2:])  # failed calls teach it to call again


def test_calls_written_as_text_fail_a_round_when_one_fails(kb):
    """A 0.5B model answered a recipe question by writing a call to every tool, one a line, some with made-up values;
    the ones that happened to work kept it going until the output limit. Calls written as text come from a model that
    does not speak the tool protocol: one failed call in such a reply counts the round as failed."""
    recital = ('{"name": "links", "arguments": {"file_path": "python.md"}}\n'
               '{"name": "list_notes", "arguments": {"after": "1"}}')
    client = StubClient([{"content": recital}, {"content": recital}, {"content": "Beat 3 eggs."}])
    answer = run_agent("How many eggs?", settings=make_settings(kb), client=client)
    assert answer == "Beat 3 eggs." and [bool(r.get("tools")) for r in client.requests] == [True, True, False]
    sent = json.dumps(client.requests[2]["messages"][1:], ensure_ascii=False)
    assert "links" in sent and "list_notes" not in sent  # what worked is kept, what failed is not


def test_a_call_made_again_with_nothing_changed_is_not_run_again(kb):
    """Qwen2.5-Coder-0.5B made the same search five times (each found nothing: no error), then gave an empty answer;
    the 1.5B read the right note, read it again, then wrote that call as text when asked to answer. A call repeated
    since the notes last changed is answered that its result is above, and the next request offers no tools and
    carries no call to copy: the question comes after what the calls that worked returned."""
    search = tool_call("search_notes", query="每天进步1%", after="2026-12-02")
    client = StubClient([{"tool_calls": [search]}, {"tool_calls": [search]}, {"content": "约 37.8 倍。"}])
    history = []
    answer = run_agent("每天进步1%，一年后是多少倍？", history, settings=make_settings(kb), client=client)
    assert answer == "约 37.8 倍。" and [bool(r.get("tools")) for r in client.requests] == [True, True, False]
    results = [m["content"] for m in history if m["role"] == "tool"]
    assert "made before" not in results[0] and "made before in this answer" in results[1]
    last = client.requests[2]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] and last[1]["content"].endswith("一年后是多少倍？")
    assert results[0] in last[1]["content"] and "made before" not in last[1]["content"]
    read, edit = tool_call("read_note", file_path="vim.md"), tool_call("append_note", file_path="vim.md", content="x")
    client = StubClient([{"tool_calls": [read]}, {"tool_calls": [edit]}, {"tool_calls": [read]}, {"content": "Done."}])
    history = []
    run_agent("add x to vim.md and show it", history, settings=make_settings(kb, auto_approve=True), client=client)
    assert "made before" not in json.dumps(history)  # the note changed in between: read again


def test_an_empty_reply_is_asked_once_more_without_tools(kb):
    """Qwen2.5-Coder-1.5B read the right note twice, then answered nothing at all."""
    client = StubClient([{"tool_calls": [tool_call("read_note", file_path="vim.md")]}, {"content": ""},
                         {"content": "Press :q! to quit."}])
    history = []
    answer = run_agent("quit vim?", history, settings=make_settings(kb), client=client)
    assert answer == "Press :q! to quit." and answer.complete
    assert [bool(r.get("tools")) for r in client.requests] == [True, True, False]
    assert_valid_history(history) and all(m.get("content") != "" for m in history if m["role"] == "assistant")
    blank = run_agent("quit vim?", [], settings=make_settings(kb), client=StubClient([{"content": "\n"}] * 2))
    assert not blank.complete and "empty answer" in blank.notice  # a line break is no answer either


@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_that_copies_a_tool_result_is_not_shown_and_is_asked_for_again(kb, stream):
    """Qwen2.5-Coder-1.5B searched, then "answered" with the search result word for word (1,398 tokens, 292 s),
    the note's fact not among its lines. A reply that begins with a result's first two lines (the tool's words,
    then what it found) is stopped, never shown, and asked for again with no tools; copied then, it is the answer
    (a list the person asked for). A quoted line of a note, or a one-line result, is an answer at once."""
    settings = make_settings(kb, stream=stream)
    with Notebook(settings) as notebook:
        found, linked = run_tool(notebook, "search_notes", query="quit"), run_tool(notebook, "links", file_path="vim.md")
    search = tool_call("search_notes", query="quit")
    client = StubClient([{"tool_calls": [search]}, {"content": "<tool_response>\n" + found},
                         {"content": "Press :q! to quit (vim.md:9)."}])
    ui, history = Recorder(), []
    answer = run_agent("how do I quit vim?", history, settings=settings, client=client, ui=ui)
    assert answer == "Press :q! to quit (vim.md:9)." and answer.complete and "".join(ui.texts) == answer
    assert [bool(r.get("tools")) for r in client.requests] == [True, True, False]
    assert not any(found.splitlines()[0] in (m["content"] or "") for m in history if m["role"] == "assistant")
    ui = Recorder()
    twice = run_agent("which notes say quit?", [], settings=settings, ui=ui,
                      client=StubClient([{"tool_calls": [search]}, {"content": found}, {"content": found}]))
    assert twice == found and twice.complete and "".join(ui.texts) == found
    ui = Recorder()
    last = run_agent("how do I quit vim?", [], settings=make_settings(kb, stream=stream, max_rounds=2), ui=ui,
                     client=StubClient([{"tool_calls": [search]}, {"content": found}]))  # no request left
    assert not last.complete and "only copied what a tool returned" in last.notice and ui.texts == []
    line = next(line for line in found.splitlines() if line.startswith("  ")).strip()  # a note's line, quoted
    assert "\n" not in linked.strip()
    for answer, call in ((line, search), (linked, tool_call("links", file_path="vim.md"))):
        assert run_agent("?", [], settings=settings, client=StubClient([{"tool_calls": [call]}, {"content": answer}])) \
            == answer.strip()


def test_an_empty_reply_on_the_last_round_is_said_to_be_empty(kb):
    """No request is left to ask again with no tools: the answer says it is empty (it was a crash)."""
    answer = run_agent("hi", [], settings=make_settings(kb, max_rounds=1), client=StubClient([{"content": ""}]))
    assert not answer.complete and "empty answer" in answer.notice
