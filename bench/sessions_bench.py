"""Benchmark: what saving every message costs, and how fast a big history opens and loads.

Builds a session database of many long conversations (tool results of MAX_TOOL_OUTPUT characters) in a
temp folder and prints:
  - the time to commit one message with the store's settings (synchronous=FULL) against the same
    commit with synchronous=NORMAL (the baseline: safe against a crash, not against a power cut);
  - the time to open the store, list the sessions and load the longest one;
  - how much of the open is PRAGMA quick_check (the store runs it at every start to catch damage).

    python bench/sessions_bench.py [--sessions 40] [--turns 200] [--dir FOLDER]
"""

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import config  # noqa: E402
from sessions import SessionStore  # noqa: E402

MAX_TOOL_OUTPUT = getattr(config, "MAX_TOOL_OUTPUT", 8000)


def turn_messages(i: int) -> list[dict]:
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "read_note", "arguments": '{"file_path": "a.md"}'}}
    return [{"role": "user", "content": f"question {i} 关于笔记"},
            {"role": "assistant", "content": None, "reasoning_content": "Let me look. " * 20, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": ("note text 笔记 " * 1000)[:MAX_TOOL_OUTPUT]},
            {"role": "assistant", "content": "Here is what I found. " * 30}]


def commit_times(store: SessionStore, count: int) -> list[float]:
    sid = store.new_session()
    times = []
    for i in range(count):
        message = turn_messages(i)[2]
        start = time.perf_counter()
        store.add_message(sid, message)
        times.append((time.perf_counter() - start) * 1000)
    return times


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--dir", help="where to build the database (default: a temp folder); fsync costs differ by disk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "sessions.db"
        store = SessionStore(path)
        full = commit_times(store, 200)
        store.conn.execute("PRAGMA synchronous=NORMAL")
        normal = commit_times(store, 200)
        store.conn.execute("PRAGMA synchronous=FULL")
        print(f"commit one 8 KB message: FULL {statistics.median(full):.2f} ms (median), "
              f"NORMAL {statistics.median(normal):.2f} ms  -> {statistics.median(full) / statistics.median(normal):.1f}x")

        # many long conversations, written in one transaction each to build the file quickly
        for s in range(args.sessions):
            sid = store.new_session()
            store.conn.execute("BEGIN")
            for i in range(args.turns):
                for message in turn_messages(i):
                    store.conn.execute("INSERT INTO messages (session_id, created, role, body) VALUES (?, ?, ?, json(?))",
                                       (sid, time.time(), message["role"], __import__("json").dumps(message)))
            store.conn.execute("COMMIT")
        store.close()
        size_mb = path.stat().st_size / 1e6

        reopened, open_ms = timed(lambda: SessionStore(path))
        listed, list_ms = timed(reopened.list_sessions)
        messages, load_ms = timed(lambda: reopened.load_messages(listed[0].id))
        latest, latest_ms = timed(reopened.latest_session_id)
        conn = sqlite3.connect(path)
        _, check_ms = timed(lambda: conn.execute("PRAGMA quick_check").fetchall())
        conn.close()
        print(f"database: {args.sessions} conversations x {args.turns} turns, {size_mb:.0f} MB")
        print(f"open (quick_check included) {open_ms:.1f} ms · list {list_ms:.1f} ms · latest id {latest_ms:.2f} ms · "
              f"load {len(messages)} messages {load_ms:.1f} ms")
        print(f"PRAGMA quick_check alone {check_ms:.1f} ms ({check_ms / size_mb:.2f} ms per MB)")


if __name__ == "__main__":
    main()
