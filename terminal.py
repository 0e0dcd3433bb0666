"""The terminal side of the chat: what the person sees (Display, the agent's UI) and how a question is read
(line editing, pasted blocks, Ctrl+C, input history).

Only the answer goes to stdout; the rest goes to stderr. Text from the model or a note is shown, never obeyed:
control characters and escapes are made visible, so only this module's colours reach the terminal. It shows
and asks; it never decides what a line means (main.py's Chat does), nor writes the conversation.
"""

import contextlib
import itertools
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import db
import diffs
import tools
import versions
from approval import Approval
from agent import UI
from notes import visible

TRACE_WIDTH = 110  # characters of a tool call or result shown on stderr
HISTORY_LINES = 1000  # typed lines kept across runs
COMMAND_ROWS_SEEN = 10  # a shell command taller than this on screen gets its question again below it
BLANKS = re.compile(r"[ \t]{20,}")  # a run of spaces this long is counted, not drawn
QUESTION_FILES = 20  # files of a change listed under its question (the page shows each one's diff)


def shorten(text: str) -> str:
    text = visible(text)
    return text if len(text) <= TRACE_WIDTH else text[:TRACE_WIDTH - 1] + "…"


def compact(arguments, indent: int | None = None) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False, indent=indent)
    except ValueError:
        return str(arguments)


