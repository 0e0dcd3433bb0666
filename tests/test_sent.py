"""/sent: what left this machine, recorded as it happened (each API call's endpoint, model, tokens, cache hits and
time in sessions.db) and reported per endpoint with the notes' lines and the cost, through run_agent with the stub
client and through main.py against the fake server."""

import json
import sqlite3
import time
from calendar import timegm

import pytest

import sent
import sessions
from agent import run_agent
from conftest import Recorder, StubClient, Terminal, call, child_env, make_settings, posix_only



def conversation_with(settings, replies, tmp_path, conversation=None):
    conversation = conversation or sessions.Conversation(sessions.SessionStore(tmp_path / "sessions.db"), settings.kb)
    conversation.begin_turn("q")
    run_agent("q", conversation.history, settings, StubClient(replies), Recorder())
    conversation.end_turn()
    return conversation


def report(conversation, everything=False) -> str:
    return sent.report(conversation.store, conversation.session_id, conversation.kb, everything)


def test_each_call_is_recorded_with_its_endpoint_model_tokens_and_cache_hits(kb, tmp_path):
    settings = make_settings(kb, base_url="https://user:secret@api.deepseek.com/?k=1", model="deepseek-flash")
    conversation = conversation_with(settings, [
        {**call("read_note", file_path="python.md"), "prompt_tokens": 1000, "cache_hit_tokens": 0},
        {"content": "Done (python.md:3).", "prompt_tokens": 1200, "cache_hit_tokens": 1000}], tmp_path)
    rows = conversation.store.conn.execute("SELECT endpoint, model, reported, prompt_tokens, cache_hit_tokens "
                                           "FROM calls ORDER BY id").fetchall()
    assert rows == [("https://api.deepseek.com/", "deepseek-flash", 1, 1000, 0),
                    ("https://api.deepseek.com/", "deepseek-flash", 1, 1200, 1000)]  # never the credentials
    text = report(conversation)
    assert text.startswith(f"What conversation {conversation.session_id} sent, and where:\n"
                           "api.deepseek.com · deepseek-flash · 2 API calls\n"
                           "  tokens: 2,200 sent (1,000 cache hits), ")
    assert "  notes' text sent:\n    python.md  lines 1-4\n" in text
    assert "estimated cost: $" in text and "api-docs.deepseek.com/quick_start/pricing, November 2026" in text


def test_each_call_is_priced_at_its_own_hour_cache_hits_apart(kb, tmp_path):
    settings = make_settings(kb, base_url="https://api.deepseek.com", model="deepseek-flash")
    usage = {"prompt_tokens": 1_000_000, "cache_hit_tokens": 400_000}
    conversation = conversation_with(settings, [{**call("list_notes"), **usage}, {"content": "x" * 399_996, **usage}],
                                     tmp_path)  # 100,000 completion tokens (the fake counts 4 characters a token)
    off_peak, peak = timegm((2026, 11, 3, 12, 0, 0)), timegm((2026, 11, 3, 2, 30, 0))  # 02:30 UTC is peak
    assert sent.price("https://api.deepseek.com", "deepseek-flash", off_peak, 1_000_000, 400_000, 0) == \
        pytest.approx((400_000 * 0.003 / 1e6, 600_000 * 0.15 / 1e6, 0))
    conn = conversation.store.conn
    first, second = [row[0] for row in conn.execute("SELECT id FROM calls ORDER BY id")]
    conn.execute("UPDATE calls SET time = ? WHERE id = ?", (off_peak, first))
    conn.execute("UPDATE calls SET time = ? WHERE id = ?", (peak, second))
    # off-peak: 0.0012 + 0.09 (no output); peak: 0.0024 + 0.18 + 0.12 (100,000 output at $1.20)
    assert ("  estimated cost: $0.3936 (cache hits $0.0036, cache misses $0.2700, output $0.1200; 1 of 2 at "
            "peak-hour prices)") in report(conversation)


def test_unknown_prices_local_servers_and_unreported_usage_are_said_so(kb, tmp_path):
    openai = make_settings(kb, base_url="https://api.openai.com/v1", model="gpt-5.4-mini")
    conversation = conversation_with(openai, [{**call("read_note", file_path="python.md"), "usage": False},
                                              {"content": "hi", "prompt_tokens": 50, "cached_tokens": 20}], tmp_path)
    local = make_settings(kb, base_url="http://127.0.0.1:9/v1", model="qwen3:8b")
    conversation_with(local, [call("read_note", file_path="vim.md"), {"content": "ok", "usage": False}], tmp_path,
                      conversation)
    text = report(conversation)
    assert ("api.openai.com · gpt-5.4-mini · 2 API calls\n  tokens: 50 sent (20 cache hits), 1 received (1 call "
            "reported none)\n  cost: no published prices known (tokens only)\n  notes' text sent:\n"
            "    python.md  lines 1-4\n127.0.0.1:9") in text
    assert "127.0.0.1:9 · qwen3:8b · 2 API calls: on this machine/network, nothing left the machine\n" in text
    assert "  tokens: " in text.split("127.0.0.1:9")[1] and " received (1 call reported none)\n  notes'" in text
    # what the conversation carried went to the endpoint it went on with; what was read there, there only
    assert "  notes' text in the requests:\n    python.md  lines 1-4\n    vim.md  lines 1-4\n" in text
    assert text.count("vim.md") == 1


