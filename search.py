"""Find notes fast: a SQLite FTS5 index of the notes folder, kept fresh, ranked, bounded.

search_notes and list_notes are the agent's tools of those names; note_changed hears of the tools' own
changes. Indexed per note: path, title, opening paragraph ("lead") and body, from its first 2 MB. Runs of
Chinese, Japanese or Korean become overlapping 2-character words, in notes and queries alike: SQLite's
unicode61 tokenizer would see a whole sentence as one word. One index file per notes folder in index_dir,
in WAL mode so processes can share it; a damaged or outdated one is rebuilt with a notice through `warn`
(the caller may replace it). Freshness: the first search in a process compares every note's size and mtime
with the index, later ones ask Linux inotify which notes changed (without it, every search compares).
Ranking: BM25 with path, title and lead above the body; a note whose title or file name is the whole query
comes first, and notes with every word before notes with some.
It never writes inside the notes folder nor reads outside it; what the model can fix raises ToolError.
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
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from notes import NOTE_SUFFIXES, ToolError, is_hidden_name, is_note_path, readable_text, rel, safe_folder

SEARCH_MAX_HITS = 10
SEARCH_LINES_PER_HIT = 3
SEARCH_OUTPUT_CHARS = 4000
SEARCH_LINE_CHARS = 160  # a shown line is cut to about this many characters around the match
SEARCH_LEAD_CHARS = 400  # the opening paragraph, weighted as "lead"
SEARCH_QUERY_ECHO_CHARS = 80  # the query is repeated in the answer's first line, cut to this length
SEARCH_QUERY_MAX_WORDS = 64  # words (Chinese: 2-character words) of a query searched; the rest is ignored
SEARCH_WEIGHTS = (5.0, 10.0, 5.0, 1.0)  # BM25 weights of path, title, lead, body
LIST_MAX_NOTES = 200
LIST_OUTPUT_CHARS = 6000
INDEX_MAX_NOTE_BYTES = 2_000_000  # only the first 2 MB of a huge note are indexed
INDEX_BATCH = 500  # notes read and written together: bounds memory during a big build
INDEX_PROGRESS_AFTER_S = 1.0  # a build running longer than this tells the person
INDEX_BUSY_TIMEOUT_S = 5.0  # SQLite's own wait for another process's write lock
INDEX_WAIT_S = 120  # then a search says so and waits this long for another process's build
SCHEMA_VERSION = "2"  # bump when the tables or the text preparation change: old indexes get rebuilt


def warn(message: str) -> None:
    """A one-line notice for the person; the caller may replace it (search.warn = ...)."""
    print(f"knowledge-agent: {message}", file=sys.stderr, flush=True)


# --- Which files are notes ---

def _walk(kb: Path, watcher=None) -> dict:
    """Map every note to (size, mtime_ns), skipping hidden names; watch each folder before reading it."""
    found, stack = {}, [""]
    while stack:
        rel_dir = stack.pop()
        if watcher is not None:
            watcher.watch(kb / rel_dir, rel_dir)
        try:
            entries = list(os.scandir(kb / rel_dir))
        except OSError:
            continue  # vanished or unreadable folder: nothing in it can be searched
        for entry in entries:
            name = entry.name
            if name[0] == "." and name[:2] != "..":
                continue  # hidden (is_hidden_name inlined: this runs once per note per comparison)
            path = f"{rel_dir}/{name}" if rel_dir else name
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)  # linked folders are not followed: no loops, no escapes
                elif name.lower().endswith(NOTE_SUFFIXES) and (st := _note_stat(entry.path, kb)):
                    path.encode("utf-8")  # a name that is not valid Unicode cannot be stored or shown
                    found[path] = st
            except (OSError, RuntimeError, UnicodeEncodeError):  # RuntimeError: a symlink loop
                continue
    return found


def _note_stat(path: str, kb: Path):
    """(size, mtime_ns) of a regular note, or None: FIFOs, sockets and links leading out are no notes."""
    st = os.stat(path, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        if not Path(path).resolve().is_relative_to(kb):
            return None
        st = os.stat(path)
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def _read_note(path: Path):
    """The text of a note's first 2 MB, or None if it cannot be read or looks binary."""
    try:
        with open(path, "rb") as f:
            return readable_text(f.read(INDEX_MAX_NOTE_BYTES))
    except OSError:
        return None


# --- Text preparation shared by the index and the queries ---

