"""End to end: `python main.py` as a user runs it, against a fake OpenAI-compatible server on 127.0.0.1.

Most tests run main.main in this process (`call_main`, conftest.py): what main.py does with a question, a flag
or piped lines is the same code there, and stdout and stderr are caught at their file descriptors. The tests
about the process itself run it as one (`run_main`): its exit status and its real streams' encodings."""

import subprocess
import sys

import pytest

from conftest import MAIN, assert_clean_failure, child_env, run_main

QUICK_RETRY = {"retry-after-ms": "1"}  # the SDK honours it, so retries take no time


@pytest.mark.parametrize("flags", [[], ["--no-stream"]])
def test_one_shot_searches_reads_and_answers(call_main, fake_llm, kb, flags):
    result = call_main(*flags, "帮我找关于 Python 的笔记", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("According to your note: # Python 学习笔记")  # only the answer on stdout
    assert "→ search_notes" in result.stderr and "→ read_note" in result.stderr
    assert "\033[" not in result.stdout + result.stderr  # no colour when not a terminal
    assert fake_llm.requests[0].get("stream", False) is (flags == [])


def test_write_request_creates_the_note(call_main, fake_llm, kb):
    result = call_main("帮我写一篇 Git 常用命令的笔记", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0, result.stderr
    assert "git status" in (kb / "git-cheatsheet.md").read_text(encoding="utf-8")


def test_piped_lines_are_one_conversation(call_main, fake_llm, kb):
    result = call_main(kb=kb, base_url=fake_llm.base_url, stdin="find vim notes\n\nsummarise it in one line\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("In one line: According to your note: # Vim")
    last_messages = [m.get("content") for m in fake_llm.requests[-1]["messages"]]
    assert "find vim notes" in last_messages


def test_reasoning_goes_to_stderr_and_can_be_hidden(call_main, fake_llm, kb):
    fake_llm.replies = [{"reasoning": "Let me think.", "content": "Answer."}] * 2
    shown = call_main("q", kb=kb, base_url=fake_llm.base_url)
    hidden = call_main("--no-reasoning", "q", kb=kb, base_url=fake_llm.base_url)
    assert shown.stdout == hidden.stdout == "Answer.\n"
    assert "Let me think." in shown.stderr and "Let me think." not in hidden.stderr


def test_server_errors_are_retried_then_answered(call_main, fake_llm, kb):
    fake_llm.replies = [{"status": 503, "headers": QUICK_RETRY}, {"status": 429, "headers": QUICK_RETRY},
                        {"content": "recovered"}]
    result = call_main("q", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0 and result.stdout == "recovered\n"
    assert len(fake_llm.requests) == 3


@pytest.mark.parametrize("reply, expected", [
    ({"status": 500, "headers": QUICK_RETRY}, "HTTP 500"),
    ({"status": 501, "headers": QUICK_RETRY}, "does not serve chat completions (HTTP 501). Check the base URL"),
    ({"status": 401, "message": "invalid key"}, "DEEPSEEK_API_KEY"),
    ({"status": 404, "message": "model not found"}, "MODEL"),
    ({"status": 400, "message": "maximum context length exceeded"}, "do not fit the model's context window"),
])
def test_api_failures_are_one_line_and_exit_1(call_main, fake_llm, kb, reply, expected):
    fake_llm.replies = [reply] * 3
    result = call_main("q", kb=kb, base_url=fake_llm.base_url)
    assert_clean_failure(result, 1)
    assert expected in result.stderr and result.stdout == ""


def test_refused_connection(call_main, kb):
    result = call_main("q", kb=kb, base_url="http://127.0.0.1:9/v1")
    assert_clean_failure(result, 1)
    assert "Could not connect to http://127.0.0.1:9/v1" in result.stderr


def test_stream_dropped_after_text_is_not_replayed(call_main, fake_llm, kb):
    fake_llm.replies = [{"content": "The first part of a long answer", "break_after": 3}, {"content": "AGAIN"}]
    result = call_main("q", kb=kb, base_url=fake_llm.base_url)
    assert_clean_failure(result, 1)
    assert "broke off" in result.stderr and "AGAIN" not in result.stdout and ". What was shown" in result.stderr
    assert result.stdout.startswith("The first part")


def test_stream_dropped_before_text_is_asked_again(call_main, fake_llm, kb):
    fake_llm.replies = [{"content": "lost", "break_after": 1}, {"content": "second try"}]
    result = call_main("q", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0 and result.stdout == "second try\n"


def test_error_event_inside_the_stream(call_main, fake_llm, kb):
    fake_llm.replies = [{"content": "partial answer", "error_event": "server overloaded"}]
    result = call_main("q", kb=kb, base_url=fake_llm.base_url)
    assert_clean_failure(result, 1)
    assert "server overloaded" in result.stderr


def test_piped_chat_goes_on_after_a_failed_turn(call_main, fake_llm, kb):
    fake_llm.replies = [{"status": 400, "message": "bad request"}, {"content": "fine"}]
    result = call_main(kb=kb, base_url=fake_llm.base_url, stdin="first\nsecond\n")
    assert result.returncode == 1 and result.stdout == "fine\n" and "Traceback" not in result.stderr
    assert [m["content"] for m in fake_llm.requests[1]["messages"][1:]] == ["second"]


@pytest.mark.parametrize("args, env, key, expected", [
    (["q"], {}, None, "DEEPSEEK_API_KEY"),
    (["--kb", "/no/such/folder", "q"], {}, "k", "Notes folder not found"),
    (["--max-rounds", "zero", "q"], {}, "k", "MAX_TOOL_ROUNDS"),
    (["q"], {"STREAM": "maybe"}, "k", "STREAM"),
    (["q"], {"THINKING": "sometimes"}, "k", "THINKING"),
])
def test_bad_settings_are_one_line_exit_2(kb, args, env, key, expected):
    """The exit status of the process: run as one."""
    result = run_main(*args, kb=kb, key=key, extra_env=env)
    assert_clean_failure(result, 2)
    assert expected in result.stderr


def test_help_lists_the_flags(call_main, kb):
    result = call_main("-h", kb=kb)
    assert result.returncode == 0
    for flag in ("--kb", "--model", "--base-url", "--max-rounds", "--no-stream"):
        assert flag in result.stdout


@pytest.mark.parametrize("flags", [[], ["--no-stream"]])
def test_thinking_mode_reasoning_is_sent_back_with_tool_calls(call_main, fake_llm, kb, flags):
    fake_llm.thinking_mode = True
    fake_llm.replies = [
        {"reasoning": "Search first.", "tool_calls": [{"name": "search_notes", "arguments": '{"query": "vim"}'}]},
        {"reasoning": "Read it.", "tool_calls": [{"name": "read_note", "arguments": '{"file_path": "vim.md"}'}]},
        {"reasoning": "Done.", "content": "dd deletes a line."},
    ]
    result = call_main(*flags, "how do I delete a line in vim?", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "dd deletes a line.\n"
    sent = [m for m in fake_llm.requests[-1]["messages"] if m.get("tool_calls")]
    assert [m["reasoning_content"] for m in sent] == ["Search first.", "Read it."]


def test_server_that_is_not_an_openai_api(call_main, kb, tmp_path):
    import http.server
    import threading

    class Html(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = b"<html><body>Welcome to nginx</body></html>"
            self.send_response(200)
            self.send_header("content-type", self.server.content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()  # stops at once
    try:
        for content_type in ("text/html", "text/event-stream"):
            server.content_type = content_type
            for flags in ([], ["--no-stream"]):
                result = call_main(*flags, "q", kb=kb, base_url=f"http://127.0.0.1:{server.server_address[1]}/v1")
                assert_clean_failure(result, 1)
                assert "not an OpenAI-compatible answer" in result.stderr, (content_type, flags, result.stderr)
    finally:
        server.shutdown()


def test_odd_input_and_output_encodings_never_crash(fake_llm, kb):
    """The encodings of a process's real streams: run as one."""
    fake_llm.replies = [{"content": "答案: dd"}]
    result = run_main("q", kb=kb, base_url=fake_llm.base_url, extra_env={"PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0 and result.stdout == "??: dd\n"
    env = child_env(DEEPSEEK_API_KEY="k", DEEPSEEK_BASE_URL=fake_llm.base_url, KNOWLEDGE_BASE=str(kb))
    del env["PYTHONIOENCODING"]  # stdin in the locale's own encoding
    fake_llm.replies = [{"content": "ok"}]
    raw = subprocess.run([sys.executable, str(MAIN)], input=b"find \xff vim\n", capture_output=True, env=env,
                         timeout=60)
    assert raw.returncode == 0 and raw.stdout == b"ok\n", raw.stderr
    assert fake_llm.requests[-1]["messages"][-1]["content"] == "find \ufffd vim"


def test_empty_question_and_exit_line(call_main, fake_llm, kb):
    assert_clean_failure(call_main("  ", kb=kb, base_url=fake_llm.base_url), 2)
    fake_llm.replies = [{"content": "one"}, {"content": "two"}]
    result = call_main(kb=kb, base_url=fake_llm.base_url, stdin="first\nexit\nnever sent\n")
    assert result.stdout == "one\n" and len(fake_llm.requests) == 1


def test_slash_commands_work_piped_and_one_shot_even_without_a_key(call_main, fake_llm, kb):
    piped = call_main(kb=kb, base_url=fake_llm.base_url, stdin="/search quits\n/list work\n/read vim.md\n")
    assert piped.returncode == 0, piped.stderr
    assert "vim.md" in piped.stdout and "work/meeting.md" in piped.stdout and "`dd` deletes a line." in piped.stdout
    assert fake_llm.requests == []  # no command reached the model
    one_shot = call_main("/search", "quits", kb=kb, key=None)
    assert one_shot.returncode == 0 and "vim.md" in one_shot.stdout, one_shot.stderr
    no_key_question = call_main(kb=kb, key=None, stdin="/list\nwhat is in my notes?\n")
    assert no_key_question.returncode == 1 and "note" in no_key_question.stdout
    assert "no API key" in no_key_question.stderr and "Traceback" not in no_key_question.stderr
    escape = call_main("/read ../../etc/passwd", kb=kb, key=None)  # a person typed it: no argument name to show
    assert escape.returncode == 1 and escape.stderr == "error: '../../etc/passwd' is outside the notes folder.\n"


def test_piped_undo_reverts_and_tells_the_model_until_a_turn_is_kept(call_main, fake_llm, kb):
    fake_llm.replies = [{"tool_calls": [{"name": "append_note", "arguments": '{"file_path": "vim.md", "content": "x"}'}]},
                        {"content": "appended"}, {"status": 400, "message": "refused"}, {"content": "ok"},
                        {"content": "fine"}]
    before = (kb / "vim.md").read_bytes()
    result = call_main("--yes", kb=kb, base_url=fake_llm.base_url,
                      stdin="add x to vim\n/undo\nrefused?\nwhat now?\nand then?\n")
    assert result.returncode == 1 and "refused" in result.stderr, result.stderr  # the third question failed
    assert (kb / "vim.md").read_bytes() == before and "Undid the append of vim.md" in result.stderr
    asked = [request["messages"][-1]["content"] for request in fake_llm.requests[2:]]
    assert asked[0].startswith("[I ran /undo: Undid the append") and asked[0].endswith("refused?")
    assert asked[1].startswith("[I ran /undo: Undid the append") and asked[1].endswith("what now?")  # still untold
    assert asked[2] == "and then?"  # told once a turn was kept


def test_odd_command_arguments_never_crash(call_main, fake_llm, kb):
    result = call_main(kb=kb, base_url=fake_llm.base_url,
                       stdin="/undo now\n/resume \u00b2\n/resume 99999999999999999999\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr  # each one failed, said why
    assert "Nothing to undo" in result.stderr and "Usage: /resume ID" in result.stderr
    assert "No conversation 99999999999999999999" in result.stderr
    big = call_main("--resume", "99999999999999999999", "q", kb=kb, base_url=fake_llm.base_url)
    assert_clean_failure(big, 2)
