"""Benchmark: what saving every message costs, and how fast a big history opens and loads.

Builds a session database of many long conversations (tool results of TOOL_OUTPUT characters) in a temp
folder and prints:
  - the time to commit one message through Conversation.sync with the store's settings (synchronous=FULL)
    against the same commit with synchronous=NORMAL (the baseline: safe against a crash, not a power cut);
  - the time to open the store, list the sessions, find the latest one and resume the longest one;
  - how much of the open is PRAGMA quick_check (the store runs it at every start to catch damage).

    python bench/sessions_bench.py [--sessions 40] [--turns 200] [--dir FOLDER]
"""

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sessions import Conversation, SessionStore  # noqa: E402

TOOL_OUTPUT = 8000  # characters of one tool result, as the agent's tools cap them


def turn_messages(i: int) -> list[dict]:
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "read_note", "arguments": '{"file_path": "a.md"}'}}
    return [{"role": "user", "content": f"question {i} 关于笔记"},
            {"role": "assistant", "content": None, "reasoning_content": "Let me look. " * 20, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": ("note text 笔记 " * 1000)[:TOOL_OUTPUT]},
            {"role": "assistant", "content": "Here is what I found. " * 30}]


def commit_times(store: SessionStore, count: int) -> list[float]:
    conversation = Conversation(store)
    times = []
    for i in range(count):
        conversation.history.append(turn_messages(i)[2])
        start = time.perf_counter()
        conversation.sync(conversation.history)
        times.append((time.perf_counter() - start) * 1000)
    return times


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - start) * 1000


def build(store: SessionStore, sessions: int, turns: int) -> None:
    """Many long conversations, written in one transaction each to build the file quickly."""
    for _ in range(sessions):
        def fill(c):
            sid = c.execute("INSERT INTO sessions (started, kb, title) VALUES (?, NULL, 'q')", (time.time(),)).lastrowid
            c.executemany("INSERT INTO messages (session_id, created, role, body) VALUES (?, ?, ?, ?)",
                          [(sid, time.time(), m["role"], json.dumps(m, ensure_ascii=False))
                           for i in range(turns) for m in turn_messages(i)])
        store.write(fill)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--dir", help="where to build the database (default: a temp folder); fsync costs differ by disk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "sessions.db"
        store = SessionStore(path, warn=print)
        full = commit_times(store, 200)
        store.conn.execute("PRAGMA synchronous=NORMAL")
        normal = commit_times(store, 200)
        store.conn.execute("PRAGMA synchronous=FULL")
        print(f"commit one 8 KB message: FULL {statistics.median(full):.2f} ms (median), "
              f"NORMAL {statistics.median(normal):.2f} ms  -> {statistics.median(full) / statistics.median(normal):.1f}x")

        build(store, args.sessions, args.turns)
        store.conn.close()
        size_mb = path.stat().st_size / 1e6

        reopened, open_ms = timed(lambda: SessionStore(path, warn=print))
        listed, list_ms = timed(reopened.list_sessions)
        latest, latest_ms = timed(reopened.latest_session_id)
        conversation = Conversation(reopened)
        _, load_ms = timed(lambda: conversation.resume(listed[-1].id))
        conn = sqlite3.connect(path)
        _, check_ms = timed(lambda: conn.execute("PRAGMA quick_check").fetchall())
        conn.close()
        print(f"database: {args.sessions} conversations x {args.turns} turns, {size_mb:.0f} MB")
        print(f"open (quick_check included) {open_ms:.1f} ms · list {list_ms:.1f} ms · latest id {latest_ms:.2f} ms · "
              f"resume {len(conversation.history)} messages {load_ms:.1f} ms")
        print(f"PRAGMA quick_check alone {check_ms:.1f} ms ({check_ms / size_mb:.2f} ms per MB)")


if __name__ == "__main__":
    main()
