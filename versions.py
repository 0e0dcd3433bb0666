"""Keeping every word recoverable: versions in .history, the undo log, the changes the agent makes, undo.

Every change goes through save_note, move_note or delete_note, under notes.locked: the old file is copied
to `.history/<path>.<stamp>` (a plain file a person can open with any tool) and the change is recorded in
`.history/undo.jsonl` before the note is replaced, so `undo_last` can always revert the latest one; undo
itself keeps a copy of anything it would replace. It must never lose a word: a failure leaves the note as
it was and raises notes.ToolError.
"""

import contextlib
import difflib
import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from notes import (HISTORY_DIR, NoteFormat, ToolError, decode_note, encode_note, in_folder, locked, move_file,
                   read_bytes, rel, remove_file, remove_folders, write_bytes)

UNDO_LOG = "undo.jsonl"
HISTORY_KEEP = 20  # versions kept per note (0: no limit)
UNDO_LOG_KEEP = 200  # changes /undo remembers
CHANGE_OPS = ("write", "overwrite", "edit", "append", "move", "delete")  # what an undo log line may record
STAMP_FORMAT = "%Y-%m-%dT%H-%M-%S.%fZ"  # UTC, so versions sort by name across DST changes
STAMP_RE = re.compile(r"\.(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{6}Z)(?:-(\d+))?$")
MINUS = "\u2212"
DIFF_CONTEXT = 3  # unchanged lines shown around a change under review
DIFF_MAX_LINES = 400  # lines of a diff shown for review; a longer one says how many more


class _Gone(ToolError):
    """What a recorded change touched is no longer there, so it can never be undone."""


# --- Versions in .history ---

def _stamp() -> str:
    return datetime.now(timezone.utc).strftime(STAMP_FORMAT)


def snapshot(kb: Path, rel_path: str) -> str:
    """Copy the note to .history/<rel_path>.<stamp>; return that copy's path relative to kb."""
    data = read_bytes(kb, rel_path)
    base = f"{HISTORY_DIR}/{rel_path}.{_stamp()}"
    copy, n = base, 0
    try:
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


def prune_versions(kb: Path, rel_path: str) -> None:
    """Delete the oldest versions of one note beyond HISTORY_KEEP (0: keep all, as [:-0] is empty)."""
    for path in list_versions(kb, rel_path)[:-HISTORY_KEEP]:
        with contextlib.suppress(OSError):
            remove_file(kb, rel(kb, path))


# --- The undo log ---

def _inside_notes(path, under: str | None = None) -> bool:
    if not isinstance(path, str) or "\0" in path or "\\" in path:
        return False
    parts = path.split("/")  # an empty part: "", "/abs.md" or "a//b.md"
    if {"..", ".", ""} & set(parts):
        return False
    return parts[0] == under if under else parts[0] != HISTORY_DIR


def _followable(e) -> bool:
    """The log may be edited by hand: undo follows only paths inside the notes (a snapshot: inside .history)."""
    if not isinstance(e, dict) or e.get("op") not in CHANGE_OPS or not isinstance(e.get("time", ""), (str, type(None))):
        return False
    return (_inside_notes(e.get("path")) and (e.get("to") is None or _inside_notes(e["to"]))
            and (e.get("snapshot") is None or _inside_notes(e["snapshot"], HISTORY_DIR)))


def read_log(kb: Path) -> list[dict]:
    """Changes the agent made, oldest first; unreadable lines are skipped rather than fatal."""
    try:
        lines = read_bytes(kb, f"{HISTORY_DIR}/{UNDO_LOG}").decode("utf-8", "replace").splitlines()
    except (OSError, ToolError):
        return []
    entries = []
    for line in lines:
        with contextlib.suppress(ValueError):
            entries.append(json.loads(line))
    return [e for e in entries if _followable(e)]


def _write_log(kb: Path, entries: list[dict]) -> None:
    text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries[-UNDO_LOG_KEEP:])
    write_bytes(kb, f"{HISTORY_DIR}/{UNDO_LOG}", text.encode("utf-8"))


