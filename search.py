"""Find notes fast: a SQLite FTS5 index of the knowledge base, kept fresh, ranked, bounded.

The agent's search_notes and list_notes tools call into this file. Everything it needs is in the standard
library: sqlite3 (with FTS5) for the index and, on Linux, inotify through ctypes to notice edits.

How it works, top to bottom:
- Which files are notes: `is_note_file`; a walk of the knowledge base (KB) that skips hidden folders.
- What gets indexed: each note's path, title (first heading, else file name), opening paragraph ("lead")
  and body. Runs of Chinese, Japanese or Korean characters are rewritten as overlapping two-character
  words before indexing and before querying, because SQLite's unicode61 tokenizer would otherwise see a
  whole sentence as one word.
- Where: one index file per KB in the user cache folder (never inside the notes), WAL mode so two
  processes can share it. A missing, corrupt or outdated index is rebuilt with a one-line notice.
- Freshness: every search first brings the index up to date with the disk. The first search in a process
  compares every note's size and mtime with the index; after that Linux inotify reports exactly which
  paths changed. Elsewhere (or when inotify is unavailable) every search repeats the full comparison.
- Ranking: BM25 with title, path and lead weighted above the body; a note whose title or file name is
  the whole query comes first; notes holding all query words come before notes holding only some.
- Output: the best hits with path, title and the best matching lines, bounded for the model.
"""

import ctypes
import ctypes.util
import hashlib
import os
import re
import sqlite3
import stat
import struct
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from config import (INDEX_BUSY_TIMEOUT_MS, INDEX_RETRY_PAUSE_S, INDEX_DIR_ENV, INDEX_MAX_NOTE_BYTES,
                    INDEX_OPEN_MAX, INDEX_PROGRESS_AFTER_S, INDEX_WAIT_S, LIST_MAX_NOTES, LIST_OUTPUT_CHARS,
                    NOTE_SUFFIXES, SEARCH_LEAD_CHARS, SEARCH_LINE_CHARS, SEARCH_LINES_PER_HIT,
                    SEARCH_MAX_HITS, SEARCH_OUTPUT_CHARS, SEARCH_QUERY_ECHO_CHARS,
                    SEARCH_QUERY_MAX_WORDS, SEARCH_WATCH_ENV, SEARCH_WEIGHT_BODY,
                    SEARCH_WEIGHT_LEAD, SEARCH_WEIGHT_PATH, SEARCH_WEIGHT_TITLE, env_value)

SCHEMA_VERSION = "2"  # bump when the tables or the text preparation change: old indexes get rebuilt

# ----------------------------------------------------------------------------------------------------
# Which files are notes


def is_hidden_name(name: str) -> bool:
    """Dot-files and dot-folders (.git, .obsidian, .history) are hidden; `..md` is a note named '.'."""
    return name.startswith(".") and not name.startswith("..")


def _is_note_name(name: str) -> bool:
    return name.lower().endswith(NOTE_SUFFIXES) and not is_hidden_name(name)


def is_note_file(rel_path) -> bool:
    """True for a note path relative to the KB: a note suffix, and nothing hidden on the way."""
    parts = PurePosixPath(str(rel_path).replace("\\", "/")).parts
    return (bool(parts) and _is_note_name(parts[-1])
            and not any(p == ".." or is_hidden_name(p) for p in parts))


def _walk(kb: Path, top: str, watcher=None) -> dict:
    """Map every note under the folder `top` ("" = whole KB) to (size, mtime_ns); watch each folder seen."""
    found = {}
    if top and os.path.realpath(kb / top) != str(kb / top):
        return found  # the folder was replaced by a link (perhaps leading out): nothing in it is a note here
    stack = [top]
    while stack:
        rel_dir = stack.pop()
        abs_dir = kb / rel_dir if rel_dir else kb
        if watcher is not None:
            watcher.watch(abs_dir, rel_dir)
        try:
            entries = list(os.scandir(abs_dir))
        except OSError:
            continue  # vanished or unreadable folder: nothing in it can be searched
        prefix = rel_dir + "/" if rel_dir else ""
        for entry in entries:
            name = entry.name
            if name[0] == "." and name[:2] != "..":
                continue  # hidden (is_hidden_name, inlined: this loop runs once per file per search)
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(prefix + name)  # linked folders are not followed: no loops, no escapes
                elif name.lower().endswith(NOTE_SUFFIXES):
                    if entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                    elif entry.is_symlink() and _link_stays_inside(entry.path, kb):
                        st = os.stat(entry.path)
                        if not stat.S_ISREG(st.st_mode):
                            continue
                    else:
                        continue  # FIFOs, sockets, links leading out of the notes
                    rel = prefix + name
                    rel.encode("utf-8")  # a name that is not valid Unicode cannot be stored or shown
                    found[rel] = (st.st_size, st.st_mtime_ns)
            except (OSError, RuntimeError, UnicodeEncodeError):  # RuntimeError: a symlink loop
                continue
    return found


