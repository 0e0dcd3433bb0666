"""Find notes fast: a SQLite FTS5 index of the notes folder, kept fresh, ranked, bounded.

search_notes and list_notes are the agent's tools; note_changed hears of the tools' own changes; `kb` is
the resolved notes folder. Indexed per note: path, title, opening paragraph ("lead"), body (first 2 MB), CJK
runs as 2-character words (SQLite's unicode61 would see a sentence as one word). One index file per notes
folder, in WAL mode so processes share it; a damaged or outdated one is rebuilt. A process's first search
compares every note's size and mtime with the index, later ones ask Linux inotify what changed. Ranking:
BM25 with path, title, lead above body; a note titled (or named) exactly the query first; then every word.
It never writes inside the notes folder nor reads outside it; what the model can fix raises ToolError.
"""

import ctypes
import hashlib
import os
import re
import sqlite3
import stat
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from notes import NOTE_SUFFIXES, ToolError, is_note_path, readable_text, rel, safe_folder
from shell import libc

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


# --- Notes on disk ---

def _walk(kb: Path, watch=None) -> dict:
    """Map every note to (size, mtime_ns), skipping hidden names; watch each folder before reading it."""
    found, stack = {}, [""]
    while stack:
        rel_dir = stack.pop()
        if watch is not None:
            watch(kb / rel_dir, rel_dir)
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


# --- Text, for the index and the queries alike ---

_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")
_SCRIPT_PIECE = re.compile(f"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")  # a word cut where the script changes
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_FRONT_TITLE = re.compile(r"\A---\s*\n(?:.*\n)*?title:\s*['\"]?(.+?)['\"]?\s*\n(?:.*\n)*?---", re.M)
_WORD = re.compile(r"[^\W_]+")
_STOPWORDS = frozenset("""a an and are as at be by for from how i in is it of on or that the this to was what
when where which who why with""".split())


def _cjk_words(text: str, tails: str = "all") -> str:
    """Each CJK run as overlapping 2-character words: 归档实用 -> 归档 档实 实用 用 ("all", for the index:
    the lone last character lets a 1-character query find it). A query ("inner") adds it only inside its
    text, so 解压zip lines up with 解压 压 zip; "none" splits one word: 解压zip文件 -> 解压 zip 文件."""
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


def _row(kb: Path, path: str, size_mtime):
    """The index row of a note (size_mtime None: stat it now), or None if it cannot be read."""
    try:
        size_mtime = size_mtime or _note_stat(str(kb / path), kb)
        text = _read_note(kb / path) if size_mtime else None
    except (OSError, RuntimeError):
        return None
    if text is None:
        return None
    name = path.rsplit("/", 1)[-1]
    stem = next((name[:-len(s)] for s in NOTE_SUFFIXES if name.lower().endswith(s)), name)
    title = _title_of(text, stem)
    words = _cjk_words if _CJK_RUN.search(text) or _CJK_RUN.search(path) else str  # most have no CJK
    return (path, *size_mtime, title, _key(title), _key(stem), words(path[:-len(name)] + stem),
            words(title), words(_lead_of(text)), words(text))


def _phrase(words: list) -> str:
    """Words as one quoted FTS5 phrase, so that operators and punctuation in them are plain text."""
    spaced = _cjk_words(" ".join(words), "inner").split()
    phrase = '"' + " ".join(spaced) + '"'
    if len(spaced[-1]) == 1 and _CJK_RUN.fullmatch(spaced[-1]):
        phrase += "*"  # a lone CJK character is the start of a 2-character word in the index
    return phrase


