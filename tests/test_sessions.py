"""The session store: conversations survive restarts, kills, a second process and a damaged file."""

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import db
import sessions
from conftest import ROOT, child_env
from replies import Usage
from sessions import Conversation, SessionStore

TOOL_TURN = [
    {"role": "user", "content": "我的笔记里关于 Rust 的内容有哪些？"},
    {"role": "assistant", "content": "", "reasoning_content": "",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "search_notes", "arguments": '{"query": "Rust"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "rust/ownership.md: 所有权…"},
    {"role": "assistant", "content": "你有一篇关于所有权的笔记。", "reasoning_content": "找到了一篇"},
]


def hear(warnings: list) -> None:
    """Collect the notices meant for the person (db.notice) in `warnings`."""
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("knowledge-agent").handlers[:] = [handler]


def store_in(folder: Path, warnings: list | None = None) -> SessionStore:
    if warnings is not None:
        hear(warnings)
    return SessionStore(folder / "sessions.db")


def talk(store: SessionStore, messages: list[dict], kb: Path | None = None) -> Conversation:
    """A conversation that received `messages` one at a time, as the agent hands them over."""
    conversation = Conversation(store, kb)
    for message in messages:
        conversation.history.append(message)
        conversation.sync(conversation.history)
    return conversation


def resumed(folder: Path, session_id: int, warnings: list | None = None) -> list[dict]:
    conversation = Conversation(store_in(folder, warnings))
    assert conversation.resume(session_id)
    return conversation.history


def child(code: str, *args: str) -> subprocess.Popen:
    """A separate Python process using the store, as a second REPL or a killed one would."""
    return subprocess.Popen([sys.executable, "-c", code, *args], env=child_env(PYTHONPATH=str(ROOT)),
                            text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def saved_conversations(folder: Path) -> list:
    return store_in(folder).list_sessions()


# -- a conversation kept ---------------------------------------------------------------------------------
def test_messages_come_back_exactly_after_reopening(tmp_path):
    conversation = talk(store_in(tmp_path), TOOL_TURN)
    conversation.store.conn.close()
    assert resumed(tmp_path, conversation.session_id) == TOOL_TURN
    assert store_in(tmp_path).latest_session_id() == conversation.session_id


def test_stored_body_is_the_message_and_nothing_else(tmp_path):
    talk(store_in(tmp_path), TOOL_TURN[:2])
    bodies = sqlite3.connect(tmp_path / "sessions.db").execute("SELECT body FROM messages ORDER BY id").fetchall()
    assert [json.loads(body) for (body,) in bodies] == TOOL_TURN[:2]


def test_sdk_message_objects_are_stored_as_plain_dicts(tmp_path):
    from openai.types.chat import ChatCompletionMessage
    reply = ChatCompletionMessage(role="assistant", content="hi", tool_calls=[
        {"id": "c9", "type": "function", "function": {"name": "list_notes", "arguments": "{}"}}])
    conversation = talk(store_in(tmp_path), [{"role": "user", "content": "list"}, reply])
    loaded = store_in(tmp_path).load_messages(conversation.session_id)[1]
    assert loaded["tool_calls"][0]["id"] == "c9" and loaded["content"] == "hi"
    assert "refusal" not in loaded  # None fields are not carried into the history


def test_a_dropped_turn_stays_in_the_file_but_is_never_loaded(tmp_path):
    conversation = talk(store_in(tmp_path), TOOL_TURN)
    conversation.history.append({"role": "user", "content": "a question the API refused"})
    conversation.sync(conversation.history)
    del conversation.history[-1]  # the agent abandons the turn
    conversation.sync(conversation.history)
    conversation.history.append({"role": "user", "content": "next question"})
    conversation.sync(conversation.history)
    assert resumed(tmp_path, conversation.session_id) == TOOL_TURN + [{"role": "user", "content": "next question"}]
    raw = sqlite3.connect(tmp_path / "sessions.db").execute("SELECT count(*) FROM messages").fetchone()[0]
    assert raw == len(TOOL_TURN) + 2
    assert saved_conversations(tmp_path)[0].messages == len(TOOL_TURN) + 1


def test_a_conversation_without_messages_leaves_nothing_behind(tmp_path):
    store = store_in(tmp_path)
    Conversation(store, tmp_path).sync([])
    assert store.list_sessions() == [] and store.latest_session_id() is None
    assert sqlite3.connect(tmp_path / "sessions.db").execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_listing_shows_first_question_count_and_newest_first(tmp_path):
    store = store_in(tmp_path)
    first = talk(store, TOOL_TURN).session_id
    second = talk(store, [{"role": "user", "content": "  what did we\n talk about? "}]).session_id
    listed = store.list_sessions()
    assert [s.id for s in listed] == [second, first]
    assert listed[0].title == "what did we talk about?"
    assert listed[1].title.startswith("我的笔记里") and listed[1].messages == 4
    assert store.latest_session_id() == second
    line = sessions.format_session_line(listed[1])
    assert line.split()[0] == str(first) and "4 msgs" in line and "我的笔记里" in line


def test_each_notes_folder_has_its_own_latest_conversation(tmp_path):
    store = store_in(tmp_path)
    work, home = tmp_path / "work-notes", tmp_path / "home-notes"
    at_work = talk(store, [{"role": "user", "content": "meeting notes?"}], kb=work).session_id
    at_home = talk(store, [{"role": "user", "content": "recipes?"}], kb=home).session_id
    assert store.latest_session_id() == at_home
    assert store.latest_session_id(work) == at_work and store.latest_session_id(tmp_path / "other") is None
    assert [s.id for s in store.list_sessions(kb=work)] == [at_work]
    (info,) = store.list_sessions(kb=home)
    assert info.kb == str(home)
    assert str(home) in sessions.format_session_line(info, show_kb=True)
    assert str(home) not in sessions.format_session_line(info)


def test_usage_adds_up_per_turn_run_and_session(tmp_path):
    from openai.types import CompletionUsage

    conversation = talk(store_in(tmp_path), TOOL_TURN[:1])  # DeepSeek's cache hits, then OpenAI's
    conversation.add_usage(Usage.of(CompletionUsage.model_validate(
        {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280, "prompt_cache_hit_tokens": 9})))
    conversation.begin_turn()
    conversation.add_usage(Usage.of(CompletionUsage(prompt_tokens=1500, completion_tokens=20, total_tokens=1520,
                                                    prompt_tokens_details={"cached_tokens": 3})))
    conversation.add_usage(Usage.of(None))
    assert conversation.turn_usage == Usage(1500, 20, 3, calls=2, unreported=1)
    assert str(conversation.turn_usage) == "1,500 prompt + 20 completion tokens (1 of 2 API calls not reported)"
    assert conversation.run_usage == Usage(2700, 100, 12, calls=3, unreported=1)
    other = talk(conversation.store, TOOL_TURN[:1])
    other.add_usage(Usage(7, 3, calls=1))
    later = Conversation(store_in(tmp_path))
    later.resume(conversation.session_id)
    assert later.session_usage() == Usage(2700, 100) and str(later.run_usage) == "no API call was answered"



def test_after_an_undo_each_question_tells_the_model_until_a_turn_is_kept(tmp_path, kb):
    import versions
    from conftest import make_notebook
    conversation, notebook = Conversation(store_in(tmp_path), kb), make_notebook(kb)
    assert not notebook.undo()[1] and conversation.begin_turn("q0") == "q0"  # nothing undone: nothing to tell
    notebook.apply(versions.plan_text(kb, "vim.md", "# Vim\n", "edit"))
    message, undone = notebook.undo()
    conversation.undone(message)
    assert undone and conversation.begin_turn("q1") == f"[I ran /undo: {message}]\nq1"
    conversation.end_turn()  # the turn was dropped (a refused request): the model has still not heard it
    assert conversation.begin_turn("q2") == f"[I ran /undo: {message}]\nq2"
    conversation.history.append({"role": "user", "content": "q2"})
    conversation.end_turn()
    assert conversation.begin_turn("q3") == "q3"


# -- kills and other processes ---------------------------------------------------------------------------
WRITER = """
import logging, sys
from pathlib import Path
import sessions
from replies import Usage
logging.basicConfig(stream=sys.stdout, format="%(message)s")  # notices on stdout, for the test to read
conversation = sessions.Conversation(sessions.SessionStore(Path(sys.argv[1])))
def say(message):
    conversation.history.append(message)
    conversation.sync(conversation.history)
"""


def test_kill_between_two_messages_loses_nothing_committed(tmp_path):
    proc = child(WRITER + "say({'role': 'user', 'content': 'first question'})\n"
                 "print(conversation.session_id, flush=True)\n"
                 "sys.stdin.readline()\n"  # parked here, between two messages, until killed
                 "say({'role': 'user', 'content': 'never sent'})\n", str(tmp_path / "sessions.db"))
    sid = int(proc.stdout.readline())
    proc.kill()  # SIGKILL: no handler, no cleanup, as a crash or the OOM killer
    proc.wait()
    assert store_in(tmp_path).load_messages(sid) == [{"role": "user", "content": "first question"}]


def test_kill_while_writing_keeps_every_reported_message(tmp_path):
    proc = child(WRITER + "say({'role': 'user', 'content': 'go'})\n"
                 "i = 0\n"
                 "while True:\n"
                 "    say({'role': 'tool', 'tool_call_id': str(i), 'content': 'x' * 5000})\n"
                 "    print(conversation.session_id, i, flush=True)\n"
                 "    i += 1\n", str(tmp_path / "sessions.db"))
    for _ in range(40):
        sid, last = map(int, proc.stdout.readline().split())
    proc.kill()  # most likely in the middle of the next write
    proc.wait()
    ids = [int(m["tool_call_id"]) for m in store_in(tmp_path).load_messages(sid)[1:]]
    assert ids == list(range(len(ids))) and len(ids) > last


def test_two_processes_writing_at_once_both_keep_everything(tmp_path):
    code = WRITER + ("sys.stdin.readline()\n"
                     "for i in range(300):\n"
                     "    say({'role': 'user', 'content': f'message {i}'})\n"
                     "    conversation.add_usage(Usage(10, 1, calls=1))\n"
                     "print(conversation.session_id)\n")
    procs = [child(code, str(tmp_path / "sessions.db")) for _ in range(2)]
    for p in procs:  # both start writing together
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [p.communicate() for p in procs]
    assert [err for _, err in results] == ["", ""] and [p.returncode for p in procs] == [0, 0]
    store = store_in(tmp_path)
    for out, _ in results:
        sid = int(out)
        assert [m["content"] for m in store.load_messages(sid)] == [f"message {i}" for i in range(300)]
        assert store.session_info(sid).prompt_tokens == 3000


def test_a_writer_blocked_by_another_process_gives_up_once_and_the_chat_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.2)  # the wait is bounded; a short one keeps the test quick
    warnings = []
    store = store_in(tmp_path, warnings)
    holder = child("import sqlite3, sys\n"
                   "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                   "db.execute('BEGIN IMMEDIATE')\n"
                   "print('locked', flush=True)\n"
                   "sys.stdin.readline()\n"
                   "db.execute('ROLLBACK')\n", str(tmp_path / "sessions.db"))
    try:
        assert holder.stdout.readline() == "locked\n"
        conversation = talk(store, TOOL_TURN)
        conversation.add_usage(Usage(5, 1, calls=1))
        assert conversation.history == TOOL_TURN  # the conversation itself goes on
    finally:
        holder.communicate("done\n")
    assert warnings == [f"{tmp_path / 'sessions.db'} could not be written (another knowledge-agent is writing); "
                        "this conversation is not being saved"]
    assert not store.persistent
    talk(store, TOOL_TURN[:1])  # nothing more is tried this run, so nothing more waits or warns
    assert len(warnings) == 1 and saved_conversations(tmp_path) == []
    assert talk(store_in(tmp_path), TOOL_TURN[:1]).session_id == 1  # the next run saves again


# -- damage, permissions and other trouble ---------------------------------------------------------------
@pytest.mark.parametrize("damage", [b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0\xef",
                                    b'"""""""""""""""""'], ids=["not utf-8", "not json"])
def test_a_damaged_message_is_reported_and_the_rest_resumes_valid(tmp_path, damage):
    store = store_in(tmp_path)
    sid = talk(store, TOOL_TURN + [{"role": "user", "content": "and Go?"}]).session_id
    store.conn.close()
    db = tmp_path / "sessions.db"
    data = db.read_bytes()
    assert data.count(b"rust/ownership.md") == 1
    db.write_bytes(data.replace(b"rust/ownership.md", damage))  # bytes flipped inside one stored message

    warnings = []
    history = resumed(tmp_path, sid, warnings)
    assert warnings == [f"1 damaged message(s) in conversation {sid} could not be read and were left out"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user"]
    assert history[2]["tool_call_id"] == "call_1" and "rust" not in history[2]["content"]  # answered, not lost
    assert history[3] == TOOL_TURN[3] and history[4]["content"] == "and Go?"


def test_an_emptied_file_is_said_so_once(tmp_path):
    (tmp_path / "sessions.db").write_bytes(b"")
    os.utime(tmp_path / "sessions.db", (1e9, 1e9))  # emptied a while ago, not being created this instant
    warnings = []
    store = store_in(tmp_path, warnings)
    assert warnings == [f"{tmp_path / 'sessions.db'} was empty (0 bytes); starting a fresh history"]
    assert store.persistent and talk(store, TOOL_TURN[:1]).session_id == 1
    warnings.clear()
    assert store_in(tmp_path, warnings).list_sessions()[0].title.startswith("我的笔记") and warnings == []


def build_history(folder: Path, conversations: int) -> dict[int, list[dict]]:
    store = store_in(folder)
    kept = {}
    for n in range(conversations):
        messages = [{"role": "user", "content": f"question {n}"}, {"role": "assistant", "content": "x" * 3000}]
        kept[talk(store, messages).session_id] = messages
    store.conn.close()
    return kept


@pytest.mark.parametrize("damage", ["garbage", "header", "inner page", "directory"])
def test_damaged_database_is_moved_aside_and_a_fresh_one_started(tmp_path, damage):
    db = tmp_path / "sessions.db"
    if damage == "garbage":
        db.write_bytes(os.urandom(8192))
    elif damage == "directory":
        db.mkdir()
    else:
        build_history(tmp_path, 30)
        data = bytearray(db.read_bytes())
        if damage == "header":
            data[:16] = b"not sqlite here!"
        else:  # a b-tree page in the middle, as a bad sector or a half-synced copy leaves it
            page = len(data) // 4096 // 2 * 4096
            data[page:page + 64] = b"\xff" * 64
        db.write_bytes(bytes(data))
    original = db.read_bytes() if db.is_file() else None

    warnings = []
    store = store_in(tmp_path, warnings)
    assert len(warnings) == 1 and "\n" not in warnings[0]
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("sessions.db.damaged-")]
    assert f"is damaged (" in warnings[0] and f"moved it to {aside.name} and started a fresh one" in warnings[0]
    assert store.persistent and talk(store, [{"role": "user", "content": "new"}]).session_id
    assert original is None or aside.read_bytes() == original  # kept as it was, not deleted or changed

    if original is not None:  # the warning says how to get the file back: doing exactly that works
        store.conn.close()
        subprocess.run(warnings[0].split("To put it back, quit and run: ")[1], shell=True, check=True)
        assert db.read_bytes() == original


def test_a_damaged_file_goes_aside_with_what_only_its_wal_held_and_comes_back_whole(tmp_path):
    db = tmp_path / "sessions.db"
    build_history(tmp_path, 30)
    proc = child(WRITER + "say({'role': 'user', 'content': 'only in the WAL'})\n"
                 "print('saved', flush=True)\n"
                 "sys.stdin.readline()\n", str(db))
    assert proc.stdout.readline() == "saved\n"
    proc.kill()  # killed before any checkpoint: the last message lives in sessions.db-wal alone
    proc.wait()
    assert b"only in the WAL" in Path(f"{db}-wal").read_bytes() and b"only in the WAL" not in db.read_bytes()
    data = bytearray(db.read_bytes())
    page = len(data) // 4096 // 2 * 4096  # an old page in the middle, which the WAL does not cover
    data[page:page + 64] = b"\xff" * 64
    db.write_bytes(bytes(data))

    warnings = []
    store = store_in(tmp_path, warnings)
    assert "is damaged (" in warnings[0] and store.list_sessions() == []  # nothing of the old file replayed
    asides = [p for p in tmp_path.iterdir() if ".damaged-" in p.name]
    assert any(b"only in the WAL" in p.read_bytes() for p in asides)  # the last message went aside too
    store.conn.close()
    subprocess.run(warnings[0].split("To put it back, quit and run: ")[1], shell=True, check=True)
    back = [p for p in tmp_path.iterdir() if p.name in ("sessions.db", "sessions.db-wal")]
    assert any(b"only in the WAL" in p.read_bytes() for p in back)


@pytest.fixture
def reachable_dir():
    """A folder an unprivileged user can reach (tmp_path's parents are root's alone)."""
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o777)
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():  # files need no rights to be removed; a -wal file may go while this runs
            path.chmod(0o700)
    shutil.rmtree(folder)


