"""Keep the search index of a notes folder on disk and fresh: one SQLite FTS5 file, the notes as its rows.

Per note: path, title and aliases, opening paragraph ("lead"), body (first 2 MB), CJK runs as 2-character words
(unicode61 would see a sentence as one word); beside them its alias and tag keys, the note a sync-conflict copy
was made from, its day and its links (links.rows). The other files' paths (what a link may lead to) are kept in
memory. Obsidian's Excluded files are not indexed. The first search compares every note's size and mtime, later
ones ask watch.py what changed. The walk also finds what the shell's sandbox may not read (`unreadable`).
search.py asks the questions. It never writes inside the notes folder nor reads outside it (notes are read from
the folder's own descriptor, as the tools read them); what the model can fix raises ToolError.
"""

import contextlib
import datetime
import hashlib
import operator
import os
import re
import sqlite3
import stat
import time
from collections import namedtuple
from dataclasses import dataclass, field
from pathlib import Path

import db
import frontmatter
import links
import notes
import privacy
import vault
import watch
from db import notice
from notes import NOTE_SUFFIXES, ToolError, is_hidden_name, is_note_path, readable_text

INDEX_MAX_NOTE_BYTES = 2_000_000  # only the first 2 MB of a huge note are indexed
INDEX_LEAD_CHARS = 400  # the opening paragraph, weighted as "lead"
INDEX_BATCH = 500  # notes read and written together: bounds memory during a big build
INDEX_PROGRESS_AFTER_S = 1.0  # a build running longer than this tells the person
DATE_PROPERTIES = ("date", "created", "date created")  # a note's day, the first found; the last: Obsidian Linter's
SCHEMA_VERSION = 12  # bump when the tables or the text preparation change: old indexes get rebuilt


# --- Notes on disk ---
def _walk(kb: Path, excluded: list, rules: list, watcher=None) -> tuple:
    """(notes -> (size, mtime_ns), notes whose paths are not UTF-8, the other files' paths, notes that are links ->
    where they lead, what the shell's sandbox seals by name (hidden names, a private folder whole, every name of a
    hard-linked file one of whose names is private), the files it seals if their text says so); hidden names and
    `excluded` (vault.ignore_filters) not indexed, each folder watched first."""
    found, unnamed, others, linked, sealed, unsure, stack = {}, [], set(), {}, set(), set(), [("", False)]
    inodes = {}  # (st_dev, st_ino) -> the names of a file that has more than one
    while stack:
        rel_dir, shut_in = stack.pop()
        if watcher is not None:
            watcher.watch(kb / rel_dir, rel_dir)
        try:
            entries = list(os.scandir(kb / rel_dir))
        except OSError:
            continue  # vanished or unreadable folder: nothing in it can be searched
        for entry in entries:
            name = entry.name
            path = f"{rel_dir}/{name}" if rel_dir else name
            try:
                folder = entry.is_dir(follow_symlinks=False)
                if name[0] == "." and name[:2] != "..":  # hidden (is_hidden_name inlined: this runs once per note)
                    if folder or not rel_dir or name not in privacy.HARMLESS_HIDDEN:  # refusals bury grep -r's output
                        sealed.add(path)
                    continue
                shut = shut_in or bool(rules) and privacy.matched(path, folder, rules)
                if shut and not shut_in:
                    sealed.add(path)
                if folder:
                    stack.append((path, shut))  # linked folders are not followed: no loops, no escapes
                    continue
                lower, lst = name.lower(), entry.stat(follow_symlinks=False)
                if lst.st_nlink > 1 and stat.S_ISREG(lst.st_mode):
                    inodes.setdefault((lst.st_dev, lst.st_ino), []).append(path)
                note = lower.endswith(NOTE_SUFFIXES)
                if note and not (excluded and vault.is_excluded(path, excluded)):
                    if not (st := _note_stat(entry.path, kb, lst)):
                        continue
                    if notes.is_utf8(path):  # else it cannot be stored or shown: list_notes says how many
                        found[path] = st
                        if entry.is_symlink():  # known from the scan: only links pay for a second resolve
                            linked[path] = notes.rel(kb, Path(entry.path).resolve())
                        continue
                    unnamed.append(path)
                elif not note and notes.is_utf8(path) and entry.is_file():
                    others.add(path)  # an attachment or a canvas: links may lead to it
                if not shut and (note or lst.st_nlink > 1 or privacy.original_of(path) is not None):
                    unsure.add(path)
            except (OSError, RuntimeError, ValueError):  # RuntimeError: a symlink loop; ValueError: one moved out
                continue
    for names in inodes.values():  # the text of each name is the same: only a name may make one private
        kept = next((name for name in names if privacy.by_name(kb, name, None, rules)), None)
        linked |= {name: kept for name in names if kept and name in found and name != kept}
        sealed.update(names if kept else ())
    return found, unnamed, others, linked, sealed, unsure


