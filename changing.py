"""The tools that change notes: edit_note, append_note, write_note, move_note, delete_note, and their one pipeline.

Every change is a versions.Change planned from the disk with its words (the question, the result), approved where
approval.Approver asks, applied by Notebook.apply (atomic, undoable, the index told). A change that would break a
note's front matter is refused (_text_change), as is a new name that could be taken for another one (_new_name).
What the model can fix raises ToolError; nothing here writes but through Notebook.apply.
"""

import dataclasses
import difflib
import itertools
import json
import os
import re
import unicodedata
from datetime import datetime
from pathlib import PurePosixPath
from typing import Callable

import diffs
import frontmatter
import links as link_graph
import notes
import search
import vault
import versions
from approval import Approval
from notebook import Notebook
from notes import HISTORY_DIR, Shown, ToolError, is_note_path, plural, rel
from reading import MAX_NOTE_BYTES, MISSING, guarded, linked_here, note_links, note_text

EDIT_CLOSEST_LINES = 3  # lines shown when edit_note's old_text is not found
HINT_WIDTH = 200  # characters of the passage compared, and of a long line shown
# The hint for old_text not found must come within about a second on any note (bench/edit_hint_bench.py): only this
# much of the note is searched, and only this many pieces (most three-letter runs shared) are compared closely.
HINT_SCAN_CHARS = 1_000_000
HINT_CANDIDATES = 50
EDIT_MAX_MATCHES_COUNTED = 20
LINE_NUMBER = re.compile(r" {0,2}(\d+):(?: |$)")  # before each line a search hit or the passages show
KEPT = "the previous version is kept in .history/ (/undo in the chat restores it)."


def _changeable(notebook: Notebook, path, size_limit: bool = True) -> str:
    """The name of an existing note that may be changed (`size_limit`: its text is to be changed, so not a huge one)."""
    name = rel(notebook.kb, path)
    if path.is_dir():
        raise ToolError(f"{name} is a folder, not a note.")
    if not path.is_file():
        raise ToolError(*MISSING)  # as for a private note
    if size_limit and path.stat().st_size > MAX_NOTE_BYTES:
        raise ToolError(f"{name} is larger than {MAX_NOTE_BYTES} bytes; it is too big to change safely here.")
    return name


def _change(notebook: Notebook, approve, plan: Callable[[], versions.Change]) -> Shown:
    """A change a person approved is written only if every file is as they saw it; one nobody saw is planned again."""
    change = plan()
    if change.is_noop():  # saying "replaced" would claim a version was kept
        return _told(notebook, change, f"\nNothing was written: {change.note} already holds exactly that text.")
    asked = approve(Approval("change", change.title, change=change))
    if not asked and approve.allowance.over(change):  # routine, but this answer has written a lot already
        asked = approve(Approval("change", f"{change.title} (this answer would have written "
                                           f"{approve.allowance.written(change)} to the notes folder)", change=change),
                        always=True)
    if asked and change.move and (new := {f.path for f in plan().files} - {f.path for f in change.files}):
        raise versions.Stale(sorted(new))  # a note came to link here while the person looked: it must not break
    try:
        change, warning = notebook.apply(change, replan=None if asked else plan)
    except versions.Stale as exc:
        raise ToolError(f"{', '.join(exc.paths)} changed while the person was reviewing the change, so nothing "
                        "was written.", "read_note it again.") from None
    approve.allowance.left -= approve.allowance.cost(change)
    return _told(notebook, change, f"{warning}\n{change.done}")


def _told(notebook: Notebook, change: versions.Change, words: str) -> Shown:
    """diffs.summary for the model, then `words`: a private note the change touched is counted, not named."""
    paths = [change.final_path(f.path) for f in change.files]
    hidden = {path for f, path in zip(change.files, paths)
              if notebook.is_private(path, notes.readable_text(f.new or f.old or b"") or "")}
    return Shown(diffs.summary(change, hidden) + words, named=[*(change.move or ()), *set(paths) - hidden])