def _log_change(kb: Path, op: str, path: str, to=None, snapshot_path=None, after=None, made=None) -> str:
    """Record a change; "" or a warning for its summary. `after`: the digest of what the agent wrote, so undo
    copies the note aside first only if it differs; `made`: the folders it made, which undo removes if empty."""
    entry = {"time": _stamp(), "op": op, "path": path, "to": to, "snapshot": snapshot_path, "after": after,
             "made": made or None}
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


# --- Changes the agent makes ---

@contextlib.contextmanager
def _changing(kb: Path, verb: str, rel_path: str, unchanged: str, new: bool = False):
    """Under the lock, with rel_path an existing note (unless `new`); a failing disk says what is unchanged."""
    try:
        with locked(kb):
            if not new and not (kb / rel_path).is_file():
                raise ToolError(f"{rel_path} does not exist")
            yield
    except OSError as e:
        raise ToolError(f"could not {verb} {rel_path}: {e.strerror or e}; {unchanged}") from None


def save_note(kb: Path, rel_path: str, new_text, op: str, check=None) -> str:
    """Write the note, keeping the old version; return the change summary line.

    `new_text`: the text, or a function of the note's text now, run under the lock so a change another process
    made meanwhile is built on, never written over. "write" creates a note (refused if one exists); "overwrite",
    "edit" and "append" replace one in its own format. `check(old_text, text)` may raise to write nothing: it
    runs under the lock, so what a person reviews is exactly what is written."""
    compute = new_text if callable(new_text) else lambda old: new_text
    with _changing(kb, "save", rel_path, "the note is as it was", new=op == "write"):
        if op == "write":  # `new`: refused, race-free, if a note of that name exists
            text, made = compute(""), []
            if check:
                check("", text)
            write_bytes(kb, rel_path, encode_note(text, NoteFormat()), new=True, made=made)
            return f"+ {rel_path}  +{len(text.splitlines())}" + _log_change(kb, "write", rel_path, made=made)
        try:
            old_text, fmt = decode_note(read_bytes(kb, rel_path))
        except ToolError as e:
            raise ToolError(f"{rel_path} is {e}") from None
        text = compute(old_text)
        if old_text == text:
            return change_summary(rel_path, old_text, text)
        if check:
            check(old_text, text)
        data = encode_note(text, fmt)
        kept = snapshot(kb, rel_path)  # and the undo entry before the write: a crash leaves none unknown to /undo
        warning = _log_change(kb, op, rel_path, snapshot_path=kept, after=hashlib.sha256(data).hexdigest())
        try:
            write_bytes(kb, rel_path, data)
        except BaseException:
            with contextlib.suppress(OSError):  # the change did not happen: nothing to undo
                remove_file(kb, kept)
                entries = read_log(kb)
                if entries and entries[-1].get("snapshot") == kept:  # ours, not an earlier change's
                    _write_log(kb, entries[:-1])
            raise
        prune_versions(kb, rel_path)
        return change_summary(rel_path, old_text, text) + warning


def move_note(kb: Path, from_path: str, to_path: str) -> str:
    """Rename a note; never replaces an existing one."""
    with _changing(kb, "move", from_path, "it is where it was"):
        made = []
        move_file(kb, from_path, to_path, made=made)  # refused, race-free, if to_path exists
        return f"→ {from_path} → {to_path}" + _log_change(kb, "move", from_path, to_path, made=made)


def delete_note(kb: Path, rel_path: str) -> str:
    """Remove a note after copying it into .history, where undo (or a person) can get it back."""
    with _changing(kb, "delete", rel_path, "it is still there"):
        kept = snapshot(kb, rel_path)
        remove_file(kb, rel_path)
        return f"- {rel_path}" + _log_change(kb, "delete", rel_path, snapshot_path=kept)


# --- Undo ---

def undo_last(kb: Path) -> tuple[str, list[str]]:
    """Revert the latest change the agent made: (what was done, the paths it touched). What undo replaces is
    copied into .history first; a change that can no longer be undone is dropped; ToolError: retry later."""
    with locked(kb) if (kb / HISTORY_DIR).is_dir() else contextlib.nullcontext():
        entries = read_log(kb)
        if not entries:
            return "Nothing to undo: no changes by the agent are recorded in this knowledge base.", []
        entry = entries[-1]
        try:
            message, touched = _undo(kb, entry)
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
    """Copy what is at rel_path into .history before undo replaces it, unless it is just what the agent wrote
    (such copies would push out the older versions further undos need)."""
    if not (kb / rel_path).is_file() or (after and hashlib.sha256(read_bytes(kb, rel_path)).hexdigest() == after):
        return ""
    return f" The text it had before this undo is kept in {snapshot(kb, rel_path)}."


