"""knowledge-agent's command line: an interactive chat, a one-shot question, or questions piped on stdin.

    python main.py                      chat (REPL) about the notes in knowledge_base/
    python main.py "question"           one answer on stdout, tool calls on stderr
    printf 'q1\\nq2\\n' | python main.py  each line a turn of one conversation

The answer goes to stdout; reasoning, tool calls and errors go to stderr. Exit codes: 0 ok, 1 the
answer failed, 2 bad settings or usage, 130 interrupted.
"""

import argparse
import json
import os
import sys

import search
import versions
from agent import AgentError, make_client, run_agent
from config import ConfigError, Settings, load_settings
from tools import CHANGE_TOOLS, SHELL_QUESTION, tool_schemas

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
TRACE_WIDTH = 110  # characters of a tool call or result shown on stderr


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="main.py",
        description="Chat with an AI agent about your Markdown notes. Every flag also has an environment "
                    "variable (see .env.example).",
        epilog="examples:\n  python main.py\n  python main.py \"帮我找关于 Python 的笔记\"\n"
               "  printf 'find my git notes\\nsummarise it in one line\\n' | python main.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("question", nargs="*", help="ask one question and exit (omit for a chat)")
    parser.add_argument("--kb", metavar="PATH", help="notes folder (KNOWLEDGE_BASE; default knowledge_base/)")
    parser.add_argument("--model", help="model name (MODEL; default deepseek-flash)")
    parser.add_argument("--base-url", metavar="URL", help="OpenAI-compatible endpoint (DEEPSEEK_BASE_URL)")
    parser.add_argument("--max-rounds", metavar="N", help="cap on model calls per question (MAX_TOOL_ROUNDS; default 10)")
    parser.add_argument("--no-stream", action="store_true", help="wait for whole answers (STREAM=0)")
    parser.add_argument("--no-reasoning", action="store_true", help="hide the model's reasoning (SHOW_REASONING=0)")
    parser.add_argument("-y", "--yes", action="store_true", help="approve actions that ask first (AUTO_APPROVE=1)")
    parser.add_argument("--allow-shell", action="store_true",
                        help="let the model run shell commands in the notes folder, each one confirmed "
                             "(ALLOW_SHELL=1; read the README first)")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    return load_settings(
        kb=args.kb,
        model=args.model,
        base_url=args.base_url,
        max_rounds=args.max_rounds,
        stream=False if args.no_stream else None,
        show_reasoning=False if args.no_reasoning else None,
        auto_approve=True if args.yes else None,
        allow_shell=True if args.allow_shell else None,
    )