def _parse_query(query: str) -> tuple:
    """(as phrases, every word, any word) as FTS5 queries, and the words for picking lines. "a b" quoted is
    a phrase; so is an unquoted chunk of several words (gnu-tar, 解压zip文件), then its words in any order.
    A lone stopword is never required; only SEARCH_QUERY_MAX_WORDS words count (a pasted page is no query)."""
    def split(chunk):  # its lowercased words, and the separate words in them (CJK: the 2-character ones)
        words = [w.casefold() for w in _WORD.findall(chunk)]
        return words, list(dict.fromkeys(u for w in words for u in _cjk_words(w, "none").split()))

    quoted = re.findall(r'"([^"]*)"', query)
    rest = re.sub(r'"[^"]*"', " ", query).replace('"', " ")
    terms, budget = [], SEARCH_QUERY_MAX_WORDS  # (words, the chunk as a phrase, its words as phrases)
    for chunk, is_quoted in [(c, True) for c in quoted] + [(w, False) for w in rest.split()]:
        if budget <= 0:
            break
        words, units = split(chunk)
        if len(units) > budget:  # every word takes at least one character, so this many characters fit
            words, units = split(chunk[:budget])
        if not units:
            continue
        budget -= len(units)
        phrase = _phrase(words)
        terms.append((words, phrase, [phrase] if is_quoted else [_phrase([u]) for u in units]))
    required = [t for t in terms if len(t[0]) > 1 or t[0][0] not in _STOPWORDS] or terms
    loose = [p for _, phrase, each in terms for p in (each + [phrase] if len(each) > 1 else each)]
    return (" AND ".join(phrase for _, phrase, _ in required),
            " AND ".join(dict.fromkeys(p for _, _, each in required for p in each)),
            " OR ".join(dict.fromkeys(loose)), [w for words, _, _ in terms for w in words])


# --- The one open index, kept in step with the notes on disk ---

# Every statement may run twice: two processes opening a new index at once both try to create it.
_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, size INTEGER, "
    "mtime_ns INTEGER, title TEXT, title_key TEXT, stem_key TEXT)",
    "CREATE INDEX IF NOT EXISTS notes_mtime ON notes(mtime_ns)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(path, title, lead, body, "
    "tokenize='porter unicode61 remove_diacritics 2')",
    f"INSERT OR IGNORE INTO meta VALUES ('schema', '{SCHEMA_VERSION}')",
]
_DAMAGE = ("malformed", "not a database", "no such table", "corrupt", "another version")  # in error texts
# Linux inotify: any event on a folder (or lost events) means a full comparison, a note's event that note.
_IN_FOLDER = 0x40000000 | 0x400 | 0x800 | 0x4000  # IN_ISDIR, IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW
_WATCH_MASK = 0x03000FCE  # MODIFY ATTRIB CLOSE_WRITE MOVED_* CREATE DELETE *_SELF, ONLYDIR DONT_FOLLOW
_EVENT = struct.Struct("iIII")  # watch descriptor, mask, cookie, length of the name that follows


