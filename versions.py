"""Keeping every word recoverable: faithful reads, atomic writes, old versions, and undo.

Every change the agent makes to a note goes through this file:

- `read_note` gives a note's text (with "\\n" line endings) and its `NoteFormat` (UTF-8 BOM or not,
  CRLF or LF); writes put text back in that same format, so untouched lines stay byte-identical.
- Writes are atomic: a temp file in the note's folder, fsync, `os.replace`. If anything fails the old
  note is untouched and the temp file is gone.
- Before a change replaces or removes text, the old file is copied to `<kb>/.history/<rel_path>.<stamp>`,
  a plain file a person can open with any tool. Versions are pruned per note by `HISTORY_KEEP` and
  `HISTORY_MAX_AGE_DAYS`, never the newest.
- Each change is one line in `<kb>/.history/undo.jsonl`; `undo_last` reverts the latest one, and keeps a
  copy of anything it would replace.
- `change_summary` renders a change as one line, e.g. `~ notes/git.md  +3 −1`.

Problems come out as `VersionError` with a message meant for the model or the person; nothing is lost.
"""

import codecs
import contextlib
import difflib
import hashlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import config
from config import HISTORY_DIR, UNDO_LOG_NAME

CHANGE_OPS = ("write", "overwrite", "edit", "append", "move", "delete")
STAMP_FORMAT = "%Y-%m-%dT%H-%M-%S.%fZ"  # UTC, so versions sort by name even across DST changes
STAMP_RE = re.compile(r"\.(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{6}Z)(?:-(\d+))?$")
MINUS = "\u2212"


class VersionError(Exception):
    """A change could not be made or undone; the message says why, and the note is as it was."""


class _Gone(VersionError):
    """What a recorded change touched is no longer there, so it can never be undone."""


@dataclass(frozen=True)
class NoteFormat:
    bom: bool = False
    newline: str = "\n"  # "\n", "\r\n", or "" when a note mixes both and must be kept exactly as it is


# --- Reading and writing faithfully ---


def decode_note(data: bytes) -> tuple[str, NoteFormat]:
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        text = data[len(codecs.BOM_UTF8) if bom else 0 :].decode("utf-8")
    except UnicodeDecodeError as e:
        raise VersionError(f"not UTF-8 text (undecodable byte at offset {e.start}); it was left alone") from None
    crlf = text.count("\r\n")
    lone_lf = text.count("\n") - crlf
    if crlf and lone_lf:
        return text, NoteFormat(bom, "")
    if crlf:
        return text.replace("\r\n", "\n"), NoteFormat(bom, "\r\n")
    return text, NoteFormat(bom, "\n")


def encode_note(text: str, fmt: NoteFormat) -> bytes:
    # Only "\n" is translated: a stray "\r" the note already had round-trips untouched.
    if fmt.newline == "\r\n":
        text = text.replace("\n", "\r\n")
    data = text.encode("utf-8")
    return codecs.BOM_UTF8 + data if fmt.bom else data


def read_note(path: Path) -> tuple[str, NoteFormat]:
    """The note's text with "\\n" line endings, and the format to write it back in."""
    return decode_note(Path(path).read_bytes())


