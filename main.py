"""knowledge-agent's command line: an interactive chat, a one-shot question, or questions piped on stdin.

    python main.py                      chat (REPL) about the notes in knowledge_base/
    python main.py "question"           one answer on stdout, tool calls on stderr
    printf 'q1\\nq2\\n' | python main.py  each line a turn of one conversation
    python main.py --continue           pick up the last conversation (--resume ID, --list-sessions)

The answer goes to stdout; reasoning, tool calls and errors go to stderr. Every message is saved as it
happens (sessions.py). Without an API key the chat starts in notes-only mode: /search, /list, /read.
Exit codes: 0 ok, 1 the answer failed, 2 bad settings or usage, 130 interrupted.
"""

import argparse
import difflib
import json
import os
import sys

import search
import sessions
import versions
from agent import AgentError, make_client, next_request_size, run_agent
from config import SESSIONS_LIST_LIMIT, ConfigError, Settings, load_settings
from tools import CHANGE_TOOLS, SHELL_QUESTION, execute_tool, tool_schemas

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
    earlier = parser.add_mutually_exclusive_group()
    earlier.add_argument("-c", "--continue", dest="continue_last", action="store_true",
                         help="continue the most recent conversation")
    earlier.add_argument("--resume", metavar="ID", type=int, help="continue conversation ID (see --list-sessions)")
    earlier.add_argument("--list-sessions", action="store_true", help="list recent conversations and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="show token usage on stderr after an answer")
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
        sys.stderr.write("\n")  # Ctrl+D ends no line
        return "n"
    if not reply and "readline" in sys.modules and sys.stdin.isatty() and sys.stdout.isatty():
        sys.stderr.write("\n")  # readline ends the line only if it holds text: its prompt was empty
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


def answer(question: str, history: list, settings: Settings, client, display: Display, confirm,
           conversation: sessions.Conversation | None = None) -> bool:
    """Run one turn, printing as it goes. Returns False if it failed (the error is already shown)."""
    if conversation:
        conversation.begin_turn()
    try:
        run_agent(question, history, settings=settings, client=client, on_text=display.text,
                  on_reasoning=display.reasoning, on_tool_call=display.tool_call,
                  on_tool_result=display.tool_result, confirm=confirm,
                  on_change=conversation and conversation.sync, on_usage=conversation and conversation.add_usage)
        display.end_answer()
        return True
    except AgentError as exc:
        display.error(str(exc))
        return False


COMMANDS = {
    "/help": "this list",
    "/new": "start a new conversation (this one stays saved)",
    "/sessions": "recent conversations",
    "/resume ID": "switch to an earlier conversation",
    "/history": "this conversation so far, one line a message",
    "/usage": "tokens used by the last answer and this conversation",
    "/tools": "the tools the agent can use",
    "/search QUERY": "search the notes (no model needed)",
    "/list [FOLDER]": "list the notes, newest first",
    "/read PATH": "show a note",
    "/undo": "revert the agent's last change to a note",
    "/exit": "leave (Ctrl+D too)",
}
NO_KEY = ("Chat is off: no API key. Set DEEPSEEK_API_KEY (or OPENAI_API_KEY) in the environment or in .env "
          "beside main.py, then start again. Meanwhile /search, /list and /read work; /help lists all.")


def repl(settings: Settings, client, display: Display, conversation: sessions.Conversation | None = None) -> int:
    """The chat. `client` None means notes-only mode: the commands work, questions say how to enable chat."""
    conversation = conversation or open_store_conversation(settings, display)
    _enable_line_editing()
    names = ", ".join(schema["function"]["name"] for schema in tool_schemas(settings))
    display.info(f"knowledge-agent · model {settings.model} · notes {settings.kb}\ntools: {names}")
    display.info("Ask about your notes. /help lists commands; /undo reverts the agent's last change. "
                 "Ctrl+C cancels an answer; Ctrl+D or /exit leaves." if client else NO_KEY)
    if settings.allow_shell:
        approval = "every command runs without asking (--yes)" if settings.auto_approve else \
            "you approve each command"
        display.info(f"shell is ON: the model can run commands as you in {settings.kb}; {approval}. "
                     "The guard against destructive commands is a seat belt, not a sandbox.")
    confirm = make_confirm(settings, interactive=True)
    told: list[str] = []
    while True:
        try:
            line = input("\n> ").strip()
        except (EOFError, KeyboardInterrupt):
            display.info("")
            break
        try:
            if line and chat_line(line, settings, client, display, conversation, confirm, told) == "exit":
                break
        except KeyboardInterrupt:  # cancels this answer or command, not the chat
            display.end_answer()
            display.info("[cancelled]")
    if conversation.session_id is not None and conversation.store.persistent:
        display.info(f"Conversation {conversation.session_id} is saved: python main.py --continue picks it up.")
    return EXIT_OK


def chat_line(line: str, settings: Settings, client, display: Display, conversation, confirm,
              told: list[str]) -> str:
    """One line of the chat, typed or piped: a /command or a question. Returns "exit", "ok" or "failed".

    `told` collects what the model should hear with the next question (what /undo restored), so it does
    not trust what it read before."""
    if line.lower() in ("exit", "quit"):
        return "exit"
    if line.split()[0].lower() == "/undo":
        message = undo(settings)
        display.info(message)
        if message.startswith("Undid"):  # the model must not trust what it read before
            told.append(f"[I ran /undo: {message}]")
        return "ok"
    if line.startswith("/"):
        return "ok" if run_command(line, settings, client, display, conversation) else "exit"
    if not client:
        display.error(NO_KEY)
        return "failed"
    question = "\n".join(told + [line])
    before = len(conversation.history)
    try:
        ok = answer(question, conversation.history, settings, client, display, confirm, conversation)
    finally:
        if len(conversation.history) > before:  # the turn was kept, and with it what the model was told
            told.clear()
    return "ok" if ok else "failed"


def run_command(line: str, settings: Settings, client, display: Display, conversation) -> bool:
    """Carry out one /command. False means leave the REPL."""
    name, _, argument = line.partition(" ")
    name, argument = name.lower(), argument.strip()
    known = [usage.split()[0] for usage in COMMANDS]
    if name in ("/exit", "/quit"):
        return False
    if name not in known:
        # A cut-short name ("/hist") means the command it begins; otherwise the most similar spelling.
        close = [c for c in known if c.startswith(name)] or difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]}?" if close else ""
        display.info(f"Unknown command {name}.{hint} /help lists the commands.")
    elif name == "/help":
        display.info("\n".join(f"  {usage:<16} {text}" for usage, text in COMMANDS.items())
                     + "\n  anything else    a question for the agent" + ("" if client else " (needs an API key)"))
    elif name == "/tools":
        for schema in tool_schemas(settings):
            function = schema["function"]
            display.info(f"  {function['name']:<14} {function['description'].split('. ')[0].rstrip('.')}.")
    elif name == "/new":
        conversation.start_new()
        display.info("New conversation. (The previous one stays saved: /sessions)")
    elif name == "/sessions":
        show_sessions(conversation.store, display, current=conversation.session_id)
    elif name == "/resume":
        resume(conversation, argument, display)
    elif name == "/history":
        show_history(conversation.history, display)
    elif name == "/usage":
        show_usage(conversation, settings, display)
    elif name in NOTE_COMMANDS:
        show_tool(name, argument, settings)
    return True


