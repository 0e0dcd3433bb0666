"""Session store: every conversation with the agent, kept in one SQLite file so it survives the program.

Each message is committed the moment it exists, as the OpenAI chat API takes it; an abandoned turn is marked
`dropped`, kept but never loaded. A `Conversation`'s history saves itself (run_agent calls its `save`); no UI
writes it. Nothing here raises at the caller or reads the environment: each problem is one notice. Only damage
SQLite can prove moves the file aside; a file that cannot be opened is left alone, the run kept in memory.
"""

import json
import shlex
import sqlite3
import threading
import time
from collections import defaultdict, namedtuple
from pathlib import Path
from urllib.parse import urlsplit

import db
from context import SHOWN, content_text, repair_history
from db import notice
from replies import Usage

SCHEMA_VERSION = 3  # 2: calls; 3: shown (an older file gets the tables, its conversations kept)
SCHEMA = [
    "CREATE TABLE IF NOT EXISTS sessions (id INTEGER PRIMARY KEY, started REAL NOT NULL, kb TEXT, title TEXT, "
    "prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id INTEGER NOT NULL, "
    "created REAL NOT NULL, role TEXT NOT NULL, body TEXT NOT NULL, dropped INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_id, id)",
    # Each API call, for /sent (endpoint: no credentials; reported 0: no counts; last_message: newest carried).
    "CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL, time REAL NOT NULL, "
    "endpoint TEXT NOT NULL, model TEXT NOT NULL, reported INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, "
    "completion_tokens INTEGER NOT NULL, cache_hit_tokens INTEGER NOT NULL, last_message INTEGER)",
    "CREATE INDEX IF NOT EXISTS calls_by_session ON calls(session_id, time)",
    # What each tool result showed (its context.SHOWN as JSON); none for one saved before this table existed.
    "CREATE TABLE IF NOT EXISTS shown (message_id INTEGER PRIMARY KEY, data TEXT NOT NULL)",
]
LIST_LIMIT = 20  # conversations a listing shows
TITLE_CHARS, TITLE_SHOWN = 200, 60  # of the first question: kept as the title; of the title: in a listing
# One row per conversation, its kept messages counted; add WHERE ... GROUP BY s.id.
INFO = ("SELECT s.id, s.started, coalesce(s.title, ''), count(m.id), s.kb, s.prompt_tokens, s.completion_tokens "
        "FROM sessions s LEFT JOIN messages m ON m.session_id = s.id AND NOT m.dropped ")
SessionInfo = namedtuple("SessionInfo", "id started title messages kb prompt_tokens completion_tokens")
# What /sent reads: the calls rows, {session: [(message id, SHOWN or None: not known)]} of its tool results
# (dropped ones too: they were sent), and {session: (prompt, completion)} totals, older uncounted calls included.
Sent = namedtuple("Sent", "calls shown totals")


def _open(path: Path) -> sqlite3.Connection:
    """FULL: a commit survives a power cut; quick_check (~0.5 ms a MB) finds damage now, not mid-conversation."""
    return db.connect(path, SCHEMA, SCHEMA_VERSION, synchronous="FULL", check=True)