def _note_stat(path: str, kb: Path, st=None):
    """(size, mtime_ns) of a regular note (`st`: its lstat, if known), or None: FIFOs, sockets and links leading out
    are no notes."""
    st = st or os.stat(path, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        if not Path(path).resolve().is_relative_to(kb):
            return None
        st = os.stat(path)
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def read_text(kb: Path, rel_path: str):
    """The text of a note's first INDEX_MAX_NOTE_BYTES, or None if it cannot be read or looks binary."""
    return _text_and_target(kb, rel_path)[0]


def _text_and_target(kb: Path, rel_path: str) -> tuple:
    """(read_text's text, the note's real path if links on its way lead elsewhere, else None): read as the tools
    read, from the notes folder's descriptor; a link is followed only where it stays inside the notes."""
    real = None
    try:
        try:
            data = notes.read_bytes(kb, rel_path, INDEX_MAX_NOTE_BYTES)
        except OSError:  # ELOOP: a link on the way; followed only to where the path guard lets a tool go
            real = notes.rel(kb, notes.safe_path(kb, rel_path))
            data = notes.read_bytes(kb, real, INDEX_MAX_NOTE_BYTES)
    except (OSError, ToolError, ValueError):
        return None, real
    return readable_text(data), real


# --- Text, for the index and the queries alike ---
CJK_RUN = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")  # kana, hanzi, hangul
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def cjk_words(text: str, tails: str = "all") -> str:
    """CJK runs as overlapping 2-character words, 归档实用 -> 归档 档实 实用 用; the lone last character is for a
    1-character query, so a query ("inner") keeps it only mid-text and one word ("none") drops it."""
    end = len(text.rstrip())
    def grams(match):
        run = match[0]
        pairs = " ".join(map(operator.add, run, run[1:]))  # each character with the next
        if len(run) == 1 or tails == "all" or (tails == "inner" and match.end() < end):
            return f" {pairs} {run[-1]} " if pairs else f" {run} "
        return f" {pairs} "
    return CJK_RUN.sub(grams, text)


def _lead_of(body: str) -> str:
    """The opening paragraph of the note's body (after its front matter), headings skipped: what it is about."""
    paragraph = []
    for line in body[:20000].splitlines():
        if line.strip() and not HEADING.match(line):
            paragraph.append(line)
        elif paragraph:
            break
    return "\n".join(paragraph)[:INDEX_LEAD_CHARS]


def _first_heading(text: str, body: str) -> str:
    """The title of the note's first heading, or ""; a `# comment` in a code block above it is no heading."""
    found = HEADING.search(body, 0, 20000)
    if found and ("```" in body[:found.start()] or "~~~" in body[:found.start()]):  # rare: read it as vault does
        return next((title for _, _, title in vault.headings(text)), "")
    return found.group(1).strip() if found else ""


def stem_of(path: str) -> str:
    """A note's file name without its folder and suffix: its name, as links and stem_key know it."""
    name = path.rsplit("/", 1)[-1]
    return next((name[:-len(s)] for s in NOTE_SUFFIXES if name.lower().endswith(s)), name)


def title_key(text: str) -> str:
    """A title or name as compared with the whole query: case-folded, runs of spaces as one."""
    return " ".join(text.casefold().split())


def indexed_text(path: str, text: str) -> str:
    """The part of a note that is searched: all of it, but a drawing's words only (not its JSON)."""
    return vault.excalidraw_text(text) if vault.is_drawing(path, text) else text


def _keys(values) -> str:
    """Keys as stored for instr(): each between newlines ("\\na\\nb\\n"), or "" for none."""
    return "\n" + "\n".join(values) + "\n" if values else ""


# A note's columns in the `notes` table (its id aside), and in the `fts` table: the texts a query's words meet.
Note = namedtuple("Note", "path size mtime_ns title title_key stem_key alias_keys tags conflict_of private day "
                         "dated_by")
Searched = namedtuple("Searched", "path title lead body")


def _row(kb: Path, path: str, size_mtime, private_rules: list, daily_format: str = vault.DAILY_FORMAT, twin=None):
    """(the note's Note, its Searched or None when it is private, its links.rows) (size_mtime None: stat it now;
    `twin`: another name of its inode, Index.linked's); None if it cannot be read."""
    try:
        size_mtime = size_mtime or _note_stat(str(kb / path), kb)
        text, real = _text_and_target(kb, path) if size_mtime else (None, None)
    except (OSError, RuntimeError):
        return None
    if text is None:
        return None
    text = indexed_text(path, text)
    parsed = frontmatter.front_matter(text)
    properties, body_start, _ = parsed
    body = text if body_start == 1 else "".join(text.splitlines(keepends=True)[body_start - 1:])
    name, stem = path.rsplit("/", 1)[-1], stem_of(path)
    title = properties.get("title")
    if not isinstance(title, str) or not title.strip():
        title = _first_heading(text, body) or stem
    aliases = properties.get("aliases", [])
    tags = sorted({tag.casefold() for tag in vault.tags_of(text, parsed)})
    dated = _dated(path, properties, size_mtime[1], daily_format)
    conflict_of, note_links = vault.conflict_of(path), links.rows(text, path)
    cjk = not (text.isascii() and path.isascii()) and (CJK_RUN.search(text) or CJK_RUN.search(path))
    words = cjk_words if cjk else str  # most have no CJK, and most of those are ASCII: told without a scan
    if privacy.by_name(kb, path, real or twin, private_rules) or privacy.says_private(properties) or (
            body_start == 1 and privacy.marked_private(text)):  # counted, links kept
        return Note(path, *size_mtime, "", "", "", "", "", conflict_of, 1, *dated), None, note_links
    return (Note(path, *size_mtime, title.strip(), title_key(title), title_key(stem),
                 _keys([title_key(alias) for alias in aliases]), _keys(tags), conflict_of, 0, *dated),
            Searched(words(path[:-len(name)] + stem), words("\n".join([title, *aliases])), words(_lead_of(body)),
                     words(text)), note_links)


def _dated(path: str, properties: dict, mtime_ns: int, daily_format: str) -> tuple:
    """(the note's day as ISO text, what it is from): its daily-note name, a date property, else mtime."""
    if day := vault.named_date(path, daily_format):
        return day.isoformat(), "name"
    for key in DATE_PROPERTIES:
        if day := day_written(properties.get(key)):
            return day, key
    return datetime.date.fromtimestamp(mtime_ns / 1e9).isoformat(), "modified"


_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[T ]\S.*)?")