UNPRIVILEGED = """
import logging, os, sys
from pathlib import Path
import sessions
if os.geteuid() == 0:  # root reads any file: become nobody, as a person without the rights would be
    os.setgid(65534)
    os.setuid(65534)
logging.basicConfig(stream=sys.stdout, format="%(message)s")  # notices on stdout, for the test to read
store = sessions.SessionStore(Path(sys.argv[1]))
print("persistent" if store.persistent else "in memory")
"""


@pytest.mark.parametrize("locked", ["file", "folder"])
def test_a_file_that_may_not_be_read_is_left_alone(reachable_dir, locked):
    folder = reachable_dir / "data"
    kept = talk(store_in(folder), TOOL_TURN).session_id
    for path in (folder, *folder.iterdir()):
        path.chmod(0o777)  # only the one thing locked below stands in the way
    (folder / "sessions.db" if locked == "file" else folder).chmod(0)
    out, err = child(UNPRIVILEGED, str(folder / "sessions.db")).communicate()
    folder.chmod(0o777)
    assert err == "" and out.splitlines() == [
        f"cannot open {folder / 'sessions.db'} (permission denied); this conversation will not be saved", "in memory"]
    assert sorted(p.name for p in folder.iterdir() if "damaged" in p.name) == []  # a good file is never moved
    (folder / "sessions.db").chmod(0o600)
    assert resumed(folder, kept) == TOOL_TURN


