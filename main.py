"""knowledge-agent's command line: an interactive chat, a one-shot question, or questions piped on stdin.

    python main.py ["question"] [--continue | --resume ID | --list-sessions]   (--help lists every flag)

Only the answer goes to stdout, the rest to stderr; a failure is one line there, never a traceback. Without an
API key the chat runs notes-only. Exit codes: 0 ok, 1 the answer failed, 2 bad settings or usage, 130 interrupted.
"""

import argparse
import contextlib
import difflib
import json
import os
import sys

import context
import embeddings
import sessions
import shell
import tools
from agent import UI, AgentError, make_client, request_budget, run_agent, system_message
from config import ConfigError, Settings, load_settings
from notes import ToolError, visible

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
TRACE_WIDTH = 110  # characters of a tool call or result shown on stderr


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="main.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Chat with an AI agent about your Markdown notes. Every flag also has an environment "
                    "variable (see .env.example).",
        epilog="examples:\n  python main.py\n  python main.py \"帮我找关于 Python 的笔记\"\n"
               "  printf 'find my git notes\\nsummarise it in one line\\n' | python main.py")
    add = parser.add_argument
    add("question", nargs="*", help="ask one question and exit (omit for a chat)")
    add("--kb", metavar="PATH", help="notes folder (KNOWLEDGE_BASE; default knowledge_base/)")
    add("--model", help="model name (MODEL; default deepseek-flash)")
    add("--base-url", metavar="URL", help="OpenAI-compatible endpoint (DEEPSEEK_BASE_URL)")
    add("--max-rounds", metavar="N", help="cap on model calls per question (MAX_TOOL_ROUNDS; default 10)")
    add("--no-stream", action="store_true", help="wait for whole answers (STREAM=0)")
    add("--no-reasoning", action="store_true", help="hide the model's reasoning (SHOW_REASONING=0)")
    add("-y", "--yes", action="store_true", help="approve actions that ask first (AUTO_APPROVE=1)")
    add("--allow-shell", action="store_true", help="let the model run shell commands in a sandbox in the notes "
        "folder, each one confirmed (ALLOW_SHELL=1; read the README first)")
    earlier = parser.add_mutually_exclusive_group().add_argument
    earlier("-c", "--continue", dest="continue_last", action="store_true", help="continue the most recent conversation")
    earlier("--resume", metavar="ID", type=int, help="continue conversation ID (see --list-sessions)")
    earlier("--list-sessions", action="store_true", help="list recent conversations and exit")
    add("--reindex", action="store_true", help="build the whole search index (and the vectors when EMBED_MODEL "
        "is set) with progress, then exit")
    add("-v", "--verbose", action="store_true", help="show token usage on stderr after an answer")
    return parser.parse_args(argv)


def _shorten(text: str) -> str:
    text = visible(text)
    return text if len(text) <= TRACE_WIDTH else text[:TRACE_WIDTH - 1] + "…"


def _compact(arguments) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except ValueError:
        return str(arguments)