def day_written(value) -> str | None:
    """The ISO day a value holds (2026-11-02, with a time after it or not, or as a link [[2026-11-02]]), or None."""
    found = isinstance(value, str) and _DAY.fullmatch(value.strip().removeprefix("[[").removesuffix("]]"))
    try:
        return datetime.date.fromisoformat(found[1]).isoformat() if found else None
    except ValueError:  # 2026-02-31
        return None


# --- The one open index, kept in step with the notes on disk ---
_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",  # embeddings.py keeps its state here
    "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, size INTEGER, "
    "mtime_ns INTEGER, title TEXT, title_key TEXT, stem_key TEXT, alias_keys TEXT, tags TEXT, conflict_of TEXT, "
    "private INTEGER NOT NULL DEFAULT 0, day TEXT, dated_by TEXT)",  # private: no fts row, nor title or keys
    "CREATE INDEX IF NOT EXISTS notes_day ON notes(day, mtime_ns)",
    "CREATE INDEX IF NOT EXISTS notes_conflicts ON notes(conflict_of) WHERE conflict_of IS NOT NULL",
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(path, title, lead, body, "
    "tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TABLE IF NOT EXISTS links({', '.join(links.ROW_COLUMNS)})",  # one row per link of a note
    "CREATE INDEX IF NOT EXISTS links_source ON links(source)",
    "CREATE INDEX IF NOT EXISTS links_key ON links(key)",  # the links that may lead to a note: links.link_keys
]


def _insert(table: str, columns: tuple) -> str:
    return f"INSERT INTO {table}({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


_INSERT_NOTE, _INSERT_SEARCHED = _insert("notes", ("id", *Note._fields)), _insert("fts", ("rowid", *Searched._fields))
_INSERT_LINKS = _insert("links", links.ROW_COLUMNS)