def index_path(kb: Path, index_dir: Path) -> Path:
    """This notes folder's index file: named after a hash of its full path, so each folder has its own."""
    digest = hashlib.sha256(str(kb).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(index_dir) / f"{kb.name or 'root'}-{digest}.sqlite"


def _run_waiting(conn: sqlite3.Connection, sql: str) -> None:
    """Run sql; if another process holds the index longer (a big first build), say so and wait for it."""
    try:
        conn.execute(sql)
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        warn("another knowledge-agent is updating the search index of these notes; "
             f"waiting for it (at most {INDEX_WAIT_S:.0f} s)…")
        conn.execute(f"PRAGMA busy_timeout = {int(INDEX_WAIT_S * 1000)}")
        conn.execute(sql)  # on failure the caller closes this connection, long wait and all
        conn.execute(f"PRAGMA busy_timeout = {int(INDEX_BUSY_TIMEOUT_S * 1000)}")


@dataclass
class _Index:
    kb: Path
    path: Path
    watch: bool  # inotify wanted; `can_watch` turns False where it is missing or at its watch limit
    conn: sqlite3.Connection
    can_watch: bool = sys.platform.startswith("linux")
    inotify: int = -1  # its descriptor, watching the folders of the last walk; -1: the next search walks
    folder_of: dict = field(default_factory=dict)  # inotify watch descriptor -> folder relative to the notes
    pending: set = field(default_factory=set)  # notes the agent changed: read whatever their stat says

    def set_up(self) -> None:
        """Create the tables of a new index; raise sqlite3.DatabaseError if it is damaged or outdated."""
        _run_waiting(self.conn, "PRAGMA journal_mode=WAL")  # a new file: the process creating it may hold it
        self.conn.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; at worst the last change is re-read
        if not self.conn.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            _run_waiting(self.conn, "BEGIN IMMEDIATE")
            with self.conn:  # commits, or rolls back on an error
                for statement in _SCHEMA:
                    self.conn.execute(statement)
        if self.conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone() != (SCHEMA_VERSION,):
            raise sqlite3.DatabaseError("it was made by another version of knowledge-agent")

    def refresh(self) -> None:
        """Index what inotify names, or else what a comparison of every note with the index finds."""
        changed, gone = self.changes() if self.inotify >= 0 else None, []
        if changed is None:
            on_disk = self.walk()
            known = {p: (s, m) for p, s, m in self.conn.execute("SELECT path, size, mtime_ns FROM notes")}
            changed = {p: st for p, st in on_disk.items() if known.get(p) != st}
            gone = [p for p in known if p not in on_disk]
        self.apply(changed | dict.fromkeys(self.pending), gone)
        self.pending.clear()

    def walk(self) -> dict:
        """Every note on disk; with inotify, a new instance watches exactly the folders found."""
        self.stop_watching()
        if self.watch and self.can_watch:
            try:
                self.inotify = libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
                if self.inotify < 0:
                    raise OSError(ctypes.get_errno(), "inotify_init1 failed")
                return _walk(self.kb, self.watch_folder)
            except (OSError, AttributeError):  # no inotify here, or its watch limit: compare every time
                self.stop_watching()
                self.can_watch = False
        return _walk(self.kb)

    def watch_folder(self, abs_dir: Path, rel_dir: str) -> None:
        wd = libc().inotify_add_watch(self.inotify, os.fsencode(abs_dir), _WATCH_MASK)
        if wd >= 0:
            self.folder_of[wd] = rel_dir
        elif ctypes.get_errno() not in (2, 20):  # ENOENT, ENOTDIR: gone meanwhile, the walk skips it too
            raise OSError(ctypes.get_errno(), "inotify_add_watch failed")  # the watch limit, most likely

    def stop_watching(self) -> None:
        if self.inotify >= 0:
            os.close(self.inotify)
        self.inotify, self.folder_of = -1, {}

    def changes(self) -> dict | None:
        """The notes inotify saw change since the last call, or None when a folder changed."""
        notes = {}
        while True:
            try:
                data = os.read(self.inotify, 65536)
            except BlockingIOError:
                return notes
            at = 0
            while at < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
                name = os.fsdecode(data[at + _EVENT.size:at + _EVENT.size + length].rstrip(b"\0"))
                at += _EVENT.size + length
                if mask & _IN_FOLDER:
                    return None
                if is_note_path(name):
                    notes[f"{self.folder_of[wd]}/{name}".lstrip("/")] = None

    def apply(self, changed: dict, gone: list) -> None:
        """Write changes in one transaction; a path changed to None is read whatever its stat says."""
        if not changed and not gone:
            return
        started, told = time.monotonic(), False
        _run_waiting(self.conn, "BEGIN IMMEDIATE")
        with self.conn:  # commits, or rolls back on an error (and then the index is closed)
            stored = "SELECT size, mtime_ns FROM notes WHERE path=?"  # another process may have indexed it
            items = [(p, st) for p, st in changed.items()
                     if st is None or self.conn.execute(stored, (p,)).fetchone() != st]
            for first in range(0, len(items), INDEX_BATCH):
                batch = items[first:first + INDEX_BATCH]
                rows = [row for row in (_row(self.kb, p, st) for p, st in batch) if row]
                self.remove([p for p, _ in batch])  # the unreadable ones leave the index
                self.conn.executemany("INSERT INTO notes(path, size, mtime_ns, title, title_key, stem_key) "
                                      "VALUES (?,?,?,?,?,?)", [r[:6] for r in rows])
                self.conn.executemany("INSERT INTO fts(rowid, path, title, lead, body) "
                                      "SELECT id, ?, ?, ?, ? FROM notes WHERE path=?", [r[6:] + r[:1] for r in rows])
                if not told and time.monotonic() - started > INDEX_PROGRESS_AFTER_S:
                    warn(f"indexing {len(items)} notes, this takes a moment…")
                    told = True
            self.remove(gone)
        if len(items) > 1000:  # fold a big build into the main file now instead of leaving a huge WAL
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if told:
            warn(f"indexed {len(items)} notes in {time.monotonic() - started:.1f} s.")

    def remove(self, paths: list) -> None:
        rows = [(p,) for p in paths]
        self.conn.executemany("DELETE FROM fts WHERE rowid IN (SELECT id FROM notes WHERE path=?)", rows)
        self.conn.executemany("DELETE FROM notes WHERE path=?", rows)


_INDEX: _Index | None = None  # the one index this process has open


def close_index() -> None:
    """Close the open index and its watcher (tests and benchmarks use this to start cold)."""
    global _INDEX
    if _INDEX is not None:
        _INDEX.stop_watching()
        _INDEX.conn.close()
        _INDEX = None


def _with_index(kb: Path, index_dir: Path, watch: bool, action) -> str:
    """action(index) on the index brought up to date; a damaged or outdated one is rebuilt."""
    global _INDEX
    path = index_path(kb, index_dir)
    for attempt in (1, 2):
        try:
            if _INDEX is None or (_INDEX.kb, _INDEX.path, _INDEX.watch) != (kb, path, watch):
                close_index()
                path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(path, timeout=INDEX_BUSY_TIMEOUT_S, isolation_level=None)
                _INDEX = _Index(kb, path, watch, conn)
                _INDEX.set_up()
            _INDEX.refresh()
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
        except BaseException:
            close_index()  # whatever failed, the next search starts over with a full comparison
            raise


def _folder(kb: Path, folder: str | None) -> tuple:
    """(folder relative to the notes, "" for all; SQL bounds of the paths in it). ToolError if no folder."""
    if folder is None or folder.strip() in ("", ".", "/"):
        return "", "", "\U0010ffff"
    try:
        path = safe_folder(kb, folder)
        if path.is_dir():
            rel_dir = "" if path == kb else rel(kb, path)
            return (rel_dir, rel_dir + "/", rel_dir + "0") if rel_dir else ("", "", "\U0010ffff")  # "0" follows "/"
    except ValueError:  # a name the system cannot encode
        pass
    raise ToolError(f"there is no folder '{folder}' in the notes. Call list_notes to see the folders.")


# --- Searching ---

_RANK_SQL = f"""SELECT n.id, n.path, n.title FROM fts JOIN notes n ON n.id = fts.rowid
WHERE fts MATCH ? AND n.path >= ? AND n.path < ? {{exclude}}
ORDER BY (n.title_key = ? OR n.stem_key = ?) DESC, bm25(fts, {', '.join(map(str, SEARCH_WEIGHTS))}) LIMIT ?"""


def search_notes(kb: Path, index_dir: Path, query: str, folder: str | None = None, watch: bool = True) -> str:
    """Best notes for `query` (all words first, then any word), with their best lines; bounded text."""
    query = (query or "").encode("utf-8", "replace").decode("utf-8")  # lone surrogates become "?"
    parsed = _parse_query(query)
    if not parsed[-1]:
        raise ToolError("the search query has no words to look for. Give one or more keywords.")
    scope = _folder(kb, folder)
    return _with_index(kb, index_dir, watch, lambda idx: _search(idx, query, parsed, *scope))


def _search(idx: _Index, query: str, parsed: tuple, rel_dir: str, lo: str, hi: str) -> str:
    """Rank in tiers: each chunk as a phrase, then every word in any order, then any word."""
    as_phrases, every_word, any_word, words = parsed
    qkey, hits = _key(query.replace('"', " ")), []

    def add(match):  # the best notes for match that are not hits yet, while there is room
        if len(hits) < SEARCH_MAX_HITS:
            exclude = [h[0] for h in hits]
            sql = _RANK_SQL.format(exclude=f"AND n.id NOT IN ({','.join('?' * len(exclude))})" if hits else "")
            hits.extend(idx.conn.execute(sql, (match, lo, hi, *exclude, qkey, qkey, SEARCH_MAX_HITS - len(hits))))

    def count(match):  # all notes: every FTS row is one, and skipping the join is ~5x faster on 30k matches
        if not lo:
            return idx.conn.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (match,)).fetchone()[0]
        return idx.conn.execute("SELECT count(*) FROM fts JOIN notes n ON n.id = fts.rowid WHERE fts "
                                "MATCH ? AND n.path >= ? AND n.path < ?", (match, lo, hi)).fetchone()[0]

    for match in dict.fromkeys((as_phrases, every_word)):
        add(match)
    total, some_only = count(every_word), 0
    if len(hits) < SEARCH_MAX_HITS and any_word not in (as_phrases, every_word):
        add(any_word)
        some_only = count(any_word) - total
    return _format_hits(idx.kb, words, hits, total, some_only, f" in {rel_dir}/" if rel_dir else "", query)