def _new_name(notebook: Notebook, name: str, moving: str = "") -> str:
    """A new note's name (or the note `moving`'s), refused if it holds an invisible character, looks like a name
    there (_alike) or is a sync copy's name of a note beside it. No answer names the other: it may be private."""
    if hidden := next((c for i, c in enumerate(name) if notes.ignorable(c) and not notes.joins(name, i)), None):
        raise ToolError(f"the name '{notes.visible(name)}' holds an invisible character (U+{ord(hidden):04X}); a new "
                        "note's name may not.", "Choose the name without it.")
    if (original := vault.copy_of(name)) and original != moving and os.path.lexists(notebook.kb / original):
        raise ToolError(f"'{notes.visible(name)}' is the name a sync service gives a copy of the note beside it, so it "
                        "would be taken for one; nothing was changed.", "Choose another name.")
    folder = notebook.kb
    for part in name.split("/"):
        try:
            twin = next((entry for entry in os.listdir(folder) if entry != part and _alike(entry) == _alike(part)), "")
        except OSError:  # a folder the change makes: nothing in it yet
            break
        if twin and rel(notebook.kb, folder / twin) != moving:
            odd = "".join(f", U+{ord(c):04X}" for c in dict.fromkeys(part) if _alike(c) != c.casefold())
            where = f"{rel(notebook.kb, folder)}/" if folder != notebook.kb else "the top folder"
            raise ToolError(f"'{notes.visible(part)}' looks the same as a name in {where} (it differs only in case, "
                            f"Unicode form or letters drawn alike{odd}); nothing was changed.",
                            "list_notes shows the names there: use that one, or a name that differs in more.")
        folder = folder / part
    return name


# Cyrillic and Greek letters drawn as Latin ones (Unicode's confusables.txt, which Python does not ship).
_LOOK_ALIKE = str.maketrans("АВЕКМНОРСТХУЅІЈҮԚԜаеорсухѕіјһԁԛԝӏүΑΒΕΖΗΙΚΜΝΟΡΤΥΧαορικνυχ",
                            "ABEKMHOPCTXYSIJYQWaeopcyxsijhdqwlyABEZHIKMNOPTYXaopikvux")


def _alike(name: str) -> str:
    """A name as it looks: what shows nothing left out, in NFKC (full-width, ligatures), look-alikes Latin, no case."""
    return unicodedata.normalize("NFKC", notes.SHOWN_ESCAPED.sub("", name)).translate(_LOOK_ALIKE).casefold()


def _text_change(notebook: Notebook, approve, name: str, new_text: Callable[[str], str], op: str, done: str) -> Shown:
    def checked(text: str) -> str:
        new = new_text(text)
        if problem := frontmatter.front_matter_broken(text, new):
            raise ToolError(f"that change would break the front matter (the properties between the '---' lines) of "
                            f"{name}: {problem}. Nothing was written.", "read_note it, then change the text so the "
                            "front matter stays valid.")
        return new
    return _change(notebook, approve, lambda: dataclasses.replace(
        versions.plan_text(notebook.kb, name, checked, op), title=f"Make this change to {name}?", done=done))


def _new_note(notebook: Notebook, name: str) -> tuple[str, str]:
    """(the text a new note starts with, words saying so): for today's daily note its template, filled in."""
    daily, now = vault.daily_note_settings(notebook.kb), datetime.now()
    if not daily["template"] or name != vault.daily_note_path(daily, now):
        return "", ""
    template = daily["template"] if daily["template"].lower().endswith(".md") else daily["template"] + ".md"
    try:
        _, text = note_text(notebook, template)
    except ToolError:
        return "", f" (the daily-note template {template} could not be read, so it started empty)"
    filled = vault.fill_template(_lf(text), PurePosixPath(name).stem, now, daily["format"])
    return filled, f" from the template {template}"


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")  # versions.py puts a CRLF note's own endings back