class SessionStore:
    """The file of conversations; one thread at a time uses it (the page's worker and requests share one)."""

    def __init__(self, path: Path):
        self.path, self.lock = Path(path), threading.RLock()
        self.persistent = self.saving = True  # persistent: False once nothing more can reach the file
        try:
            # A file another process is creating this instant is empty too, for a moment: not worth a word.
            empty = self.path.is_file() and (st := self.path.stat()).st_size == 0 and st.st_mtime < time.time() - 1
            self.conn = _open(self.path)
        except (OSError, sqlite3.Error) as e:  # only proven damage moves the file: one that may be good never
            self.conn = (self._recover(str(e)) if db.problem(e) == "damaged"
                         else self._in_memory(f"cannot open {self.path} ({db.why(e)})"))
        else:
            if empty:  # SQLite takes a 0-byte file for a new database: say that the history was emptied
                notice(f"{self.path} was empty (0 bytes); starting a fresh history")

    def _recover(self, reason: str) -> sqlite3.Connection:
        """Move the damaged file aside with its WAL (else replayed into the fresh file), say how to put it back."""
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        while aside.exists():  # never replace an earlier one
            aside = aside.with_name(aside.name + "+")
        moved = [suffix for suffix in ("", "-wal") if Path(f"{self.path}{suffix}").exists()]
        try:
            for suffix in moved:
                Path(f"{self.path}{suffix}").rename(f"{aside}{suffix}")
            conn = _open(self.path)
        except (OSError, sqlite3.Error) as e:
            return self._in_memory(f"{self.path} is damaged ({reason}) and could not be replaced ({db.why(e)})")
        back = " && ".join(f"mv {shlex.quote(f'{aside}{s}')} {shlex.quote(f'{self.path}{s}')}" for s in moved)
        notice(f"{self.path} is damaged ({reason}); moved it to {aside.name} and started a fresh one. "
               f"To put it back, quit and run: {back}")
        return conn

    def _in_memory(self, problem: str) -> sqlite3.Connection:
        self.persistent = False
        notice(f"{problem}; this conversation will not be saved")
        return _open(Path(":memory:"))  # the same tables, gone when the program ends

    def write(self, fn):
        """fn(conn) in one transaction; its result. On failure: one notice, save nothing more, None."""
        if not self.saving:
            return None
        try:
            with self.lock, db.writing(self.conn, str(self.path), long_wait=0):
                return fn(self.conn)
        except sqlite3.Error as e:
            self.saving = self.persistent = False  # saving on after a gap would leave holes, and wait at each write
            notice(f"{self.path} could not be written ({db.why(e)}); this conversation is not being saved")

    def _rows(self, sql: str, args=()) -> list:
        try:
            with self.lock:
                return self.conn.execute(sql, args).fetchall()
        except OverflowError:  # an id too big for SQLite matches nothing
            return []
        except sqlite3.Error as e:
            notice(f"could not read {self.path} ({db.why(e)})")
            return []

    def load_messages(self, session_id: int) -> list[dict]:
        bodies = self._rows("SELECT CAST(m.body AS BLOB), CAST(s.data AS BLOB) FROM messages m LEFT JOIN shown s "
                            "ON s.message_id = m.id WHERE m.session_id = ? AND NOT m.dropped ORDER BY m.id",
                            (session_id,))
        messages = [message | ({SHOWN: _decoded(shown) or {}} if shown else {})
                    for body, shown in bodies if (message := _decoded(body)) is not None]
        if lost := len(bodies) - len(messages):
            notice(f"{lost} damaged message(s) in conversation {session_id} could not be read and were left out")
        return messages

    def list_sessions(self, kb: Path | None = None) -> list[SessionInfo]:
        """Most recent first (only that notes folder's, when kb is given); never-used ones are left out."""
        rows = self._rows(INFO + "WHERE ?1 IS NULL OR s.kb = ?1 GROUP BY s.id HAVING count(m.id) "
                          "ORDER BY max(m.id) DESC LIMIT ?2", (kb and str(kb), LIST_LIMIT))
        return [SessionInfo(*row) for row in rows]

    def latest_session_id(self, kb: Path | None = None) -> int | None:
        return next((info.id for info in self.list_sessions(kb)), None)

    def session_info(self, session_id: int | None) -> SessionInfo | None:
        rows = self._rows(INFO + "WHERE s.id = ? GROUP BY s.id", (session_id,))
        return SessionInfo(*rows[0]) if rows else None

    def sent(self, session_id: int | None = None, kb: Path | None = None) -> Sent:
        """What left this machine in conversation `session_id`, or (None) in every conversation about `kb`."""
        where, args = ("s.id = ?", (session_id,)) if session_id is not None else ("s.kb = ?", (str(kb),))
        calls = self._rows(f"SELECT c.session_id, c.time, c.endpoint, c.model, c.reported, c.prompt_tokens, "
                           f"c.completion_tokens, c.cache_hit_tokens, c.last_message FROM calls c JOIN sessions s "
                           f"ON s.id = c.session_id WHERE {where} ORDER BY c.id", args)
        rows = self._rows(f"SELECT m.session_id, m.id, CAST(sh.data AS BLOB) FROM messages m JOIN sessions s ON s.id = "
                          f"m.session_id LEFT JOIN shown sh ON sh.message_id = m.id WHERE {where} AND (m.role = 'tool' "
                          f"OR sh.data IS NOT NULL) ORDER BY m.id", args)
        shown = defaultdict(list)
        for sid, row, data in rows:
            shown[sid].append((row, None if data is None else _decoded(data) or {}))
        totals = self._rows(f"SELECT s.id, s.prompt_tokens, s.completion_tokens FROM sessions s WHERE {where}", args)
        return Sent(calls, shown, {row[0]: row[1:] for row in totals})


def _decoded(body: bytes | None) -> dict | None:
    """A stored message (or what it showed), or None when it is damaged (NULL, not UTF-8, not JSON, not an object)."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (AttributeError, ValueError):
        return None
    return message if isinstance(message, dict) else None


def format_session_line(info: SessionInfo, show_kb: bool = False) -> str:
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.started))
    title = info.title if len(info.title) <= TITLE_SHOWN else info.title[:TITLE_SHOWN - 1] + "…"
    line = f"{info.id:>5}  {started}  {info.messages:>4} msgs  {title or '(no question)'}"
    return line + (f"  (notes: {info.kb})" if show_kb and info.kb else "")


class History(list):
    """A conversation's messages: a list that run_agent `save`s after each change; `seen` caches citations.Seen."""

    def __init__(self, conversation: "Conversation", messages=()):
        super().__init__(messages)
        self.conversation, self.seen = conversation, None

    def save(self, usage: Usage | None = None, endpoint: tuple[str, str] | None = None) -> None:
        """Commit what changed; after an API call (`endpoint`: base URL, model), count its `usage` too."""
        self.conversation.sync(self)
        if endpoint:
            self.conversation.add_usage(usage, endpoint)