def write_note_text(path: Path, text: str, fmt: NoteFormat = NoteFormat()) -> None:
    atomic_write(path, encode_note(text, fmt))


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` all at once: readers see the old file or the new one, never half."""
    target = Path(os.path.realpath(path))  # through a symlinked note, so the link itself survives
    _write_via_temp(target, data, os.replace)


def _write_via_temp(target: Path, data: bytes, put_in_place) -> None:
    """Write a synced temp file beside `target`, then `put_in_place(tmp, target)`; no temp file survives."""
    # A dot name keeps a temp file left by a power cut out of search and listings.
    fd, tmp = tempfile.mkstemp(prefix=f".~{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(target))
        put_in_place(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)  # the only way to read it; set straight back
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable on POSIX; not possible (nor needed) everywhere.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _place_new(src: Path, dst: Path) -> None:
    """Move src to dst, failing if dst exists, even if it appeared a moment ago (os.rename would replace)."""
    try:
        os.link(src, dst)
    except FileExistsError:
        raise VersionError(f"{dst.name} already exists; nothing was replaced") from None
    except OSError:
        # No hard links here (some network or FAT drives): check, then rename.
        if os.path.lexists(dst):
            raise VersionError(f"{dst.name} already exists; nothing was replaced") from None
        os.rename(src, dst)
        return
    os.unlink(src)


# --- Versions in .history ---


def history_root(kb: Path) -> Path:
    return Path(kb) / HISTORY_DIR


def _stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime(STAMP_FORMAT)


def snapshot(kb: Path, rel_path: str, now: datetime | None = None) -> str:
    """Copy the note to .history/<rel_path>.<stamp>; return that copy's path relative to kb."""
    data = (Path(kb) / rel_path).read_bytes()
    base = history_root(kb) / f"{rel_path}.{_stamp(now)}"
    copy, n = base, 0
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        while copy.exists():  # two changes within one microsecond
            n += 1
            copy = base.with_name(f"{base.name}-{n}")
        atomic_write(copy, data)
    except OSError as e:
        raise VersionError(
            f"could not keep a copy of {rel_path} in {HISTORY_DIR}/ ({e.strerror or e}), so nothing was changed"
        ) from None
    return copy.relative_to(kb).as_posix()


def list_versions(kb: Path, rel_path: str) -> list[tuple[datetime, Path]]:
    """(time taken, path) of every kept version of one note, oldest first."""
    base = history_root(kb) / rel_path
    try:
        names = os.listdir(base.parent)
    except OSError:
        return []
    found = []
    for name in names:
        if not name.startswith(base.name + "."):
            continue
        match = STAMP_RE.fullmatch(name[len(base.name) :])
        if match:
            taken = datetime.strptime(match[1], STAMP_FORMAT).replace(tzinfo=timezone.utc)
            found.append((taken, int(match[2] or 0), base.parent / name))
    found.sort()
    return [(taken, path) for taken, _, path in found]


def prune_versions(
    kb: Path,
    rel_path: str,
    keep: int | None = None,
    max_age_days: float | None = None,
    now: datetime | None = None,
) -> list[Path]:
    """Delete versions of one note beyond `keep` or older than `max_age_days` (0 = no limit); never the newest.

    The limits default to config.HISTORY_KEEP and config.HISTORY_MAX_AGE_DAYS, read at call time.
    """
    keep = config.HISTORY_KEEP if keep is None else keep
    max_age_days = config.HISTORY_MAX_AGE_DAYS if max_age_days is None else max_age_days
    versions = list_versions(kb, rel_path)
    now = now or datetime.now(timezone.utc)
    removed = []
    for i, (taken, path) in enumerate(versions[:-1]):
        too_many = keep > 0 and len(versions) - i > keep
        too_old = max_age_days > 0 and now - taken > timedelta(days=max_age_days)
        if too_many or too_old:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


# --- The undo log ---


def _log_path(kb: Path) -> Path:
    return history_root(kb) / UNDO_LOG_NAME


def read_log(kb: Path) -> list[dict]:
    """Changes the agent made, oldest first; unreadable lines are skipped rather than fatal."""
    try:
        lines = _log_path(kb).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    entries = []
    for line in lines:
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if _valid_entry(entry):
                entries.append(entry)
    return entries


def _valid_entry(entry) -> bool:
    def optional_str(key):
        return entry.get(key) is None or isinstance(entry.get(key), str)

    return (
        isinstance(entry, dict)
        and entry.get("op") in CHANGE_OPS
        and _inside_notes(entry.get("path"))
        and (entry.get("to") is None or _inside_notes(entry["to"]))
        and (entry.get("snapshot") is None or _inside_notes(entry["snapshot"], HISTORY_DIR))
        and optional_str("time")
    )


def _inside_notes(rel_path, under: str | None = None) -> bool:
    """The log lives in the notes folder and may be synced or edited: undo follows only relative paths
    that stay inside it (and, for a snapshot, inside .history)."""
    if not isinstance(rel_path, str) or not rel_path or "\0" in rel_path or "\\" in rel_path:
        return False
    parts = rel_path.split("/")
    return not rel_path.startswith("/") and ".." not in parts and "" not in parts and \
        (under is None or parts[0] == under) and (under is not None or parts[0] != HISTORY_DIR)


def _write_log(kb: Path, entries: list[dict]) -> None:
    text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries[-config.UNDO_LOG_KEEP :])
    atomic_write(_log_path(kb), text.encode("utf-8"))


def log_change(kb: Path, op: str, path: str, to: str | None = None, snapshot_path: str | None = None,
               after: str | None = None) -> str:
    """Record a change that was made; return "" or a warning to append to its summary (never raise).

    `after` is the digest of what the agent wrote: undo copies the note aside first only if it differs."""
    try:
        _append_log(kb, {"time": _stamp(), "op": op, "path": path, "to": to, "snapshot": snapshot_path,
                         "after": after})
        return ""
    except OSError as e:
        return f"  (done, but /undo will not know about it: {e.strerror or e})"


def _append_log(kb: Path, entry: dict) -> None:
    history_root(kb).mkdir(parents=True, exist_ok=True)
    entries = read_log(kb)
    if len(entries) >= 2 * config.UNDO_LOG_KEEP:  # rewrite only now and then, so the log stays small and cheap
        _write_log(kb, entries + [entry])
        return
    with open(_log_path(kb), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


# --- Changes the agent makes ---


def save_note(kb: Path, rel_path: str, text: str, op: str, expected: str | None = None) -> str:
    """Write `text` to the note, keeping the old version; return the change summary line.

    op "write" creates a new note and fails if one exists; "overwrite", "edit" and "append" replace an
    existing one in its own format. `expected` is the text the change was computed from, read moments
    before in the same tool call: if the note differs now (a save in between), nothing is written.
    """
    kb = Path(kb)
    path = kb / rel_path
    try:
        if op == "write":
            if os.path.lexists(path):
                raise VersionError(f"{rel_path} already exists; nothing was replaced")
            path.parent.mkdir(parents=True, exist_ok=True)
            _create(path, encode_note(text, NoteFormat()))
            return change_summary("write", rel_path, new_text=text) + log_change(kb, "write", rel_path)
        if not path.is_file():
            raise VersionError(f"{rel_path} does not exist")
        old_text, fmt = read_note(path)
        if expected is not None and old_text != expected:
            raise VersionError(f"{rel_path} changed on disk since it was read; read it again, nothing was written")
        if old_text == text:
            return change_summary(op, rel_path, old_text, text)
        kept = snapshot(kb, rel_path)
        write_note_text(path, text, fmt)
        prune_versions(kb, rel_path)
        return change_summary(op, rel_path, old_text, text) + log_change(
            kb, op, rel_path, snapshot_path=kept, after=_digest(path))
    except OSError as e:
        raise VersionError(f"could not save {rel_path}: {e.strerror or e}; the note is as it was") from None


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _create(path: Path, data: bytes) -> None:
    _write_via_temp(path, data, lambda tmp, target: _place_new(Path(tmp), target))


def move_note(kb: Path, from_path: str, to_path: str) -> str:
    """Rename a note; never replaces an existing one."""
    kb = Path(kb)
    src, dst = kb / from_path, kb / to_path
    try:
        if not src.is_file():
            raise VersionError(f"{from_path} does not exist")
        if os.path.lexists(dst):
            raise VersionError(f"{to_path} already exists; choose another name, nothing was moved")
        dst.parent.mkdir(parents=True, exist_ok=True)
        _place_new(src, dst)
        return change_summary("move", from_path, to=to_path) + log_change(kb, "move", from_path, to=to_path)
    except OSError as e:
        raise VersionError(f"could not move {from_path}: {e.strerror or e}; it is where it was") from None


def delete_note(kb: Path, rel_path: str) -> str:
    """Remove a note after copying it into .history, where undo (or a person) can get it back."""
    kb = Path(kb)
    path = kb / rel_path
    try:
        if not path.is_file():
            raise VersionError(f"{rel_path} does not exist")
        kept = snapshot(kb, rel_path)
        path.unlink()
        return change_summary("delete", rel_path) + log_change(kb, "delete", rel_path, snapshot_path=kept)
    except OSError as e:
        raise VersionError(f"could not delete {rel_path}: {e.strerror or e}; it is still there") from None


# --- Undo ---


def undo_last(kb: Path, on_change=None) -> str:
    """Revert the latest change the agent made and say what was restored.

    Whatever undo would replace or remove is copied into .history first, so a person's own edits made
    since the change are never lost. `on_change(rel_path)` is called for each path touched (for the
    search index). A change that can no longer be undone (its file is gone) is dropped with a message.
    """
    kb = Path(kb)
    entries = read_log(kb)
    if not entries:
        return "Nothing to undo: no changes by the agent are recorded in this knowledge base."
    entry = entries[-1]
    try:
        message, touched = _undo(kb, entry)
    except _Gone as e:
        message, touched = f"Could not undo {_describe(entry)}: {e}. Dropped it from the undo list.", []
    except (VersionError, OSError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        return f"Error: could not undo {_describe(entry)}: {reason}. Nothing was changed; try again."
    try:
        _write_log(kb, entries[:-1])
    except OSError as e:
        message += f" (Warning: could not update the undo list: {e.strerror or e}.)"
    for rel_path in touched:
        if on_change:
            on_change(rel_path)
    return message


def _describe(entry: dict) -> str:
    when = (entry.get("time") or "")[11:19].replace("-", ":")
    target = f"{entry['path']} → {entry['to']}" if entry["op"] == "move" else entry["path"]
    return f"the {entry['op']} of {target}" + (f" at {when} UTC" if when else "")


def _keep_current(kb: Path, rel_path: str, after: str | None = None) -> str:
    """Copy what is at rel_path now into .history before undo replaces it; return a note for the message.

    Text that is exactly what the agent wrote is not copied: those copies would count against
    HISTORY_KEEP and push out the older versions that further undos need."""
    path = Path(kb) / rel_path
    if not path.is_file() or (after and _digest(path) == after):
        return ""
    return f" The text it had before this undo is kept in {snapshot(kb, rel_path)}."


def _restore(kb: Path, rel_path: str, snapshot_path: str | None, after: str | None) -> str:
    source = Path(kb) / (snapshot_path or "")
    if not snapshot_path or not source.is_file():
        raise _Gone(f"its saved version {snapshot_path or '(none)'} is gone")
    kept = _keep_current(kb, rel_path, after)
    path = Path(kb) / rel_path
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, source.read_bytes())
    prune_versions(kb, rel_path)
    return kept


def _undo(kb: Path, entry: dict) -> tuple[str, list[str]]:
    op, rel_path, to = entry["op"], entry["path"], entry.get("to")
    what = _describe(entry)
    if op == "write":
        if not (kb / rel_path).is_file():
            raise _Gone(f"{rel_path} no longer exists")
        kept = snapshot(kb, rel_path)
        (kb / rel_path).unlink()
        return f"Undid {what}: removed {rel_path} (a copy is kept in {kept}).", [rel_path]
    if op == "move":
        if not to or not (kb / to).is_file():
            raise _Gone(f"{to} no longer exists")
        kept = _keep_current(kb, rel_path)
        (kb / rel_path).parent.mkdir(parents=True, exist_ok=True)
        os.replace(kb / to, kb / rel_path)
        return f"Undid {what}: moved {to} back to {rel_path}.{kept}", [to, rel_path]
    kept = _restore(kb, rel_path, entry.get("snapshot"), entry.get("after"))
    if op == "delete":
        return f"Undid {what}: {rel_path} is back.{kept}", [rel_path]
    return f"Undid {what}: {rel_path} is as it was before.{kept}", [rel_path]


# --- Summaries ---


def count_changed_lines(old_text: str, new_text: str) -> tuple[int, int]:
    """(lines added, lines removed) between two texts."""
    old, new = old_text.splitlines(), new_text.splitlines()
    # Trim the common head and tail first: an edit touches a few lines of a long note, and difflib is
    # slow on long inputs.
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old, new = old[head : len(old) - tail], new[head : len(new) - tail]
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += i2 - i1
            added += j2 - j1
    return added, removed


def change_summary(
    op: str, rel_path: str, old_text: str | None = None, new_text: str | None = None, to: str | None = None
) -> str:
    """One line per change: `+ new.md  +12`, `~ notes/git.md  +3 −1`, `- old.md`, `→ a.md → b.md`."""
    if op == "move":
        return f"→ {rel_path} → {to}"
    if op == "delete":
        return f"- {rel_path}"
    if op == "write" or old_text is None:
        return f"+ {rel_path}  +{len((new_text or '').splitlines())}"
    added, removed = count_changed_lines(old_text, new_text or "")
    return f"~ {rel_path}  +{added} {MINUS}{removed}"

