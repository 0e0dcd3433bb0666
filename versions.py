"""Every change to the notes: planned as a value, shown, applied as one, recorded so /undo can take it back.

`plan_text`, `plan_move` and `plan_delete` make a `Change` from the disk; `apply` writes it under notes.locked
only if every file still holds what the plan saw (one nobody was shown is planned again, so what another process
wrote is built on, never written over). First every file it replaces is copied to `.history/<path>.<stamp>` and
the change logged as one line of `.history/undo.jsonl`, so `undo_last` can put it all back, even after a kill
midway. It must never lose a word: a failure leaves the notes as they were and raises notes.ToolError.
"""

import contextlib
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from notes import (HISTORY_DIR, NoteFormat, ToolError, decode_note, encode_note, in_folder, locked, move_file,
                   read_bytes, remove_file, remove_folders, write_bytes)

UNDO_LOG = "undo.jsonl"
HISTORY_KEEP = 20  # versions of a note always kept; older ones go only when old or too big (see prune_versions)
HISTORY_PROTECT_S = 3600  # a version younger than this is never pruned: no burst of changes flushes a note
HISTORY_MAX_AGE_S = 30 * 86400  # beyond HISTORY_KEEP, versions older than this are pruned
HISTORY_MAX_BYTES = 200_000_000  # beyond HISTORY_KEEP, a note's oldest versions go while they take more than this
UNDO_LOG_KEEP = 200  # changes /undo remembers
LOG_TRIMMED = b'{"trimmed": true}\n'  # the log's first line once it dropped changes (read_log skips it)
CHANGE_OPS = ("write", "overwrite", "edit", "append", "move", "delete")  # what an undo log line may record
STAMP_FORMAT = "%Y-%m-%dT%H-%M-%S.%fZ"  # UTC, so versions sort by name across DST changes
STAMP_RE = re.compile(r"\.(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{6}Z)(?:-(\d+))?$")


class _Gone(ToolError):
    """What a recorded change touched is no longer there, so it can never be undone."""


class Stale(ToolError):
    def __init__(self, paths: list[str]):
        super().__init__(f"{', '.join(paths)} changed on disk after the change was planned, so nothing was written.",
                         "read_note it again and redo the change.")
        self.paths = paths


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the notes folder; for a move's own note, its path before the move
    old: bytes | None  # what it held when planned; None: it did not exist
    new: bytes | None  # what it gets; None: it is removed


@dataclass(frozen=True)
class Change:
    op: str  # one of CHANGE_OPS
    files: tuple[FileChange, ...]
    move: tuple[str, str] | None = None  # (from, to): renamed first; a file of `from` is then written at `to`
    title: str = ""  # the question that asks the person about it: "Move a.md to b.md?"
    done: str = ""  # what the model is told once it is written

    @property
    def note(self) -> str:
        return self.move[0] if self.move else self.files[0].path

    def final_path(self, path: str) -> str:
        return self.move[1] if self.move and path == self.move[0] else path

    def is_noop(self) -> bool:
        return not self.move and all(f.old == f.new for f in self.files)


# --- Planning a change ---

def _current(kb: Path, rel_path: str, must_exist: bool = False) -> bytes | None:
    try:
        return read_bytes(kb, rel_path)
    except (FileNotFoundError, NotADirectoryError):
        if must_exist:
            raise ToolError(f"{rel_path} does not exist") from None
        return None


def plan_text(kb: Path, rel_path: str, new_text, op: str) -> Change:
    """A text change: "write" creates a note (refused if one exists), "overwrite", "edit" and "append" replace one
    in its own format. `new_text`: the text, or a function of the note's text now (it may raise ToolError)."""
    compute = new_text if callable(new_text) else lambda old: new_text
    if op == "write":
        if _current(kb, rel_path) is not None or os.path.lexists(kb / rel_path):
            raise ToolError(f"{rel_path} already exists; nothing was replaced")
        return Change(op, (FileChange(rel_path, None, encode_note(compute(""), NoteFormat())),))
    data = _current(kb, rel_path, must_exist=True)
    try:
        old_text, fmt = decode_note(data)
    except ToolError as e:
        raise ToolError(f"{rel_path} is {e}") from None
    return Change(op, (FileChange(rel_path, data, encode_note(compute(old_text), fmt)),))


