"""The privacy boundary: notes the person keeps from every model, by any path.

A note is private when `.kaignore` at the notes root matches its path (gitignore's patterns: `diary/`,
`*.secret.md`, `/taxes/**`, `!diary/public.md`; the last matching line decides) or its front matter says
`private: true`. A private note is no search hit, no name in a listing (list_notes only counts them), no snippet,
never embedded; the tools treat it as absent, the shell's sandbox cannot read it, and a change that touches one
(a move rewriting its links) never names it to the model. The person still sees it in /read and the page's note
view, which go to nobody. This module only answers "is it private?"; each of those places asks it. It never
writes.
"""

import os
import re
from pathlib import Path

import notes
import vault

KAIGNORE = ".kaignore"
KAIGNORE_MAX_BYTES = 100_000
FRONT_MATTER_BYTES = 65_536  # where `private: true` is looked for: the front matter is at the top
TRUE = ("true", "yes", "1", "on")
_RULES: dict = {}  # notes folder -> (the .kaignore file's mtime and size, its rules)


def _pattern(line: str) -> tuple[re.Pattern, bool, bool] | None:
    """A .kaignore line as (regex over a path relative to the notes, negated, matches folders only), or None."""
    line = line.rstrip("\n").rstrip("\r")
    if not line.strip() or line.startswith("#"):
        return None
    negated = line.startswith("!")
    line = line[1:] if negated else line.replace("\\#", "#", 1).replace("\\!", "!", 1)
    line = line.rstrip() if not line.endswith("\\ ") else line  # trailing spaces only when escaped
    folder_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line  # a slash at the start or in the middle: from the root, as in .gitignore
    line = line.lstrip("/")
    out, i = [], 0
    while i < len(line):
        if line.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif line.startswith("/**", i) and i + 3 == len(line):
            out.append("/.*")
            i += 3
        elif line.startswith("**", i):
            out.append(".*")
            i += 2
        elif line[i] == "*":
            out.append("[^/]*")
            i += 1
        elif line[i] == "?":
            out.append("[^/]")
            i += 1
        elif line[i] == "[" and (end := line.find("]", i + 2)) > 0:
            inside = line[i + 1:end]
            out.append("[" + ("^" + inside[1:] if inside[0] in "!^" else inside).replace("\\", "\\\\") + "]")
            i = end + 1
        elif line[i] == "\\" and i + 1 < len(line):
            out.append(re.escape(line[i + 1]))
            i += 2
        else:
            out.append(re.escape(line[i]))
            i += 1
    start = "" if anchored else "(?:.*/)?"
    return re.compile(f"{start}{''.join(out)}(?:/.*)?" if not folder_only else f"{start}{''.join(out)}/.*",
                      re.S), negated, folder_only


def signature(kb: Path) -> tuple | None:
    """What changes when the .kaignore file does: (mtime, size), or None without one."""
    try:
        st = os.stat(kb / KAIGNORE, follow_symlinks=False)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def rules(kb: Path) -> list:
    """The .kaignore rules of the notes folder (read race-free, again only when the file changed)."""
    key = signature(kb)
    if key is None:
        return []
    cached = _RULES.get(kb)
    if cached and cached[0] == key:
        return cached[1]
    try:
        text = notes.readable_text(notes.read_bytes(kb, KAIGNORE, KAIGNORE_MAX_BYTES)) or ""
    except (OSError, notes.ToolError):
        text = ""
    found = [rule for rule in map(_pattern, text.splitlines()) if rule]
    _RULES[kb] = (key, found)
    return found


def ignored(rel_path: str, found: list) -> bool:
    """Whether the .kaignore rules match the path (a note, or a folder given with a trailing "/")."""
    private = False
    for pattern, negated, _ in found:
        if pattern.fullmatch(rel_path) or pattern.fullmatch(rel_path.rstrip("/") + "/"):
            private = not negated
    return private


def marked(text: str) -> bool:
    """Whether a note's front matter says `private: true`."""
    return says_private(vault.front_matter(text)[0]) if text.startswith(("---", "\ufeff---")) else False


def says_private(properties: dict) -> bool:
    """Whether a note's properties (vault.front_matter's) say `private: true`."""
    value = properties.get("private")
    return isinstance(value, str) and value.strip().lower() in TRUE


def is_private(kb: Path, rel_path: str, text: str | None = None, found: list | None = None) -> bool:
    """Whether the note is private; its text is read (its start, race-free) when not given; `found`: the
    .kaignore rules, when the caller has them (an index build asks for thousands of notes)."""
    if ignored(rel_path, rules(kb) if found is None else found):
        return True
    if text is None:
        try:
            text = notes.readable_text(notes.read_bytes(kb, rel_path, FRONT_MATTER_BYTES)) or ""
        except (OSError, notes.ToolError):
            return False  # nothing there to keep private
    return marked(text)
