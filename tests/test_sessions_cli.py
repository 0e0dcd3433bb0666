"""Conversations across runs and long sessions, as a person meets them through main.py: run through main.main in
this process (each run starts afresh and finds only what the last one saved), and killed as a process."""

import io
import subprocess
import sys
import threading

import pytest

import fake_server
import main
from conftest import MAIN, assert_clean_failure, child_env

TOPICS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


@pytest.fixture
def big_kb(tmp_path):
    """Ten long notes (English and Chinese), each bigger than one read_note call returns."""
    root = tmp_path / "big"
    root.mkdir()
    for i, topic in enumerate(TOPICS):
        line = (f"- {topic} fact {{n}}: " + "the quick brown fox jumps over the lazy dog " * 2 if i % 3
                else f"- {topic} 事实 {{n}}：" + "敏捷的棕色狐狸跳过了懒狗，然后回家吃饭。" * 2)
        body = "\n".join(line.format(n=n) for n in range(300))
        (root / f"{topic}.md").write_text(f"# {topic} handbook\n\n{body}\n", encoding="utf-8")
    return root


def ask_each(call_main, fake, kb, questions, *args, extra_env=None):
    return call_main(*args, kb=kb, base_url=fake.base_url, stdin="".join(q + "\n" for q in questions),
                     extra_env=extra_env)