def _link_stays_inside(link: str, kb: Path) -> bool:
    """A linked note is the person's note only if its target is inside the notes folder too."""
    return Path(link).resolve().is_relative_to(kb)


def _note_stat(path: Path, kb: Path):
    """(size, mtime_ns) of one note, as _walk would see it; None if it is no (longer a) regular note."""
    st = os.stat(path, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        if not _link_stays_inside(str(path), kb):
            return None
        st = os.stat(path)
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


# ----------------------------------------------------------------------------------------------------
# Text preparation shared by the index and the queries

_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")
_SCRIPT_PIECE = re.compile(f"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")  # a word cut where the script changes
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_FRONT_TITLE = re.compile(r"\A---\s*\n(?:.*\n)*?title:\s*['\"]?(.+?)['\"]?\s*\n(?:.*\n)*?---", re.M)
_WORD = re.compile(r"[^\W_]+")
_STOPWORDS = frozenset("""a an and are as at be by for from how i in is it of on or that the this to was what
when where which who why with""".split())


def _cjk_words(text: str, for_query: bool = False) -> str:
    """Rewrite each CJK run as overlapping 2-character words: 归档实用 -> 归档 档实 实用 用.

    In the index every run also ends with its last character alone, so a 1-character query (matched as a
    prefix) finds a character at the end of a run too. A query leaves that tail off only where its text
    ends, so a phrase still lines up with a longer run in a note, and 解压zip still lines up with 解压 压 zip.
    """
    end = len(text.rstrip())

    def grams(match):
        run = match.group()
        if len(run) == 1:
            return f" {run} "
        words = [run[i:i + 2] for i in range(len(run) - 1)]
        if not for_query or match.end() < end:
            words.append(run[-1])
        return " " + " ".join(words) + " "
    return _CJK_RUN.sub(grams, text)


def _units(word: str) -> list:
    """The separate words inside one word: 解压zip文件 -> 解压 zip 文件, 如何压缩 -> 如何 何压 压缩."""
    units = []
    for piece in _SCRIPT_PIECE.findall(word):
        if len(piece) > 1 and _CJK_RUN.fullmatch(piece):
            units += [piece[i:i + 2] for i in range(len(piece) - 1)]
        else:
            units.append(piece)
    return units


def _title_of(text: str, stem: str) -> str:
    front = _FRONT_TITLE.match(text[:4000])
    if front:
        return front.group(1).strip()
    heading = _HEADING.search(text, 0, 20000)
    return heading.group(1).strip() if heading else stem


def _lead_of(text: str) -> str:
    """The note's opening paragraph (after front matter and headings): usually what the note is about."""
    if text.startswith("---"):
        end = text.find("\n---", 3)
        text = text[end + 4:] if end > 0 else text
    paragraph = []
    for line in text[:20000].splitlines():
        if line.strip() and not _HEADING.match(line):
            paragraph.append(line)
        elif paragraph:
            break
    return "\n".join(paragraph)[:SEARCH_LEAD_CHARS]


def _key(text: str) -> str:
    return " ".join(text.casefold().split())


def _stem(rel: str) -> str:
    name = rel.rsplit("/", 1)[-1]
    lower = name.lower()
    for suffix in NOTE_SUFFIXES:
        if lower.endswith(suffix):
            return name[:-len(suffix)]
    return name


@dataclass
class _Term:
    fts: str          # the chunk as one FTS5 phrase, quoted, ready for MATCH: the best kind of match
    every: list       # its words as separate phrases, all wanted in any order (a CJK run: its 2-char words)
    loose: list       # what the "any word" fallback looks for: each word, unless the person quoted a phrase
    words: list       # lowercased words / CJK strings used to pick the lines shown
    optional: bool    # a stopword: helps ranking, never required


def _phrase(words: list) -> str:
    spaced = _cjk_words(" ".join(words), for_query=True).split()
    phrase = '"' + " ".join(spaced) + '"'
    if len(spaced[-1]) == 1 and _CJK_RUN.fullmatch(spaced[-1]):
        phrase += "*"  # a lone CJK character is the start of a 2-character word in the index
    return phrase


def _chunk_words(chunk: str):
    words = [w.casefold() for w in _WORD.findall(chunk)]
    return words, list(dict.fromkeys(u for w in words for u in _units(w)))


def _parse_query(query: str) -> list:
    """Split a person's or model's query into safe FTS5 phrases; operators and punctuation become text.

    "a b" in double quotes is a phrase. An unquoted chunk made of several words (gnu-tar, title:x, a run
    of Chinese written without spaces, 解压zip文件) is a phrase first, then its words in any order, then
    any of its words in the fallback. At most SEARCH_QUERY_MAX_WORDS words count: a pasted page is no query.
    """
    quoted = re.findall(r'"([^"]*)"', query)
    rest = re.sub(r'"[^"]*"', " ", query).replace('"', " ")
    chunks = [(c, True) for c in quoted] + [(w, False) for w in rest.split()]
    terms, budget = [], SEARCH_QUERY_MAX_WORDS
    for chunk, is_quoted in chunks:
        if budget <= 0:
            break
        words, units = _chunk_words(chunk)
        if len(units) > budget:  # every word takes at least one character, so this many characters fit
            words, units = _chunk_words(chunk[:budget])
        if not units:
            continue
        budget -= len(units)
        fts = _phrase(words)
        every = [fts] if is_quoted else [_phrase([u]) for u in units]
        loose = every if len(every) == 1 else every + [fts]  # the whole phrase adds to the rank
        terms.append(_Term(fts, every, loose, words, len(words) == 1 and words[0] in _STOPWORDS))
    if terms and all(t.optional for t in terms):
        for t in terms:
            t.optional = False
    return terms


# ----------------------------------------------------------------------------------------------------
# The index file: where it lives, opening, creating, rebuilding


def _index_dir() -> Path:
    override = env_value(INDEX_DIR_ENV)
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "knowledge-agent"


def index_path(kb: Path) -> Path:
    """The index file for this KB: named after a hash of the KB's full path, so each KB has its own."""
    kb = Path(kb).resolve()
    digest = hashlib.sha256(str(kb).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return _index_dir() / f"{kb.name or 'root'}-{digest}.sqlite"


# Every statement may run again: two processes opening a new index at once both try to create it.
_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, size INTEGER, "
    "mtime_ns INTEGER, title TEXT, title_key TEXT, stem_key TEXT)",
    "CREATE INDEX IF NOT EXISTS notes_title ON notes(title_key)",
    "CREATE INDEX IF NOT EXISTS notes_stem ON notes(stem_key)",
    "CREATE INDEX IF NOT EXISTS notes_mtime ON notes(mtime_ns)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(path, title, lead, body, "
    "tokenize='porter unicode61 remove_diacritics 2')",
    f"INSERT OR IGNORE INTO meta VALUES ('schema', '{SCHEMA_VERSION}')",
]


class _Corrupt(Exception):
    pass


class _Busy(Exception):
    """Another process kept the index's write lock longer than we wait (it is building a big index)."""

    def __str__(self):
        return "another process kept it locked"


def _is_corruption(exc: Exception) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc).lower()
    return (name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB" or "malformed" in text
            or "not a database" in text or "no such table" in text or "corrupt" in text
            or isinstance(exc, _Corrupt))