def plan_move(kb: Path, from_path: str, to_path: str, rewritten: dict | None = None) -> Change:
    """Rename a note; `rewritten`: new bytes of the notes whose links change (the moved one's by its old path)."""
    _current(kb, from_path, must_exist=True)
    files = tuple(FileChange(path, _current(kb, path), new) for path, new in (rewritten or {}).items())
    return Change("move", files, (from_path, to_path))


def plan_delete(kb: Path, rel_path: str) -> Change:
    return Change("delete", (FileChange(rel_path, _current(kb, rel_path, must_exist=True), None),))


# --- Applying one ---

def _stale(kb: Path, change: Change) -> list[str]:
    """The files that no longer hold what the plan saw; a move whose note is gone or whose place is taken raises."""
    stale = [f.path for f in change.files if _current(kb, f.path) != f.old]
    if change.move:
        _current(kb, change.move[0], must_exist=True)
        if os.path.lexists(kb / change.move[1]):
            raise ToolError(f"{change.move[1]} already exists; nothing was moved")
    return stale


def apply(kb: Path, change: Change, replan=None, since: float | None = None) -> tuple[Change, str]:
    """Write the change, logged as one undo entry first: (the change as written, "" or a warning that /undo will
    not know it). A file changed since the plan: `replan()` plans it again under the lock; without one, Stale."""
    verb, unchanged = {"move": ("move", "it is where it was"), "delete": ("delete", "it is still there")}.get(
        change.op, ("save", "the note is as it was"))
    try:
        with locked(kb):
            if stale := _stale(kb, change):
                if replan is None:
                    raise Stale(stale)
                change = replan()
                if stale := _stale(kb, change):  # only a program that ignores the lock writes this fast
                    raise ToolError(f"{', '.join(stale)} keeps changing on disk; nothing was written.")
            if change.is_noop():
                return change, ""
            entry, warning = _record(kb, change)
            try:
                _write(kb, change)
            except BaseException:
                _take_back(kb, entry)
                raise
            for f in change.files:
                prune_versions(kb, f.path, since)  # its versions are kept under the name it had
    except OSError as e:
        raise ToolError(f"could not {verb} {change.note}: {e.strerror or e}; {unchanged}") from None
    return change, warning


def _record(kb: Path, change: Change) -> tuple[dict, str]:
    """Copy what the change replaces into .history and log it, before any write: a kill midway loses nothing."""
    files = [{"path": change.final_path(f.path),
              "snapshot": None if f.old is None else snapshot(kb, f.path, f.old),
              "after": None if f.new is None else hashlib.sha256(f.new).hexdigest()} for f in change.files]
    new = [f["path"] for f in files if f["snapshot"] is None] + ([change.move[1]] if change.move else [])
    made = [folder.as_posix() for path in new for folder in reversed(PurePosixPath(path).parents[:-1])
            if not (kb / folder).is_dir()]  # the folders a write there makes, outermost first
    entry = {"time": _stamp(), "op": change.op, "path": change.note, "to": change.move and change.move[1],
             "files": files, "made": list(dict.fromkeys(made)) or None}
    return entry, _log_change(kb, entry)


def _write(kb: Path, change: Change) -> None:
    if change.move:
        move_file(kb, *change.move)  # refused, race-free, if the new place is taken
    for f in change.files:
        path = change.final_path(f.path)
        if f.new is None:
            remove_file(kb, path)
        else:
            write_bytes(kb, path, f.new, new=f.old is None)  # `new`: refused if a note of that name appeared


