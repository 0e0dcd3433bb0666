"""The tools that read: search_notes, list_notes, read_note and links, and how a note is shown to the model.

Every path the model gives goes through `guarded` (the path guard, then privacy: to the model a private note is no
note). `note_text` reads a note for every reader (the page, /read, the citation check): race-free, any encoding,
bounded. Nothing here writes; what the model can fix raises ToolError.
"""

import itertools
import json
from collections import Counter

import embeddings
import links as link_graph  # `links` is the tool's name here
import notes
import privacy
import search
import vault
from index import stem_of, title_key
from notebook import Notebook
from notes import Shown, ToolError, plural, rel, safe_path

MAX_TOOL_OUTPUT = 8000  # characters; no tool result is longer (tools.execute_tool cuts what is)
MAX_NOTE_BYTES = 5_000_000  # larger files are not read whole, nor changed
NOT_READ = f"[… file is larger than {MAX_NOTE_BYTES} bytes; the rest is not read]"
READ_MAX_LINES = 200  # read_note returns at most this many lines per call
READ_ROOM = MAX_TOOL_OUTPUT - 300  # characters of note text one read shows, leaving room for its header and footer
OUTLINE_MAX_CHARS = MAX_TOOL_OUTPUT // 3  # the outline a long note's first read starts with is cut to this
LINKERS_NAMED = 5  # notes named when a question or result says which notes link to a note
MISSING = ("no such note.", "Use search_notes or list_notes to find the right path.", "missing")


def search_notes(notebook: Notebook, query: str = "", folder: str | None = None, after: str | None = None,
                 before: str | None = None) -> Shown:
    try:
        embedder, notice = embeddings.embedder_of(notebook.settings), ""
    except embeddings.EmbedError as exc:
        embedder, notice = None, f"(Keyword results only: {exc}.)\n"
    found = search.search_notes(notebook, query, folder, embedder, after=after, before=before)
    return Shown(notice + found, found.lines, found.named)


list_notes = search.list_notes


def guarded(notebook: Notebook, file_path: str, what: str = "file_path", new: bool = False):
    """notes.safe_path for a path the model gave, a private note refused as missing. `new`: a note to be made,
    refused where .kaignore keeps the name (at one private by its front matter the caller answers as for any)."""
    path = safe_path(notebook.kb, file_path, what)
    name = rel(notebook.kb, path)
    if new and any(privacy.ignored(kept, notebook.rules()) for kept in (name, vault.copy_of(name)) if kept):
        raise ToolError("no note can be made at that path (the person keeps notes of such names from the model).",
                        "Choose another name.")
    if not new and notebook.is_private(name):
        raise ToolError(*MISSING)
    return path


def note_text(notebook: Notebook, file_path: str, what: str = "file_path") -> tuple[str, str]:
    """(name, text) of a note to read, through the path guard, bounded. `what` names the path in an error ("" for a
    person: /read and the page show private notes too; the model's read_note goes through `guarded` first)."""
    name = rel(notebook.kb, safe_path(notebook.kb, file_path, what))
    try:
        data = notes.read_bytes(notebook.kb, name, MAX_NOTE_BYTES + 1)
    except FileNotFoundError:
        raise ToolError(*MISSING) from None
    except IsADirectoryError:
        raise ToolError("that is a folder, not a note.", "Use list_notes with folder to see inside it.",
                        "folder") from None
    text = notes.readable_text(data[:MAX_NOTE_BYTES])
    if text is None:
        raise ToolError("that file looks binary, not a text note.")
    if len(data) > MAX_NOTE_BYTES:
        text += "\n" + NOT_READ
    return name, text


def read_lines(text: str, start_line: int, last_line: int | None = None, room: int = READ_ROOM) -> tuple:
    """(the lines from start_line to last_line at most that fit `room` characters; the last's number; all lines)."""
    lines = text.splitlines()
    if not 1 <= start_line <= len(lines):
        which = f"whose first {MAX_NOTE_BYTES} bytes are read: {len(lines)} lines" if lines[-1:] == [NOT_READ] \
            else f"which has {len(lines)} lines"
        raise ToolError(f"line {start_line} is outside the note, {which}.",
                        f"Pass start_line from 1 to {len(lines)}.", "lines")
    window = lines[start_line - 1:min(start_line - 1 + READ_MAX_LINES, last_line or len(lines))]
    shown, _ = _fit(window, room + 1)  # the last line shown needs no "\n" after it
    if not shown:  # a single enormous line
        shown = [lines[start_line - 1][:room] + " [… line cut]"]
    return shown, start_line + len(shown) - 1, len(lines)


