"""The one way this project keeps an SQLite file (the search index, the conversation store), and tells the person.

`connect` opens one: a private file (0600 in a 0700 folder: conversations hold note text), in WAL mode, its
schema versioned by `PRAGMA user_version`. `problem` tells failures apart by SQLite's result codes, never by its
messages. `notice` is how every module tells the person something that is not the answer: one line through the
"knowledge-agent" logger, which each UI shows its own way (stderr when none set one up). It never reads the notes.
"""

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

BUSY_TIMEOUT_S = 5.0  # SQLite's own wait for another process's write lock
LONG_WAIT_S = 120.0  # then the person is told, and we wait this long (another process's first index build)
notice = logging.getLogger("knowledge-agent").warning


def show_notices(show) -> None:
    """Make `show(text)` the one way the notices reach the person (the terminal, the page, the MCP log)."""
    handler = logging.Handler()
    handler.emit = lambda record: show(record.getMessage())
    logging.getLogger("knowledge-agent").handlers[:] = [handler]


class Damaged(sqlite3.DatabaseError):
    """Damage found without SQLite raising it: quick_check's verdict, a folder where the file should be."""
    sqlite_errorname = "SQLITE_CORRUPT"


class Newer(sqlite3.DatabaseError):
    """The file was made by a newer version of knowledge-agent: it is left alone (no kind of `problem`)."""


# SQLite's primary result codes, as sqlite3 exceptions name them (Python 3.11+; 3.10 falls back to the class).
_KINDS = {"damaged": ("SQLITE_CORRUPT", "SQLITE_NOTADB"), "busy": ("SQLITE_BUSY", "SQLITE_LOCKED"),
          "denied": ("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH", "SQLITE_READONLY")}


def problem(error: BaseException) -> str:
    """"damaged", "busy", "denied" or "" (anything else) for an exception from SQLite or the file system."""
    if isinstance(error, PermissionError):
        return "denied"
    name = getattr(error, "sqlite_errorname", None)
    if name is None:  # Python 3.10: no result codes; a DatabaseError that is no operational one is damage
        return "damaged" if type(error) is sqlite3.DatabaseError else ""
    return next((kind for kind, codes in _KINDS.items() if name.startswith(codes)), "")


def why(error: BaseException) -> str:
    if isinstance(error, (FileExistsError, NotADirectoryError)):  # a path passing through a file
        return "part of that path is a file, not a folder"
    said = {"denied": "permission denied", "busy": "another knowledge-agent is writing"}.get(problem(error))
    return said or getattr(error, "strerror", None) or str(error)


def private_folder(folder: Path) -> None:
    """Make the folder 0700; ours (named for the project) is made so if left open, one the person chose is not."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if folder.name == "knowledge-agent" and folder.stat().st_mode & 0o077:
            folder.chmod(0o700)


def connect(path: Path, schema: list[str], version: int, synchronous: str = "NORMAL", check: bool = False,
            upgrade: bool = True):
    """The database at `path` with `schema` (statements that may run twice) at `version`; raises sqlite3.Error (a
    newer version's file; an older one's without `upgrade`: Damaged). `check`: SQLite's quick check, now."""
    if str(path) != ":memory:":
        private_folder(path.parent)
        if path.is_dir():
            raise Damaged("a folder, not a file")
        with contextlib.suppress(FileExistsError):  # SQLite gives its -wal and -shm files the same mode
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        for made_before in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # by a version that made them 0644
            with contextlib.suppress(OSError):
                if made_before.stat().st_mode & 0o077:
                    made_before.chmod(0o600)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")  # one bad title must not hide a list
    try:
        _wal(conn, str(path))
        conn.execute(f"PRAGMA synchronous={synchronous}")
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > version:
            raise Newer(f"made by a newer version of knowledge-agent (schema {found})")
        if found < version and not upgrade and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise Damaged("it was made by another version of knowledge-agent")
        if found < version:
            with writing(conn, str(path)):  # two processes making a new file both run it: IF NOT EXISTS
                for statement in schema:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version={version}")
        if check and (verdict := conn.execute("PRAGMA quick_check(1)").fetchone()[0]) != "ok":  # ~0.5 ms per MB
            raise Damaged(" ".join(verdict.split()))
    except BaseException:
        conn.close()
        raise
    return conn


def _wal(conn: sqlite3.Connection, what: str) -> None:
    """Retried while another process makes or builds the file: the switch to WAL answers "locked", never waits."""
    started, told = time.monotonic(), False
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            waited = time.monotonic() - started
            if problem(e) != "busy" or waited > BUSY_TIMEOUT_S + LONG_WAIT_S:
                raise
            if waited > BUSY_TIMEOUT_S and not told:
                told = True
                notice(f"another knowledge-agent is updating {what}; waiting for it (at most {LONG_WAIT_S:.0f} s)…")
            time.sleep(0.01)


@contextlib.contextmanager
def writing(conn: sqlite3.Connection, what: str, long_wait: float | None = None):
    """One write transaction, committed or (on any error, Ctrl+C too) rolled back; past the busy timeout the person
    is told (`what` names the file) and we wait `long_wait` s longer (None: LONG_WAIT_S; 0: give up at once)."""
    long_wait = LONG_WAIT_S if long_wait is None else long_wait
    try:
        conn.execute("BEGIN IMMEDIATE")  # the lock first: a second writer waits here, not half-way
    except sqlite3.OperationalError as e:
        if problem(e) != "busy" or not long_wait:
            raise
        notice(f"another knowledge-agent is updating {what}; waiting for it (at most {long_wait:.0f} s)…")
        conn.execute(f"PRAGMA busy_timeout = {int(long_wait * 1000)}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    try:
        yield
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