def _take_back(kb: Path, entry: dict) -> None:
    """A change that failed midway: put back what it did, and forget its entry (it never happened)."""
    with contextlib.suppress(ToolError, OSError):
        _undo(kb, entry, only_ours=True)
    with contextlib.suppress(OSError):
        for f in entry["files"]:
            if f["snapshot"]:
                remove_file(kb, f["snapshot"])
        entries = read_log(kb)
        if entries and entries[-1].get("time") == entry["time"] and entries[-1]["path"] == entry["path"]:
            _write_log(kb, entries[:-1])


# --- Versions in .history ---

def _stamp() -> str:
    return datetime.now(timezone.utc).strftime(STAMP_FORMAT)


def snapshot(kb: Path, rel_path: str, data: bytes | None = None) -> str:
    """Copy the note (or `data`, its bytes read under the lock) to .history/<rel_path>.<stamp>; that copy's path."""
    base = f"{HISTORY_DIR}/{rel_path}.{_stamp()}"
    copy, n = base, 0
    try:
        data = read_bytes(kb, rel_path) if data is None else data
        while os.path.lexists(kb / copy):  # two changes within one microsecond
            n += 1
            copy = f"{base}-{n}"
        write_bytes(kb, copy, data, new=True)
    except OSError as e:
        raise ToolError(f"could not keep a copy of {rel_path} in {HISTORY_DIR}/ ({e.strerror or e}), "
                        "so nothing was changed") from None
    return copy


def list_versions(kb: Path, rel_path: str) -> list[Path]:
    """Every kept version of one note, oldest first: names end in a UTC stamp (and -N after a clash)."""
    base = kb / HISTORY_DIR / rel_path
    try:
        names = os.listdir(base.parent)
    except OSError:
        return []
    found = [(match[1], int(match[2] or 0), name) for name in names
             if name.startswith(base.name + ".") and (match := STAMP_RE.fullmatch(name[len(base.name):]))]
    return [base.parent / name for _, _, name in sorted(found)]


def _age_s(version: Path) -> float:
    stamp = STAMP_RE.search(version.name)[1]
    return time.time() - datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=timezone.utc).timestamp()


def prune_versions(kb: Path, rel_path: str, since: float | None = None) -> None:
    """Delete a note's old versions by age and size, never by count alone. Always kept: the newest HISTORY_KEEP,
    the last HISTORY_PROTECT_S's and the newest older one, the first since `since` (its Notebook's), the oldest."""
    with contextlib.suppress(OSError):  # housekeeping: another process pruning too must not fail the change it follows
        kept = list_versions(kb, rel_path)
        ages = [_age_s(v) for v in kept]
        first = next((i for i, age in enumerate(ages) if since is not None and age <= time.time() - since), None)
        older = [i for i, age in enumerate(ages) if age >= HISTORY_PROTECT_S]
        protected = {i for i, age in enumerate(ages)
                     if i in (0, first, *older[-1:]) or i >= len(kept) - HISTORY_KEEP or age < HISTORY_PROTECT_S}
        sizes = [v.stat().st_size if v.exists() else 0 for v in kept]
        total = sum(sizes)
        for i, version in enumerate(kept):  # oldest first
            if i in protected or (ages[i] < HISTORY_MAX_AGE_S and total <= HISTORY_MAX_BYTES):
                continue
            with contextlib.suppress(OSError):
                remove_file(kb, version.relative_to(kb).as_posix())
                total -= sizes[i]


# --- The undo log ---

def _inside_notes(path, under: str | None = None) -> bool:
    if not isinstance(path, str) or "\0" in path or "\\" in path:
        return False
    parts = path.split("/")  # an empty part: "", "/abs.md" or "a//b.md"
    if {"..", ".", ""} & set(parts):
        return False
    return parts[0] == under if under else parts[0] != HISTORY_DIR


