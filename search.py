"""Finding notes: which files count as notes, keyword search over them, and listing them.

This is the simple version: every search reads every note. It keeps a note only if it contains all the
query's words (case-insensitive), ranks by how often they occur, and shows the best matching lines.
"""

import os
from pathlib import Path, PurePath

from config import LIST_MAX_NOTES, NOTE_SUFFIXES, SEARCH_LINES_PER_HIT, SEARCH_MAX_HITS, SEARCH_OUTPUT_CHARS


def is_hidden_name(name: str) -> bool:
    """Dot-files and dot-folders (.git, .obsidian, .history) are hidden; `..md` is a note named '.'."""
    return name.startswith(".") and not name.startswith("..")


def is_note_file(rel_path) -> bool:
    parts = PurePath(rel_path).parts
    return bool(parts) and parts[-1].lower().endswith(NOTE_SUFFIXES) and not any(map(is_hidden_name, parts))


def iter_notes(kb: Path, folder: str | None = None):
    """Yield (relative posix path, os.DirEntry) for every visible note, skipping what cannot be read."""
    start = kb / folder if folder else kb
    stack = [start]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            if is_hidden_name(entry.name):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file() and entry.name.lower().endswith(NOTE_SUFFIXES):
                    if entry.is_symlink() and not Path(entry.path).resolve().is_relative_to(kb):
                        continue  # a link leading out of the notes: its target is not the person's note
                    yield Path(entry.path).relative_to(kb).as_posix(), entry
            except (OSError, RuntimeError):  # RuntimeError: a symlink loop
                continue


def note_title(text: str, rel_path: str) -> str:
    for line in text.splitlines()[:20]:
        if line.startswith("#"):
            return line.lstrip("#").strip() or PurePath(rel_path).stem
    return PurePath(rel_path).stem


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8-sig", errors="replace")


def _score(rel_path: str, text: str, words: list[str]) -> tuple[int, list[tuple[int, str]]]:
    lower = rel_path.lower() + "\n" + text.lower()
    if not all(word in lower for word in words):
        return 0, []
    scored_lines = []
    for number, line in enumerate(text.splitlines(), 1):
        hits = sum(line.lower().count(word) for word in words)
        if hits:
            scored_lines.append((hits, number, line.strip()))
    best = sorted(scored_lines, key=lambda item: (-item[0], item[1]))[:SEARCH_LINES_PER_HIT]
    return sum(lower.count(word) for word in words), [(n, line) for _, n, line in sorted(best, key=lambda i: i[1])]


def render_hits(hits: list[tuple[str, str, list[tuple[int, str]]]], total: int, query: str) -> str:
    out = [f"{total} note(s) match {query!r}:"]
    shown = 0
    for rel_path, title, lines in hits:
        block = [f"\n{rel_path} — {title}"] + [f"  {n}: {line[:200]}" for n, line in lines]
        if sum(map(len, out)) + sum(map(len, block)) > SEARCH_OUTPUT_CHARS:
            break
        out.extend(block)
        shown += 1
    if total > shown:
        out.append(f"\n… {total - shown} more matched; refine the query or give a folder to see them.")
    return "\n".join(out)


def search_notes(kb: Path, query: str, folder: str | None = None, limit: int = SEARCH_MAX_HITS) -> str:
    words = query.lower().split()
    if not words:
        return "Error: the query is empty; give one or more words to look for."
    matches = []
    for rel_path, entry in iter_notes(kb, folder):
        text = _read_text(entry.path)
        if text is None:
            continue
        score, lines = _score(rel_path, text, words)
        if score:
            matches.append((score, rel_path, note_title(text, rel_path), lines))
    if not matches:
        return f"No notes match {query!r}. Try fewer or other words (or another language), or list_notes."
    matches.sort(key=lambda m: (-m[0], m[1]))
    return render_hits([m[1:] for m in matches[:limit]], len(matches), query)


def list_notes(kb: Path, folder: str | None = None) -> str:
    notes = []
    for rel_path, entry in iter_notes(kb, folder):
        try:
            stat = entry.stat()
        except OSError:
            continue
        notes.append((stat.st_mtime, rel_path, stat.st_size))
    where = f"in {folder}/" if folder else "in the knowledge base"
    if not notes:
        return f"No notes {where}."
    notes.sort(reverse=True)
    lines = [f"{len(notes)} note(s) {where}, newest first:"]
    lines += [f"{rel_path}  ({size} bytes)" for _, rel_path, size in notes[:LIST_MAX_NOTES]]
    if len(notes) > LIST_MAX_NOTES:
        lines.append(f"… {len(notes) - LIST_MAX_NOTES} more not shown; give a folder to narrow the list.")
    return "\n".join(lines)


def note_changed(kb: Path, rel_path: str) -> None:
    """The agent changed a note. The simple search reads files on every call, so there is nothing to do."""