class Display(UI):
    """The terminal: the answer to stdout, the rest to stderr (coloured on a terminal); asks only if `interactive`."""

    def __init__(self, interactive: bool = False):
        self.show_reasoning, self.interactive = True, interactive  # run() sets show_reasoning from the settings
        self.colour = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
        self.in_reasoning = self.text_open = self.shell_always = False
        self.conversation: sessions.Conversation | None = None  # set by Chat before any answer

    def _style(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.colour else text

    def reasoning(self, text: str) -> None:
        if self.show_reasoning:
            text = text if self.in_reasoning else "thinking: " + text
            self.in_reasoning = True
            print(self._style("2", text), end="", file=sys.stderr, flush=True)

    def text(self, text: str) -> None:
        self.end_answer(more_text=True)
        print(text, end="", flush=True)
        self.text_open = not text.endswith("\n")

    def end_answer(self, more_text: bool = False) -> None:
        """End the open reasoning line, and the answer's too unless `more_text` of it follows."""
        if self.in_reasoning:
            self.in_reasoning = False
            print(file=sys.stderr)
        if self.text_open and not more_text:
            self.text_open = False
            print(flush=True)

    def tool_call(self, name: str, arguments: str) -> None:
        self.end_answer()
        self.info(self._style("36", f"→ {name}") + " " + _shorten(_compact(arguments)))

    def tool_result(self, name: str, result: tools.Result) -> None:
        first = result.text.splitlines()[0] if result.text else "(empty)"
        if getattr(tools.TOOLS.get(name), "changes_notes", False) and not result.error:
            self.info(self._style("32", "  " + visible(first)))  # the change summary: `~ notes/git.md  +3 −1`
        else:
            self.info(self._style("31" if result.error else "2", "  ← " + _shorten(first)))

    def confirm(self, question: str) -> bool | None:
        if not self.interactive:
            return None
        if not question.startswith(tools.SHELL_QUESTION):
            return ask(question, "y/N") == "y"
        reply = "a" if self.shell_always else ask(question, "y/N/a=always this session")
        self.shell_always = reply == "a"
        return reply in ("y", "a")

    def history_changed(self, history: list[dict]) -> None:
        self.conversation.sync(history)

    def usage(self, usage) -> None:
        self.conversation.add_usage(usage)

    def info(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def error(self, message: str) -> None:
        self.end_answer()
        self.info(self._style("31", "error: ") + message)


def ask(question: str, choices: str) -> str:
    """Ask at the terminal; "y", "a" (always, if offered) or "n" (anything else, or a closed stdin)."""
    print(f"{question} [{choices}] ", end="", file=sys.stderr, flush=True)
    try:
        reply = input().strip().lower()
    except EOFError:
        reply = None  # Ctrl+D ends no line
    if reply is None or (not reply and "readline" in sys.modules and sys.stdin.isatty() and sys.stdout.isatty()):
        print(file=sys.stderr)  # nor does readline when its line holds no text
    if reply in ("y", "yes"):
        return "y"
    return "a" if reply in ("a", "always") and "a" in choices else "n"


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
NOTE_COMMANDS = {"/search": ("search_notes", "query"), "/list": ("list_notes", "folder"),
                 "/read": ("read_note", "file_path")}


class Chat:
    """One conversation at the terminal or on a pipe: what a line of input does."""

    def __init__(self, settings: Settings, client, display: Display, conversation: sessions.Conversation):
        self.settings, self.client, self.display, self.conversation = settings, client, display, conversation
        display.conversation = conversation
        self.told: list[str] = []  # what the model should hear with the next question (what /undo restored)

    def line(self, line: str) -> str:
        """One line, typed or piped: a /command or a question. Returns "exit", "ok" or "failed"."""
        if line.lower() in ("exit", "quit"):
            return "exit"
        if line.startswith("/"):
            return self.command(line)
        if not self.client:
            self.display.error(NO_KEY)
            return "failed"
        history, before = self.conversation.history, len(self.conversation.history)
        self.conversation.begin_turn()
        try:
            run_agent("\n".join(self.told + [line]), history, self.settings, self.client, self.display)
            self.display.end_answer()
            return "ok"
        except AgentError as exc:
            self.display.error(str(exc))
            return "failed"
        finally:
            if len(history) > before:  # the turn was kept, and with it what the model was told
                self.told.clear()

    def command(self, line: str) -> str:
        name, _, argument = line.partition(" ")
        name, argument = name.lower(), argument.strip()
        known = [usage.split()[0] for usage in COMMANDS]
        if name in ("/exit", "/quit"):
            return "exit"
        if name not in known:
            # A cut-short name ("/hist") means the command it begins; otherwise the most similar spelling.
            close = [c for c in known if c.startswith(name)] or difflib.get_close_matches(name, known, n=1, cutoff=0.5)
            self.display.info(f"Unknown command {name}." + (f" Did you mean {close[0]}?" if close else "")
                              + " /help lists the commands.")
        elif name in NOTE_COMMANDS:  # the agent's own tools, run by hand: their text goes to stdout
            tool, parameter = NOTE_COMMANDS[name]
            if not argument and name != "/list":
                print(f"Usage: {name} {parameter.upper().replace('FILE_PATH', 'PATH')}", flush=True)
            else:
                result = tools.execute_tool(tool, {parameter: argument} if argument else {}, self.settings)
                print(result.text, flush=True)
        else:
            getattr(self, "do_" + name[1:])(argument)
        return "ok"

    def do_help(self, argument: str) -> None:
        self.display.info("\n".join(f"  {usage:<16} {text}" for usage, text in COMMANDS.items())
                          + "\n  anything else    a question for the agent" + ("" if self.client else " (needs an API key)"))

    def do_tools(self, argument: str) -> None:
        for schema in tools.tool_schemas(self.settings):
            function = schema["function"]
            self.display.info(f"  {function['name']:<14} {function['description'].split('. ')[0].rstrip('.')}.")

    def do_new(self, argument: str) -> None:
        self.conversation.start_new()
        self.display.info("New conversation. (The previous one stays saved: /sessions)")

    def do_sessions(self, argument: str) -> None:
        show_sessions(self.conversation.store, self.display.info, self.conversation.session_id)

    def do_resume(self, argument: str) -> None:
        if not (argument.isascii() and argument.isdigit()):  # "²".isdigit() is True, int("²") is not
            self.display.info("Usage: /resume ID (the numbers /sessions shows)")
        elif not self.conversation.resume(int(argument)):
            self.display.info(f"No conversation {argument}. /sessions lists them.")
        else:
            self.display.info(f"Continuing conversation {argument} ({len(self.conversation.history)} messages). "
                              "/history shows it.")

    def do_history(self, argument: str) -> None:
        if not self.conversation.history:
            self.display.info("Nothing yet in this conversation.")
        turn = 0
        for message in self.conversation.history:
            role, text = message.get("role"), _shorten(" ".join(str(message.get("content") or "").split()))
            if role == "user":
                turn += 1
                self.display.info(f"[{turn}] you: {text}")
            elif role == "assistant":
                for call in message.get("tool_calls") or []:
                    function = call.get("function") or {}
                    self.display.info(_shorten(f"      → {function.get('name')} {_compact(function.get('arguments'))}"))
                if text:
                    self.display.info(f"    agent: {text}")

    def do_usage(self, argument: str) -> None:
        conversation, settings = self.conversation, self.settings
        (tp, tc), (sp, sc) = conversation.turn_usage, conversation.session_usage()
        sent = context.fit_to_budget([system_message()] + conversation.history, request_budget(settings))
        tokens = context.estimate_tokens(sent, tools.tool_schemas(settings))
        self.display.info(f"last answer : {tp:,} prompt + {tc:,} completion tokens ({conversation.turn_calls} API calls)")
        self.display.info(f"conversation: {sp:,} prompt + {sc:,} completion tokens in all")
        self.display.info(f"next request: ~{tokens:,} of {settings.context_tokens:,} tokens (CONTEXT_TOKENS), "
                          f"carrying {len(sent) - 1} of {len(conversation.history)} messages")

    def do_undo(self, argument: str) -> None:
        message, undone = tools.undo(self.settings)
        self.display.info(message)
        if undone:  # the model must not trust what it read before
            self.told.append(f"[I ran /undo: {message}]")


def show_sessions(store: sessions.SessionStore, write, current: int | None = None) -> None:
    """The recent conversations, one line each, the one in progress (`current`) marked with *."""
    listed = store.list_sessions()
    for info in listed:
        write(("*" if info.id == current else " ") + sessions.format_session_line(info))
    if not listed:
        print(f"No saved conversations yet (in {store.path}).", file=sys.stderr)
    elif len(listed) == sessions.LIST_LIMIT:
        print(f"(the {sessions.LIST_LIMIT} most recent; older ones still open by ID)", file=sys.stderr)


def repl(settings: Settings, client, display: Display, conversation: sessions.Conversation | None = None) -> int:
    conversation = conversation or open_conversation(settings, display)
    display.interactive = True
    chat = Chat(settings, client, display, conversation)
    with contextlib.suppress(ImportError):  # Windows without pyreadline: plain input() still works
        import readline  # noqa: F401  (importing it gives input() line editing and history)
    display.info(f"knowledge-agent · model {settings.model} · notes {settings.kb}\n"
                 f"tools: {', '.join(tools.offered(settings))}")
    display.info("Ask about your notes. /help lists commands; /undo reverts the agent's last change. "
                 "Ctrl+C cancels an answer; Ctrl+D or /exit leaves." if client else NO_KEY)
    if settings.allow_shell:
        display.info(shell_banner(settings))
    while True:
        try:
            line = input("\n> ").strip()
        except (EOFError, KeyboardInterrupt):
            display.info("")
            break
        try:
            if line and chat.line(line) == "exit":
                break
        except KeyboardInterrupt:  # cancels this answer or command, not the chat
            display.end_answer()
            display.info("[cancelled]")
    if conversation.session_id is not None and conversation.store.persistent:
        display.info(f"Conversation {conversation.session_id} is saved: python main.py --continue picks it up.")
    return EXIT_OK


def shell_banner(settings: Settings) -> str:
    if problem := shell.sandbox_problem():
        return (f"shell is ON WITHOUT A SANDBOX: {problem}. The model can run commands as you in {settings.kb}; "
                "every command is asked about, even with --yes.")
    approval = "commands run without asking (--yes)" if settings.auto_approve else "you approve each command"
    return (f"shell is ON, sandboxed: commands can read the notes and the system but change nothing outside a "
            f"scratch folder, {'with' if settings.shell_network else 'without'} network; {approval}.")


def open_conversation(settings: Settings, display: Display, resume=None, latest=False) -> sessions.Conversation:
    """The conversation to carry on: a new one, the latest (`latest`) or conversation number `resume`."""
    conversation = sessions.Conversation(sessions.SessionStore(settings.data_dir / "sessions.db", display.info),
                                         settings.kb)
    wanted = conversation.store.latest_session_id() if latest else resume
    if latest and wanted is None:
        display.info("No earlier conversation to continue; starting a new one.")
    elif wanted is not None and not conversation.resume(wanted):
        raise ConfigError(f"No conversation {wanted}. python main.py --list-sessions lists them.")
    if conversation.session_id is not None:
        display.info(f"Continuing conversation {conversation.session_id} ({len(conversation.history)} messages).")
    return conversation


def run(args, display: Display) -> int:
    if args.reindex:
        return embeddings.reindex(load_settings(kb=args.kb))
    if args.list_sessions:
        data_dir = load_settings(kb=args.kb, notes_required=False).data_dir  # a bad notes folder does not matter
        show_sessions(sessions.SessionStore(data_dir / "sessions.db", warn=display.info), print)
        return EXIT_OK
    settings = load_settings(kb=args.kb, model=args.model, base_url=args.base_url, max_rounds=args.max_rounds,
                             stream=False if args.no_stream else None,
                             show_reasoning=False if args.no_reasoning else None,
                             auto_approve=True if args.yes else None, allow_shell=True if args.allow_shell else None)
    display.show_reasoning = settings.show_reasoning
    question = " ".join(args.question).strip()
    if args.question and not question:
        display.error("The question is empty. Ask something, or run without arguments to chat.")
        return EXIT_USAGE
    # Without a key the REPL opens and /commands run, for the notes alone; a question needs the key.
    client = make_client(settings) if settings.api_key or (question and not question.startswith("/")) else None
    conversation = open_conversation(settings, display, args.resume, args.continue_last)
    if not question and sys.stdin.isatty():
        return repl(settings, client, display, conversation)
    chat = Chat(settings, client, display, conversation)
    # The one question, or each piped line a turn of one conversation (/commands too) until "exit" or EOF.
    results = []
    for typed in [question] if question else (line.strip() for line in sys.stdin if line.strip()):
        results.append(chat.line(typed))
        if results[-1] == "exit":
            break
    if args.verbose:
        (tp, tc), (sp, sc) = conversation.run_usage, conversation.session_usage()
        display.info(f"usage: {tp:,} prompt + {tc:,} completion tokens; this conversation {sp:,} + {sc:,} in all")
    return EXIT_FAILED if "failed" in results else EXIT_OK


def main(argv=None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a terminal or file that cannot show a character gets '?'
        stream.reconfigure(errors="replace")
    args = parse_args(argv)
    display = Display()
    try:
        return run(args, display)
    except (ConfigError, AgentError, ToolError) as exc:
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