class Conversation:
    """The conversation in progress: its messages in memory (`history`), each also committed to the store."""

    def __init__(self, store: SessionStore, kb: Path | str | None = None):
        self.store, self.kb = store, kb
        self.run_usage = Usage()  # of this run of the program; turn_usage: of the last answer
        self.told: list[str] = []  # what the model must hear with the next question (what /undo restored)
        self.start_new()

    def start_new(self) -> None:
        self.session_id, self.history = None, History(self)
        self.rows: list[int | None] = []  # the store's row id of each message in history (None: not stored)
        self.begin_turn()  # /usage speaks of this conversation only

    def resume(self, session_id: int) -> bool:
        if self.store.session_info(session_id) is None:
            return False
        # A kill may have left unanswered tool calls, damage a hole: repair as every request is repaired.
        self.session_id = session_id
        self.history = History(self, repair_history(self.store.load_messages(session_id)))
        self.rows = [None] * len(self.history)  # only messages of later turns are ever dropped
        return True

    def sync(self, history: list[dict]) -> None:
        """Make the store match the history: commit new messages, mark removed ones (a refused turn) dropped."""
        if dropped := [(row,) for row in self.rows[len(history):] if row is not None]:
            self.store.write(lambda c: c.executemany("UPDATE messages SET dropped = 1 WHERE id = ?", dropped))
        del self.rows[len(history):]
        for message in history[len(self.rows):]:
            self.rows.append(None)  # before the write returns, so a Ctrl+C inside it cannot store it twice
            if stored := self.store.write(lambda c: self._insert(c, message)):
                self.session_id, self.rows[-1] = stored

    def _insert(self, c: sqlite3.Connection, message) -> tuple[int, int]:
        """Write one message (the first creates the session row) and what it showed; (session id, row id)."""
        message = json.loads(json.dumps(message, default=lambda o: o.model_dump(exclude_none=True)))
        shown, body = message.pop(SHOWN, None), json.dumps(message, ensure_ascii=False)
        session_id = self.session_id or c.execute("INSERT INTO sessions (started, kb) VALUES (?, ?)",
                                                  (time.time(), str(self.kb) if self.kb else None)).lastrowid
        if message.get("role") == "user":
            title = " ".join(content_text(message.get("content")).split())[:TITLE_CHARS]
            c.execute("UPDATE sessions SET title = ? WHERE id = ? AND title IS NULL", (title, session_id))
        row = c.execute("INSERT INTO messages (session_id, created, role, body) VALUES (?, ?, ?, ?)",
                        (session_id, time.time(), str(message.get("role", "")), body)).lastrowid
        if shown is not None:
            c.execute("INSERT INTO shown VALUES (?, ?)", (row, json.dumps(shown, ensure_ascii=False)))
        return session_id, row

    def begin_turn(self, question: str = "") -> str:
        """Start a turn; the question as the model gets it, after what it must be told first (see undo)."""
        self.turn_usage, self.turn_start = Usage(), len(self.history)
        return "\n".join(self.told + [question])

    def end_turn(self) -> None:
        if len(self.history) > self.turn_start:  # the turn was kept, and with it what the model was told
            self.told.clear()

    def undone(self, message: str) -> None:
        """After an undo (Notebook.undo) the next question says so: the model must not trust what it read before."""
        self.told.append(f"[I ran /undo: {message}]")

    def add_usage(self, usage: Usage, endpoint: tuple[str, str] | None = None) -> None:
        """Count one API call's `usage`; with its `endpoint` (base URL, model), keep the call for /sent."""
        self.turn_usage, self.run_usage = self.turn_usage + usage, self.run_usage + usage
        if endpoint and self.session_id is not None:
            self.store.write(lambda c: c.execute(
                "INSERT INTO calls (session_id, time, endpoint, model, reported, prompt_tokens, completion_tokens, "
                "cache_hit_tokens, last_message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
                "(SELECT max(id) FROM messages WHERE session_id = ?1))",
                (self.session_id, time.time(), _without_credentials(endpoint[0]), endpoint[1], not usage.unreported,
                 usage.prompt, usage.completion, usage.hits)))
        if not usage.unreported:
            self.store.write(lambda c: c.execute("UPDATE sessions SET prompt_tokens = prompt_tokens + ?, "
                                                 "completion_tokens = completion_tokens + ? WHERE id = ?",
                                                 (usage.prompt, usage.completion, self.session_id)))

    def session_usage(self) -> Usage:
        """The tokens this conversation's calls were counted, from the store: every run of it (calls not counted)."""
        info = self.store.session_info(self.session_id)  # None, before the first message: no row matches
        return Usage(info.prompt_tokens, info.completion_tokens) if info else Usage()


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()