NOTE_COMMANDS = {"/search": ("search_notes", "query"), "/list": ("list_notes", "folder"),
                 "/read": ("read_note", "file_path")}


def show_tool(name: str, argument: str, settings: Settings) -> None:
    """/search, /list, /read: the agent's own tools, run by hand; their text goes to stdout."""
    tool, parameter = NOTE_COMMANDS[name]
    if not argument and name != "/list":
        sys.stdout.write(f"Usage: {name} {parameter.upper().replace('FILE_PATH', 'PATH')}\n")
        return
    sys.stdout.write(execute_tool(tool, {parameter: argument} if argument else {}, settings) + "\n")
    sys.stdout.flush()


def show_sessions(store: sessions.SessionStore, display: Display, current: int | None = None) -> None:
    listed = store.list_sessions()
    if not listed:
        display.info("No saved conversations yet.")
    for info in listed:
        mark = "*" if info.id == current else " "
        display.info(mark + sessions.format_session_line(info))


def resume(conversation: sessions.Conversation, argument: str, display: Display) -> bool:
    if not (argument.isascii() and argument.isdigit()):  # "²".isdigit() is True, int("²") is not
        display.info("Usage: /resume ID (the numbers /sessions shows)")
        return False
    if not conversation.resume(int(argument)):
        display.info(f"No conversation {argument}. /sessions lists them.")
        return False
    display.info(f"Continuing conversation {argument} ({len(conversation.history)} messages). /history shows it.")
    return True


def show_history(history: list[dict], display: Display) -> None:
    if not history:
        display.info("Nothing yet in this conversation.")
    turn = 0
    for message in history:
        role, text = message.get("role"), _one_line(message.get("content"))
        if role == "user":
            turn += 1
            display.info(f"[{turn}] you: {text}")
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                display.info(_shorten(f"      → {function.get('name')} {_compact(function.get('arguments'))}"))
            if text:
                display.info(f"    agent: {text}")


