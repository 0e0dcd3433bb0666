"""One notes folder as this process uses it: the handle every tool is given.

A `Notebook` holds its settings, its search index (opened on first use, one thread at a time), its vectors'
bookkeeping, the .kaignore rules and when it opened (versions.prune_versions keeps the note as it was before this
run). Every change the agent makes or undoes goes through it, so the index hears of it. Closed, the next use opens
it again.
"""

import sqlite3
import threading
import time
from pathlib import Path, PurePosixPath

import db
import embeddings
import index
import privacy
import versions
from notes import ToolError, is_note_path


class Notebook:
    def __init__(self, settings):
        self.settings, self.kb = settings, settings.kb
        self.lock = threading.RLock()  # guards the index
        self.vectors, self.opened = embeddings.Vectors(), time.time()
        self._index: index.Index | None = None
        self._rules: tuple = (None, [])  # (the .kaignore file's privacy.signature, its rules)

    def __enter__(self) -> "Notebook":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the index and its watcher: the next search opens it again and compares every note."""
        with self.lock:
            if self._index is not None:
                self._index.stop_watching()
                self._index.conn.close()
                self._index = None

    def rules(self) -> list:
        """The .kaignore rules as the file is now."""
        if (key := privacy.signature(self.kb)) != self._rules[0]:
            self._rules = (key, privacy.rules(self.kb) if key else [])
        return self._rules[1]

    def is_private(self, rel_path: str, text: str | None = None) -> bool:
        """privacy.is_private, a hard link judged by its other names too (the index's walk finds them)."""
        twin = self.with_index(lambda idx: idx.linked.get(rel_path)) if privacy.hard_linked(self.kb, rel_path) else None
        return privacy.is_private(self.kb, rel_path, self.rules(), text, twin)

    def with_index(self, action):
        """action(index) on the index brought up to date; a damaged or outdated one is rebuilt."""
        path = index.index_path(self.kb, self.settings.index_dir)
        with self.lock:
            for attempt in (1, 2, 3):
                try:
                    if self._index is None:  # an index opened again starts its vectors' bookkeeping over
                        self._index = index.Index(self.kb, self.settings.search_watch, index.open_file(path))
                        self.vectors = embeddings.Vectors(self.vectors.clients, self.vectors.failed)
                    self.vectors.touched |= self._index.refresh(self.rules())
                    return action(self._index)
                except (OSError, sqlite3.Error) as exc:
                    self.close()
                    if attempt == 3 or isinstance(exc, OSError) or db.problem(exc) in ("busy", "denied"):
                        db.notice(f"search index {path} failed: {db.why(exc)}")
                        raise ToolError(f"the search index failed ({db.why(exc)}); the notice on the person's "
                                        "screen says where it is.") from None
                    if db.problem(exc) == "damaged":
                        db.notice(f"search index {path} cannot be used ({exc}); rebuilding it.")
                        for suffix in ("", "-wal", "-shm"):
                            Path(f"{path}{suffix}").unlink(missing_ok=True)
                    # else a plain error (a table gone while the index was open): opened again, damage shows
                except BaseException:
                    self.close()  # whatever failed, the next search starts over with a full comparison
                    raise

    def unreadable(self) -> list[str]:
        """The paths in the notes folder the shell's sandbox may not let a command read: what the index's walk
        sealed, the private notes, and the files not indexed whose text (or their note's) is private."""
        return self.with_index(lambda idx: sorted(idx.sealed | {  # not self.is_private: it would refresh the index
            p for p in idx.unsure if privacy.is_private(self.kb, p, self.rules())} | {
            path for path, in idx.conn.execute("SELECT path FROM notes WHERE private")}))

    def changed(self, rel_path: str) -> None:
        """The agent changed, made, deleted or moved this note (a folder: all): the next search re-reads it."""
        with self.lock:
            if self._index is None:
                return  # not open: its first search compares everything anyway
            if is_note_path(rel_path):
                self._index.pending.add(PurePosixPath(rel_path.replace("\\", "/")).as_posix())
            else:
                self._index.stop_watching()  # the next search compares every note

    def apply(self, change: versions.Change, replan=None) -> tuple[versions.Change, str]:
        """versions.apply, the index told of every file it wrote (both ends of a move)."""
        change, warning = versions.apply(self.kb, change, replan, self.opened)
        for path in {f.path for f in change.files} | set(change.move or ()):
            self.changed(path)
        return change, warning

    def undo(self) -> tuple[str, bool]:
        """Revert the agent's last change to a note: (one line for the person saying what happened, whether it undid
        one). A person asked, so no "Error:" as in a tool result: each UI shows a failure its own way."""
        try:
            message, touched = versions.undo_last(self.kb, self.opened)
        except ToolError as exc:
            return str(exc), False
        except Exception as exc:  # undo must never end the chat
            return f"undo failed: {type(exc).__name__}: {exc}. Your notes and .history/ are as they were.", False
        for name in touched:
            self.changed(name)
        return message, bool(touched)