def _undo(kb: Path, entry: dict) -> tuple[str, list[str]]:
    op, rel_path, to, what = entry["op"], entry["path"], entry.get("to"), _describe(entry)
    if op == "write":
        if not (kb / rel_path).is_file():
            raise _Gone(f"{rel_path} no longer exists")
        kept = snapshot(kb, rel_path)
        remove_file(kb, rel_path)
        _remove_made(kb, rel_path, entry.get("made"))
        return f"Undid {what}: removed {rel_path} (a copy is kept in {kept}).", [rel_path]
    if op == "move":
        if not to or not (kb / to).is_file():
            raise _Gone(f"{to} no longer exists")
        kept = _keep_current(kb, rel_path)
        move_file(kb, to, rel_path, replace=True)
        _remove_made(kb, to, entry.get("made"))
        return f"Undid {what}: moved {to} back to {rel_path}.{kept}", [to, rel_path]
    saved = entry.get("snapshot")
    if not saved or not (kb / saved).is_file():
        raise _Gone(f"its saved version {saved or '(none)'} is gone")
    kept = _keep_current(kb, rel_path, entry.get("after"))
    write_bytes(kb, rel_path, read_bytes(kb, saved))
    prune_versions(kb, rel_path)
    back = "is back" if op == "delete" else "is as it was before"
    return f"Undid {what}: {rel_path} {back}.{kept}", [rel_path]


def _remove_made(kb: Path, note: str, folders) -> None:
    """Remove the folders a change made for `note` where they are empty now. The log may be edited by hand:
    only folders above the note count."""
    if isinstance(folders, list):
        remove_folders(kb, [f for f in folders if isinstance(f, str) and note.startswith(f + "/")])


# --- Summaries ---

def _common_ends(old: list[str], new: list[str]) -> tuple[int, int]:
    """Lines the two share at head and tail: trimmed first, as difflib is slow on long notes with small edits."""
    head = len(os.path.commonprefix([old, new]))  # commonprefix compares any sequences, item by item
    return head, len(os.path.commonprefix([old[head:][::-1], new[head:][::-1]]))


def diff_text(old_text: str, new_text: str) -> str:
    """A unified diff (hunks only, 3 lines of context) of a change, at most DIFF_MAX_LINES lines long."""
    old, new = old_text.splitlines(), new_text.splitlines()
    head, tail = _common_ends(old, new)
    start, cut = max(0, head - DIFF_CONTEXT), max(0, tail - DIFF_CONTEXT)
    lines = list(difflib.unified_diff(old[start:len(old) - cut], new[start:len(new) - cut], lineterm="",
                                      n=DIFF_CONTEXT))[2:]  # the ---/+++ header: the question names the note
    lines = [re.sub(r"(?<=[-+])\d+", lambda m: str(int(m[0]) + start), line) if line.startswith("@@") else line
             for line in lines]  # hunk line numbers count from the note's first line, not from `start`
    if len(lines) > DIFF_MAX_LINES:
        lines = lines[:DIFF_MAX_LINES] + [f"[… {len(lines) - DIFF_MAX_LINES} more lines of the diff]"]
    return "\n".join(lines)


def change_summary(rel_path: str, old_text: str, new_text: str) -> str:
    """`~ notes/git.md  +3 −1`: lines added and removed (a new note says `+ new.md  +12`, a deleted one
    `- old.md`, a moved one `→ a.md → b.md`)."""
    old, new = old_text.splitlines(), new_text.splitlines()
    head, tail = _common_ends(old, new)
    matcher = difflib.SequenceMatcher(None, old[head:len(old) - tail], new[head:len(new) - tail], autojunk=False)
    changes = [c for c in matcher.get_opcodes() if c[0] != "equal"]
    added, removed = sum(j2 - j1 for _, _, _, j1, j2 in changes), sum(i2 - i1 for _, i1, i2, _, _ in changes)
    return f"~ {rel_path}  +{added} {MINUS}{removed}"
