"""Session store: every conversation with the agent, kept in one SQLite file so it survives the program.

Each message (the person's question, the assistant's reply with its tool calls and reasoning, every tool
result) is written and committed the moment it exists, so quitting, a crash or a kill loses at most the
message in flight, and `--continue` / `--resume ID` can pick a conversation up again later.

The file is $KA_DATA_DIR/sessions.db, else $XDG_DATA_HOME/knowledge-agent/sessions.db, else
~/.local/share/knowledge-agent/sessions.db. WAL mode and a busy timeout let two REPLs write at once.
A damaged or unreadable file is moved aside with a one-line notice and a fresh one started; if the folder
itself cannot be used, the store lives in memory for this run and says so. Nothing here raises at the
caller: a failed write is reported once and the conversation goes on in memory.

Messages are stored exactly as the OpenAI chat API takes them (JSON of the message dict); bookkeeping such
as the time lives in columns beside it, never inside the message. A turn the agent abandons (the API
refused it, so sending it again would fail again) is marked `dropped`: kept in the file, never loaded.
"""

import json
import os
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import config
from context import content_text, repair_history

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id                INTEGER PRIMARY KEY,
    started           REAL NOT NULL,
    kb                TEXT,
    title             TEXT,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL REFERENCES sessions(id),
    created    REAL NOT NULL,
    role       TEXT NOT NULL,
    body       TEXT NOT NULL,
    dropped    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_id, id);