def test_hundred_turns_with_big_notes_never_overflow_the_context(call_main, big_kb):
    # The fake counts English ~25% above the client's estimate: without the factor learnt from `usage`
    # a 7000-token budget would overflow its 8000-token window.
    questions = [f"find {TOPICS[i % len(TOPICS)]} notes" for i in range(100)]
    with fake_server.FakeLLM(context_limit=8000) as fake:
        result = ask_each(call_main, fake, big_kb, questions, "-v", extra_env={"CONTEXT_TOKENS": "7000"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("According to your note") == 100
    assert fake.rejected == 0 and fake.max_prompt_tokens <= 8000
    last = fake.requests[-1]["messages"]
    assert last[0]["role"] == "system" and any(m.get("content") == questions[-1] for m in last)
    # it was trimming, not luck: the whole conversation is many times the limit
    assert len(fake.requests) == 300 and len(last) < 100
    assert any("[… elided, " in str(m.get("content")) for r in fake.requests for m in r["messages"])


def test_a_budget_too_big_for_the_model_costs_one_refusal_not_the_conversation(call_main, big_kb):
    """CONTEXT_TOKENS far above the server's window: the first refusal teaches the window, then all fits."""
    questions = [f"find {topic} notes" for topic in TOPICS[:8]]
    with fake_server.FakeLLM(context_limit=8000) as fake:
        result = ask_each(call_main, fake, big_kb, questions, extra_env={"CONTEXT_TOKENS": "1000000"})
    assert result.returncode == 0, result.stderr[-1000:]
    assert result.stdout.count("According to your note") == 8
    assert fake.rejected == 1  # the limit is real, and is hit once


def test_continue_after_a_restart_carries_the_earlier_turns(call_main, fake_llm, kb):
    first = call_main("find vim notes", kb=kb, base_url=fake_llm.base_url)
    assert first.returncode == 0, first.stderr
    fake_llm.requests.clear()

    again = call_main("--continue", "summarise it in one line", kb=kb, base_url=fake_llm.base_url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("In one line: According to your note: # Vim")
    sent = [m.get("content") for m in fake_llm.requests[0]["messages"]]
    assert "find vim notes" in sent and "summarise it in one line" in sent
    assert "Continuing conversation 1" in again.stderr


def test_list_sessions_and_resume_by_id(call_main, fake_llm, kb):
    call_main("find vim notes", kb=kb, base_url=fake_llm.base_url)
    call_main("帮我找关于 Python 的笔记", kb=kb, base_url=fake_llm.base_url)
    listed = call_main("--list-sessions", kb=kb, key=None)
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert len(lines) == 2 and "帮我找关于 Python 的笔记" in lines[0] and "find vim notes" in lines[1]
    assert lines[1].split()[0] == "1" and "msgs" in lines[1]

    fake_llm.requests.clear()
    resumed = call_main("--resume", "1", "summarise it in one line", kb=kb, base_url=fake_llm.base_url)
    assert resumed.stdout.startswith("In one line: According to your note: # Vim")


def test_resume_of_an_unknown_conversation_is_one_line(call_main, kb):
    result = call_main("--resume", "42", "q", kb=kb)
    assert_clean_failure(result, 2)
    assert "No conversation 42" in result.stderr


def test_verbose_one_shot_reports_usage_on_stderr(call_main, fake_llm, kb):
    result = call_main("-v", "find vim notes", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0
    assert "usage: " in result.stderr and "prompt" in result.stderr and "usage" not in result.stdout


def test_a_damaged_history_file_does_not_stop_the_program(call_main, fake_llm, kb, tmp_path):
    data = tmp_path / "data" / "knowledge-agent"
    data.mkdir(parents=True)
    (data / "sessions.db").write_bytes(b"\x00garbage" * 1000)
    result = call_main("find vim notes", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0 and "moved it to sessions.db.damaged-" in result.stderr
    assert call_main("--list-sessions", kb=kb).stdout.count("\n") == 1


# -- the REPL, driven in-process through input() -------------------------------------------------------
class TypedAtATerminal(io.StringIO):
    def isatty(self):
        return True


def run_repl(monkeypatch, capsys, lines, *args):
    """Type `lines` into `python main.py ARGS` as if at a terminal; returns (stdout, stderr)."""
    typed = iter(lines)

    def fake_input(prompt=""):
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    monkeypatch.setattr(sys, "stdin", TypedAtATerminal())
    assert main.main(list(args)) == 0
    return capsys.readouterr()


@pytest.fixture
def chat_env(monkeypatch, kb, fake_llm):
    monkeypatch.setenv("KNOWLEDGE_BASE", str(kb))
    monkeypatch.setenv("DEEPSEEK_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
    monkeypatch.setenv("SHOW_REASONING", "0")
    return fake_llm


def test_chat_quit_continue_and_ask_about_it(chat_env, monkeypatch, capsys):
    out, err = run_repl(monkeypatch, capsys, ["find vim notes", "/exit"])
    assert "According to your note: # Vim" in out and "--continue" in err

    chat_env.requests.clear()
    out, err = run_repl(monkeypatch, capsys, ["/history", "summarise it in one line"], "--continue")
    assert "[1] you: find vim notes" in err and "→ search_notes" in err
    assert "In one line: According to your note: # Vim" in out
    assert "find vim notes" in [m.get("content") for m in chat_env.requests[0]["messages"]]


def test_new_sessions_and_usage_commands(chat_env, monkeypatch, capsys):
    out, err = run_repl(monkeypatch, capsys, ["find vim notes", "/usage", "/new", "/history",
                                              "find python notes", "/sessions"])
    assert "last answer :" in err and "3 API calls" in err and "of 88,000 tokens" in err
    assert "Nothing yet in this conversation." in err
    assert "*    2" in err and "find vim notes" in err  # the listing marks the current conversation


def test_note_commands_work_without_an_api_key(monkeypatch, capsys, kb):
    monkeypatch.setenv("KNOWLEDGE_BASE", str(kb))
    out, err = run_repl(monkeypatch, capsys, ["what is in my notes?", "/search Vim", "/list", "/read vim.md",
                                              "/read", "/serch vim", "/hist", "/frobnicate", "/tools", "/help"])
    assert "Chat is off: no API key" in err and "DEEPSEEK_API_KEY" in err
    assert "vim.md" in out and "`dd` deletes a line." in out and "work/meeting.md" in out
    assert "Usage: /read PATH" in err
    assert "Unknown command /serch. Did you mean /search?" in err
    assert "Unknown command /hist. Did you mean /history?" in err
    assert "Unknown command /frobnicate. /help" in err
    assert "search_notes" in err and "/resume ID" in err


def test_conversations_go_where_ka_data_dir_says(call_main, fake_llm, kb, tmp_path):
    result = call_main("find vim notes", kb=kb, base_url=fake_llm.base_url,
                      extra_env={"KA_DATA_DIR": str(tmp_path / "mine")})
    assert result.returncode == 0
    assert (tmp_path / "mine" / "sessions.db").is_file()
    assert not (tmp_path / "data" / "knowledge-agent" / "sessions.db").exists()


def test_killed_while_the_model_thinks_keeps_the_question_and_the_tool_results(call_main, kb, tmp_path):
    asked, release = threading.Event(), threading.Event()

    def slow_after_tools(request):
        if request["messages"][-1]["role"] == "tool" and fake_server.unfenced(request["messages"][-1]["content"]).startswith("vim.md"):
            asked.set()  # the model is "thinking" about the note it read: kill the program now
            release.wait(30)
        return fake_server.demo_brain(request)

    with fake_server.FakeLLM(responder=slow_after_tools) as fake:
        env = child_env(DEEPSEEK_API_KEY="k", DEEPSEEK_BASE_URL=fake.base_url, KNOWLEDGE_BASE=str(kb))
        proc = subprocess.Popen([sys.executable, str(MAIN), "find vim notes"], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert asked.wait(60)
            proc.kill()
            proc.wait()
        finally:
            release.set()
        again = call_main("--continue", "summarise it in one line", kb=kb, base_url=fake.base_url)
    roles = [m["role"] for m in fake.requests[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
    assert "`dd` deletes a line." in fake.requests[-1]["messages"][5]["content"]  # the note read before the kill
    assert again.returncode == 0