def _connect(target: str) -> sqlite3.Connection:
    conn = sqlite3.connect(target, timeout=INDEX_BUSY_TIMEOUT_MS / 1000, check_same_thread=False,
                           isolation_level=None)
    _while_busy(conn, "PRAGMA journal_mode=WAL")  # a new file: the process creating it may hold it a moment
    conn.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; at worst the last change is re-indexed
    if not _has_meta(conn):
        _begin_write(conn)
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    version = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if not version or version[0] != SCHEMA_VERSION:
        conn.close()
        raise _Corrupt()
    return conn


def _has_meta(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone() is not None


def _begin_write(conn: sqlite3.Connection, wait_s: float | None = None) -> None:
    """Take the index's write lock, waiting up to wait_s (and saying so) while another process holds it.

    SQLite's own wait (INDEX_BUSY_TIMEOUT_MS) covers short writes; a first build of tens of thousands of
    notes holds the lock far longer, and the process waiting for it then finds that work done already.
    """
    _while_busy(conn, "BEGIN IMMEDIATE", wait_s)


def _while_busy(conn: sqlite3.Connection, sql: str, wait_s: float | None = None) -> None:
    """Run sql, retrying for up to wait_s (default INDEX_WAIT_S) while another process locks the index."""
    wait_s = INDEX_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            conn.execute(sql)
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            if time.monotonic() >= deadline:
                raise _Busy() from None
            if not told:
                _notice("another knowledge-agent is updating the search index of these notes; "
                        f"waiting for it (at most {wait_s:.0f} s)…")
                told = True
            time.sleep(INDEX_RETRY_PAUSE_S)  # SQLite may answer BUSY at once (WAL switch, recovery): don't spin


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith("SQLITE_BUSY") or "database is locked" in str(exc)


def _remove_index(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(str(path) + suffix)
        except FileNotFoundError:
            pass


def _open_db(path: Path) -> sqlite3.Connection:
    """Open (or create) the index; rebuild it if unreadable; keep it in memory if the cache is unwritable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _notice(f"cannot create the search index folder {path.parent} ({exc.strerror}); "
                "keeping the index in memory for this session.")
        return _connect(":memory:")
    try:
        return _connect(str(path))
    except (sqlite3.DatabaseError, _Busy) as exc:
        if not _is_corruption(exc):
            _notice(f"cannot open the search index {path} ({exc}); keeping it in memory for this session.")
            return _connect(":memory:")
        reason = f"is unreadable ({exc})"
    except _Corrupt:
        reason = "was made by another version of knowledge-agent"
    _notice(f"search index {path} {reason}; rebuilding it.")
    try:
        _remove_index(path)
        return _connect(str(path))
    except (OSError, sqlite3.DatabaseError, _Corrupt, _Busy) as exc:
        _notice(f"cannot rebuild the search index ({exc}); keeping it in memory for this session.")
        return _connect(":memory:")


def _notice(message: str) -> None:
    print(f"knowledge-agent: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------
# Linux inotify through ctypes: after the first full check, a search re-checks only the paths that changed

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
_IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_ISDIR = 0x01000000, 0x02000000, 0x40000000
_WATCH_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
               | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW)
_EVENT = struct.Struct("iIII")


class _Inotify:
    """One inotify instance watching every non-hidden folder of a KB; reports the changed paths."""

    def __init__(self):
        self._libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.rel_of = {}   # watch descriptor -> folder relative to the KB
        self.wd_of = {}    # folder relative to the KB -> watch descriptor

    def watch(self, abs_dir: Path, rel_dir: str) -> None:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(str(abs_dir)), _WATCH_MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (2, 20):  # ENOENT, ENOTDIR: the folder went away meanwhile; the walk skips it too
                return
            raise OSError(err, os.strerror(err))  # ENOSPC (watch limit) and the like: give up watching
        old = self.rel_of.get(wd)
        if old is not None and old != rel_dir:
            self.wd_of.pop(old, None)
        self.rel_of[wd] = rel_dir
        self.wd_of[rel_dir] = wd

    def _forget_tree(self, rel_dir: str) -> None:
        prefix = rel_dir + "/"
        for rel in [r for r in self.wd_of if r == rel_dir or r.startswith(prefix)]:
            wd = self.wd_of.pop(rel)
            self.rel_of.pop(wd, None)
            self._libc.inotify_rm_watch(self.fd, wd)

    def changes(self):
        """Drain pending events: (changed note paths, changed folders, whether events were lost)."""
        files, folders, lost = set(), set(), False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                raw = data[offset + _EVENT.size: offset + _EVENT.size + length]
                offset += _EVENT.size + length
                name = os.fsdecode(raw.rstrip(b"\0"))
                if mask & _IN_Q_OVERFLOW:
                    lost = True
                    continue
                rel_dir = self.rel_of.get(wd)
                if rel_dir is None:
                    continue
                if mask & _IN_IGNORED:
                    self.rel_of.pop(wd, None)
                    if self.wd_of.get(rel_dir) == wd:
                        del self.wd_of[rel_dir]
                    continue
                if not name:  # the watched folder itself was deleted or moved
                    folders.add(rel_dir)
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if mask & _IN_ISDIR:
                    if not is_hidden_name(name):
                        if mask & (_IN_MOVED_FROM | _IN_DELETE):
                            self._forget_tree(rel)
                        folders.add(rel)
                elif _is_note_name(name):
                    files.add(rel)
        return files, folders, lost

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _start_watcher():
    if not sys.platform.startswith("linux") or env_value(SEARCH_WATCH_ENV) == "0":
        return None
    try:
        return _Inotify()
    except (OSError, AttributeError):
        return None


# ----------------------------------------------------------------------------------------------------
# Keeping the index in step with the notes on disk


@dataclass
class _Index:
    kb: Path
    path: Path
    conn: sqlite3.Connection
    watcher: object = None
    checked: bool = False  # has a full comparison with the disk run in this process yet?
    known: dict | None = None  # path -> (size, mtime_ns) as indexed: spares full comparisons a table read
    version: int | None = None  # PRAGMA data_version when `known` matched the table; others' commits change it


def _read_note(abs_path: Path):
    """The note's text, or None for a file that cannot be read or looks binary (left out quietly)."""
    try:
        with open(abs_path, "rb") as f:
            return readable_text(f.read(INDEX_MAX_NOTE_BYTES))
    except OSError:
        return None


def readable_text(data: bytes) -> str | None:
    """A note's text from its bytes (BOM dropped, bad UTF-8 replaced), or None when it looks binary."""
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8-sig", errors="replace")


def _apply(idx: _Index, changed: dict, gone, wait_s: float | None = None) -> None:
    """Write changes to the index in one transaction.

    `changed` maps a path to its (size, mtime_ns), or to None to stat it now; `gone` lists removed paths.
    A note that cannot be read (any more) leaves the index. Raises _Busy if another process keeps the
    index locked for more than wait_s.
    """
    if not changed and not gone:
        return
    conn = idx.conn
    _begin_write(conn, wait_s)
    try:
        changed = _still_changed(idx, changed)
        started = time.monotonic()
        shown = False
        items = list(changed.items())
        known = idx.known if idx.known is not None else {}
        _delete(conn, list(gone))
        for rel in gone:
            known.pop(rel, None)
        for first in range(0, len(items), _BATCH):
            rows, unreadable = _prepare(idx.kb, items[first:first + _BATCH])
            _delete(conn, unreadable)
            _store(conn, rows)
            for rel in unreadable:
                known.pop(rel, None)
            known.update((r[0], (r[1], r[2])) for r in rows)
            done = first + len(rows) + len(unreadable)
            if time.monotonic() - started > INDEX_PROGRESS_AFTER_S and done < len(items):
                shown = _progress(done, len(items), shown)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        idx.known = None  # it may hold rows that were rolled back: read the table again next time
        raise
    if len(items) > 1000:  # fold a big build into the main file now instead of leaving a huge WAL
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if shown:
        _progress(len(items), len(items), shown, final=time.monotonic() - started)


_BATCH = 500  # notes read and written together: bounds memory during a big build


def _still_changed(idx: _Index, changed: dict) -> dict:
    """Under the write lock: leave out notes another process has indexed meanwhile, as they are on disk.

    This is what spares a process that waited for another's first build from indexing everything again.
    """
    version = idx.conn.execute("PRAGMA data_version").fetchone()[0]
    if version == idx.version:
        return changed
    idx.version = version
    current = {p: (s, m) for p, s, m in idx.conn.execute("SELECT path, size, mtime_ns FROM notes")}
    if idx.known is not None:
        idx.known = current
    return {p: st for p, st in changed.items() if st is None or current.get(p) != st}


def _prepare(kb: Path, items: list):
    """Read notes and turn them into index rows; also return the paths that could not be read."""
    rows, unreadable = [], []
    for rel, size_mtime in items:
        abs_path = kb / rel
        try:
            if size_mtime is None:
                size_mtime = _note_stat(abs_path, kb)
            text = _read_note(abs_path) if size_mtime else None
        except (OSError, RuntimeError):
            text = None
        if text is None:
            unreadable.append(rel)
            continue
        stem = _stem(rel)
        title = _title_of(text, stem)
        folder = rel[:len(rel) - len(rel.rsplit("/", 1)[-1])]
        if _CJK_RUN.search(text) or _CJK_RUN.search(rel):
            words = _cjk_words
        else:  # most notes have no CJK text: skip four needless passes over them
            words = str
        rows.append((rel, size_mtime[0], size_mtime[1], title, _key(title), _key(stem),
                     words(folder + stem), words(title), words(_lead_of(text)), words(text)))
    return rows, unreadable


def _progress(done: int, total: int, shown: bool, final: float | None = None) -> bool:
    """Tell the person why the first search is slow: a live counter on a terminal, two lines otherwise."""
    tty = sys.stderr.isatty()
    if final is not None:
        print(f"{chr(13) if tty else ''}knowledge-agent: indexed {total} notes in {final:.1f} s.",
              file=sys.stderr, flush=True)
    elif tty:
        print(f"\rknowledge-agent: indexing notes {done}/{total}…", file=sys.stderr, end="", flush=True)
    elif not shown:
        print(f"knowledge-agent: indexing {total} notes, this takes a moment…", file=sys.stderr, flush=True)
    return True


def _delete(conn: sqlite3.Connection, paths: list) -> None:
    pairs = [(p,) for p in paths]
    conn.executemany("DELETE FROM fts WHERE rowid IN (SELECT id FROM notes WHERE path=?)", pairs)
    conn.executemany("DELETE FROM notes WHERE path=?", pairs)


def _store(conn: sqlite3.Connection, rows: list) -> None:
    """Insert or replace notes; a note keeps its id, so the FTS row is replaced under the same rowid."""
    conn.executemany("DELETE FROM fts WHERE rowid IN (SELECT id FROM notes WHERE path=?)",
                     [(r[0],) for r in rows])
    conn.executemany(
        "INSERT INTO notes(path, size, mtime_ns, title, title_key, stem_key) VALUES (?,?,?,?,?,?) "
        "ON CONFLICT(path) DO UPDATE SET size=excluded.size, mtime_ns=excluded.mtime_ns, "
        "title=excluded.title, title_key=excluded.title_key, stem_key=excluded.stem_key",
        [r[:6] for r in rows])
    conn.executemany("INSERT INTO fts(rowid, path, title, lead, body) "
                     "SELECT id, ?, ?, ?, ? FROM notes WHERE path=?", [r[6:] + r[:1] for r in rows])


def _range(rel_dir: str):
    """SQL bounds selecting every path inside a folder ("" = everything)."""
    if not rel_dir:
        return "", "\U0010ffff"
    return rel_dir + "/", rel_dir + "0"  # "0" sorts right after "/"


def _sync_tree(idx: _Index, rel_dir: str, wait_s: float | None = None) -> None:
    """Compare the notes in a folder ("" = all) with the index by size and mtime; re-index differences.

    The whole-KB comparison uses the in-memory copy of what this process indexed. Another process
    sharing the index can only make it re-index a note twice, never miss a change: the disk decides.
    """
    on_disk = _walk(idx.kb, rel_dir, idx.watcher)
    lo, hi = _range(rel_dir)
    indexed = idx.known if not rel_dir else None
    if indexed is None:
        version = idx.conn.execute("PRAGMA data_version").fetchone()[0]
        indexed = {p: (s, m) for p, s, m in idx.conn.execute(
            "SELECT path, size, mtime_ns FROM notes WHERE path >= ? AND path < ?", (lo, hi))}
        if not rel_dir:
            idx.known, idx.version = indexed, version
    changed = {p: st for p, st in on_disk.items() if indexed.get(p) != st}
    gone = [p for p in indexed if p not in on_disk]
    _apply(idx, changed, gone, wait_s)


def _stop_watching(idx: _Index) -> None:
    if idx.watcher is not None:
        idx.watcher.close()
        idx.watcher = None


def _refresh(idx: _Index) -> None:
    """Bring the index up to date with the disk before a search or listing."""
    if not idx.checked or idx.watcher is None:
        try:
            _sync_tree(idx, "")
        except OSError:  # inotify watch limit reached: fall back to full comparisons
            _stop_watching(idx)
            _sync_tree(idx, "")
        idx.checked = True
        return
    files, folders, lost = idx.watcher.changes()
    if lost:
        idx.checked = False
        _refresh(idx)
        return
    try:
        for rel_dir in sorted(folders):
            if not any(rel_dir.startswith(f + "/") for f in folders):
                _sync_tree(idx, rel_dir)
        files = {f: None for f in files if not any(f.startswith(d + "/") for d in folders)}
        _apply(idx, files, [])
    except OSError:
        _stop_watching(idx)
        _sync_tree(idx, "")
    except BaseException:  # Ctrl+C or a database error: the events are used up, so compare in full next time
        idx.checked = False
        raise


# ----------------------------------------------------------------------------------------------------
# Open indexes of this process (a few, least recently used closed first)

_OPEN = OrderedDict()
_LOCK = threading.RLock()


def _get_index(kb: Path) -> _Index:
    kb = Path(kb).resolve()
    path = index_path(kb)
    key = (str(kb), str(path))
    idx = _OPEN.get(key)
    if idx is not None:
        _OPEN.move_to_end(key)
        return idx
    idx = _Index(kb, path, _open_db(path), _start_watcher())
    _OPEN[key] = idx
    while len(_OPEN) > INDEX_OPEN_MAX:
        _close(_OPEN.popitem(last=False)[1])
    return idx


def _close(idx: _Index) -> None:
    if idx.watcher is not None:
        idx.watcher.close()
    idx.conn.close()


def close_indexes() -> None:
    """Close every open index and watcher (tests and benchmarks use this to start cold)."""
    with _LOCK:
        while _OPEN:
            _close(_OPEN.popitem()[1])


def _with_index(kb: Path, action):
    """Run action(index) with a fresh index; a corrupt index is rebuilt once. Never raises."""
    with _LOCK:
        for attempt in (1, 2):
            idx = None
            try:
                idx = _get_index(kb)
                try:
                    _refresh(idx)
                except _Busy:
                    return action(idx) + _still_indexing(idx)
                return action(idx)
            except sqlite3.DatabaseError as exc:
                if idx is None or attempt == 2 or not _is_corruption(exc):
                    _notice(f"search index failed ({exc}); if it persists, delete {index_path(kb)}")
                    return (f"Error: the search index failed ({exc}). Try again; if it persists, the person "
                            "can delete the index file named on their screen (it is rebuilt).")
                _notice(f"search index {idx.path} is damaged ({exc}); rebuilding it.")
                _OPEN.pop((str(idx.kb), str(idx.path)), None)
                _close(idx)
                _remove_index(idx.path)
            except OSError as exc:
                return f"Error: cannot read the notes folder ({exc.strerror or exc})."


def _still_indexing(idx: _Index) -> str:
    """Another process has been indexing for INDEX_WAIT_S already: answer from what the index holds now."""
    idx.checked = False  # changes noticed in this round were not written: compare everything next time
    _notice("the search index is still being updated by another knowledge-agent; searching what it holds.")
    return ("\n\n(Another knowledge-agent process is still indexing these notes, so this answer may miss "
            "some. Try again in a minute.)")


def _folder(kb: Path, folder) -> str:
    """The folder argument as a KB-relative path ("" = whole KB); raises ValueError with a message."""
    if folder is None or str(folder).strip() in ("", ".", "/"):
        return ""
    raw = Path(str(folder).strip())
    if raw.is_absolute():
        try:
            raw = raw.resolve().relative_to(Path(kb).resolve())
        except ValueError:
            raise ValueError(f"folder '{folder}' is outside the notes folder.") from None
    parts = [p for p in PurePosixPath(str(raw).replace("\\", "/")).parts if p not in ("", ".", "/")]
    if ".." in parts:
        raise ValueError(f"folder '{folder}' leaves the notes folder; give a folder inside it.")
    rel = "/".join(parts)
    if rel and not (Path(kb) / rel).is_dir():
        raise ValueError(f"there is no folder '{rel}' in the notes. Call list_notes to see the folders.")
    return rel


# ----------------------------------------------------------------------------------------------------
# Searching

_RANK_SQL = f"""
SELECT n.id, n.path, n.title FROM fts JOIN notes n ON n.id = fts.rowid
WHERE fts MATCH ? AND n.path >= ? AND n.path < ? {{exclude}}
ORDER BY (n.title_key = ? OR n.stem_key = ?) DESC,
         bm25(fts, {SEARCH_WEIGHT_PATH}, {SEARCH_WEIGHT_TITLE}, {SEARCH_WEIGHT_LEAD}, {SEARCH_WEIGHT_BODY})
LIMIT ?"""
_COUNT_SQL = """SELECT count(*) FROM fts JOIN notes n ON n.id = fts.rowid
WHERE fts MATCH ? AND n.path >= ? AND n.path < ?"""


def _count(conn, match: str, lo: str, hi: str) -> int:
    if not lo:  # the whole KB: every FTS row is a note, and skipping the join is ~5x faster on 30k matches
        return conn.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (match,)).fetchone()[0]
    return conn.execute(_COUNT_SQL, (match, lo, hi)).fetchone()[0]


def _ranked(conn, match: str, lo: str, hi: str, qkey: str, limit: int, exclude=()):
    sql = _RANK_SQL.format(exclude=f"AND n.id NOT IN ({','.join('?' * len(exclude))})" if exclude else "")
    return conn.execute(sql, (match, lo, hi, *exclude, qkey, qkey, limit)).fetchall()


def search_notes(kb: Path, query: str, folder: str | None = None, limit: int = SEARCH_MAX_HITS) -> str:
    """Best notes for `query` (all words first, then any word), with their best lines; bounded text."""
    query = query or ""
    terms = _parse_query(query)
    if not terms:
        return "Error: the search query has no words to look for. Give one or more keywords."
    try:
        rel_dir = _folder(kb, folder)
        limit = max(1, min(int(limit), 50))
    except (ValueError, TypeError) as exc:
        return f"Error: {exc}"
    return _with_index(kb, lambda idx: _search(idx, terms, query, rel_dir, limit))


def _search(idx: _Index, terms: list, query: str, rel_dir: str, limit: int) -> str:
    """Rank in tiers: each chunk as a phrase, then every word in any order, then any word."""
    conn = idx.conn
    lo, hi = _range(rel_dir)
    qkey = _key(query.replace('"', " "))
    required = [t for t in terms if not t.optional]
    as_phrases = " AND ".join(t.fts for t in required)
    every_word = " AND ".join(dict.fromkeys(p for t in required for p in t.every))
    any_word = " OR ".join(dict.fromkeys(p for t in terms for p in t.loose))
    hits = []
    for match in dict.fromkeys((as_phrases, every_word)):
        if len(hits) < limit:
            hits += _ranked(conn, match, lo, hi, qkey, limit - len(hits), [h[0] for h in hits])
    total = _count(conn, every_word, lo, hi)
    some_only = 0
    if len(hits) < limit and any_word not in (as_phrases, every_word):
        hits += _ranked(conn, any_word, lo, hi, qkey, limit - len(hits), [h[0] for h in hits])
        some_only = _count(conn, any_word, lo, hi) - total
    where = f" in {rel_dir}/" if rel_dir else ""
    if not hits:
        return f"No notes{where} match {_quoted(query)}. Try fewer or different words."
    return _format_hits(idx.kb, terms, hits, total, some_only, where, query)


def _line_patterns(terms: list) -> list:
    """Patterns marking the lines to show; a line holding a whole Chinese run also holds its 2-char words."""
    patterns = set()
    for word in {w for t in terms for w in t.words}:
        for piece in _SCRIPT_PIECE.findall(word):
            if _CJK_RUN.fullmatch(piece):
                patterns.update(re.escape(u) for u in {piece, *_units(piece)})
            else:  # match the word's start, so "archives" also marks "archive" lines (the index stems words)
                core = piece[:-1] if len(piece) > 4 and piece.endswith("s") else piece
                patterns.add(r"(?<![^\W_])(?i:" + re.escape(core) + ")")
    return [re.compile(p) for p in patterns]


def _best_lines(abs_path: Path, patterns: list) -> list:
    text = _read_note(abs_path)
    if text is None:
        return []
    scored = []
    for number, line in enumerate(text.splitlines(), 1):
        found = [m for m in (p.search(line) for p in patterns) if m]
        if found and line.strip():
            scored.append((-len(found), number, line, min(m.start() for m in found)))
    if not scored:  # matched by path, title or word form only: show the opening line for context
        scored = [(0, n, line, 0) for n, line in enumerate(text.splitlines()[:50], 1)
                  if line.strip() and not _HEADING.match(line)][:1]
    best = sorted(scored)[:SEARCH_LINES_PER_HIT]
    return [(number, _clip(line, start)) for _, number, line, start in sorted(best, key=lambda s: s[1])]


def _clip(line: str, start: int) -> str:
    line = line.rstrip()
    if len(line) <= SEARCH_LINE_CHARS:
        return line.strip()
    begin = max(0, min(start - SEARCH_LINE_CHARS // 4, len(line) - SEARCH_LINE_CHARS))
    piece = line[begin:begin + SEARCH_LINE_CHARS].strip()
    return ("…" if begin else "") + piece + ("…" if begin + SEARCH_LINE_CHARS < len(line) else "")


def _quoted(query: str) -> str:
    """The query as echoed in the answer's first line: on one line, and cut if it is long."""
    query = " ".join(query.split())
    if len(query) > SEARCH_QUERY_ECHO_CHARS:
        query = query[:SEARCH_QUERY_ECHO_CHARS].rstrip() + "…"
    return f"'{query}'" if '"' in query else f'"{query}"'


def _notes(count: int) -> str:
    return f"{count} note" + ("" if count == 1 else "s")


def _format_hits(kb: Path, terms, hits, total_all: int, some_only: int, where: str, query: str) -> str:
    """One block per hit: "path — title", then its best lines as "  line-number: text"; bounded."""
    matched = total_all + some_only
    if total_all:
        head = f"{_notes(matched)}{where} {'matches' if matched == 1 else 'match'} {_quoted(query)}"
        if some_only:
            head += f" ({total_all} with every word)"
    else:
        have = "has" if matched == 1 else "have"
        head = f"No note{where} has every word of {_quoted(query)}; {_notes(matched)} {have} some of them"
    patterns = _line_patterns(terms)
    blocks, used = [], len(head) + 80  # room for the head and the closing "more" line
    for _id, rel, title in hits:
        lines = _best_lines(kb / rel, patterns)
        block = f"{rel} — {title}" + "".join(f"\n  {n}: {text}" for n, text in lines)
        if used + len(block) + 2 > SEARCH_OUTPUT_CHARS:
            if blocks:
                break
            block = block[:SEARCH_OUTPUT_CHARS - used - 2]
        blocks.append(block)
        used += len(block) + 2
    out = [f"{head}, best first:", *blocks]
    more = matched - len(blocks)
    if more > 0:
        out.append(f"({more} more matched; add words or a folder to narrow the search.)")
    return "\n\n".join(out)


# ----------------------------------------------------------------------------------------------------
# Listing and the agent's own writes


def list_notes(kb: Path, folder: str | None = None) -> str:
    """How many notes there are (per subfolder) and the newest ones first, capped and bounded."""
    try:
        rel_dir = _folder(kb, folder)
    except ValueError as exc:
        return f"Error: {exc}"
    return _with_index(kb, lambda idx: _listing(idx, rel_dir))


def _listing(idx: _Index, rel_dir: str) -> str:
    conn = idx.conn
    lo, hi = _range(rel_dir)
    where = f"in {rel_dir}/" if rel_dir else "in the knowledge base"
    total = conn.execute("SELECT count(*) FROM notes WHERE path >= ? AND path < ?", (lo, hi)).fetchone()[0]
    if not total:
        return f"No notes {where}."
    start = len(lo) + 1
    folders = conn.execute(
        "SELECT substr(path, ?, instr(substr(path, ?), '/') - 1) AS sub, count(*) FROM notes "
        "WHERE path >= ? AND path < ? AND instr(substr(path, ?), '/') > 0 GROUP BY sub ORDER BY sub",
        (start, start, lo, hi, start)).fetchall()
    tail = "Folders: " + ", ".join(f"{name}/ ({count})" for name, count in folders) if folders else ""
    out = [f"{total} note(s) {where}, newest first:"]
    used = len(out[0]) + len(tail) + 100
    for rel, title, mtime_ns in conn.execute(
            "SELECT path, title, mtime_ns FROM notes WHERE path >= ? AND path < ? "
            "ORDER BY mtime_ns DESC, path LIMIT ?", (lo, hi, LIST_MAX_NOTES)):
        day = time.strftime("%Y-%m-%d", time.localtime(mtime_ns / 1e9))
        line = f"{rel} — {title}  ({day})"
        if used + len(line) + 1 > LIST_OUTPUT_CHARS:
            break
        out.append(line)
        used += len(line) + 1
    shown = len(out) - 1
    if total > shown:
        narrow = "give one of the folders below" if folders else "search_notes finds the others by their words"
        out.append(f"… {total - shown} more not shown; {narrow}.")
    if tail:
        out.append(tail)
    return "\n".join(out)


def note_changed(kb: Path, rel_path: str) -> None:
    """The agent wrote, created or deleted this note: update the index now. Never raises."""
    try:
        with _LOCK:
            key = (str(Path(kb).resolve()), str(index_path(kb)))
            idx = _OPEN.get(key)
            if idx is None:
                return  # nothing open in this process: the next search compares the disk anyway
            parts = [p for p in PurePosixPath(str(rel_path).replace("\\", "/")).parts if p != "."]
            if not parts or any(p == ".." or p == "/" or is_hidden_name(p) for p in parts):
                return  # not a path inside the notes: nothing of ours to update
            rel = "/".join(parts)
            if (idx.kb / rel).is_dir():  # no waiting for another process: the next search catches up
                _sync_tree(idx, rel, wait_s=0)
            elif is_note_file(rel):
                _apply(idx, {rel: None}, [], wait_s=0)
    except Exception:  # the next search's freshness check repairs whatever this missed
        pass