class Display:
    """Writes the answer to stdout and everything else to stderr, with colour only on a terminal."""

    def __init__(self, show_reasoning: bool = True):
        self.show_reasoning = show_reasoning
        self.colour = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
        self.in_reasoning = False
        self.text_open = False  # the answer's last line has no newline yet

    def _style(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.colour else text

    def reasoning(self, text: str) -> None:
        if not self.show_reasoning:
            return
        if not self.in_reasoning:
            self.in_reasoning = True
            sys.stderr.write(self._style("2", "thinking: "))
        sys.stderr.write(self._style("2", text))
        sys.stderr.flush()

    def _end_reasoning(self) -> None:
        if self.in_reasoning:
            self.in_reasoning = False
            sys.stderr.write("\n")

    def text(self, text: str) -> None:
        self._end_reasoning()
        sys.stdout.write(text)
        sys.stdout.flush()
        self.text_open = not text.endswith("\n")

    def end_answer(self) -> None:
        self._end_reasoning()
        if self.text_open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.text_open = False

    def tool_call(self, name: str, arguments: str) -> None:
        self.end_answer()
        self.info(self._style("36", f"→ {name}") + " " + _shorten(_compact(arguments)))

    def tool_result(self, name: str, result: str) -> None:
        first = result.splitlines()[0] if result else "(empty)"
        if name in CHANGE_TOOLS and not result.startswith("Error:"):
            self.info(self._style("32", "  " + first))  # the change summary: `~ notes/git.md  +3 −1`
            return
        line = "  ← " + _shorten(first)
        self.info(self._style("31", line) if result.startswith("Error:") else self._style("2", line))

    def info(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    def error(self, message: str) -> None:
        self.end_answer()
        self.info(self._style("31", "error: ") + message)


def _compact(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except ValueError:
        return arguments


def _shorten(text: str) -> str:
    return text if len(text) <= TRACE_WIDTH else text[: TRACE_WIDTH - 1] + "…"


def ask_yes_no(question: str) -> bool:
    """Ask the person at the terminal; anything but y/yes (or a closed stdin) means no."""
    return ask(question, "y/N") == "y"


def ask(question: str, choices: str) -> str:
    """Ask at the terminal; returns "y", "a" (always, if offered) or "n" (anything else, or a closed stdin)."""
    try:
        sys.stderr.write(f"{question} [{choices}] ")
        sys.stderr.flush()
        reply = input().strip().lower()
    except EOFError:
        return "n"
    if reply in ("y", "yes"):
        return "y"
    return "a" if reply in ("a", "always") and "a" in choices else "n"


def make_confirm(settings: Settings, interactive: bool):
    """The confirm(question) -> bool callback for the tools; None when nobody can be asked.

    Shell commands may also be answered "a" (always): later shell commands in this session run
    without asking. Every other question is asked each time.
    """
    if settings.auto_approve:
        return lambda question: True
    if not interactive:
        return None
    shell_always = False

    def confirm(question: str) -> bool:
        nonlocal shell_always
        if not question.startswith(SHELL_QUESTION):
            return ask_yes_no(question)
        if shell_always:
            return True
        reply = ask(question, "y/N/a=always this session")
        shell_always = reply == "a"
        return reply in ("y", "a")

    return confirm


def answer(question: str, history: list, settings: Settings, client, display: Display, confirm) -> bool:
    """Run one turn, printing as it goes. Returns False if it failed (the error is already shown)."""
    try:
        run_agent(question, history, settings=settings, client=client, on_text=display.text,
                  on_reasoning=display.reasoning, on_tool_call=display.tool_call,
                  on_tool_result=display.tool_result, confirm=confirm)
        display.end_answer()
        return True
    except AgentError as exc:
        display.error(str(exc))
        return False


def repl(settings: Settings, client, display: Display) -> int:
    _enable_line_editing()
    names = ", ".join(schema["function"]["name"] for schema in tool_schemas(settings))
    display.info(f"knowledge-agent · model {settings.model} · notes {settings.kb}\n"
                 f"tools: {names}\nAsk about your notes. /undo reverts the agent's last change. "
                 "Ctrl+C cancels an answer; Ctrl+D or 'exit' leaves.")
    if settings.allow_shell:
        approval = "every command runs without asking (--yes)" if settings.auto_approve else \
            "you approve each command"
        display.info(f"shell is ON: the model can run commands as you in {settings.kb}; {approval}. "
                     "The guard against destructive commands is a seat belt, not a sandbox.")
    history: list[dict] = []
    confirm = make_confirm(settings, interactive=True)
    undone = ""  # told to the model with the next question, so it does not trust what it read before
    while True:
        try:
            line = input("\n> ").strip()
        except (EOFError, KeyboardInterrupt):
            display.info("")
            return EXIT_OK
        if not line:
            continue
        if line.lower() in ("exit", "quit", "/exit", "/quit"):
            return EXIT_OK
        if line.lower() == "/undo":
            message = undo(settings)
            display.info(message)
            undone += f"[I ran /undo: {message}]\n"
            continue
        question, undone = undone + line, ""
        try:
            answer(question, history, settings, client, display, confirm)
        except KeyboardInterrupt:
            display.end_answer()
            display.info("[cancelled]")


def undo(settings: Settings) -> str:
    """Revert the agent's last recorded change in the notes folder; one line saying what happened."""
    try:
        return versions.undo_last(settings.kb, on_change=lambda rel: search.note_changed(settings.kb, rel))
    except Exception as exc:  # undo must never end the chat
        return f"Error: undo failed: {type(exc).__name__}: {exc}. Your notes and .history/ are as they were."


def _enable_line_editing() -> None:
    try:
        import readline  # noqa: F401  (importing it gives input() editing and history)
    except ImportError:  # Windows without pyreadline: plain input still works
        pass


def piped(settings: Settings, client, display: Display) -> int:
    history: list[dict] = []
    confirm = make_confirm(settings, interactive=False)
    ok = True
    for line in sys.stdin:
        if line.strip().lower() in ("exit", "quit", "/exit", "/quit"):
            break
        if line.strip():
            ok = answer(line.strip(), history, settings, client, display, confirm) and ok
    return EXIT_OK if ok else EXIT_FAILED


def main(argv=None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a terminal or file that cannot show a character gets '?'
        stream.reconfigure(errors="replace")
    args = parse_args(argv)
    display = Display()
    try:
        settings = settings_from(args)
        display.show_reasoning = settings.show_reasoning
        client = make_client(settings)
        if args.question:
            question = " ".join(args.question).strip()
            if not question:
                display.error("The question is empty. Ask something, or run without arguments to chat.")
                return EXIT_USAGE
            ok = answer(question, [], settings, client, display, make_confirm(settings, interactive=False))
            return EXIT_OK if ok else EXIT_FAILED
        if not sys.stdin.isatty():
            return piped(settings, client, display)
        return repl(settings, client, display)
    except ConfigError as exc:
        display.error(str(exc))
        return EXIT_USAGE
    except AgentError as exc:
        display.error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        display.end_answer()
        display.info("[interrupted]")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `python main.py q | head -1`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