def _followed(e) -> dict | None:
    """The entry with its files as this version records them (an older version's line too), or None: the log may be
    edited by hand, and undo follows only paths inside the notes (a snapshot: inside .history)."""
    if not isinstance(e, dict) or e.get("op") not in CHANGE_OPS or not isinstance(e.get("time", ""), (str, type(None))):
        return None
    if not _inside_notes(e.get("path")) or not (e.get("to") is None or _inside_notes(e["to"])):
        return None
    if e["op"] == "move" and not e.get("to"):
        return None
    if "files" in e:
        files = e["files"]
    elif e["op"] == "move":
        files = []
    elif e["op"] == "write" or e.get("snapshot"):
        files = [{"path": e.get("path"), "snapshot": None if e["op"] == "write" else e.get("snapshot"),
                  "after": e.get("after")}]
    else:  # an older version's line with no saved version: nothing to put back
        return None
    good = isinstance(files, list) and all(
        isinstance(f, dict) and _inside_notes(f.get("path")) and isinstance(f.get("after"), (str, type(None)))
        and (f.get("snapshot") is None or _inside_notes(f["snapshot"], HISTORY_DIR)) for f in files)
    return {**e, "files": files} if good else None


def read_log(kb: Path) -> list[dict]:
    """Changes the agent made, oldest first; unreadable lines are skipped rather than fatal."""
    try:
        lines = read_bytes(kb, f"{HISTORY_DIR}/{UNDO_LOG}").decode("utf-8", "replace").splitlines()
    except (OSError, ToolError):
        return []
    entries = []
    for line in lines:
        with contextlib.suppress(ValueError):
            entries.append(_followed(json.loads(line)))
    return [e for e in entries if e is not None]


def _trimmed(kb: Path) -> bool:
    """Whether the log dropped older changes, so that /undo stops short of them."""
    try:
        return read_bytes(kb, f"{HISTORY_DIR}/{UNDO_LOG}", len(LOG_TRIMMED)) == LOG_TRIMMED
    except (OSError, ToolError):
        return False


def _write_log(kb: Path, entries: list[dict]) -> None:
    text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries[-UNDO_LOG_KEEP:])
    mark = LOG_TRIMMED if len(entries) > UNDO_LOG_KEEP or _trimmed(kb) else b""
    write_bytes(kb, f"{HISTORY_DIR}/{UNDO_LOG}", mark + text.encode("utf-8"))


def _log_change(kb: Path, entry: dict) -> str:
    """Record a change; "" or a warning for its summary."""
    try:
        entries = read_log(kb)
        if len(entries) >= 2 * UNDO_LOG_KEEP:  # rewrite now and then: a log that could not be read is never
            _write_log(kb, entries + [entry])  # rewritten from nothing, and appending stays cheap
            return ""
        with in_folder(kb, f"{HISTORY_DIR}/{UNDO_LOG}", create=True) as (folder, name):
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666, dir_fd=folder)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
    except OSError as e:
        return f"  (done, but /undo will not know about it: {e.strerror or e})"
    return ""


# --- Undo ---