def index_path(kb: Path, index_dir: Path) -> Path:
    """This notes folder's index file: named after a hash of its full path, so each folder has its own."""
    digest = hashlib.sha256(str(kb).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(index_dir) / f"{kb.name or 'root'}-{digest}.sqlite"


def open_file(path: Path) -> sqlite3.Connection:
    """The index file, made if new (synchronous=NORMAL is safe with WAL: at worst a change is read again)."""
    conn = db.connect(path, _SCHEMA, SCHEMA_VERSION, upgrade=False)
    tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE name IN ('meta', 'notes', 'fts', 'links')")
    if tables.fetchone()[0] < 4:  # dropped by hand: SQLite would call each use a plain error, not damage
        conn.close()
        raise db.Damaged("a table is missing")
    return conn


def writing(conn: sqlite3.Connection):
    return db.writing(conn, "the search index of these notes")


@dataclass
class Index:
    """The index of one notes folder, open: its Notebook's."""
    kb: Path
    watch: bool  # inotify wanted; `can_watch` turns False where it is missing or at its watch limit
    conn: sqlite3.Connection
    can_watch: bool = watch.AVAILABLE
    watcher: watch.Watcher | None = None  # watching the folders of the last walk; None: the next search walks
    pending: set = field(default_factory=set)  # notes the agent changed: read whatever their stat says
    unnamed: list = field(default_factory=list)  # notes the last walk found with a path that is not UTF-8
    others: set = field(default_factory=set)  # the other files, from the last walk and the watcher since
    excluded: list = field(default_factory=list)  # the owner's Excluded files as the last walk read them
    daily_format: str = vault.DAILY_FORMAT  # the daily notes' names, as the last walk read them: dates notes
    linked: dict = field(default_factory=dict)  # the notes that are links -> where they lead, from the last walk
    sealed: set = field(default_factory=set)  # _walk's, from the last walk and the watcher since
    unsure: set = field(default_factory=set)  # _walk's: the files sealed if their text says private

    def refresh(self, rules: list) -> set:
        """Bring the index up to date with the notes on disk; the paths it read again or dropped."""
        kaignore = str(privacy.signature(self.kb))
        stored = dict(self.conn.execute("SELECT key, value FROM meta WHERE key IN ('kaignore', 'daily_format')"))
        private_changed = stored.get("kaignore", kaignore) != kaignore  # the person changed what is private
        changed, gone = self.watcher.changes() if self.watcher and not private_changed else None, []
        if changed and any(privacy.hard_linked(self.kb, p) for p in changed):  # only a walk finds its other names
            changed = None
        watched = changed is not None
        if not watched:
            on_disk, self.unnamed, self.others, self.linked, self.sealed, self.unsure = self.walk(rules)
            rows = self.conn.execute("SELECT path, size, mtime_ns, private FROM notes").fetchall()
            known = {p: (s, m) for p, s, m, _ in rows}
            changed = {p: st for p, st in on_disk.items() if known.get(p) != st}
            if private_changed:  # read again the notes .kaignore now judges otherwise than their stored flag
                changed |= {p: None for p, _, _, private in rows
                            if p in on_disk and privacy.by_name(self.kb, p, self.linked.get(p), rules) != bool(private)}
            gone = [p for p in known if p not in on_disk]
            if stored.get("daily_format", self.daily_format) != self.daily_format:  # other names are dates now
                changed = dict.fromkeys(on_disk)
        else:
            for path in changed:
                self.judge(path, rules)
        # A walk finds notes only, but for a name holding a backslash, which is_note_path reads as the tools do.
        for path in [p for p in changed if (watched or "\\" in p) and not is_note_path(p)]:  # another file
            del changed[path]
            if not is_hidden_name(path):  # the top folder's hidden files are the sandbox's only
                (self.others.add if (self.kb / path).is_file() else self.others.discard)(path)
        changed |= dict.fromkeys(self.pending)
        read = self.apply({p: st for p, st in changed.items() if not vault.is_excluded(p, self.excluded)}, gone, rules)
        self.pending.clear()
        if stored != (now := {"kaignore": kaignore, "daily_format": self.daily_format}):
            with writing(self.conn):
                self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", now.items())
        return read

    def judge(self, path: str, rules: list) -> None:
        """Keep `sealed`, `unsure` and `linked` in step with a file the watcher saw change (a folder's change means
        a walk); a note that is a new link is known only by looking."""
        self.sealed.discard(path)
        self.unsure.discard(path)
        if not os.path.lexists(self.kb / path):
            return
        name = path.rsplit("/", 1)[-1].lower()
        note = name.endswith(NOTE_SUFFIXES)
        if is_hidden_name(name) or rules and privacy.matched(path, False, rules):
            self.sealed.add(path)
        elif note and vault.is_excluded(path, self.excluded) or not note and vault.copy_of(path) is not None:
            self.unsure.add(path)
        with contextlib.suppress(OSError, RuntimeError, ValueError):  # as _walk: a loop, or a link leading out
            if is_note_path(path) and (self.kb / path).is_symlink():
                self.linked[path] = notes.rel(self.kb, (self.kb / path).resolve())

    def walk(self, rules: list) -> tuple:
        """_walk's notes on disk; with inotify, a new watcher watches exactly the folders found, and the vault's
        settings files, whose change (Excluded files, the daily notes' names) means walking again."""
        self.stop_watching()
        self.excluded = vault.ignore_filters(self.kb)
        self.daily_format = vault.daily_note_settings(self.kb)["format"]
        if self.watch and self.can_watch:
            try:
                self.watcher = watch.Watcher(walk_again={vault.APP_SETTINGS, vault.DAILY_SETTINGS, privacy.KAIGNORE})
                self.watcher.watch(self.kb / vault.OBSIDIAN_DIR, vault.OBSIDIAN_DIR)
                return _walk(self.kb, self.excluded, rules, self.watcher)
            except (OSError, AttributeError):  # no inotify here, or its watch limit: compare every time
                self.stop_watching()
                self.can_watch = False
        return _walk(self.kb, self.excluded, rules)

    def stop_watching(self) -> None:
        if self.watcher:
            self.watcher.close()
        self.watcher = None

    def apply(self, changed: dict, gone: list, private_rules: list) -> set:
        """Write the changes in one transaction (None: read whatever the stat); the paths read again or dropped."""
        if not changed and not gone:
            return set()
        notes_changed = {*changed, *gone}  # links to them and copies of them are private when they are: read again
        again = [p for p, note in self.linked.items() if note in notes_changed] + self.copies(notes_changed)
        changed = dict.fromkeys(again) | changed
        started, told = time.monotonic(), False
        with writing(self.conn):  # on an error the index is closed
            query = "SELECT size, mtime_ns FROM notes WHERE path=?"  # another process may have indexed it
            stored = {p: self.conn.execute(query, (p,)).fetchone() for p in changed}
            items = [(p, st) for p, st in changed.items() if st is None or stored[p] != st]
            for first in range(0, len(items), INDEX_BATCH):
                batch = items[first:first + INDEX_BATCH]
                rows = [row for p, st in batch if (row := _row(self.kb, p, st, private_rules, self.daily_format,
                                                                  self.linked.get(p)))]
                # The unreadable ones leave the index. Only the stored are deleted: each DELETE makes FTS5 write out
                # the words pending from the notes before, in smaller pieces to merge again.
                self.remove([p for p, _ in batch if stored[p]])
                self.insert(rows)
                if not told and time.monotonic() - started > INDEX_PROGRESS_AFTER_S:
                    notice(f"indexing {len(items)} notes, this takes a moment…")
                    told = True
            self.remove(gone)
        if len(items) > 1000:  # fold a big build into the main file now instead of leaving a huge WAL
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if told:
            notice(f"indexed {len(items)} notes in {time.monotonic() - started:.1f} s.")
        return {*changed, *gone}

    def copies(self, notes: set) -> list:
        """The indexed notes named as copies of these (vault.copy_of): beside each, named after it."""
        stems = {note.rsplit(".", 1)[0] for note in notes}
        return [path for stem in stems for path, in self.conn.execute("SELECT path FROM notes WHERE path > ? AND "
                "path < ?", (stem, stem + "\U0010ffff")) if vault.copy_of(path) in notes]

    def insert(self, rows: list) -> None:
        """Add _row's rows. Each note gets the id SQLite would give it (the largest + 1) from here, so its fts row
        is an INSERT … VALUES: as an INSERT … SELECT, FTS5 wrote out its pending words at every note."""
        first = self.conn.execute("SELECT coalesce(max(id), 0) + 1 FROM notes").fetchone()[0]
        numbered = list(enumerate(rows, first))
        self.conn.executemany(_INSERT_NOTE, [(id_, *note) for id_, (note, _, _) in numbered])
        self.conn.executemany(_INSERT_SEARCHED, [(id_, *searched) for id_, (_, searched, _) in numbered if searched])
        self.conn.executemany(_INSERT_LINKS, [link for _, _, note_links in rows for link in note_links])

    def remove(self, paths: list) -> None:
        rows = [(p,) for p in paths]
        self.conn.executemany("DELETE FROM fts WHERE rowid IN (SELECT id FROM notes WHERE path=?)", rows)
        self.conn.executemany("DELETE FROM notes WHERE path=?", rows)
        self.conn.executemany("DELETE FROM links WHERE source=?", rows)