"""
# SQLite result codes that mean "this file is not a usable database", as opposed to "busy right now".
DAMAGED = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM",
           "SQLITE_IOERR", "SQLITE_AUTH"}
BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}


@dataclass
class SessionInfo:
    id: int
    started: float
    title: str
    messages: int
    prompt_tokens: int = 0
    completion_tokens: int = 0


def default_db_path(data_dir: Path | str | None = None) -> Path:
    """Where the session database lives: data_dir (Settings.data_dir, from KA_DATA_DIR in the environment
    or .env), else $KA_DATA_DIR, else the XDG data folder."""
    folder = data_dir or config.env_value(config.DATA_DIR_ENV)
    if not folder:
        xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        folder = str(Path(xdg) / "knowledge-agent")
    return Path(folder).expanduser() / config.SESSIONS_DB_NAME


def _warn_stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _plain(message) -> dict:
    """The message as a JSON-able dict: SDK objects (pydantic models) are turned into dicts."""
    if hasattr(message, "model_dump"):
        message = message.model_dump(exclude_none=True)
    return json.loads(json.dumps(message, ensure_ascii=False,
                                 default=lambda o: o.model_dump(exclude_none=True)))


def _title_of(message: dict) -> str:
    return " ".join(content_text(message.get("content")).split())[:200]


def _error_name(error: sqlite3.Error) -> str:
    name = getattr(error, "sqlite_errorname", "")  # Python 3.11+
    if name:
        return "_".join(name.split("_")[:2])  # SQLITE_IOERR_SHORT_READ -> SQLITE_IOERR
    text = str(error).lower()  # Python 3.10: only the message tells
    for words, guess in (("not a database", "SQLITE_NOTADB"), ("malformed", "SQLITE_CORRUPT"),
                         ("unable to open", "SQLITE_CANTOPEN"), ("readonly", "SQLITE_READONLY"),
                         ("locked", "SQLITE_BUSY")):
        if words in text:
            return guess
    return "SQLITE_ERROR"


class SessionStore:
    """One open session database. All methods report problems through `warn` instead of raising."""

    def __init__(self, path: Path | str | None = None, warn=_warn_stderr):
        self.warn = warn
        self.path = Path(path) if path else default_db_path()
        self.persistent = True
        self._write_failed = False
        self.conn = self._open_or_recover()

    # -- opening -----------------------------------------------------------------------------------------
    def _open_or_recover(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return self._in_memory(f"cannot create {self.path.parent} ({e.strerror or e})")
        try:
            return self._open_patiently(self.path)
        except sqlite3.Error as e:
            if _error_name(e) not in DAMAGED and self.path.is_file():
                # Locked by another process, or made by a newer version: the file is probably fine, so
                # leave it alone.
                return self._in_memory(f"{self.path} cannot be used now ({e})")
            reason = str(e)
        except OSError as e:
            reason = e.strerror or str(e)
        aside = self._move_aside()
        if aside is None:
            return self._in_memory(f"{self.path} cannot be read ({reason}) nor moved aside")
        try:
            conn = self._open(self.path)
        except (sqlite3.Error, OSError) as e:
            return self._in_memory(f"{self.path} cannot be created ({e})")
        self.warn(f"Session history {self.path} could not be read ({reason}); "
                  f"moved it to {aside.name} and started a fresh one.")
        return conn

    def _open_patiently(self, path: Path) -> sqlite3.Connection:
        """Open, retrying while another process holds the file: switching to WAL and recovering the WAL
        index answer "database is locked" at once, without waiting for the busy timeout."""
        deadline = time.monotonic() + config.SESSIONS_BUSY_TIMEOUT
        pause = 0.01
        while True:
            try:
                return self._open(path)
            except sqlite3.OperationalError as e:
                if _error_name(e) not in BUSY or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        # isolation_level=None: every statement commits on its own unless we BEGIN explicitly.
        conn = sqlite3.connect(str(path), timeout=config.SESSIONS_BUSY_TIMEOUT, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed message survives a power cut too, not only a crash; costs one fsync per
            # message, which is nothing next to an API round trip.
            conn.execute("PRAGMA synchronous=FULL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"made by a newer version (schema {version})")
            conn.executescript(SCHEMA)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            # A damaged page deep inside would otherwise surface mid-conversation; checking costs ~0.5 ms
            # per MB (bench/sessions_bench.py), a few ms for a typical history.
            problem = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            if problem != "ok":
                raise sqlite3.DatabaseError("database disk image is malformed: " + " ".join(problem.split()))
        except BaseException:
            conn.close()
            raise
        return conn

    def _move_aside(self) -> Path | None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{n}")
        try:
            self.path.rename(aside)
        except OSError:
            return None
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            try:
                if side.exists():
                    side.rename(aside.with_name(aside.name + suffix))
            except OSError:
                pass
        return aside

    def _in_memory(self, reason: str) -> sqlite3.Connection:
        self.persistent = False
        self.warn(f"Session history unavailable: {reason}. This conversation will not be saved.")
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.executescript(SCHEMA)
        return conn

    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:
            pass

    # -- writing -----------------------------------------------------------------------------------------
    def _write(self, action: str, fn):
        """Run fn(conn) in one IMMEDIATE transaction; on failure warn once and return None."""
        try:
            # IMMEDIATE takes the write lock up front, so a second REPL waits (busy timeout) instead of
            # failing half-way through a read-then-write transaction.
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self.conn)
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            return result
        except sqlite3.Error as e:
            if not self._write_failed:
                self.warn(f"Could not {action} in {self.path} ({e}); the conversation goes on unsaved.")
                self._write_failed = True
            return None

    def new_session(self, kb: Path | str | None = None) -> int | None:
        """Start a conversation; returns its id (None only if the database refused the write)."""
        return self._write("start a session", lambda c: c.execute(
            "INSERT INTO sessions (started, kb) VALUES (?, ?)",
            (time.time(), str(kb) if kb else None)).lastrowid)

    def add_message(self, session_id: int, message) -> int | None:
        """Append one OpenAI-format message and commit it. Its row id once it is safely stored, else None."""
        if session_id is None:
            return None
        message = _plain(message)
        body = json.dumps(message, ensure_ascii=False)
        role = str(message.get("role", ""))

        def insert(conn):
            row = conn.execute("INSERT INTO messages (session_id, created, role, body) VALUES (?, ?, ?, ?)",
                               (session_id, time.time(), role, body)).lastrowid
            if role == "user":
                conn.execute("UPDATE sessions SET title = ? WHERE id = ? AND title IS NULL",
                             (_title_of(message), session_id))
            return row

        return self._write("save a message", insert)

    def drop_messages(self, row_ids: list[int]) -> None:
        """Leave these messages out of every later load (they stay in the file)."""
        rows = [(row,) for row in row_ids if row is not None]
        if rows:
            self._write("update the history", lambda c: c.executemany(
                "UPDATE messages SET dropped = 1 WHERE id = ?", rows))

    def record_usage(self, session_id: int, prompt_tokens: int, completion_tokens: int) -> None:
        """Add one API call's token counts to the session's totals."""
        if session_id is None:
            return
        self._write("save token usage", lambda c: c.execute(
            "UPDATE sessions SET prompt_tokens = prompt_tokens + ?, "
            "completion_tokens = completion_tokens + ? WHERE id = ?",
            (int(prompt_tokens or 0), int(completion_tokens or 0), session_id)))

    # -- reading -----------------------------------------------------------------------------------------
    def _read(self, sql: str, args=()) -> list:
        try:
            return self.conn.execute(sql, args).fetchall()
        except OverflowError:  # an id too big for SQLite matches nothing
            return []
        except sqlite3.Error as e:
            self.warn(f"Could not read session history {self.path} ({e}).")
            return []

    def exists(self, session_id: int) -> bool:
        return bool(self._read("SELECT 1 FROM sessions WHERE id = ?", (session_id,)))

    def load_messages(self, session_id: int) -> list[dict]:
        """The session's messages in the order they were added (a row that fails to parse is skipped)."""
        messages = []
        for (body,) in self._read("SELECT body FROM messages WHERE session_id = ? AND NOT dropped ORDER BY id",
                                  (session_id,)):
            try:
                message = json.loads(body)
            except ValueError:
                continue
            if isinstance(message, dict):
                messages.append(message)
        return messages

    def latest_session_id(self) -> int | None:
        """The most recent conversation that has at least one message."""
        rows = self._read("SELECT session_id FROM messages WHERE NOT dropped ORDER BY id DESC LIMIT 1")
        return rows[0][0] if rows else None

    def list_sessions(self, limit: int = config.SESSIONS_LIST_LIMIT) -> list[SessionInfo]:
        """Most recent first; conversations that never got a message are left out."""
        rows = self._read(
            "SELECT s.id, s.started, coalesce(s.title, ''), count(m.id), s.prompt_tokens, "
            "s.completion_tokens FROM sessions s JOIN messages m ON m.session_id = s.id AND NOT m.dropped "
            "GROUP BY s.id ORDER BY max(m.id) DESC LIMIT ?", (limit,))
        return [SessionInfo(*row) for row in rows]

    def session_info(self, session_id: int) -> SessionInfo | None:
        rows = self._read(
            "SELECT s.id, s.started, coalesce(s.title, ''), "
            "(SELECT count(*) FROM messages m WHERE m.session_id = s.id AND NOT m.dropped), s.prompt_tokens, "
            "s.completion_tokens FROM sessions s WHERE s.id = ?", (session_id,))
        return SessionInfo(*rows[0]) if rows else None