def test_unusable_folder_means_an_unsaved_conversation_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the data folder should be")
    warnings = []
    hear(warnings)
    store = SessionStore(blocker / "sub" / "sessions.db")
    assert not store.persistent and warnings[0].endswith("; this conversation will not be saved")
    assert "(part of that path is a file, not a folder)" in warnings[0]
    conversation = talk(store, TOOL_TURN)  # kept in memory for this run: /sessions and /resume still work
    assert store.list_sessions()[0].id == conversation.session_id
    assert Conversation(store).resume(conversation.session_id)


def test_failed_write_is_reported_once_and_does_not_raise(tmp_path):
    warnings = []
    store = store_in(tmp_path, warnings)
    store.conn.execute("PRAGMA query_only=ON")  # every write now fails, as on a full disk
    conversation = talk(store, TOOL_TURN)
    conversation.add_usage(Usage(1, 1, calls=1))
    assert conversation.history == TOOL_TURN and conversation.session_id is None
    assert len(warnings) == 1 and warnings[0].endswith("; this conversation is not being saved")
    assert not store.persistent


def test_a_history_from_a_newer_version_is_left_alone(tmp_path):
    store = store_in(tmp_path)
    talk(store, [{"role": "user", "content": "kept"}])
    store.conn.execute("PRAGMA user_version=99")
    store.conn.close()
    warnings = []
    newer = store_in(tmp_path, warnings)
    assert not newer.persistent and "newer version" in warnings[0]
    assert [p.name for p in tmp_path.iterdir()] == ["sessions.db"]  # not moved, not changed