class Display(UI):
    """The terminal; asks only if `interactive`. On a terminal a one-line status (waiting, the reasoning's tail) is
    redrawn in place and erased before anything else; -v or a non-terminal stderr gets the whole reasoning."""

    def __init__(self, interactive: bool = False):
        self.show_reasoning, self.verbose, self.interactive = True, False, interactive  # run() sets the first two
        self.live = sys.stderr.isatty()
        self.colour = self.live and not os.environ.get("NO_COLOR")
        self.status, self.thought, self.thinking_since, self.thought_seconds = "", "", None, 0.0
        self.text_open = self.shell_always = False
        self.held_cr = ""  # a stream piece's last "\r", until the next shows whether "\n" follows

    def _style(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.colour else text

    def _show_status(self, text: str) -> None:
        room = max(shutil.get_terminal_size().columns // 2 - 2, 10)  # Chinese characters take two columns
        self.status = text if len(text) <= room else "…" + text[-room:]
        print("\r\033[K" + self._style("2", visible(self.status)), end="", file=sys.stderr, flush=True)

    def _clear_status(self) -> None:
        if self.status:
            self.status = ""
            print("\r\033[K", end="", file=sys.stderr, flush=True)

    def begin_answer(self) -> None:
        self.thought, self.thought_seconds = "", 0.0
        self.waiting()

    def waiting(self) -> None:
        if self.live:
            self._show_status("waiting for the model…")

    def reasoning(self, text: str) -> None:
        first = self.thinking_since is None
        self.thought += ("\n\n" if first and self.thought else "") + text  # each model call's apart
        self.thinking_since = self.thinking_since or time.monotonic()
        if not self.show_reasoning:
            return
        if self.live and not self.verbose:
            self._show_status("thinking: " + " ".join(self.thought.split("\n\n")[-1].split()))
        else:
            text = visible(text, lines=True)
            print(self._style("2", "thinking: " + text if first else text), end="", file=sys.stderr, flush=True)

    def text(self, text: str) -> None:
        self.end_answer(more_text=True)
        text, self.held_cr = self.held_cr + text, ""
        if text.endswith("\r"):
            text, self.held_cr = text[:-1], "\r"
        print(visible(text, lines=True), end="", flush=True)
        self.text_open = not text.endswith("\n")

    def end_answer(self, more_text: bool = False, announce: bool = True) -> None:
        """End the status or reasoning line, the answer's unless `more_text`; `announce` how long it thought."""
        self._clear_status()
        started, self.thinking_since = self.thinking_since, None
        if started is not None and self.show_reasoning:
            self.thought_seconds += time.monotonic() - started
            if not self.live or self.verbose:
                print(file=sys.stderr)  # ends the reasoning printed whole
        if announce and self.thought_seconds and self.live and not self.verbose:
            how = "/reasoning" if self.interactive else "-v"
            self.info(self._style("2", f"thought for {self.thought_seconds:.0f} s ({how} shows it)"))
            self.thought_seconds = 0.0
        if self.text_open and not more_text:
            self.text_open = False
            print(flush=True)

    def tool_call(self, name: str, arguments: str) -> None:
        self.end_answer(announce=False)  # the thinking goes on after the tool
        self.info(self._style("36", f"→ {shorten(name)}") + " " + shorten(compact(arguments)))

    def passages(self, lines: dict) -> None:
        found = ", ".join(f"{path}:{min(numbers)}-{max(numbers)}" for path, numbers in lines.items())
        self.info(self._style("2", f"  (with the question: {shorten(found)})"))

    def tool_result(self, name: str, result: tools.Result) -> None:
        first = result.text.splitlines()[0] if result.text else "(empty)"
        chosen = tools.TOOLS.get(name)
        if chosen and not (chosen.read_only or chosen.opt_in or result.error):  # it changed notes
            summary = itertools.takewhile(lambda line: line[:2] in ("~ ", "+ ", "- ", "→ "), result.text.splitlines())
            for line in listed(list(summary)):  # the change's summary: `~ notes/git.md  +3 −1`, …
                self.info(self._style("32", "  " + visible(line)))
        else:
            self.info(self._style("31" if result.error else "2", "  ← " + shorten(first)))
        self.waiting()  # for the model's next call

    def notice(self, text: str) -> None:
        self.end_answer()
        self.info(self._style("33", text))

    def citations(self, report) -> None:
        """After the answer, a line for each citation that does not hold, and one if no note was read for it."""
        lines = [f"✗ {line}" for line in report.failed()] + [f"⚠ {report.unread}"] * bool(report.unread)
        if lines:
            self.end_answer()
        for line in lines:
            self.info(self._style("33", visible(line)))

    def approve(self, approval: Approval) -> bool | None:
        """Ask at the terminal: a command shown whole, indented; `a` approves every command this session."""
        self._clear_status()
        if not self.interactive:
            return None
        title = self._style("1", visible(approval.title))  # bold: no model or note can draw it (escapes are shown)
        if approval.kind != "shell":
            return ask(title + touched(approval.change), "y/N") == "y"
        if self.shell_always:
            return True
        lines, width = shown_command(approval.detail), max(shutil.get_terminal_size().columns - 4, 20)
        rows = sum(len(line) // width + 1 for line in lines)  # a long line wraps
        again = f"\n{title} (the command is above)" if rows > COMMAND_ROWS_SEEN else ""
        reply = ask(f"{title}\n    " + "\n    ".join(lines) + again, "y/N/a=always this session")
        self.shell_always = reply == "a"
        return reply in ("y", "a")

    def info(self, message: str) -> None:
        self._clear_status()
        print(message, file=sys.stderr, flush=True)

    def error(self, message: str) -> None:
        self.end_answer()
        self.info(self._style("31", "error: ") + visible(message, lines=True))


def shown_command(command: str) -> list[str]:
    """A command's lines as asked about; runs of blank lines or spaces are counted, so none hides part of it."""
    lines = [BLANKS.sub(lambda m: f"[{len(m[0])} spaces]", visible(line.rstrip(" \t")))
             for line in command.split("\n")]
    shown = []
    for blank, run in itertools.groupby(lines, key=lambda line: not line):
        run = list(run)
        shown += [f"[{len(run)} blank lines]"] if blank and len(run) > 1 else run
    return shown


def touched(change: versions.Change | None) -> str:
    """A change's files, one summary line each under its question, the answer asked on the next line; "" for one."""
    lines = diffs.summary(change).splitlines() if change else []
    return "".join(f"\n    {visible(line)}" for line in listed(lines)) + "\n" if len(lines) > 1 else ""


def listed(lines: list) -> list:
    return lines[:QUESTION_FILES] + [f"… and {len(lines) - QUESTION_FILES} more"] * (len(lines) > QUESTION_FILES)


def ask(question: str, choices: str) -> str:
    """Ask at the terminal; "y", "a" (always, if offered) or "n" (anything else, or a closed stdin)."""
    print(f"{question} [{choices}] ", end="", file=sys.stderr, flush=True)
    try:
        typed = input()
        if typed:
            forget_last_line()  # a "y" is no line to bring back with the up arrow
        reply = typed.strip().lower()
    except EOFError:
        reply = None  # Ctrl+D ends no line
    except KeyboardInterrupt:
        print(file=sys.stderr)  # "[cancelled]" goes on a line of its own
        raise
    if reply is None or (not reply and "readline" in sys.modules and sys.stdin.isatty() and sys.stdout.isatty()):
        print(file=sys.stderr)  # nor does readline when its line holds no text
    return "y" if reply in ("y", "yes") else "a" if reply in ("a", "always") and "a" in choices else "n"


def start_line_editing(display: Display):
    """readline with pasted blocks kept whole and typed lines kept across runs; None where there is none."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input() still works
        return None
    if "libedit" not in (readline.__doc__ or ""):  # macOS's libedit knows neither setting
        readline.parse_and_bind("set enable-bracketed-paste on")  # CPython turns it off
    history = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local/state") / "knowledge-agent" / "history"
    readline.set_history_length(HISTORY_LINES)
    with contextlib.suppress(OSError):
        readline.read_history_file(history)

    def save() -> None:
        for index in range(readline.get_current_history_length()):  # the file holds one line per entry
            if "\n" in (item := readline.get_history_item(index + 1) or ""):
                readline.replace_history_item(index, " ".join(item.split()))
        try:
            db.private_folder(history.parent)
            readline.write_history_file(history)
            history.chmod(0o600)  # questions about one's notes are private
        except OSError as exc:
            display.info(f"(typed lines not kept: {history}: {exc.strerror})")
    return readline, save


def read_question(readline) -> str | None:
    """One question from the prompt (lines ending in \\ go on); "" after Ctrl+C with text typed, None to leave."""
    typed = []
    try:
        while not typed or typed[-1].endswith("\\"):
            typed.append(input("… " if typed else "\n> "))
    except EOFError:
        return None
    except KeyboardInterrupt:  # like bash: clear what was typed; on an empty line, leave
        return "" if typed or (readline and readline.get_line_buffer()) else None
    lines = [line[:-1] for line in typed[:-1]] + typed[-1:]
    if len(typed) > 1 and readline:  # the up arrow brings back the question, not its pieces
        for _ in filter(None, typed):  # readline keeps only lines with text
            forget_last_line()
        readline.add_history(" ".join(lines))
    return "\n".join(lines).strip()


def forget_last_line() -> None:
    readline = sys.modules.get("readline")
    if readline and (length := readline.get_current_history_length()):
        readline.remove_history_item(length - 1)
