"""The note tools the model may call, their JSON schemas, and the path guard that keeps them in the notes.

`tool_schemas(settings)` is what the model is offered: `TOOL_SCHEMAS` (the note tools) plus the opt-in
`bash` tool when the shell is enabled (shell.py does the running and the guarding). `execute_tool(name,
arguments)` runs one call and always returns text — an error the model can act on starts with "Error: " —
it never raises (except KeyboardInterrupt, which ends the turn). Every path the model gives goes through
`safe_path`, which admits only visible .md/.txt notes inside the knowledge base.
"""

import inspect
import json
import os
import re
import tempfile
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Callable

import search
import shell
from config import MAX_NOTE_BYTES, MAX_TOOL_OUTPUT, NOTE_SUFFIXES, READ_MAX_LINES, Settings, load_settings

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
    resolved = (kb / _relative_parts(folder, what)).resolve()
    if not resolved.is_relative_to(kb):
        raise ToolError(f"{what} {folder!r} is outside the notes folder.")
    if any(search.is_hidden_name(part) for part in resolved.relative_to(kb).parts):
        raise ToolError(f"{what} {folder!r} is in a hidden folder, which the tools do not touch.")
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
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_NOTE_BYTES + 1)
    except FileNotFoundError:
        raise ToolError("no such note. Use search_notes or list_notes to find the right path.") from None
    except IsADirectoryError:
        raise ToolError("that is a folder, not a note. Use list_notes with folder to see inside it.") from None
    if b"\0" in data[:8192]:
        raise ToolError("that file looks binary, not a text note.")
    text = data[:MAX_NOTE_BYTES].decode("utf-8-sig", errors="replace")
    if len(data) > MAX_NOTE_BYTES:
        text += f"\n[… file is larger than {MAX_NOTE_BYTES} bytes; the rest is not read]"
    return text


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder and os.replace, so a failure never leaves half a note."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- The tools ---

def search_notes(kb: Path, query: str, folder: str | None = None) -> str:
    if folder:
        folder = _rel(kb, safe_folder(kb, folder)) or None
    return search.search_notes(kb, query, folder)


def list_notes(kb: Path, folder: str | None = None) -> str:
    if folder:
        resolved = safe_folder(kb, folder)
        if not resolved.is_dir():
            raise ToolError(f"no folder {folder!r} in the notes. Call list_notes without folder to see all.")
        folder = _rel(kb, resolved) or None
    return search.list_notes(kb, folder)


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


def write_note(kb: Path, file_path: str, content: str, overwrite: bool = False) -> str:
    path = safe_path(kb, file_path)
    existed = path.exists()
    if path.is_dir():
        raise ToolError(f"{file_path!r} is a folder.")
    if existed and not overwrite:
        raise ToolError(
            f"{_rel(kb, path)} already exists. Read it and change it, write to a new path, "
            "or pass overwrite: true to replace it."
        )
    atomic_write(path, content.encode("utf-8"))
    search.note_changed(kb, _rel(kb, path))
    verb = "Replaced" if existed else "Created"
    return f"{verb} {_rel(kb, path)} ({len(content.splitlines())} lines)."


SHELL_DISABLED = ("the shell tool is disabled. The person can enable it by starting with --allow-shell "
                  "(or ALLOW_SHELL=1); until then use the note tools.")
# Short: the person sees it on one trace line of about 110 characters.
SHELL_NEEDS_APPROVAL = "not run: shell commands need approval; rerun with --yes (AUTO_APPROVE=1) or use the chat."


# Control characters and bidi overrides could redraw the prompt so the person approves a command
# that is not what runs; they are shown as visible escapes instead.
_HIDING_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shell_question(command: str) -> str:
    """What the person is asked; the first line stays the same for every command, so "always" can
    answer all the shell questions of a session at once."""
    visible = _HIDING_CHARACTERS.sub(lambda m: repr(m.group())[1:-1], command)
    return "Run this shell command in the notes folder?\n    " + visible.replace("\n", "\n    ")


