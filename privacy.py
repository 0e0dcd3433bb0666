"""The privacy boundary: notes the person keeps from every model, by any path.

A note is private when `.kaignore` at the notes root matches its path (gitignore's patterns: `diary/`,
`*.secret.md`, `/taxes/**`, `!diary/public.md`; the last matching line decides) or its front matter says
`private: true` (the name in any case, as Obsidian reads it; failing safe, in a front matter that never closes too).
It is private under every name: a symlink or hard link to it and a sync copy or an editor's side file of it
(original_of) are too. A private note is no search hit, no name in a listing (list_notes only counts them), no
snippet, never embedded; the tools treat it as absent, the shell's sandbox cannot read it, and a change that touches
one (a move rewriting its links) never names it to the model. The person still sees it in /read and the page's note
view, which go to nobody. This module only answers "is it private?"; each of those places asks it. It never writes.
"""

import os
import re
import stat
from pathlib import Path

import db
import frontmatter
import notes
import vault

KAIGNORE = ".kaignore"
KAIGNORE_MAX_BYTES = 100_000
FRONT_MATTER_BYTES = 65_536  # where `private: true` is looked for: the front matter is at the top
HARMLESS_HIDDEN = frozenset({".DS_Store"})  # hidden files the sandbox lets be read in subfolders: Finder's
# An editor's or a merge's copy of a note beside it: vim's swap, a backup, emacs's autosave and lock, .orig/.bak/.rej.
_SIDE_FILE = re.compile(r"(.*/)?(?:\.([^/]+)\.sw[op]|([^/]+)~|#([^/]+)#|\.#([^/]+)|([^/]+)\.(?:orig|bak|rej))", re.S)
_GLOB = re.compile(r"\*\*/|/\*\*\Z|\*\*|\*|\?|\[(.[^\]]*)\]|\\(.)|.", re.S)  # gitignore's marks, else one character
_GLOB_REGEX = {"**/": "(?:.*/)?", "/**": "/.*", "**": ".*", "*": "[^/]*", "?": "[^/]"}


def _pattern(line: str) -> tuple[re.Pattern, bool] | None:
    """A .kaignore line (from str.splitlines) as (regex over a path relative to the notes, negated), or None."""
    if not line.strip() or line.startswith("#"):
        return None
    negated = line.startswith("!")
    line = line[1:] if negated else line.replace("\\#", "#", 1).replace("\\!", "!", 1)
    line = line.rstrip() if not line.endswith("\\ ") else line  # trailing spaces only when escaped
    folder_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line  # a slash at the start or in the middle: from the root, as in .gitignore
    body = _GLOB.sub(_glob_piece, line.lstrip("/"))
    return re.compile(("" if anchored else "(?:.*/)?") + body + ("/.*" if folder_only else "(?:/.*)?"), re.S), negated


def _glob_piece(mark: re.Match) -> str:
    """The regex for one of _GLOB's matches: a wildcard, a [class] (group 1), an escaped (group 2) or plain one."""
    if mark[0] in _GLOB_REGEX:
        return _GLOB_REGEX[mark[0]]
    if mark[1]:  # [abc], [!abc]
        return "[" + ("^" + mark[1][1:] if mark[1][0] in "!^" else mark[1]).replace("\\", "\\\\") + "]"
    return re.escape(mark[2] or mark[0])


def signature(kb: Path) -> tuple | None:
    """What changes when the .kaignore file does: (mtime, size), or None without one."""
    try:
        st = os.stat(kb / KAIGNORE, follow_symlinks=False)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def rules(kb: Path) -> list:
    """The .kaignore rules of the notes folder, read race-free (its Notebook reads them again when they change)."""
    try:
        text = notes.readable_text(notes.read_bytes(kb, KAIGNORE, KAIGNORE_MAX_BYTES)) or ""
    except (OSError, notes.ToolError):
        text = ""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            if rule := _pattern(line):
                found.append(rule)
        except re.error as exc:  # `[z-a]`: git matches nothing with it; say so rather than stop every search
            db.notice(f"{KAIGNORE} line {number} ({line.strip()!r}) is not a pattern ({exc.msg}) and is skipped: "
                      "fix it so that it does what you meant.")
    return found


def ignored(rel_path: str, found: list) -> bool:
    """Whether the .kaignore rules match the path (a note, or a folder given with a trailing "/")."""
    return next((not negated for pattern, negated in reversed(found)  # the last line that matches decides
                 if pattern.fullmatch(rel_path) or pattern.fullmatch(rel_path.rstrip("/") + "/")), False)


def matched(rel_path: str, is_folder: bool, found: list) -> bool:
    """Whether the .kaignore rules match the entry (a folder: all in it, whatever a `!` line says, as in git), or it
    is named as a copy or side file of one they match (original_of): what the shell's sandbox keeps whole."""
    if is_folder:
        return ignored(rel_path + "/", found)
    original = original_of(rel_path)
    return ignored(rel_path, found) or original is not None and ignored(original, found)


def original_of(rel_path: str) -> str | None:
    """The note a file is named as a copy (vault.copy_of) or side file (_SIDE_FILE) of: it may hold its words."""
    side = _SIDE_FILE.fullmatch(rel_path)
    name = side and next(part for part in side.groups()[1:] if part)
    if name and name.lower().endswith(notes.NOTE_SUFFIXES):
        return (side[1] or "") + name
    return vault.copy_of(rel_path)


def hard_linked(kb: Path, rel_path: str) -> bool:
    """Whether the file has other names (a private note's, maybe: Index.linked knows)."""
    try:
        st = os.stat(kb / rel_path, follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return st.st_nlink > 1 and stat.S_ISREG(st.st_mode)


def says_private(properties: dict) -> bool:
    """Whether a note's properties (frontmatter.front_matter's) say `private: true`; Obsidian's names ignore case."""
    return any(isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "on")
               for name, value in properties.items() if name.lower() == "private")


def by_name(kb: Path, rel_path: str, real_path: str | None, found: list) -> bool:
    """Whether .kaignore matches the note's path or `real_path` (where the links on its way lead, or another name of
    its inode: a hard link), or it is named as a copy or side file of a private note (original_of)."""
    if ignored(rel_path, found) or (real_path is not None and ignored(real_path, found)):
        return True
    original = original_of(real_path or rel_path)
    return original is not None and is_private(kb, original, found)


def marked_private(text: str) -> bool:
    """Whether a note's text says `private: true` in its front matter, or, failing safe, in a block opened by '---'
    (after spaces too) that never closes, of which Obsidian reads nothing."""
    opening = text.lstrip(" \t\ufeff")
    return opening.startswith("---") and says_private(frontmatter.opening_properties(opening))


def is_private(kb: Path, rel_path: str, found: list, text: str | None = None, twin: str | None = None) -> bool:
    """Whether .kaignore or its front matter say so; `rel_path` is its real path (the tools' path guard resolves
    links), `twin` another name of its inode (Index.linked); its text's start is read race-free when not given."""
    if by_name(kb, rel_path, twin, found):
        return True
    if text is None:
        try:
            text = notes.readable_text(notes.read_bytes(kb, rel_path, FRONT_MATTER_BYTES)) or ""
        except (OSError, notes.ToolError):
            return False  # nothing there to keep private
    return marked_private(text)