_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")
_SCRIPT_PIECE = re.compile(f"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")  # a word cut where the script changes
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_FRONT_TITLE = re.compile(r"\A---\s*\n(?:.*\n)*?title:\s*['\"]?(.+?)['\"]?\s*\n(?:.*\n)*?---", re.M)
_WORD = re.compile(r"[^\W_]+")
_STOPWORDS = frozenset("""a an and are as at be by for from how i in is it of on or that the this to was what
when where which who why with""".split())


def _cjk_words(text: str, tails: str = "all") -> str:
    """Rewrite each CJK run as overlapping 2-character words: 归档实用 -> 归档 档实 实用 用.

    In the index ("all") every run also ends with its last character alone, so a 1-character query (a
    prefix) finds a character at the end of a run too. A query ("inner") leaves that tail off where its
    text ends, so a phrase still lines up with a longer run in a note, and 解压zip with 解压 压 zip. "none"
    gives the separate words inside one word: 解压zip文件 -> 解压 zip 文件.
    """
    end = len(text.rstrip())

    def grams(match):
        run = match.group()
        if len(run) == 1:
            return f" {run} "
        words = [run[i:i + 2] for i in range(len(run) - 1)]
        if tails == "all" or (tails == "inner" and match.end() < end):
            words.append(run[-1])
        return " " + " ".join(words) + " "
    return _CJK_RUN.sub(grams, text)


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


@dataclass
class _Term:
    fts: str          # the chunk as one FTS5 phrase, quoted, ready for MATCH: the best kind of match
    every: list       # its words as separate phrases, all wanted in any order (a CJK run: its 2-char words)
    loose: list       # what the "any word" fallback looks for: each word, unless the person quoted a phrase
    words: list       # lowercased words / CJK strings used to pick the lines shown
    optional: bool    # a stopword: helps ranking, never required


def _phrase(words: list) -> str:
    spaced = _cjk_words(" ".join(words), "inner").split()
    phrase = '"' + " ".join(spaced) + '"'
    if len(spaced[-1]) == 1 and _CJK_RUN.fullmatch(spaced[-1]):
        phrase += "*"  # a lone CJK character is the start of a 2-character word in the index
    return phrase


def _chunk_words(chunk: str):
    words = [w.casefold() for w in _WORD.findall(chunk)]
    return words, list(dict.fromkeys(u for w in words for u in _cjk_words(w, "none").split()))


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


# --- The index file ---

def index_path(kb: Path, index_dir: Path) -> Path:
    """This notes folder's index file: named after a hash of its full path, so each folder has its own."""
    kb = Path(kb).resolve()
    digest = hashlib.sha256(str(kb).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(index_dir) / f"{kb.name or 'root'}-{digest}.sqlite"


# Every statement may run twice: two processes opening a new index at once both try to create it.
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
_DAMAGE = ("malformed", "not a database", "no such table", "corrupt", "another version")  # in error texts


def _run_waiting(conn: sqlite3.Connection, sql: str, patient: bool = True) -> None:
    """Run sql; if another process holds the index longer than SQLite's own wait, as a first build of many
    notes does, say so and wait up to INDEX_WAIT_S: whoever waited then finds that work done."""
    try:
        conn.execute(sql)
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) or not patient:
            raise
        warn("another knowledge-agent is updating the search index of these notes; "
             f"waiting for it (at most {INDEX_WAIT_S:.0f} s)…")
        conn.execute(f"PRAGMA busy_timeout = {int(INDEX_WAIT_S * 1000)}")
        conn.execute(sql)  # on failure the caller closes this connection, long wait and all
        conn.execute(f"PRAGMA busy_timeout = {int(INDEX_BUSY_TIMEOUT_S * 1000)}")