def test_an_older_sessions_file_is_upgraded_and_its_conversations_reported(kb, tmp_path):
    path = tmp_path / "sessions.db"
    old = sqlite3.connect(path)
    for statement in sessions.SCHEMA[:3]:  # version 1: no calls table
        old.execute(statement)
    body = json.dumps({"role": "tool", "tool_call_id": "c1", "content": "vim.md (lines 1-4 of 4)\n# Vim\n"})
    call_body = json.dumps({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_note", "arguments": "{}"}}]})
    old.execute("INSERT INTO sessions VALUES (1, 0, ?, 'old', 900, 30)", (str(kb),))
    old.executemany("INSERT INTO messages (session_id, created, role, body) VALUES (1, 0, ?, ?)",
                    [("user", '{"role": "user", "content": "old"}'), ("assistant", call_body), ("tool", body)])
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()
    store = sessions.SessionStore(path)
    assert store.conn.execute("PRAGMA user_version").fetchone()[0] == sessions.SCHEMA_VERSION == 3
    conversation = sessions.Conversation(store, kb)
    assert conversation.resume(1) and len(conversation.history) == 3
    assert report(conversation) == (
        "What conversation 1 sent, and where:\n"
        "API calls made before knowledge-agent recorded where each one went:\n"
        "  tokens: 900 sent, 30 received\n"
        "  notes' text sent:\n    and 1 tool result that may hold note text not listed by line (a shell command's "
        "output, or one saved by an older version)\n"
        "In all: 900 tokens sent, 30 received.\n"
        "Each request also carried the instructions, your questions, the answers and the tool calls so far.")


def test_sent_one_shot_after_continue_and_for_every_conversation(call_main, fake_llm, kb):
    assert call_main("find my python notes", kb=kb, base_url=fake_llm.base_url).returncode == 0
    result = call_main("--continue", "/sent", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0, result.stderr
    host = fake_llm.base_url.split("/")[2]
    assert result.stdout.splitlines()[1:5] == [
        f"{host} · deepseek-flash · 3 API calls: on this machine/network, nothing left the machine",
        result.stdout.splitlines()[2], "  notes' text in the requests:", "    python.md  lines 1-4"]
    assert result.stdout.splitlines()[2].startswith("  tokens: ")
    assert call_main("find my vim notes", kb=kb, base_url=fake_llm.base_url).returncode == 0
    this = call_main("--continue", "/sent", kb=kb, base_url=fake_llm.base_url).stdout
    everything = call_main("--continue", "/sent all", kb=kb, base_url=fake_llm.base_url).stdout
    assert "vim.md" in this and "python.md" not in this
    assert everything.startswith(f"What every conversation about {kb} (2) sent, and where:")
    assert "    python.md  lines 1-4\n    vim.md  lines 1-4\n" in everything
    wrong = call_main("/sent some", kb=kb)
    assert wrong.returncode == 1 and wrong.stderr.strip() == "error: Usage: /sent [all]"
    fresh = call_main("/sent", kb=kb)
    assert fresh.stdout == "Nothing has been sent in this conversation yet.\n"


@posix_only
def test_sent_in_the_chat(kb, fake_llm, tmp_path):
    env = child_env(DEEPSEEK_API_KEY="x", DEEPSEEK_BASE_URL=fake_llm.base_url, KNOWLEDGE_BASE=str(kb), NO_COLOR="1",
                    XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"), TERM="xterm")
    chat = Terminal(env)
    chat.expect("\n> ")
    chat.send(b"find my vim notes\r")
    chat.expect("\n> ", count=2)
    chat.send(b"/sent\r")
    screen = chat.expect("\n> ", count=3)
    assert "3 API calls: on this machine/network, nothing left the machine" in screen
    assert "    vim.md  lines 1-4" in screen
    chat.send(b"\x04")
    assert chat.close() == 0


def test_time_is_kept_per_call(kb, tmp_path):
    before = time.time()
    conversation = conversation_with(make_settings(kb), [{"content": "hi"}], tmp_path)
    (when,) = conversation.store.conn.execute("SELECT time FROM calls").fetchone()
    assert before <= when <= time.time()


def test_the_page_shows_the_same_report(make_web, fake_llm):
    page = make_web()
    assert page.get("/api/sent")["text"] == "Nothing has been sent in this conversation yet."
    page.until("done", page.ask("find my vim notes"))
    text = page.get("/api/sent")["text"]
    assert "3 API calls: on this machine/network, nothing left the machine" in text and "    vim.md  lines 1-4" in text
    assert page.get("/api/sent?all=1")["text"].startswith("What every conversation about ")