def undo_last(kb: Path, since: float | None = None) -> tuple[str, list[str]]:
    """Revert the agent's latest change: (what was done, the paths it touched). What undo replaces is copied into
    .history first; a change that can no longer be undone is dropped; ToolError: retry later."""
    with locked(kb) if (kb / HISTORY_DIR).is_dir() else contextlib.nullcontext():
        entries = read_log(kb)
        if not entries and _trimmed(kb):
            return (f"Nothing more to undo: older changes are no longer on the undo list (it keeps the agent's last "
                    f"{UNDO_LOG_KEEP} or more); the versions the notes had before them are kept in {HISTORY_DIR}/."), []
        if not entries:
            return "Nothing to undo: no changes by the agent are recorded in this knowledge base.", []
        entry = entries[-1]
        try:
            message, touched = _undo(kb, entry)
            for path in touched:
                prune_versions(kb, path, since)
        except _Gone as e:
            message, touched = f"Could not undo {_describe(entry)}: {e}. Dropped it from the undo list.", []
        except (ToolError, OSError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise ToolError(f"could not undo {_describe(entry)}: {reason}. Nothing was changed; try again.") from None
        try:
            _write_log(kb, entries[:-1])
        except OSError as e:
            message += f" (Warning: could not update the undo list: {e.strerror or e}.)"
        return message, touched


def _describe(entry: dict) -> str:
    when = (entry.get("time") or "")[11:19].replace("-", ":")
    target = f"{entry['path']} → {entry['to']}" if entry["op"] == "move" else entry["path"]
    return f"the {entry['op']} of {target}" + (f" at {when} UTC" if when else "")


def _keep_current(kb: Path, rel_path: str, after: str | None = None) -> str:
    """Copy what is at rel_path into .history before undo replaces it, unless it is what the agent wrote (such
    copies would push out the older versions further undos need)."""
    if not (kb / rel_path).is_file() or (after and hashlib.sha256(read_bytes(kb, rel_path)).hexdigest() == after):
        return ""
    return f" The text it had before this undo is kept in {snapshot(kb, rel_path)}."


def _undo(kb: Path, entry: dict, only_ours: bool = False) -> tuple[str, list[str]]:
    """Put back every file of the entry (a part a kill left undone needs nothing), then the move; what it says.
    `only_ours`: a file that does not hold what the change wrote is left as it is (a failed change taken back)."""
    files, move = entry["files"], (entry["path"], entry["to"]) if entry["op"] == "move" else None
    for f in files:
        if f["snapshot"] and not (kb / f["snapshot"]).is_file():
            raise _Gone(f"its saved version {f['snapshot']} is gone")
    moved = move and (kb / move[1]).is_file() and not (only_ours and os.path.lexists(kb / move[0]))
    if move and not moved and not (kb / move[0]).is_file():
        raise _Gone(f"{move[1]} no longer exists")
    if not move and all(not f["snapshot"] and not (kb / f["path"]).is_file() for f in files):
        raise _Gone(f"{entry['path']} no longer exists")
    told = []
    for f in reversed(files):
        path = f["path"] if moved or not move or f["path"] != move[1] else move[0]  # a kill before the rename
        current = _current(kb, path)
        if only_ours and (current is None or hashlib.sha256(current).hexdigest() != f["after"]):
            continue
        if f["snapshot"]:
            if current != (saved := read_bytes(kb, f["snapshot"])):
                told.append(_keep_current(kb, path, f["after"]))
                write_bytes(kb, path, saved)
        elif current is not None:  # the change made it: remove it, keeping a copy
            told.append(f" (a copy is kept in {snapshot(kb, path)})")
            remove_file(kb, path)
    if moved:
        told.append(_keep_current(kb, move[0]))
        move_file(kb, move[1], move[0], replace=True)
    if isinstance(entry.get("made"), list):  # only folders above a note the change made count
        notes = [move[1]] if move else [f["path"] for f in files if not f["snapshot"]]
        remove_folders(kb, [d for d in entry["made"] if isinstance(d, str)
                            and any(n.startswith(d + "/") for n in notes)])
    touched = list(dict.fromkeys(([*move] if move else []) + [f["path"] for f in files]))
    return _undone_message(entry, told), touched


def _undone_message(entry: dict, told: list[str]) -> str:
    op, path, files, what = entry["op"], entry["path"], entry["files"], _describe(entry)
    others = [f for f in files if f["path"] not in (path, entry.get("to"))]
    also = (f" {len(others)} other notes are back as they were." if len(others) > 1
            else " 1 other note is back as it was." if others else "")
    kept = "".join(told)
    if op == "write":
        return f"Undid {what}: removed {path}{kept}.{also}"
    if op == "move":
        return f"Undid {what}: moved {entry['to']} back to {path}.{also}{kept}"
    back = "is back" if op == "delete" else "is as it was before"
    return f"Undid {what}: {path} {back}.{kept}{also}"