def format_session_line(info: SessionInfo) -> str:
    """One line for a listing: id, start time, message count, first question."""
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.started))
    title = info.title if len(info.title) <= 60 else info.title[:59] + "…"
    return f"{info.id:>5}  {started}  {info.messages:>4} msgs  {title or '(no question)'}"


class Conversation:
    """The conversation in progress: its messages in memory, each one also committed to the store.

    sync() is the agent's on_change callback: it commits the messages added since the last call and marks
    as dropped the ones the agent removed (a refused turn). The session row is created with the first
    message, so starting the program and leaving at once leaves nothing behind. Token usage is counted per
    turn (for /usage and -v) and per session (stored).
    """

    def __init__(self, store: SessionStore, kb: Path | str | None = None):
        self.store, self.kb = store, kb
        self.session_id: int | None = None
        self.history: list[dict] = []
        self.rows: list[int | None] = []  # the store's row id of each message in history (None: not stored)
        self.turn_usage = self.run_usage = (0, 0)
        self.turn_calls = 0

    def start_new(self) -> None:
        self.session_id, self.history, self.rows = None, [], []
        self.turn_usage, self.turn_calls = (0, 0), 0  # /usage speaks of this conversation only

    def resume(self, session_id: int) -> bool:
        """Load an earlier conversation; False if there is none with that id."""
        if not self.store.exists(session_id):
            return False
        # A conversation cut off by a kill may end in unanswered tool calls: repair it the same way every
        # request is repaired, so the next turn starts from valid history.
        self.session_id, self.history = session_id, repair_history(self.store.load_messages(session_id))
        self.rows = [None] * len(self.history)  # only messages of later turns are ever dropped
        return True

    def sync(self, history: list[dict] | None = None) -> None:
        """Make the store match the history: commit new messages, mark removed ones as dropped."""
        history = self.history if history is None else history
        if len(history) < len(self.rows):
            self.store.drop_messages(self.rows[len(history):])
            del self.rows[len(history):]
        for message in history[len(self.rows):]:
            if self.session_id is None:
                self.session_id = self.store.new_session(self.kb)
            # recorded before the write returns, so a Ctrl+C inside it cannot store the message twice
            self.rows.append(None)
            self.rows[-1] = self.store.add_message(self.session_id, message)

    def begin_turn(self) -> None:
        self.turn_usage, self.turn_calls = (0, 0), 0

    def add_usage(self, usage) -> None:
        """Count one API call's `usage` (an SDK object or a dict)."""
        get = usage.get if isinstance(usage, dict) else lambda key: getattr(usage, key, None)
        prompt, completion = int(get("prompt_tokens") or 0), int(get("completion_tokens") or 0)
        self.turn_usage = (self.turn_usage[0] + prompt, self.turn_usage[1] + completion)
        self.run_usage = (self.run_usage[0] + prompt, self.run_usage[1] + completion)
        self.turn_calls += 1
        if self.session_id is not None:
            self.store.record_usage(self.session_id, prompt, completion)

    def session_usage(self) -> tuple[int, int]:
        info = self.store.session_info(self.session_id) if self.session_id is not None else None
        return (info.prompt_tokens, info.completion_tokens) if info else (0, 0)