def note_part(name: str, text: str, start_line: int = 1, section: str | None = None, read_on=None) -> Shown:
    """What read_note and /read show of the note or a section, from start_line on; a long note's first read starts
    with its outline. `read_on(line, section)`: the closing line saying how to read on (by default the model's)."""
    read_on = read_on or (lambda line, section: f"[… cut: call read_note with start_line={line}"
                          + (f" and section={json.dumps(section, ensure_ascii=False)}" if section else "")
                          + " to read on]")
    if not text.splitlines():
        return Shown(f"{name} is empty.", named=[name])
    section = section if (section or "").strip() else None  # a small model sends "" for no section
    try:
        first, last = vault.find_section(text, section) if section else (1, None)
    except ValueError as exc:
        raise ToolError(str(exc), kind="section") from None
    start = start_line if section is None or first <= start_line <= last else first
    shown, end, total = read_lines(text, start, last)
    outline = vault.outline(text) if start == 1 and section is None and end < total else []
    head, headings = "", []
    if outline:  # longer than one read: a map of it first, so the model can read the part it needs
        kept, cut = _fit([entry for _, entry in outline], OUTLINE_MAX_CHARS)
        headings = [line for line, _ in outline[:len(kept)] if line]
        read = f" in its first {MAX_NOTE_BYTES} bytes" if text.endswith(NOT_READ) else ""
        head = (f"{name} has {total} lines{read}. Its headings, with the line each starts on:\n" + "\n".join(kept)
                + "\n…" * bool(cut) + "\n\n")
        shown, end, total = read_lines(text, start, last, READ_ROOM - len(head))
    under = _under(text, start) if section is None else []
    if section:
        part = f"; section {json.dumps(section, ensure_ascii=False)} ends at line {last}"
    else:
        part = "; under " * bool(under) + " > ".join(f"{json.dumps(title, ensure_ascii=False)} (line {n})"
                                                   for n, title in under)
    footer = f"\n{read_on(end + 1, section)}" if end < (last or total) else ""
    return Shown(head + f"{name} (lines {start}-{end} of {total}{part})\n" + "\n".join(shown) + footer,
                 {name: [*range(start, end + 1), *headings, *(n for n, _ in under)]}, [name])


def _under(text: str, start: int) -> list[tuple[int, str]]:
    """(line, title) of the headings a read from `start` is under, outermost first: a 1.5B model read a note from
    the line after "## Slice" and answered what the section is called with a word of its own."""
    chain = []
    for line, level, title in vault.headings(text):
        if line >= start:
            break
        chain = [(n, lv, t) for n, lv, t in chain if lv < level] + [(line, level, title)]
    return [(n, title) for n, _, title in chain]


def read_note(notebook: Notebook, file_path: str, start_line: int = 1, section: str | None = None) -> Shown:
    """The note at file_path, or the one note of its name where no note is there: small models put a name the
    passages showed in a folder of their own ("Calendar/ACCESS 笔记组织法.md"), as a link would find it anywhere."""
    try:
        name, text = note_text(notebook, rel(notebook.kb, guarded(notebook, file_path)))
        said = ""
    except ToolError as error:
        same = _named(notebook, file_path) if error.kind == "missing" else []
        if len(same) != 1:
            advice = f"Notes of that name: {', '.join(same)}." if same else error.advice
            raise ToolError(error.message, advice, error.kind) from None
        name, text = note_text(notebook, rel(notebook.kb, guarded(notebook, same[0])))  # private since indexed?
        said = f"No note is at {file_path}; the one note of that name is {name}:\n"
    part = note_part(name, text, start_line, section)
    return Shown(said + part, part.lines, part.named)