def closest_lines(text: str, passage: str) -> tuple[str, list[int]]:
    """The note's three lines most like the passage's longest line, to help the model copy it exactly, and their
    numbers. A long line is looked at in overlapping pieces as wide as the passage (a typo fix quotes part of one)."""
    wanted = max(passage.strip().splitlines() or [passage], key=len).strip()[:HINT_WIDTH]
    grams = {wanted[i:i + 3] for i in range(len(wanted) - 2)} or {wanted}
    lines, width = text[:HINT_SCAN_CHARS].splitlines(), max(len(wanted), 40)
    pieces = [(number, line[at:at + 2 * width]) for number, line in enumerate(lines, start=1)
              for at in range(0, max(1, len(line) - width), width)]
    shared = sorted(pieces, key=lambda piece: -sum(gram in piece[1] for gram in grams))[:HINT_CANDIDATES]
    scored = {}  # line number -> (likeness, the piece shown)
    for number, piece in shared:
        ratio = _likeness(piece.strip(), wanted)
        if ratio >= 0.5 and ratio > scored.get(number, (0,))[0]:
            scored[number] = (ratio, piece.strip())
    if not scored:
        return "No line of the note looks like it; read_note the note again to see its current text.", []
    best = sorted(sorted(scored, key=lambda number: -scored[number][0])[:EDIT_CLOSEST_LINES])
    shown = {n: lines[n - 1] if len(lines[n - 1]) <= HINT_WIDTH else f"…{scored[n][1]}"[:HINT_WIDTH - 1] + "…"
             for n in best}
    return "The closest lines are:\n" + "\n".join(f"  line {n}: {shown[n]}" for n in best), best