def bash(kb: Path, command: str, settings: Settings, confirm: Callable[[str], bool] | None) -> str:
    if not settings.allow_shell:
        raise ToolError(SHELL_DISABLED)
    if not command.strip():
        raise ToolError("command is empty.")
    reason = shell.check_command(command)
    if reason:  # refused before anyone is asked, and even with --yes
        raise ToolError(f"refused by the safety guard: {reason}. Do not try to work around it; if the person "
                        "really wants this, they can run it themselves.")
    if confirm is None:
        raise ToolError(SHELL_NEEDS_APPROVAL)
    if not confirm(shell_question(command)):
        raise ToolError("the person declined to run this command. Ask what they want instead.")
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
        "what the notes say; then read_note the best hits before answering. Returns paths, titles and "
        "matching lines with line numbers.",
        {"query": {"type": "string", "description": "Keywords, e.g. 'python decorators' or '快捷键'."},
         "folder": _FOLDER},
        ["query"],
    )),
    "list_notes": (list_notes, _schema(
        "list_notes",
        "List the notes (newest first) with their sizes, optionally inside one folder. Use it to see what "
        "exists when a search finds nothing or the person asks what notes they have.",
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
        "existing note unless overwrite is true — only do that when the person asked for a full rewrite.",
        {"file_path": _PATH,
         "content": {"type": "string", "description": "The whole Markdown text of the note."},
         "overwrite": {"type": "boolean", "description": "Replace an existing note. Default false."}},
        ["file_path", "content"],
    )),
    "bash": (bash, _schema(
        "bash",
        "Run one bash command in the notes folder and get exit_code, stdout and stderr (long output keeps "
        "its head and tail). Use it for what the note tools cannot do: counting or finding files "
        "(find, wc, grep), dates and sizes, or a script the person asks you to run. Read, search and "
        "write notes with the note tools instead. The person approves every command; stdin is closed, "
        "so nothing interactive works; commands that run too long are stopped; destructive commands are "
        "refused.",
        {"command": {"type": "string", "description": "The command, e.g. \"find . -name '*.md' | wc -l\"."}},
        ["command"],
    )),
}
OPT_IN_TOOLS = {"bash": "allow_shell"}  # tool -> the Settings flag that offers it to the model
TOOL_SCHEMAS = [schema for name, (_, schema) in TOOLS.items() if name not in OPT_IN_TOOLS]
READ_ONLY_TOOLS = {"search_notes", "list_notes", "read_note"}
NEEDS_CONFIRMATION: set[str] = {"bash"}


def tool_schemas(settings: Settings | None) -> list[dict]:
    """The tools offered to the model: TOOL_SCHEMAS plus the opt-in tools these settings enable."""
    return [schema for name, (_, schema) in TOOLS.items()
            if name not in OPT_IN_TOOLS or (settings and getattr(settings, OPT_IN_TOOLS[name]))]

_JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "object": dict, "array": list}


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
        checked[name] = value
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
    try:
        settings = settings or load_settings()
        offered = [schema["function"]["name"] for schema in tool_schemas(settings)]
        if name in OPT_IN_TOOLS and name not in offered:
            raise ToolError(SHELL_DISABLED)
        if name not in TOOLS:
            raise ToolError(f"unknown tool {name!r}. Available tools: {', '.join(offered)}.")
        function, schema = TOOLS[name]
        args = _check_arguments(schema, _parse_arguments(arguments))
        context = {"settings": settings, "confirm": confirm}  # only for tools that declare them
        wanted = inspect.signature(function).parameters
        args.update({key: value for key, value in context.items() if key in wanted})
        return _cap(function(settings.kb, **args))
    except ToolError as exc:
        return ERROR_PREFIX + str(exc)
    except OSError as exc:
        return ERROR_PREFIX + f"{name} failed: {exc.strerror or exc}."
    except Exception as exc:  # a tool bug must not end the conversation
        return ERROR_PREFIX + f"{name} failed unexpectedly: {type(exc).__name__}: {exc}"
