"""The session store: conversations survive restarts, kills, a second REPL and a damaged file."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import sessions
from sessions import SessionStore

ROOT = Path(__file__).resolve().parent.parent

TOOL_TURN = [
    {"role": "user", "content": "我的笔记里关于 Rust 的内容有哪些？"},
    {"role": "assistant", "content": "", "reasoning_content": "",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "search_notes", "arguments": '{"query": "Rust"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "rust/ownership.md: 所有权…"},
    {"role": "assistant", "content": "你有一篇关于所有权的笔记。", "reasoning_content": "找到了一篇"},
]


def store_in(tmp_path, warnings=None):
    return SessionStore(tmp_path / "sessions.db", warn=(warnings.append if warnings is not None else print))


def child(code: str, data_dir: Path, **kwargs) -> subprocess.Popen:
    """A separate Python process using the store, as a second REPL or a killed one would."""
    env = {**os.environ, "KA_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def test_messages_come_back_exactly_after_reopening(tmp_path):
    store = store_in(tmp_path)
    sid = store.new_session(kb=tmp_path)
    for message in TOOL_TURN:
        assert store.add_message(sid, message)
    store.close()

    reopened = store_in(tmp_path)
    assert reopened.load_messages(sid) == TOOL_TURN
    assert reopened.latest_session_id() == sid


def test_sdk_message_objects_are_stored_as_plain_dicts(tmp_path):
    from openai.types.chat import ChatCompletionMessage
    store = store_in(tmp_path)
    sid = store.new_session()
    reply = ChatCompletionMessage(role="assistant", content="hi", tool_calls=[
        {"id": "c9", "type": "function", "function": {"name": "list_notes", "arguments": "{}"}}])
    store.add_message(sid, reply)
    (loaded,) = store.load_messages(sid)
    assert loaded["tool_calls"][0]["id"] == "c9" and loaded["content"] == "hi"
    assert "refusal" not in loaded  # None fields are not carried into the history


def test_listing_shows_first_question_count_and_newest_first(tmp_path):
    store = store_in(tmp_path)
    first = store.new_session()
    for message in TOOL_TURN:
        store.add_message(first, message)
    store.new_session()  # opened and left without a question: not worth listing
    second = store.new_session()
    store.add_message(second, {"role": "user", "content": "  what did we\n talk about? "})

    listed = store.list_sessions()
    assert [s.id for s in listed] == [second, first]
    assert listed[0].title == "what did we talk about?"
    assert listed[1].title.startswith("我的笔记里") and listed[1].messages == 4
    assert store.latest_session_id() == second
    line = sessions.format_session_line(listed[1])
    assert str(first) in line and "4 msgs" in line


def test_usage_adds_up_per_session(tmp_path):
    store = store_in(tmp_path)
    a, b = store.new_session(), store.new_session()
    store.record_usage(a, 1200, 80)
    store.record_usage(a, 1500, 20)
    store.record_usage(b, 7, 3)
    info = store_in(tmp_path).session_info(a)
    assert (info.prompt_tokens, info.completion_tokens) == (2700, 100)


def test_default_location_follows_env(tmp_path, monkeypatch):
    monkeypatch.delenv("KA_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert sessions.default_db_path() == tmp_path / "xdg" / "knowledge-agent" / "sessions.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert sessions.default_db_path() == tmp_path / "home" / ".local/share/knowledge-agent/sessions.db"
    monkeypatch.setenv("KA_DATA_DIR", str(tmp_path / "mine"))
    assert sessions.default_db_path() == tmp_path / "mine" / "sessions.db"


def test_kill_between_two_messages_loses_nothing_committed(tmp_path):
    proc = child(
        "import sys, sessions\n"
        "s = sessions.SessionStore()\n"
        "sid = s.new_session()\n"
        "s.add_message(sid, {'role': 'user', 'content': 'first question'})\n"
        "print(sid, flush=True)\n"
        "sys.stdin.readline()\n"  # parked here, between two messages, until killed
        "s.add_message(sid, {'role': 'user', 'content': 'never sent'})\n", tmp_path)
    sid = int(proc.stdout.readline())
    proc.kill()  # SIGKILL: no handler, no cleanup, as a crash or the OOM killer
    proc.wait()
    assert store_in(tmp_path).load_messages(sid) == [{"role": "user", "content": "first question"}]


def test_kill_while_writing_keeps_every_reported_message(tmp_path):
    proc = child(
        "import sessions\n"
        "s = sessions.SessionStore()\n"
        "sid = s.new_session()\n"
        "i = 0\n"
        "while True:\n"
        "    s.add_message(sid, {'role': 'tool', 'tool_call_id': str(i), 'content': 'x' * 5000})\n"
        "    print(sid, i, flush=True)\n"
        "    i += 1\n", tmp_path)
    for _ in range(40):
        sid, last = map(int, proc.stdout.readline().split())
    proc.kill()  # most likely in the middle of the next write
    proc.wait()
    ids = [int(m["tool_call_id"]) for m in store_in(tmp_path).load_messages(sid)]
    assert ids == list(range(len(ids))) and len(ids) > last


def test_two_processes_writing_at_once_both_keep_everything(tmp_path):
    code = ("import sys, sessions\n"
            "s = sessions.SessionStore()\n"
            "sid = s.new_session()\n"
            "print(sid, flush=True)\n"
            "sys.stdin.readline()\n"
            "for i in range(300):\n"
            "    s.add_message(sid, {'role': 'user', 'content': f'message {i}'})\n"
            "    s.record_usage(sid, 10, 1)\n")
    procs = [child(code, tmp_path), child(code, tmp_path)]
    sids = [int(p.stdout.readline()) for p in procs]
    for p in procs:  # both start writing only when both are ready
        p.stdin.write("go\n")
        p.stdin.flush()
    errors = [p.communicate()[1] for p in procs]
    assert errors == ["", ""] and [p.returncode for p in procs] == [0, 0]
    store = store_in(tmp_path)
    for sid in sids:
        assert [m["content"] for m in store.load_messages(sid)] == [f"message {i}" for i in range(300)]
        assert store.session_info(sid).prompt_tokens == 3000


@pytest.mark.parametrize("damage", ["garbage", "header", "inner page", "directory"])
def test_damaged_database_is_moved_aside_and_a_fresh_one_started(tmp_path, damage):
    db = tmp_path / "sessions.db"
    if damage == "garbage":
        db.write_bytes(os.urandom(8192))
    elif damage in ("header", "inner page"):
        store = store_in(tmp_path)
        sid = store.new_session()
        for i in range(50):
            store.add_message(sid, {"role": "tool", "tool_call_id": str(i), "content": "x" * 3000})
        store.close()
        data = bytearray(db.read_bytes())
        if damage == "header":
            data[:16] = b"not sqlite here!"
        else:  # a b-tree page in the middle, as a bad sector or a half-synced copy leaves it
            page = len(data) // 4096 // 2 * 4096
            data[page:page + 64] = b"\xff" * 64
        db.write_bytes(bytes(data))
    else:
        db.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())

    warnings = []
    store = store_in(tmp_path, warnings)
    assert len(warnings) == 1 and "moved it to sessions.db.damaged-" in warnings[0]
    assert "\n" not in warnings[0]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("sessions.db.damaged-")]
    assert len(aside) == 1 and len(before) == 1  # the damaged file is kept, not deleted
    sid = store.new_session()
    assert store.add_message(sid, {"role": "user", "content": "new"})
    assert store_in(tmp_path).load_messages(sid) == [{"role": "user", "content": "new"}]


def test_unusable_folder_means_an_unsaved_conversation_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the data folder should be")
    warnings = []
    store = SessionStore(blocker / "sub" / "sessions.db", warn=warnings.append)
    assert not store.persistent and "will not be saved" in warnings[0]
    sid = store.new_session()
    store.add_message(sid, {"role": "user", "content": "still works"})
    assert store.load_messages(sid) == [{"role": "user", "content": "still works"}]


def test_failed_write_is_reported_once_and_does_not_raise(tmp_path):
    warnings = []
    store = store_in(tmp_path, warnings)
    sid = store.new_session()
    store.conn.execute("PRAGMA query_only=ON")  # every write now fails, as on a full disk
    assert store.add_message(sid, {"role": "user", "content": "a"}) is None
    assert store.add_message(sid, {"role": "user", "content": "b"}) is None
    store.record_usage(sid, 1, 1)
    assert len(warnings) == 1 and "goes on unsaved" in warnings[0]


def test_stored_body_is_the_message_and_nothing_else(tmp_path):
    store = store_in(tmp_path)
    sid = store.new_session()
    store.add_message(sid, TOOL_TURN[1])
    (body,) = sqlite3.connect(tmp_path / "sessions.db").execute("SELECT body FROM messages").fetchone()
    assert json.loads(body) == TOOL_TURN[1]


def test_a_history_from_a_newer_version_is_left_alone(tmp_path):
    store = store_in(tmp_path)
    store.add_message(store.new_session(), {"role": "user", "content": "kept"})
    store.conn.execute("PRAGMA user_version=99")
    store.close()
    warnings = []
    newer = store_in(tmp_path, warnings)
    assert not newer.persistent and "newer version" in warnings[0]
    assert [p.name for p in tmp_path.iterdir()] == ["sessions.db"]  # not moved, not changed