def _format_hits(kb: Path, words, hits, total_all: int, some_only: int, where: str, query: str) -> str:
    """One block per hit: "path — title", then its best lines as "  line-number: text"; bounded."""
    matched = total_all + some_only
    notes = f"{matched} note" + ("" if matched == 1 else "s")
    if not hits:
        return f"No notes{where} match {_quoted(query)}. Try fewer or different words."
    if total_all:
        head = f"{notes}{where} {'matches' if matched == 1 else 'match'} {_quoted(query)}"
        head += f" ({total_all} with every word)" if some_only else ""
    else:
        head = (f"No note{where} has every word of {_quoted(query)}; {notes} "
                f"{'has' if matched == 1 else 'have'} some of them")
    patterns = _line_patterns(words)
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


def _quoted(query: str) -> str:
    """The query as echoed in the answer's first line: on one line, and cut if it is long."""
    query = " ".join(query.split())
    if len(query) > SEARCH_QUERY_ECHO_CHARS:
        query = query[:SEARCH_QUERY_ECHO_CHARS].rstrip() + "…"
    return f"'{query}'" if '"' in query else f'"{query}"'


def _line_patterns(words: list) -> list:
    """Patterns marking the lines to show; a line holding a whole Chinese run also holds its 2-char words."""
    patterns = set()
    for word in set(words):
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
    best = sorted(sorted(scored)[:SEARCH_LINES_PER_HIT], key=lambda s: s[1])
    return [(number, _clip(line.rstrip(), start)) for _, number, line, start in best]


