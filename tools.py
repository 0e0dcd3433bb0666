"""The note tools the model may call, their JSON schemas, and the path guard that keeps them in the notes.

`tool_schemas(settings)` is what the model is offered: `TOOL_SCHEMAS` (the note tools) plus the opt-in
`bash` tool when the shell is enabled (shell.py does the running and the guarding). `execute_tool(name,
arguments)` runs one call and always returns text — an error the model can act on starts with "Error: " —
it never raises (except KeyboardInterrupt, which ends the turn). Every path the model gives goes through
`safe_path`, which admits only visible .md/.txt notes inside the knowledge base.
"""

import difflib
import json
import os
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Callable

import search
import shell
import versions
from config import (
    EDIT_CLOSEST_LINES,
    EDIT_MAX_MATCHES_COUNTED,
    HISTORY_DIR,
    MAX_NOTE_BYTES,
    MAX_TOOL_OUTPUT,
    NOTE_SUFFIXES,
    READ_MAX_LINES,
    Settings,
    load_settings,
)

ERROR_PREFIX = "Error: "


class ToolError(Exception):
    """A tool call that cannot be done; the message goes back to the model."""


# --- The path guard ---

def _relative_parts(file_path: str, what: str) -> PurePosixPath:
    if not isinstance(file_path, str) or not file_path.strip():
        raise ToolError(f"{what} must be a non-empty path relative to the notes folder, like 'python.md'.")
    if "\0" in file_path:
        raise ToolError(f"{what} contains a NUL byte.")
    text = file_path.strip()
    if text.startswith("~"):
        raise ToolError(f"{what} may not start with '~': use a path relative to the notes folder.")
    if PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute() or PureWindowsPath(text).drive:
        raise ToolError(f"{what} must be relative to the notes folder, not absolute.")
    return PurePosixPath(text.replace("\\", "/"))


def safe_folder(kb: Path, folder: str, what: str = "folder") -> Path:
    """Resolve a folder inside the knowledge base, refusing escapes and hidden folders."""
    try:
        resolved = (kb / _relative_parts(folder, what)).resolve()
    except (OSError, RuntimeError):  # a symlink loop; the message would show the host path
        raise ToolError(f"{what} {folder!r} cannot be resolved (a symlink loop?).") from None
    if not resolved.is_relative_to(kb):
        raise ToolError(f"{what} {folder!r} is outside the notes folder.")
    if any(search.is_hidden_name(part) for part in resolved.relative_to(kb).parts):
        raise ToolError(f"{what} {folder!r} is hidden (a dot-file or dot-folder such as .git or .history), which the tools do not touch.")
    return resolved


def safe_path(kb: Path, file_path: str, what: str = "file_path") -> Path:
    """Resolve a note path inside the knowledge base; compare resolved paths, never string prefixes."""
    resolved = safe_folder(kb, file_path, what)
    if not resolved.name.lower().endswith(NOTE_SUFFIXES):
        raise ToolError(f"{what} {file_path!r} is not a note: only {' and '.join(NOTE_SUFFIXES)} files are allowed.")
    return resolved


def _rel(kb: Path, path: Path) -> str:
    return path.relative_to(kb).as_posix()


# --- Reading and writing ---

def _read_note_text(path: Path) -> str:
    if path.exists() and not path.is_dir() and not path.is_file():
        raise ToolError("that is not a regular file (a pipe or device?), so it is not read.")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_NOTE_BYTES + 1)
    except FileNotFoundError:
        raise ToolError("no such note. Use search_notes or list_notes to find the right path.") from None
    except IsADirectoryError:
        raise ToolError("that is a folder, not a note. Use list_notes with folder to see inside it.") from None
    text = search.readable_text(data[:MAX_NOTE_BYTES])
    if text is None:
        raise ToolError("that file looks binary, not a text note.")
    if len(data) > MAX_NOTE_BYTES:
        text += f"\n[… file is larger than {MAX_NOTE_BYTES} bytes; the rest is not read]"
    return text


# --- The tools ---

