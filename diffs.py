"""A change shown to a person and to the model: one summary line per file, and the diff a person reviews.

    summary(change) -> "~ notes/git.md  +3 −1"      diffs(change) -> [(title, unified diff)]

Milliseconds on any note: the lines shared at head and tail are set aside, and past DIFF_MAX_WORK the changed
middle is shown replaced whole and counted in n log n (a reorder is never `+0 −0`). Control characters and
direction marks are shown as escapes, so a note cannot hide what changes. It only reads the change it is given.
"""

import bisect
import difflib
import os
import re

from notes import plural, readable_text, visible

MINUS = "\u2212"
DIFF_CONTEXT = 3  # unchanged lines shown around a change under review
DIFF_MAX_LINES = 400  # lines of a diff shown for review; a longer one says how many more
# difflib takes time that grows with the product of the changed parts' lengths (far more on repetitive notes):
# past this product a change is estimated (_estimate) and shown as a whole replacement, so no summary takes a second.
DIFF_MAX_WORK = 4_000_000


def _text(data: bytes | None) -> str:
    return "" if data is None else readable_text(data) or ""


def _changed_lines(old_text: str, new_text: str, context: int = 0) -> tuple[int, list[str], list[str]]:
    """(the index of the first line kept, old lines, new lines) without the lines both share but for `context`."""
    old, new = old_text.splitlines(), new_text.splitlines()
    head = len(os.path.commonprefix([old, new]))  # commonprefix compares any sequences, item by item
    tail = len(os.path.commonprefix([old[head:][::-1], new[head:][::-1]]))
    start, cut = max(0, head - context), max(0, tail - context)
    return start, old[start:len(old) - cut], new[start:len(new) - cut]


def diff_text(old_text: str, new_text: str) -> str:
    """A unified diff (hunks only, 3 lines of context) of a change, at most DIFF_MAX_LINES lines long."""
    start, a, b = _changed_lines(old_text, new_text, DIFF_CONTEXT)
    if len(a) * len(b) <= DIFF_MAX_WORK:  # the ---/+++ header dropped (the note is named apart); hunks renumbered
        lines = [re.sub(r"(?<=[-+])\d+", lambda m: str(int(m[0]) + start), line) if line.startswith("@@") else line
                 for line in list(difflib.unified_diff(a, b, lineterm="", n=DIFF_CONTEXT))[2:]]  # from line 1
    else:  # too big to compare closely: one hunk replacing the changed middle
        lines = [f"@@ -{start + 1},{len(a)} +{start + 1},{len(b)} @@", *("-" + x for x in a), *("+" + x for x in b)]
    if len(lines) > DIFF_MAX_LINES:
        lines = lines[:DIFF_MAX_LINES] + [f"[… {len(lines) - DIFF_MAX_LINES} more lines of the diff]"]
    return "\n".join(lines)


def diffs(change) -> list[tuple[str, str]]:
    shown = [(f"{change.move[0]} → {change.move[1]}", "")] if change.move else []
    for f in change.files:
        title = change.final_path(f.path) if f.path != (change.move or ("",))[0] else shown.pop()[0]
        diff = diff_text(_text(f.old), _text(f.new)) or "(only the line endings or the final newline change)"
        shown.append((visible(title), visible(diff, lines=True)))
    return shown


def change_summary(rel_path: str, old_text: str, new_text: str) -> str:
    """`~ notes/git.md  +3 −1`: lines added and removed; past DIFF_MAX_WORK `+0 −0, 16000 lines moved` (_estimate)."""
    _, a, b = _changed_lines(old_text, new_text)
    if len(a) * len(b) > DIFF_MAX_WORK:
        removed, added, moved = _estimate(a, b)
    else:
        changes = [c for c in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if c[0] != "equal"]
        added, removed, moved = sum(j2 - j1 for *_, j1, j2 in changes), sum(i2 - i1 for _, i1, i2, *_ in changes), 0
    return f"~ {rel_path}  +{added} {MINUS}{removed}" + f", {plural(moved, 'line')} moved" * bool(moved)


def _estimate(a: list, b: list) -> tuple[int, int, int]:
    """(lines removed, added, moved) in n log n time: the k-th copy of a line in `b` is paired with its k-th copy in
    `a`; a line left unpaired is removed or added, a paired one off the longest run kept in order (patience) moved."""
    places = {}  # line -> where it is in `a`, last first
    for i in range(len(a) - 1, -1, -1):
        places.setdefault(a[i], []).append(i)
    paired = [places[line].pop() for line in b if places.get(line)]
    kept = [-1]  # kept[n]: the least place in `a` that n lines kept in order can end at
    for place in paired:
        if place > kept[-1]:
            kept.append(place)
        else:
            kept[bisect.bisect_left(kept, place)] = place
    return len(a) - len(paired), len(b) - len(paired), len(paired) - len(kept) + 1


def summary(change, hidden=frozenset()) -> str:
    """One line per file: `+ new.md  +12`, `~ git.md  +3 −1`, `- old.md`, `→ a.md → b.md`; `hidden` counted."""
    lines = [f"→ {change.move[0]} → {change.move[1]}"] if change.move else []
    for f in change.files:
        path = change.final_path(f.path)
        if path in hidden:
            continue
        if f.old is None:
            lines.append(f"+ {path}  +{len(_text(f.new).splitlines())}")
        elif f.new is None:
            lines.append(f"- {path}")
        else:
            lines.append(change_summary(path, _text(f.old), _text(f.new)))
    count = sum(change.final_path(f.path) in hidden for f in change.files)
    return "\n".join(lines + [f"(and {plural(count, 'private note')})"] * bool(count))