def _connect(path: Path) -> sqlite3.Connection:
    """Open (or create) the index; raise sqlite3.DatabaseError if it is damaged or outdated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=INDEX_BUSY_TIMEOUT_S, isolation_level=None)
    try:
        _run_waiting(conn, "PRAGMA journal_mode=WAL")  # a new file: the process creating it may hold it
        conn.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; at worst the last change is re-indexed
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            _run_waiting(conn, "BEGIN IMMEDIATE")
            with conn:  # commits, or rolls back on an error
                for statement in _SCHEMA:
                    conn.execute(statement)
        if conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone() != (SCHEMA_VERSION,):
            raise sqlite3.DatabaseError("it was made by another version of knowledge-agent")
        return conn
    except BaseException:
        conn.close()
        raise


# --- Linux inotify through ctypes: after one full comparison, a search re-checks only what changed ---

_IN_CHANGED = 0x2 | 0x4 | 0x8  # IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE
_IN_ENTRIES = 0x40 | 0x80 | 0x100 | 0x200  # IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE
_IN_SELF, _IN_OVERFLOW, _IN_ISDIR = 0x400 | 0x800, 0x4000, 0x40000000  # *_SELF: the folder itself went
_WATCH_MASK = _IN_CHANGED | _IN_ENTRIES | _IN_SELF | 0x01000000 | 0x02000000  # IN_ONLYDIR, IN_DONT_FOLLOW
_EVENT = struct.Struct("iIII")


class _Inotify:
    """One inotify instance watching the folders of the last walk; names the notes that changed since."""

    def __init__(self):
        self.libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.folder_of = {}  # watch descriptor -> folder relative to the notes

    def watch(self, abs_dir: Path, rel_dir: str) -> None:
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(abs_dir), _WATCH_MASK)
        if wd >= 0:
            self.folder_of[wd] = rel_dir
        elif ctypes.get_errno() not in (2, 20):  # ENOENT, ENOTDIR: gone meanwhile, the walk skips it too
            raise OSError(ctypes.get_errno(), "inotify_add_watch failed")  # the watch limit, most likely

    def changes(self) -> tuple[set, bool]:
        """Drain the events: (note paths that changed, whether a folder changed or events were lost)."""
        notes, folders = set(), False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return notes, folders
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = os.fsdecode(data[offset + _EVENT.size:offset + _EVENT.size + length].rstrip(b"\0"))
                offset += _EVENT.size + length
                if mask & (_IN_OVERFLOW | _IN_SELF) or (mask & _IN_ISDIR and mask & _IN_ENTRIES
                                                        and not is_hidden_name(name)):
                    folders = True
                elif wd in self.folder_of and not mask & _IN_ISDIR and is_note_path(name):
                    notes.add(f"{self.folder_of[wd]}/{name}".lstrip("/"))


# --- Keeping the one open index in step with the notes on disk ---

@dataclass
class _Index:
    kb: Path
    path: Path
    watch: bool  # inotify wanted; `can_watch` turns False where it is missing or at its watch limit
    conn: sqlite3.Connection
    can_watch: bool = sys.platform.startswith("linux")
    watcher: _Inotify | None = None
    checked: bool = False  # has the watcher seen every folder since the last full comparison?
    known: dict | None = None  # path -> (size, mtime_ns) as indexed: spares each comparison a table read
    version: int = -1  # PRAGMA data_version when `known` was read; other processes' commits change it


_INDEX: _Index | None = None  # the one index this process has open


def _stop_watching(idx: _Index) -> None:
    if idx.watcher is not None:
        os.close(idx.watcher.fd)
        idx.watcher = None


def close_index() -> None:
    """Close the open index and its watcher (tests and benchmarks use this to start cold)."""
    global _INDEX
    if _INDEX is not None:
        _stop_watching(_INDEX)
        _INDEX.conn.close()
        _INDEX = None


def _with_index(kb: Path, index_dir: Path, watch: bool, action) -> str:
    """action(index) on an index brought up to date with the disk; a damaged or outdated one is rebuilt."""
    global _INDEX
    path = index_path(kb, index_dir)
    for attempt in (1, 2):
        try:
            if _INDEX is None or (_INDEX.kb, _INDEX.path, _INDEX.watch) != (kb, path, watch):
                close_index()
                _INDEX = _Index(kb, path, watch, _connect(path))
            _refresh(_INDEX)
            return action(_INDEX)
        except (OSError, sqlite3.Error) as exc:
            close_index()
            if attempt == 2 or not any(s in str(exc).lower() for s in _DAMAGE):
                warn(f"search index {path} failed: {exc}")
                raise ToolError(f"the search index failed ({exc}); the notice on the person's screen says "
                                "where it is.") from None
            warn(f"search index {path} cannot be used ({exc}); rebuilding it.")
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


def _known(idx: _Index) -> dict:
    """What the index holds, path -> (size, mtime_ns); read again only after another process wrote."""
    version = idx.conn.execute("PRAGMA data_version").fetchone()[0]
    if idx.known is None or version != idx.version:
        idx.known = {p: (s, m) for p, s, m in idx.conn.execute("SELECT path, size, mtime_ns FROM notes")}
        idx.version = version
    return idx.known


def _refresh(idx: _Index) -> None:
    """Bring the index up to date with the disk before a search or listing."""
    if idx.checked and idx.watcher is not None:
        notes, folders = idx.watcher.changes()
        idx.checked = False  # until these are written: Ctrl+C or a lock must not lose them
        if not folders:
            _apply(idx, dict.fromkeys(notes), [])
            idx.checked = True
            return
    _stop_watching(idx)  # a new watcher watches exactly the folders this walk finds
    try:
        idx.watcher = _Inotify() if idx.watch and idx.can_watch else None
        on_disk = _walk(idx.kb, idx.watcher)
    except (OSError, AttributeError):  # no inotify here, or its watch limit: compare on every search
        _stop_watching(idx)
        idx.can_watch, on_disk = False, _walk(idx.kb)
    known = _known(idx)
    _apply(idx, {p: st for p, st in on_disk.items() if known.get(p) != st}, [p for p in known if p not in on_disk])
    idx.checked = True


def _apply(idx: _Index, changed: dict, gone: list, patient: bool = True) -> None:
    """Write changes in one transaction. `changed` maps a path to its (size, mtime_ns) from a walk, or to
    None when the agent just wrote it: then it is indexed whatever its size and mtime say."""
    if not changed and not gone:
        return
    started, told = time.monotonic(), False
    _run_waiting(idx.conn, "BEGIN IMMEDIATE", patient)
    try:
        with idx.conn:
            known = _known(idx)  # another process may have indexed these while we waited for the lock
            items = [(p, st) for p, st in changed.items() if st is None or known.get(p) != st]
            gone = [p for p in gone if p in known]
            for first in range(0, len(items), INDEX_BATCH):
                rows, unreadable = _prepare(idx.kb, items[first:first + INDEX_BATCH])
                _store(idx.conn, rows, [])
                gone += unreadable
                known.update((r[0], (r[1], r[2])) for r in rows)
                if not told and time.monotonic() - started > INDEX_PROGRESS_AFTER_S:
                    warn(f"indexing {len(items)} notes, this takes a moment…")
                    told = True
            _store(idx.conn, [], gone)
            for path in gone:
                known.pop(path, None)
    except BaseException:
        idx.known = None  # it may hold rows that were rolled back: read the table again next time
        raise
    if len(items) > 1000:  # fold a big build into the main file now instead of leaving a huge WAL
        idx.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if told:
        warn(f"indexed {len(items)} notes in {time.monotonic() - started:.1f} s.")


def _prepare(kb: Path, items: list):
    """Index rows for these notes, and the paths that could not be read (those leave the index)."""
    rows, unreadable = [], []
    for path, size_mtime in items:
        try:
            size_mtime = size_mtime or _note_stat(str(kb / path), kb)
            text = _read_note(kb / path) if size_mtime else None
        except (OSError, RuntimeError):
            text = None
        if text is None:
            unreadable.append(path)
            continue
        name = path.rsplit("/", 1)[-1]
        stem = next((name[:-len(s)] for s in NOTE_SUFFIXES if name.lower().endswith(s)), name)
        title = _title_of(text, stem)
        words = _cjk_words if _CJK_RUN.search(text) or _CJK_RUN.search(path) else str  # most have no CJK
        rows.append((path, *size_mtime, title, _key(title), _key(stem), words(path[:-len(name)] + stem),
                     words(title), words(_lead_of(text)), words(text)))
    return rows, unreadable


def _store(conn: sqlite3.Connection, rows: list, gone: list) -> None:
    """Remove the `gone` paths; insert or replace `rows`, each keeping its id (the FTS rowid)."""
    conn.executemany("DELETE FROM fts WHERE rowid IN (SELECT id FROM notes WHERE path=?)",
                     [(p,) for p in gone] + [(r[0],) for r in rows])
    conn.executemany("DELETE FROM notes WHERE path=?", [(p,) for p in gone])
    conn.executemany(
        "INSERT INTO notes(path, size, mtime_ns, title, title_key, stem_key) VALUES (?,?,?,?,?,?) "
        "ON CONFLICT(path) DO UPDATE SET size=excluded.size, mtime_ns=excluded.mtime_ns, "
        "title=excluded.title, title_key=excluded.title_key, stem_key=excluded.stem_key",
        [r[:6] for r in rows])
    conn.executemany("INSERT INTO fts(rowid, path, title, lead, body) "
                     "SELECT id, ?, ?, ?, ? FROM notes WHERE path=?", [r[6:] + r[:1] for r in rows])


def _folder(kb: Path, folder: str | None) -> str:
    """The folder relative to the notes ("" = all); ToolError if there is no such folder."""
    if not (folder or "").strip() or folder.strip() == ".":
        return ""
    try:
        path = safe_folder(kb, folder)
        if path.is_dir():
            return "" if path == kb else rel(kb, path)
    except ValueError:  # a name the system cannot encode
        pass
    raise ToolError(f"there is no folder '{folder}' in the notes. Call list_notes to see the folders.")


def _range(rel_dir: str):
    """SQL bounds selecting every path inside a folder ("" = everything); "0" sorts right after "/"."""
    return (rel_dir + "/", rel_dir + "0") if rel_dir else ("", "\U0010ffff")


# --- Searching ---

_RANK_SQL = f"""SELECT n.id, n.path, n.title FROM fts JOIN notes n ON n.id = fts.rowid
WHERE fts MATCH ? AND n.path >= ? AND n.path < ? {{exclude}}
ORDER BY (n.title_key = ? OR n.stem_key = ?) DESC, bm25(fts, {', '.join(map(str, SEARCH_WEIGHTS))}) LIMIT ?"""


def _count(conn, match: str, lo: str, hi: str) -> int:
    if not lo:  # all notes: every FTS row is a note, and skipping the join is ~5x faster on 30k matches
        return conn.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (match,)).fetchone()[0]
    return conn.execute("SELECT count(*) FROM fts JOIN notes n ON n.id = fts.rowid "
                        "WHERE fts MATCH ? AND n.path >= ? AND n.path < ?", (match, lo, hi)).fetchone()[0]


def _ranked(conn, match: str, lo: str, hi: str, qkey: str, limit: int, exclude: list):
    sql = _RANK_SQL.format(exclude=f"AND n.id NOT IN ({','.join('?' * len(exclude))})" if exclude else "")
    return conn.execute(sql, (match, lo, hi, *exclude, qkey, qkey, limit)).fetchall()


def search_notes(kb: Path, index_dir: Path, query: str, folder: str | None = None, watch: bool = True) -> str:
    """Best notes for `query` (all words first, then any word), with their best lines; bounded text."""
    kb, query = Path(kb).resolve(), (query or "").encode("utf-8", "replace").decode("utf-8")  # lone surrogates
    terms = _parse_query(query)
    if not terms:
        raise ToolError("the search query has no words to look for. Give one or more keywords.")
    rel_dir = _folder(kb, folder)
    return _with_index(kb, index_dir, watch, lambda idx: _search(idx, terms, query, rel_dir))


def _search(idx: _Index, terms: list, query: str, rel_dir: str) -> str:
    """Rank in tiers: each chunk as a phrase, then every word in any order, then any word."""
    conn, limit, (lo, hi) = idx.conn, SEARCH_MAX_HITS, _range(rel_dir)
    qkey = _key(query.replace('"', " "))
    required = [t for t in terms if not t.optional]
    as_phrases = " AND ".join(t.fts for t in required)
    every_word = " AND ".join(dict.fromkeys(p for t in required for p in t.every))
    any_word = " OR ".join(dict.fromkeys(p for t in terms for p in t.loose))
    hits = []
    for match in dict.fromkeys((as_phrases, every_word)):
        if len(hits) < limit:
            hits += _ranked(conn, match, lo, hi, qkey, limit - len(hits), [h[0] for h in hits])
    total, some_only = _count(conn, every_word, lo, hi), 0
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
                patterns.update(re.escape(u) for u in {piece, *_cjk_words(piece, "none").split()})
            else:  # match the word's start, so "archives" also marks "archive" lines (the index stems words)
                core = piece[:-1] if len(piece) > 4 and piece.endswith("s") else piece
                patterns.add(r"(?<![^\W_])(?i:" + re.escape(core) + ")")
    return [re.compile(p) for p in patterns]


def _best_lines(path: Path, patterns: list) -> list:
    """(line number, clipped line) of the lines matching the most patterns, in note order."""
    lines = (_read_note(path) or "").splitlines()
    scored = []
    for number, line in enumerate(lines, 1):
        found = [m for m in (p.search(line) for p in patterns) if m]
        if found and line.strip():
            scored.append((-len(found), number, line, min(m.start() for m in found)))
    if not scored:  # matched by path, title or word form only: show the opening line for context
        scored = [(0, n, line, 0) for n, line in enumerate(lines[:50], 1)
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


def _format_hits(kb: Path, terms, hits, total_all: int, some_only: int, where: str, query: str) -> str:
    """One block per hit: "path — title", then its best lines as "  line-number: text"; bounded."""
    matched = total_all + some_only
    notes = f"{matched} note" + ("" if matched == 1 else "s")
    if total_all:
        head = f"{notes}{where} {'matches' if matched == 1 else 'match'} {_quoted(query)}"
        head += f" ({total_all} with every word)" if some_only else ""
    else:
        head = (f"No note{where} has every word of {_quoted(query)}; {notes} "
                f"{'has' if matched == 1 else 'have'} some of them")
    patterns = _line_patterns(terms)
    blocks, used = [], len(head) + 80  # room for the head and the closing "more" line
    for _id, path, title in hits:
        block = f"{path} — {title}" + "".join(f"\n  {n}: {text}" for n, text in _best_lines(kb / path, patterns))
        if used + len(block) + 2 > SEARCH_OUTPUT_CHARS:
            if blocks:
                break
            block = block[:SEARCH_OUTPUT_CHARS - used - 2]
        blocks.append(block)
        used += len(block) + 2
    more = matched - len(blocks)
    tail = [f"({more} more matched; add words or a folder to narrow the search.)"] if more > 0 else []
    return "\n\n".join([f"{head}, best first:", *blocks, *tail])


# --- Listing, and the agent's own changes ---

def list_notes(kb: Path, index_dir: Path, folder: str | None = None, watch: bool = True) -> str:
    """How many notes there are (per subfolder) and the newest ones first, capped and bounded."""
    kb = Path(kb).resolve()
    rel_dir = _folder(kb, folder)
    return _with_index(kb, index_dir, watch, lambda idx: _listing(idx.conn, rel_dir))


def _listing(conn: sqlite3.Connection, rel_dir: str) -> str:
    (lo, hi), where = _range(rel_dir), f"in {rel_dir}/" if rel_dir else "in the knowledge base"
    total = conn.execute("SELECT count(*) FROM notes WHERE path >= ? AND path < ?", (lo, hi)).fetchone()[0]
    if not total:
        return f"No notes {where}."
    start = len(lo) + 1
    folders = conn.execute(
        "SELECT substr(path, ?, instr(substr(path, ?), '/') - 1) AS sub, count(*) FROM notes "
        "WHERE path >= ? AND path < ? AND instr(substr(path, ?), '/') > 0 GROUP BY sub ORDER BY sub",
        (start, start, lo, hi, start)).fetchall()
    tail = ["Folders: " + ", ".join(f"{name}/ ({count})" for name, count in folders)] if folders else []
    out = [f"{total} note(s) {where}, newest first:"]
    used = len(out[0]) + len(tail[0] if tail else "") + 100
    for path, title, mtime_ns in conn.execute("SELECT path, title, mtime_ns FROM notes WHERE path >= ? AND "
                                              "path < ? ORDER BY mtime_ns DESC, path LIMIT ?",
                                              (lo, hi, LIST_MAX_NOTES)):
        line = f"{path} — {title}  ({time.strftime('%Y-%m-%d', time.localtime(mtime_ns / 1e9))})"
        if used + len(line) + 1 > LIST_OUTPUT_CHARS:
            break
        out.append(line)
        used += len(line) + 1
    if total > len(out) - 1:
        narrow = "give one of the folders below" if folders else "search_notes finds the others by their words"
        out.append(f"… {total - len(out) + 1} more not shown; {narrow}.")
    return "\n".join(out + tail)


def note_changed(kb: Path, index_dir: Path, rel_path: str) -> None:
    """The agent changed, created, deleted or moved this note: update the index now if it is open here.
    Never raises, nor waits for another process: the next search's comparison with the disk catches up."""
    idx = _INDEX
    try:
        if idx is None or (idx.kb, idx.path) != (Path(kb).resolve(), index_path(kb, index_dir)):
            return  # not open in this process: its first search compares everything anyway
        if is_note_path(rel_path):
            _apply(idx, {PurePosixPath(rel_path.replace("\\", "/")).as_posix(): None}, [], patient=False)
        else:
            idx.checked = False  # a folder, perhaps: the next search compares every note
    except Exception:
        pass