def _likeness(piece: str, wanted: str) -> float:
    """How like the wanted text the piece, or the stretch of it lined up on their longest common run, is."""
    matcher = difflib.SequenceMatcher(None, piece, wanted, autojunk=False)
    if len(piece) > len(wanted) + len(wanted) // 4:
        match = matcher.find_longest_match(0, len(piece), 0, len(wanted))
        begin = max(0, match.a - match.b)
        matcher.set_seq1(piece[begin:begin + len(wanted) + len(wanted) // 4])
    return matcher.ratio()


def _numbered_lines(text: str, passage: str) -> tuple | None:
    """(start, end, first line number) of the note's lines a passage copied with a search hit's numbers ("12: ") holds,
    when its numbers follow one another and those lines of the note are just that; else None."""
    lines = passage.removesuffix("\n").split("\n")
    marks = [LINE_NUMBER.match(line) for line in lines]
    if not all(marks) or [int(m[1]) for m in marks] != list(range(int(marks[0][1]), int(marks[0][1]) + len(lines))):
        return None
    first, note = int(marks[0][1]), text.split("\n")
    held = note[first - 1:first - 1 + len(lines)]
    if first < 1 or [line.removesuffix("\r") for line in held] != [line[m.end():] for line, m in zip(lines, marks)]:
        return None
    start, after = (sum(len(line) + 1 for line in note[:n]) for n in (first - 1, first - 1 + len(lines)))
    end = min(after, len(text)) if passage.endswith("\n") else after - 1 - held[-1].endswith("\r")
    return start, end, first


def _unnumbered(text: str, first: int) -> str:
    """The replacement without the line numbers it was copied with: those that count on from `first`."""
    out = []
    for line in text.split("\n"):
        mark = LINE_NUMBER.match(line)
        if mark and int(mark[1]) == first:
            line, first = line[mark.end():], first + 1
        out.append(line)
    return "\n".join(out)


def edit_note(notebook: Notebook, file_path: str, old_text: str, new_text: str, *, approve) -> Shown:
    name = _changeable(notebook, guarded(notebook, file_path))
    if not old_text:
        raise ToolError("old_text is empty.", "Copy the exact passage to replace from read_note; to add text at the "
                        "end of a note use append_note.")
    old_text, new_text = _lf(old_text), _lf(new_text)
    if old_text == new_text:
        raise ToolError("old_text and new_text are the same; nothing to change.")

    # Every occurrence, overlapping ones included (they are just as ambiguous): a lookahead matches at each place
    # one starts. A note that mixes CRLF and LF keeps its "\r\n"; the model copies lines without "\r".
    pattern = re.compile("(?=(" + "\r?\n".join(map(re.escape, old_text.split("\n"))) + "))")

    def replace_once(text: str) -> str:  # run on the note as it is when the change is planned
        found = [m.span(1) for m in itertools.islice(pattern.finditer(text), EDIT_MAX_MATCHES_COUNTED + 1)]
        new = new_text
        if not found and (numbered := _numbered_lines(text, old_text)):  # copied from a search hit with its numbers
            found, new = [numbered[:2]], _unnumbered(new_text, numbered[2])
        if not found:
            hint, lines = closest_lines(text, old_text)
            raise ToolError(f"old_text was not found in {name} (0 matches); nothing was changed. {hint}",
                            "Copy the passage exactly, spaces and punctuation included.", lines={name: lines})
        if len(found) > 1:
            count = f"more than {EDIT_MAX_MATCHES_COUNTED}" if len(found) > EDIT_MAX_MATCHES_COUNTED else len(found)
            raise ToolError(f"old_text occurs {count} times in {name}; nothing was changed.",
                            "Include more of the surrounding text so it matches exactly once.")
        start, end = found[0]
        replacement = new.replace("\n", "\r\n") if "\r\n" in text[start:end] else new
        return text[:start] + replacement + text[end:]

    return _text_change(notebook, approve, name, replace_once, "edit", f"Edited {name}; {KEPT}")


def append_note(notebook: Notebook, file_path: str, content: str, section: str | None = None, *, approve) -> Shown:
    path = guarded(notebook, file_path, new=True)
    name = rel(notebook.kb, path)
    if not content.strip():
        raise ToolError("content is empty; nothing to append.")
    content = _lf(content) if content.endswith("\n") else _lf(content) + "\n"

    def added(text: str) -> str:
        if section is None:
            return text + ("" if not text or text.endswith("\n") else "\n") + content
        try:
            return vault.append_to_section(text, section, content)
        except ValueError as exc:
            raise ToolError(f"{exc} Nothing was written.", "Pass one of these headings as section, or leave section "
                            "out to add at the end of the note.", "section") from None

    where = f"the end of the section {json.dumps(section, ensure_ascii=False)} of" if section else "the end of"
    if not path.exists() and not path.is_symlink():
        start, how = _new_note(notebook, _new_name(notebook, name))
        return _text_change(notebook, approve, name, lambda _: added(start), "write",
                            f"Created {name}{how} (it did not exist) and added the content at {where} it.")
    if notebook.is_private(name):  # a note that exists, and nothing is said of it
        raise ToolError(f"{name} already exists; nothing was written.", "Choose another name.")
    _changeable(notebook, path)
    return _text_change(notebook, approve, name, added, "append", f"Appended to {where} {name}.")


def write_note(notebook: Notebook, file_path: str, content: str, overwrite: bool = False, *, approve) -> Shown:
    path = guarded(notebook, file_path, new=True)
    name = rel(notebook.kb, path)
    if not path.exists() and not path.is_symlink():
        start, how = _new_note(notebook, _new_name(notebook, name))
        text = start + ("" if not start or start.endswith("\n") else "\n") + _lf(content)
        return _text_change(notebook, approve, name, lambda _: text, "write", f"Created {name}{how}"
                            + (", with the content after it." if start else "."))
    private = notebook.is_private(name)  # a note that exists, and nothing is said of it
    if not private:
        _changeable(notebook, path)
    if private or not overwrite:
        raise ToolError(f"{name} already exists; nothing was written.", "To change part of it use edit_note, to add "
                        "to its end use append_note; pass overwrite: true only if the person asked for a full rewrite.")
    return _text_change(notebook, approve, name, lambda _: _lf(content), "overwrite", f"Replaced {name}; {KEPT}")


def move_note(notebook: Notebook, from_path: str, to_path: str, *, approve) -> Shown:
    source, target = guarded(notebook, from_path, "from_path"), guarded(notebook, to_path, "to_path", new=True)
    src = _changeable(notebook, source, size_limit=False)
    dst = _new_name(notebook, rel(notebook.kb, target), moving=src)
    if target.exists() or target.is_symlink():
        raise ToolError(f"{dst} already exists; nothing was moved.", "Choose another to_path.")

    def plan() -> versions.Change:
        read, new, counts = _links_kept(notebook, src, dst)
        change = versions.plan_move(notebook.kb, src, dst, new)
        if stale := [f.path for f in change.files if f.old != read[f.path]]:  # written between the two reads
            raise versions.Stale(stale)
        kind = "note" if all(is_note_path(path) for path in counts) else "file"
        links = f"{plural(sum(counts.values()), 'link')} in {plural(len(counts), kind)}"  # "27 links in 12 notes"
        if not counts:
            return dataclasses.replace(change, title=f"Move {src} to {dst}?", done=f"Moved {src} to {dst}; no link "
                                       "needed changing; /undo in the chat moves it back.")
        return dataclasses.replace(change, title=f"Move {src} to {dst} and update {links}?", done=(
            f"Moved {src} to {dst} and updated {links} so that they still lead to it; /undo in the chat puts every "
            "file back."))

    return _change(notebook, approve, plan)


def _links_kept(notebook: Notebook, src: str, dst: str) -> tuple[dict, dict, dict]:
    """What moving src to dst rewrites so every link leads where it did: (bytes read, new bytes, links changed)."""
    paths, rows, _ = search.link_rows(notebook, link_graph.move_keys(src, dst))
    paths |= {src}
    read, texts, formats = {}, {}, {}
    for path in {row[0] for row in rows} | {src} | {p for p in paths if p.lower().endswith(".canvas")}:
        try:
            read[path] = notes.read_bytes(notebook.kb, path)
        except (OSError, ToolError):
            continue  # gone since it was indexed, or not a plain file: no link of it to keep
        try:
            texts[path], formats[path] = notes.decode_note(read[path])
        except ToolError:  # read to plan with; refused below if one of its links must change
            texts[path] = notes.readable_text(read[path])
    try:
        plan = link_graph.plan_move(paths, texts, src, dst, vault.vault_style(notebook.kb).get("newLinkFormat", ""))
    except ValueError as exc:
        raise ToolError(f"{exc} Nothing was moved.") from None
    before, new = {dst: src}, {}
    for path, text in sorted(plan.texts.items(), key=lambda item: (item[0] != dst, item[0])):  # the moved note first
        path = before.get(path, path)
        if path not in formats:
            raise ToolError(f"{path} links to {src} but is not text that can be changed without garbling it (UTF-8, "
                            "UTF-16 with a BOM or GBK), so nothing was moved; it could be converted to UTF-8 first.")
        new[path] = notes.encode_note(text, formats[path])
    return read, new, {before.get(path, path): count for path, count in plan.counts.items()}


def delete_note(notebook: Notebook, file_path: str, *, approve) -> Shown:
    name = _changeable(notebook, guarded(notebook, file_path), size_limit=False)
    try:
        breaks = linked_here(note_links(notebook, name)[1])
    except ToolError:  # the index failed, and its notice said so: the note can still be deleted
        breaks = ""
    return _change(notebook, approve, lambda: dataclasses.replace(
        versions.plan_delete(notebook.kb, name), title=f"Delete {name}? (a copy is kept in {HISTORY_DIR}/){breaks}",
        done=f"Deleted {name}; a copy is kept in {HISTORY_DIR}/ and /undo in the chat brings it back.{breaks}"))