def search_notes(kb: Path, query: str, folder: str | None = None) -> str:
    if folder:
        folder = _folder_or_none(_rel(kb, safe_folder(kb, folder)))
    return search.search_notes(kb, query, folder)


def list_notes(kb: Path, folder: str | None = None) -> str:
    if folder:
        resolved = safe_folder(kb, folder)
        if not resolved.is_dir():
            raise ToolError(f"no folder {folder!r} in the notes. Call list_notes without folder to see all.")
        folder = _folder_or_none(_rel(kb, resolved))
    return search.list_notes(kb, folder)


def _folder_or_none(rel_folder: str) -> str | None:
    return None if rel_folder == "." else rel_folder  # "." is the whole knowledge base


def read_note(kb: Path, file_path: str, start_line: int = 1) -> str:
    path = safe_path(kb, file_path)
    lines = _read_note_text(path).splitlines()
    if not lines:
        return f"{_rel(kb, path)} is empty."
    if start_line < 1 or start_line > len(lines):
        raise ToolError(f"start_line {start_line} is outside the note, which has {len(lines)} lines.")
    shown, size = [], 0
    for line in lines[start_line - 1 : start_line - 1 + READ_MAX_LINES]:
        if size + len(line) > MAX_TOOL_OUTPUT - 300:
            break
        shown.append(line)
        size += len(line) + 1
    if not shown:  # a single enormous line
        shown = [lines[start_line - 1][: MAX_TOOL_OUTPUT - 300] + " [… line cut]"]
    end = start_line + len(shown) - 1
    header = f"{_rel(kb, path)} (lines {start_line}-{end} of {len(lines)})"
    footer = f"\n[… cut: call read_note with start_line={end + 1} to read on]" if end < len(lines) else ""
    return header + "\n" + "\n".join(shown) + footer


# --- Changing notes: every change goes through versions.py (atomic, format kept, recoverable) ---
# Results of these tools start with a one-line change summary (`~ notes/git.md  +3 −1`) that main.py shows.

def _note_text(kb: Path, path: Path) -> str:
    """The whole text of an existing note, as a change will see it."""
    if path.is_dir():
        raise ToolError(f"{_rel(kb, path)} is a folder, not a note.")
    if not path.is_file():
        raise ToolError(f"{_rel(kb, path)} does not exist. Use search_notes or list_notes to find the right path.")
    if path.stat().st_size > MAX_NOTE_BYTES:
        raise ToolError(f"{_rel(kb, path)} is larger than {MAX_NOTE_BYTES} bytes; it is too big to change safely here.")
    try:
        text, _ = versions.read_note(path)
    except versions.VersionError as exc:
        raise ToolError(f"{_rel(kb, path)} is {exc}.") from None
    if "\0" in text[:8192]:
        raise ToolError(f"{_rel(kb, path)} looks binary, not a text note; it was left alone.")
    return text


def _lf(text: str) -> str:
    # Notes are handled with "\n" endings; versions.py puts a CRLF note's own endings back.
    return text.replace("\r\n", "\n")


def _find_all(text: str, passage: str) -> list[tuple[int, int]]:
    """(start, end) of every occurrence, overlapping ones included (they are just as ambiguous)."""
    # A note that mixes CRLF and LF keeps its "\r\n" in the text; the model copies lines without "\r".
    pattern = re.compile("\r?\n".join(map(re.escape, passage.split("\n"))))
    found, match = [], pattern.search(text)
    while match and len(found) <= EDIT_MAX_MATCHES_COUNTED:
        found.append(match.span())
        match = pattern.search(text, match.start() + 1)
    return found


def closest_lines(text: str, passage: str, limit: int = EDIT_CLOSEST_LINES) -> str:
    """The note's lines most like the passage's longest line, to help the model copy it exactly."""
    wanted = max(passage.strip().splitlines() or [passage], key=len).strip()
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(wanted)
    scored = []
    for number, line in enumerate(text.splitlines(), start=1):
        ratio = _likeness(matcher, line.strip(), len(wanted))
        if ratio >= 0.5:
            scored.append((-ratio, number, line))
    if not scored:
        return "No line of the note looks like it; read_note the note again to see its current text."
    best = sorted(scored)[:limit]
    shown = "\n".join(f"  line {number}: {_shorten_line(line)}" for _, number, line in sorted(best, key=lambda s: s[1]))
    return "The closest lines are:\n" + shown