def _one_line(content) -> str:
    return _shorten(" ".join(str(content or "").split()))


def show_usage(conversation: sessions.Conversation, settings: Settings, display: Display) -> None:
    (tp, tc), (sp, sc) = conversation.turn_usage, conversation.session_usage()
    tokens, carried = next_request_size(conversation.history, settings)
    display.info(f"last answer : {tp:,} prompt + {tc:,} completion tokens ({conversation.turn_calls} API calls)\n"
                 f"conversation: {sp:,} prompt + {sc:,} completion tokens in all\n"
                 f"next request: ~{tokens:,} of {settings.context_tokens:,} tokens (CONTEXT_TOKENS), "
                 f"carrying {carried} of {len(conversation.history)} messages")


def usage_line(conversation: sessions.Conversation) -> str:
    (tp, tc), (sp, sc) = conversation.run_usage, conversation.session_usage()
    line = f"usage: {tp:,} prompt + {tc:,} completion tokens"
    if conversation.session_id is not None:
        line += f"; conversation {conversation.session_id}: {sp:,} + {sc:,} in all"
    return line


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


def piped(settings: Settings, client, display: Display, conversation: sessions.Conversation) -> int:
    """Each line of stdin is a turn of one conversation, /commands included; EOF ends it."""
    confirm = make_confirm(settings, interactive=False)
    told: list[str] = []
    ok = True
    for line in sys.stdin:
        result = chat_line(line.strip(), settings, client, display, conversation, confirm, told) if line.strip() else "ok"
        if result == "exit":
            break
        ok = ok and result == "ok"
    return EXIT_OK if ok else EXIT_FAILED


def open_conversation(args, settings: Settings, display: Display) -> sessions.Conversation:
    """The conversation to carry on: new, the latest (--continue) or a given one (--resume ID)."""
    conversation = open_store_conversation(settings, display)
    if args.resume is not None:
        if not conversation.resume(args.resume):
            raise ConfigError(f"No conversation {args.resume}. python main.py --list-sessions lists them.")
    elif args.continue_last:
        latest = conversation.store.latest_session_id()
        if latest is None:
            display.info("No earlier conversation to continue; starting a new one.")
        else:
            conversation.resume(latest)
    if conversation.session_id is not None:
        display.info(f"Continuing conversation {conversation.session_id} ({len(conversation.history)} messages).")
    return conversation


def open_store_conversation(settings: Settings, display: Display) -> sessions.Conversation:
    store = sessions.SessionStore(sessions.default_db_path(settings.data_dir), warn=display.info)
    return sessions.Conversation(store, settings.kb)


def list_sessions(args, display: Display) -> int:
    try:
        data_dir = settings_from(args).data_dir  # KA_DATA_DIR may be in .env
    except ConfigError:  # e.g. no notes folder: not needed to list conversations
        data_dir = None
    store = sessions.SessionStore(sessions.default_db_path(data_dir), warn=display.info)
    listed = store.list_sessions()
    for info in listed:
        sys.stdout.write(sessions.format_session_line(info) + "\n")
    if not listed:
        display.info(f"No saved conversations yet (in {store.path}).")
    elif len(listed) == SESSIONS_LIST_LIMIT:
        display.info(f"(the {SESSIONS_LIST_LIMIT} most recent; older ones still open with --resume ID)")
    return EXIT_OK


def main(argv=None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a terminal or file that cannot show a character gets '?'
        stream.reconfigure(errors="replace")
    args = parse_args(argv)
    display = Display()
    try:
        if args.list_sessions:
            return list_sessions(args, display)
        settings = settings_from(args)
        display.show_reasoning = settings.show_reasoning
        question = " ".join(args.question).strip()
        if args.question and not question:
            display.error("The question is empty. Ask something, or run without arguments to chat.")
            return EXIT_USAGE
        # Without a key the REPL opens and /commands run, for the notes alone; a question needs the key.
        client = make_client(settings) if settings.api_key or (question and not question.startswith("/")) else None
        conversation = open_conversation(args, settings, display)
        if question:
            ok = chat_line(question, settings, client, display, conversation,
                           make_confirm(settings, interactive=False), []) != "failed"
            if args.verbose:
                display.info(usage_line(conversation))
            return EXIT_OK if ok else EXIT_FAILED
        if not sys.stdin.isatty():
            code = piped(settings, client, display, conversation)
            if args.verbose:
                display.info(usage_line(conversation))
            return code
        return repl(settings, client, display, conversation)
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