def _clip(line: str, start: int) -> str:
    """About SEARCH_LINE_CHARS of the line around `start`, with … where it was cut."""
    if len(line) <= SEARCH_LINE_CHARS:
        return line.strip()
    begin = max(0, min(start - SEARCH_LINE_CHARS // 4, len(line) - SEARCH_LINE_CHARS))
    piece = line[begin:begin + SEARCH_LINE_CHARS].strip()
    return ("…" if begin else "") + piece + ("…" if begin + SEARCH_LINE_CHARS < len(line) else "")


# --- Listing, and the agent's own changes ---

def list_notes(kb: Path, index_dir: Path, folder: str | None = None, watch: bool = True) -> str:
    """How many notes there are (per subfolder) and the newest ones first, capped and bounded."""
    scope = _folder(kb, folder)
    return _with_index(kb, index_dir, watch, lambda idx: _listing(idx.conn, *scope))


def _listing(conn: sqlite3.Connection, rel_dir: str, lo: str, hi: str) -> str:
    where = f"in {rel_dir}/" if rel_dir else "in the knowledge base"
    inside = [p[len(lo):] for (p,) in conn.execute("SELECT path FROM notes WHERE path >= ? AND path < ?", (lo, hi))]
    total = len(inside)
    if not total:
        return f"No notes {where}."
    folders = sorted(Counter(p.split("/", 1)[0] for p in inside if "/" in p).items())
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
    """The agent changed, created, deleted or moved this note: the next search here re-reads it, whatever
    its size and mtime say; a path that is no note (a folder?) makes it compare every note. Never raises."""
    idx = _INDEX
    if idx is None or (idx.kb, idx.path) != (kb, index_path(kb, index_dir)):
        return  # not open in this process: its first search compares everything anyway
    if is_note_path(rel_path):
        idx.pending.add(PurePosixPath(rel_path.replace("\\", "/")).as_posix())
    else:
        idx.stop_watching()  # the next search compares every note