def _likeness(matcher: difflib.SequenceMatcher, line: str, width: int) -> float:
    """How like the wanted text the line, or the most alike stretch of it, is (0..1).

    A typo fix quotes part of a line, so a long line is compared piece by piece, one piece per word start."""
    wanted = matcher.b
    pairs = {wanted[i:i + 2] for i in range(len(wanted) - 1)}
    if pairs and sum(pair in line for pair in pairs) < len(pairs) / 3:
        return 0.0  # too few letter pairs in common to be worth comparing closely
    starts = [0] + [i + 1 for i, c in enumerate(line) if c == " " and i + 1 < len(line)] if len(line) > width else [0]
    best = 0.0
    for start in starts:
        matcher.set_seq1(line[start:start + width + width // 4] if len(line) > width else line)
        if matcher.real_quick_ratio() > best and matcher.quick_ratio() > best:
            best = max(best, matcher.ratio())
    return best


def _shorten_line(line: str, width: int = 200) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def edit_note(kb: Path, file_path: str, old_text: str, new_text: str) -> str:
    path = safe_path(kb, file_path)
    rel = _rel(kb, path)
    if not old_text:
        raise ToolError("old_text is empty. Copy the exact passage to replace from read_note; "
                        "to add text at the end of a note use append_note.")
    text = _note_text(kb, path)
    old_text, new_text = _lf(old_text), _lf(new_text)
    found = _find_all(text, old_text)
    if not found:
        raise ToolError(f"old_text was not found in {rel} (0 matches); nothing was changed. "
                        f"{closest_lines(text, old_text)}\nCopy the passage exactly, spaces and punctuation included.")
    if len(found) > 1:
        count = f"more than {EDIT_MAX_MATCHES_COUNTED}" if len(found) > EDIT_MAX_MATCHES_COUNTED else str(len(found))
        raise ToolError(f"old_text occurs {count} times in {rel}; nothing was changed. "
                        "Include more of the surrounding text so it matches exactly once.")
    if old_text == new_text:
        raise ToolError("old_text and new_text are the same; nothing to change.")
    start, end = found[0]
    if "\r\n" in text[start:end]:
        new_text = new_text.replace("\n", "\r\n")
    updated = text[:start] + new_text + text[end:]
    summary = versions.save_note(kb, rel, updated, "edit", expected=text)
    search.note_changed(kb, rel)
    return f"{summary}\nEdited {rel}; the previous version is kept in .history/ (/undo in the chat restores it)."


def append_note(kb: Path, file_path: str, content: str) -> str:
    path = safe_path(kb, file_path)
    rel = _rel(kb, path)
    if not content.strip():
        raise ToolError("content is empty; nothing to append.")
    content = _lf(content)
    if not content.endswith("\n"):
        content += "\n"
    if not os.path.lexists(path):
        summary = versions.save_note(kb, rel, content, "write")
        search.note_changed(kb, rel)
        return f"{summary}\nCreated {rel} with the content (it did not exist)."
    text = _note_text(kb, path)
    joiner = "" if not text or text.endswith("\n") else "\n"
    summary = versions.save_note(kb, rel, text + joiner + content, "append", expected=text)
    search.note_changed(kb, rel)
    return f"{summary}\nAppended to the end of {rel}."


def write_note(kb: Path, file_path: str, content: str, overwrite: bool = False) -> str:
    path = safe_path(kb, file_path)
    rel = _rel(kb, path)
    if path.is_dir():
        raise ToolError(f"{rel} is a folder.")
    content = _lf(content)
    if not os.path.lexists(path):
        summary = versions.save_note(kb, rel, content, "write")
        search.note_changed(kb, rel)
        return f"{summary}\nCreated {rel}."
    if not overwrite:
        raise ToolError(f"{rel} already exists; nothing was written. To change part of it use edit_note, to add "
                        "to its end use append_note; pass overwrite: true only if the person asked for a full rewrite.")
    text = _note_text(kb, path)
    summary = versions.save_note(kb, rel, content, "overwrite", expected=text)
    search.note_changed(kb, rel)
    return f"{summary}\nReplaced {rel}; the previous version is kept in .history/ (/undo in the chat restores it)."


def _confirmed(confirm, question: str) -> None:
    if confirm is None:
        # Short: the person reads it on one trace line of about 110 characters.
        raise ToolError("not done: nobody can confirm here (one-shot/piped); rerun with --yes or AUTO_APPROVE=1.")
    if not confirm(question):
        raise ToolError("not done: the person declined. Do not retry unless they ask again.")


def move_note(kb: Path, from_path: str, to_path: str, confirm=None) -> str:
    source = safe_path(kb, from_path, "from_path")
    target = safe_path(kb, to_path, "to_path")
    src, dst = _rel(kb, source), _rel(kb, target)
    if not source.is_file():
        raise ToolError(f"{src} does not exist. Use search_notes or list_notes to find the right path.")
    if os.path.lexists(target):
        raise ToolError(f"{dst} already exists; nothing was moved. Choose another to_path.")
    _confirmed(confirm, f"Move {src} to {dst}?")
    summary = versions.move_note(kb, src, dst)
    search.note_changed(kb, src)
    search.note_changed(kb, dst)
    return f"{summary}\nMoved {src} to {dst}; /undo in the chat moves it back."


def delete_note(kb: Path, file_path: str, confirm=None) -> str:
    path = safe_path(kb, file_path)
    rel = _rel(kb, path)
    if not path.is_file():
        raise ToolError(f"{rel} does not exist. Use search_notes or list_notes to find the right path.")
    _confirmed(confirm, f"Delete {rel}? (a copy is kept in {HISTORY_DIR}/)")
    summary = versions.delete_note(kb, rel)
    search.note_changed(kb, rel)
    return f"{summary}\nDeleted {rel}; a copy is kept in {HISTORY_DIR}/ and /undo in the chat brings it back."


SHELL_DISABLED = ("the shell tool is disabled. The person can enable it by starting with --allow-shell "
                  "(or ALLOW_SHELL=1); until then use the note tools.")

# Control characters and bidi overrides could redraw the prompt so the person approves a command
# that is not what runs; they are shown as visible escapes instead.
_HIDING_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


SHELL_QUESTION = "Run this shell command in the notes folder?"  # main.py offers "always" for these


def shell_question(command: str) -> str:
    """What the person is asked: SHELL_QUESTION, then the command, indented, control characters visible."""
    visible = _HIDING_CHARACTERS.sub(lambda m: repr(m.group())[1:-1], command)
    return SHELL_QUESTION + "\n    " + visible.replace("\n", "\n    ")


def bash(kb: Path, command: str, settings: Settings, confirm: Callable[[str], bool] | None) -> str:
    if not command.strip():
        raise ToolError("command is empty.")
    reason = shell.check_command(command, kb)
    if reason:  # refused before anyone is asked, and even with --yes
        raise ToolError(f"refused by the safety guard: {reason}. Do not try to work around it; if the person "
                        "really wants this, they can run it themselves.")
    _confirmed(confirm, shell_question(command))
    return shell.run_shell(command, kb, settings.shell_timeout, hide=(settings.api_key or "",))


_PATH = {"type": "string", "description": "Path relative to the notes folder, e.g. 'python.md' or 'work/ideas.md'."}
_FOLDER = {"type": "string", "description": "Optional folder inside the notes, e.g. 'work'."}


def _schema(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOLS = {
    "search_notes": (search_notes, _schema(
        "search_notes",
        "Search the person's notes by keywords (English or Chinese). Use it first for any question about "
        "what the notes say; then read_note the best hits before answering. Returns the best notes first "
        "(those with every word, then those with some) as paths, titles and matching lines with line "
        "numbers. Put a phrase in double quotes to require it word for word.",
        {"query": {"type": "string", "description": "Keywords, e.g. 'python decorators' or '快捷键'."},
         "folder": _FOLDER},
        ["query"],
    )),
    "list_notes": (list_notes, _schema(
        "list_notes",
        "List the notes (newest first) with their titles and dates, and how many notes each subfolder "
        "holds, optionally inside one folder. Use it to see what exists when a search finds nothing or "
        "the person asks what notes they have.",
        {"folder": _FOLDER},
        [],
    )),
    "read_note": (read_note, _schema(
        "read_note",
        "Read a note's text. Always read a note before quoting, summarising or changing it; never guess "
        "its content. Long notes come in parts: pass start_line to read on.",
        {"file_path": _PATH,
         "start_line": {"type": "integer", "description": "First line to read (1-based). Default 1."}},
        ["file_path"],
    )),
    "write_note": (write_note, _schema(
        "write_note",
        "Create a new note (.md or .txt); folders are created as needed. It refuses to replace an "
        "existing note unless overwrite is true — only do that when the person asked for a full rewrite; "
        "to change part of a note use edit_note, to add to its end use append_note.",
        {"file_path": _PATH,
         "content": {"type": "string", "description": "The whole Markdown text of the note."},
         "overwrite": {"type": "boolean", "description": "Replace an existing note (its old text is kept "
                       "in the history). Default false."}},
        ["file_path", "content"],
    )),
    "edit_note": (edit_note, _schema(
        "edit_note",
        "Change part of a note: replace one exact passage with new text; the rest of the note stays "
        "byte-for-byte the same. read_note first and copy old_text exactly (spaces and punctuation "
        "included), with enough surrounding text to occur only once. Use this for fixes and small "
        "changes instead of rewriting the note.",
        {"file_path": _PATH,
         "old_text": {"type": "string", "description": "The exact current text to replace; must occur once."},
         "new_text": {"type": "string", "description": "The text to put in its place (empty to delete it)."}},
        ["file_path", "old_text", "new_text"],
    )),
    "append_note": (append_note, _schema(
        "append_note",
        "Add text at the end of a note (journals, to-do lists, meeting logs), on a new line. Creates "
        "the note if it does not exist.",
        {"file_path": _PATH,
         "content": {"type": "string", "description": "The Markdown text to add at the end."}},
        ["file_path", "content"],
    )),
    "move_note": (move_note, _schema(
        "move_note",
        "Move or rename a note. Never replaces an existing note; the person is asked to confirm.",
        {"from_path": _PATH,
         "to_path": {"type": "string", "description": "The new path relative to the notes folder, "
                     "e.g. 'archive/old-ideas.md'. Must not exist yet."}},
        ["from_path", "to_path"],
    )),
    "delete_note": (delete_note, _schema(
        "delete_note",
        "Delete a note (a copy is kept in the history, and /undo brings it back). Only when the person "
        "asked for it; the person is asked to confirm.",
        {"file_path": _PATH},
        ["file_path"],
    )),
    "bash": (bash, _schema(
        "bash",
        "Run one bash command in the notes folder and get exit_code, stdout and stderr (long output keeps "
        "its head and tail). Use it for what the note tools cannot do: counting or finding files "
        "(find, wc, grep), dates and sizes, or a script the person asks you to run. Read, search and "
        "change notes with the note tools instead: changes made with bash cannot be undone. The person "
        "approves every command; stdin is closed, so nothing interactive works; commands that run too "
        "long are stopped; destructive commands are refused.",
        {"command": {"type": "string", "description": "The command, e.g. \"find . -name '*.md' | wc -l\"."}},
        ["command"],
    )),
}
OPT_IN_TOOLS = {"bash": "allow_shell"}  # tool -> the Settings flag that offers it to the model
TOOL_SCHEMAS = [schema for name, (_, schema) in TOOLS.items() if name not in OPT_IN_TOOLS]
READ_ONLY_TOOLS = {"search_notes", "list_notes", "read_note"}
NEEDS_CONFIRMATION = {"move_note", "delete_note", "bash"}  # their functions take a `confirm` callback
NEEDS_SETTINGS = {"bash"}  # their functions take `settings`
CHANGE_TOOLS = {"write_note", "edit_note", "append_note", "move_note", "delete_note"}  # results start with a summary
# Tools that change notes only by adding words. Every other tool that is not read-only counts as able to
# overwrite, move or delete: a tool nobody classified is treated as the dangerous kind (MCP clients see
# this as destructiveHint and may ask before calling it).
ADDITIVE_TOOLS = {"append_note"}
# Tools that act on the computer outside the notes (a shell). The MCP server serves them only when started
# with --allow-shell, so a setting meant for the terminal chat never hands every MCP client a shell.
SHELL_TOOLS = {"bash"}


def tool_schemas(settings: Settings | None) -> list[dict]:
    """The tools offered to the model: TOOL_SCHEMAS plus the opt-in tools these settings enable."""
    return [schema for name, (_, schema) in TOOLS.items()
            if name not in OPT_IN_TOOLS or (settings and getattr(settings, OPT_IN_TOOLS[name]))]


_JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "object": dict, "array": list}


def clean_text(text: str) -> str:
    """Bytes that are not UTF-8 (a terminal or pipe in another encoding) become U+FFFD, not a crash."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate that surrogateescape did not make
        return text.encode("utf-8", "replace").decode("utf-8")


def _parse_arguments(arguments) -> dict:
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"the arguments are not valid JSON ({exc}). Send one JSON object.") from None
    if not isinstance(parsed, dict):
        raise ToolError("the arguments must be a JSON object, like {\"query\": \"python\"}.")
    return parsed


def _check_arguments(schema: dict, args: dict) -> dict:
    params = schema["function"]["parameters"]
    missing = [name for name in params["required"] if name not in args]
    if missing:
        raise ToolError(f"missing argument(s): {', '.join(missing)}.")
    checked = {}
    for name, value in args.items():
        spec = params["properties"].get(name)
        if spec is None:
            continue  # models sometimes add extra keys; ignoring them is kinder than failing
        expected = _JSON_TYPES[spec["type"]]
        if value is None and name not in params["required"]:
            continue
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ToolError(f"argument {name!r} must be of type {spec['type']}, not {type(value).__name__}.")
        checked[name] = clean_text(value) if expected is str else value
    return checked


def _cap(text: str) -> str:
    if len(text) <= MAX_TOOL_OUTPUT:
        return text
    return text[: MAX_TOOL_OUTPUT - 60] + f"\n[… cut: {len(text) - MAX_TOOL_OUTPUT + 60} more characters]"


def execute_tool(
    name: str,
    arguments,
    settings: Settings | None = None,
    confirm: Callable[[str], bool] | None = None,
) -> str:
    """Run one tool call. Never raises: every failure is text starting with "Error: "."""
    return _cap(clean_text(_run_tool(name, arguments, settings, confirm)))  # clean: file names may not be UTF-8


def _run_tool(name: str, arguments, settings: Settings | None, confirm) -> str:
    try:
        settings = settings or load_settings()
        offered = [schema["function"]["name"] for schema in tool_schemas(settings)]
        if name in OPT_IN_TOOLS and name not in offered:
            raise ToolError(SHELL_DISABLED)
        if name not in TOOLS:
            raise ToolError(f"unknown tool {name!r}. Available tools: {', '.join(offered)}.")
        function, schema = TOOLS[name]
        args = _check_arguments(schema, _parse_arguments(arguments))
        if name in NEEDS_CONFIRMATION:
            args["confirm"] = confirm
        if name in NEEDS_SETTINGS:
            args["settings"] = settings
        return function(settings.kb, **args)
    except (ToolError, versions.VersionError) as exc:
        return ERROR_PREFIX + str(exc)
    except OSError as exc:
        return ERROR_PREFIX + f"{name} failed: {exc.strerror or exc}."
    except Exception as exc:  # a tool bug must not end the conversation
        return ERROR_PREFIX + f"{name} failed unexpectedly: {type(exc).__name__}: {exc}"