def _named(notebook: Notebook, file_path: str) -> list[str]:
    """The notes the model may read whose file name is file_path's (case and spaces aside), by path."""
    key = title_key(stem_of(file_path.replace("\\", "/")))
    return notebook.with_index(lambda idx: [path for path, in idx.conn.execute(
        "SELECT path FROM notes WHERE stem_key = ? AND NOT private ORDER BY path", (key,))])


def links(notebook: Notebook, file_path: str) -> Shown:
    name = rel(notebook.kb, guarded(notebook, file_path))
    if not (notebook.kb / name).is_file():
        raise ToolError(*MISSING)
    outgoing, backlinks = note_links(notebook, name)
    unresolved = sum(path is None for _, _, _, path, _ in outgoing)
    text = [f"{name}: {plural(len(outgoing), 'link')} out" + f" ({unresolved} unresolved)" * bool(unresolved)
            + f"; {plural(len(backlinks), 'link')} from {plural(len(_sources(backlinks)), 'note')} "
            + f"lead{'s' * (len(backlinks) == 1)} here."]
    out = [f"  {line}: {'!' * embed}{target}{'#' * bool(fragment)}{fragment} → "
           + ("this note" if path == name else path or "unresolved (no such note or file)")
           for line, target, fragment, path, embed in outgoing]
    places = Counter(backlinks)  # "source:line" -> how many links there, in order
    back = [f"  {place}" + f" ({count} links)" * (count > 1) for place, count in places.items()]
    room = MAX_TOOL_OUTPUT - 400  # for the head and the "more" lines; the backlinks get half unless they need less
    shown_out, more_out = _fit(out, room - min(sum(len(line) + 1 for line in back), room // 2))
    shown_back, _ = _fit(back, room - sum(len(line) + 1 for line in shown_out))
    if out:
        text += ["", "Links out (line: target as written → the file it leads to):", *shown_out]
        text += [f"  [… {more_out} more links out not shown]"] * bool(more_out)
    if back:
        text += ["", "Backlinks (note:line):", *shown_back]
        if hidden := list(places)[len(shown_back):]:
            text.append(f"  [… {plural(sum(places[place] for place in hidden), 'more backlink')} from "
                        f"{plural(len(_sources(hidden)), 'note')} not shown]")
    shown_links = outgoing[:len(shown_out)]  # each link's line of the note is shown: "  3: [[python]] → python.md"
    named = [name, *(path for *_, path, _ in shown_links if path), *_sources(list(places)[:len(shown_back)])]
    return Shown("\n".join(text), {name: [line for line, *_ in shown_links]}, named)


def note_links(notebook: Notebook, name: str) -> tuple[list, list]:
    """(the note's links: (line, target, fragment, the path it leads to or None, embed), its backlinks)."""
    paths, rows, hidden = search.link_rows(notebook, link_graph.link_keys(name), name)  # hidden: to the model none
    resolver = link_graph.Resolver(paths)
    own = [row for row in rows if row[0] == name]
    return ([(line, target, fragment, None if path in hidden else path, bool(row[5]))
             for (line, target, fragment, path), row in zip(link_graph.outgoing(own, resolver), own)],
            [place for place in link_graph.backlinks(name, rows, resolver) if place.rsplit(":", 1)[0] not in hidden])


def _sources(backlinks: list) -> list:
    """The notes of links.backlinks' "source:line" strings, each once, in order."""
    return list(dict.fromkeys(backlink.rsplit(":", 1)[0] for backlink in backlinks))


def _fit(lines: list, room: int) -> tuple[list, int]:
    """The first lines that fit in `room` characters, and how many did not."""
    count = sum(end <= room for end in itertools.accumulate(len(line) + 1 for line in lines))
    return lines[:count], len(lines) - count


def linked_here(backlinks: list) -> str:
    """" 4 notes link here: a.md, b.md, …", from links.backlinks' "source:line"; "" when none."""
    sources = _sources(backlinks)
    if not sources:
        return ""
    named = ", ".join(sources[:LINKERS_NAMED]) + (", …" if len(sources) > LINKERS_NAMED else "")
    return f" {plural(len(sources), 'note')} link{'s' * (len(sources) == 1)} here: {named}."
