"""knowledge-agent's command line: a chat, a one-shot question, or questions piped on stdin (--help: the flags).

Only the answer goes to stdout, the rest to stderr; a failure is one line there, never a traceback. Without an
API key the chat runs notes-only. Exit codes: 0 ok, 1 the answer failed, 2 bad settings or usage, 3 the answer
is incomplete (round limit, cut off, or empty), 130 interrupted.
"""

import argparse
import difflib
import itertools
import re
import sys
import threading
from pathlib import Path

from config import SAMPLE_NOTES, VERSION, ConfigError, Settings, config_file, load_settings

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
SETTING_FLAGS = ("kb", "model", "base_url", "api_key", "max_rounds", "reasoning_effort", "stream",
                 "show_reasoning", "auto_approve", "allow_shell")  # the flags named as Settings fields
# How the person started us: `python main.py` from a clone, or the installed `knowledge-agent` / `ka`.
COMMAND = "python main.py" if Path(sys.argv[0]).name in ("main.py", "-c", "") else Path(sys.argv[0]).name


def parse_args(argv=None) -> argparse.Namespace:
    for stream in (sys.stdin, sys.stdout, sys.stderr):  # a character that cannot be read or shown gets '?'
        if hasattr(stream, "reconfigure"):  # None without a console; an io.StringIO has none either
            stream.reconfigure(errors="replace")
    parser = argparse.ArgumentParser(
        prog=COMMAND, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Chat with an AI agent about your Markdown notes. The settings in parentheses can also be "
                    f"set\nin the environment or in {config_file()}.",
        epilog=f"examples:\n  {COMMAND}\n  {COMMAND} \"帮我找关于 Python 的笔记\"\n"
               f"  printf 'find my git notes\\nsummarise it in one line\\n' | {COMMAND}")
    add = parser.add_argument
    add("question", nargs="*", help="ask one question and exit (omit for a chat); piped text is sent with it")
    add("--version", action="version", version=f"knowledge-agent {VERSION}")
    add("--kb", metavar="PATH", help="notes folder (KNOWLEDGE_BASE" + ("; default the sample notes in "
        f"{SAMPLE_NOTES})" if SAMPLE_NOTES.is_dir() else ")"))  # an installed copy has none
    add("-m", "--model", help="model name (MODEL; default deepseek-flash, or gpt-5.4-mini with OPENAI_API_KEY)")
    add("--base-url", metavar="URL", help="OpenAI-compatible endpoint (DEEPSEEK_BASE_URL or OPENAI_BASE_URL)")
    add("--api-key", metavar="KEY", help="API key; other users can see it in the process list, so prefer "
        "DEEPSEEK_API_KEY or OPENAI_API_KEY in the environment, .env or the config file")
    add("--max-rounds", metavar="N", help="cap on model calls per question (MAX_TOOL_ROUNDS; default 10)")
    add("--thinking", choices=("on", "off"), help="thinking mode of models that have one (THINKING)")
    # A setting's flag is named by its field and None unless given (SETTING_FLAGS).
    add("--effort", dest="reasoning_effort", choices=("low", "medium", "high", "max"),
        help="reasoning effort (REASONING_EFFORT)")
    add("--no-stream", dest="stream", action="store_false", default=None, help="wait for whole answers (STREAM=0)")
    add("--no-reasoning", dest="show_reasoning", action="store_false", default=None,
        help="hide the model's reasoning (SHOW_REASONING=0)")
    add("-y", "--yes", dest="auto_approve", action="store_true", default=None,
        help="approve actions that ask first (AUTO_APPROVE=1)")
    add("--allow-shell", action="store_true", default=None, help="let the model run shell commands in a sandbox "
        "in the notes folder, each one confirmed (ALLOW_SHELL=1; read the README first)")
    earlier = parser.add_mutually_exclusive_group().add_argument
    earlier("-c", "--continue", dest="continue_last", action="store_true",
            help="continue the most recent conversation about this notes folder")
    earlier("--resume", metavar="ID", type=int, help="continue conversation ID (see --list-sessions)")
    earlier("--list-sessions", action="store_true", help="list recent conversations (every folder) and exit")
    add("--reindex", action="store_true", help="build the whole search index (and the vectors when EMBED_MODEL "
        "is set) with progress, then exit")
    add("-v", "--verbose", action="store_true", help="show the endpoint, the whole reasoning and token usage")
    add("--web", action="store_true", help="chat in a browser page instead; each change is reviewed first")
    add("--port", metavar="N", type=int, help="port for --web on 127.0.0.1 (default 8731; 0: any free one)")
    add("--no-browser", action="store_true", help="with --web, only print the address to open")
    return parser.parse_args(argv)


# --version, --help and a mistyped flag are answered before the chat's modules load: without a bytecode cache (a
# read-only checkout, PYTHONDONTWRITEBYTECODE=1) compiling them would take longer than all the rest of a start.
if __name__ == "__main__":
    parse_args()

import context  # noqa: E402
import db  # noqa: E402
import embeddings  # noqa: E402
import reading  # noqa: E402
import sent  # noqa: E402
import sessions  # noqa: E402
import shell  # noqa: E402
import tools  # noqa: E402
from agent import run_agent  # noqa: E402
from model import AgentError, Model, key_hint, make_client  # noqa: E402
from notebook import Notebook  # noqa: E402
from notes import ToolError, readable_text, visible  # noqa: E402
from terminal import Display, compact, read_question, shorten, start_line_editing  # noqa: E402

COMMANDS = {
    "/help": "this list",
    "/new": "start a new conversation (this one stays saved)",
    "/sessions": "recent conversations",
    "/resume ID": "switch to an earlier conversation",
    "/history": "this conversation so far, one line a message",
    "/usage": "tokens used by the last answer and this conversation",
    "/reasoning": "the model's whole reasoning for the last answer",
    "/sent [all]": "which notes' lines went to which endpoint, tokens, cost (all: every conversation here)",
    "/tools": "the tools the agent can use",
    "/search QUERY": "search the notes (no model needed; --after, --before YYYY-MM-DD: only notes of those days)",
    "/list [FOLDER]": "list the notes, newest first (--after, --before as for /search)",
    "/read PATH [LINE]": "show a note (from line LINE on); PATH#Heading shows one section",
    "/links PATH": "what a note links to, and the notes that link to it",
    "/undo": "revert the agent's last change to a note",
    "/exit": "leave (Ctrl+D too)",
}
NO_KEY = "Chat is off: no API key. {}, then start again. Meanwhile /search, /list and /read work; /help lists all."
# What a person typing the note commands is told to do next, by the kind of failure (notes.ToolError.kind).
PERSON_ADVICE = {"missing": "Use /search or /list to find the right path.",
                 "folder": "Use /list FOLDER to see inside it.",
                 "no_folder": "Use /list to see every note and its folder."}
MULTILINE_HELP = ("  A question can span lines: end a line with \\ to go on, or paste a block (it stays one "
                  "question).\n  Ctrl+C clears the line typed; on an empty line, or Ctrl+D, it leaves.")
NOTE_COMMANDS = ("/search", "/list", "/read", "/links")
DAY_FLAG = re.compile(r"(?:^|\s)--(after|before)[= ]+(\S+)")  # /list work --after 2026-11-01


class Chat:
    """One conversation at the terminal or on a pipe: what a line of input does."""

    def __init__(self, notebook: Notebook, model, display: Display, conversation: sessions.Conversation):
        self.settings, self.notebook, self.model = notebook.settings, notebook, model
        self.display, self.conversation = display, conversation

    def line(self, line: str) -> str:
        """One line, typed or piped: a /command or a question. Returns "exit", "ok", "incomplete" or "failed"."""
        if line.lower() in ("exit", "quit"):
            return "exit"
        if line.startswith("/"):
            return self.command(line)
        if not self.model:
            return self.failed(NO_KEY.format(key_hint()))
        question = self.conversation.begin_turn(line)
        self.display.begin_answer()
        try:
            answer = run_agent(question, self.conversation.history, self.settings, self.model, self.display,
                               self.notebook)
            self.display.end_answer()
            return "ok" if answer.complete else "incomplete"
        except AgentError as exc:
            return self.failed(str(exc))
        finally:
            self.conversation.end_turn()

    def failed(self, message: str) -> str:
        self.display.error(message)
        return "failed"

    def command(self, line: str) -> str:
        name, _, argument = line.partition(" ")
        name, argument = name.lower(), argument.strip()
        known = [usage.split()[0] for usage in COMMANDS]
        if name in ("/exit", "/quit"):
            return "exit"
        if name not in known:
            # A cut-short name ("/hist") means the command it begins; otherwise the most similar spelling.
            close = [c for c in known if c.startswith(name)] or difflib.get_close_matches(name, known, n=1, cutoff=0.5)
            return self.failed(f"Unknown command {name}." + (f" Did you mean {close[0]}?" if close else "")
                               + " /help lists the commands.")
        if name in NOTE_COMMANDS:
            return self.note_command(name, argument)
        return getattr(self, "do_" + name[1:])(argument) or "ok"

    def note_command(self, name: str, argument: str) -> str:
        """The agent's note tools run by hand, their text on stdout; a failure, worded for a person, on stderr."""
        days = dict(DAY_FLAG.findall(argument)) if name in ("/search", "/list") else {}
        argument = DAY_FLAG.sub("", argument).strip() if days else argument
        if not argument and name != "/list" and not days:
            return self.failed(f"Usage: {next(usage for usage in COMMANDS if usage.split()[0] == name)}")
        try:
            text = (self.read(argument) if name == "/read"
                    else reading.links(self.notebook, argument) if name == "/links"
                    else reading.list_notes(self.notebook, argument, person=True, **days) if name == "/list"
                    else reading.search_notes(self.notebook, argument, **days))
        except ToolError as exc:
            return self.failed(" ".join(filter(None, (exc.message, PERSON_ADVICE.get(exc.kind, "")))))
        except Exception as exc:  # a disk error, or a bug: one line, never a traceback
            return self.failed(f"{name} failed: {getattr(exc, 'strerror', None) or exc}.")
        print(visible(tools.clean_text(text), lines=True), flush=True)
        return "ok"

    def read(self, argument: str) -> str:
        """/read PATH[#Heading] [LINE]: a screenful of the note (or section) from LINE, and the command for the next."""
        path, _, line = argument.rpartition(" ")
        path, start = (path.strip(), int(line)) if path.strip() and line.isascii() and line.isdigit() else (argument, 1)
        heading = re.fullmatch(r"(.+?\.(?:md|txt))#(.*\S.*)", path, re.I | re.S)  # notes/x.md#Setup > Linux
        path, section = (heading[1], heading[2].strip()) if heading else (path, None)
        name, text = reading.note_text(self.notebook, path, "")
        return reading.note_part(name, text, start, section,
                               lambda line, section: f"[… more: /read {name}{'#' + section if section else ''} {line}]")

    def do_help(self, argument: str) -> None:
        needs = "" if self.model else " (needs an API key)"
        self.display.info("\n".join(f"  {usage:<18} {text}" for usage, text in COMMANDS.items())
                          + f"\n  anything else      a question for the agent{needs}\n" + MULTILINE_HELP)

    def do_reasoning(self, argument: str) -> None:
        print(self.display.thought or "No reasoning was shown for the last answer.", flush=True)

    def do_tools(self, argument: str) -> None:
        for schema in tools.tool_schemas(self.settings):
            function = schema["function"]
            self.display.info(f"  {function['name']:<14} {function['description'].split('. ')[0].rstrip('.')}.")

    def do_new(self, argument: str) -> None:
        self.conversation.start_new()
        self.display.info("New conversation. (The previous one stays saved: /sessions)")

    def do_sessions(self, argument: str) -> None:
        show_sessions(self.conversation.store, self.display.info, self.conversation.session_id, self.settings.kb)

    def do_resume(self, argument: str) -> str | None:
        if not (argument.isascii() and argument.isdigit()):  # "²".isdigit() is True, int("²") is not
            return self.failed("Usage: /resume ID (the numbers /sessions shows)")
        if not self.conversation.resume(int(argument)):
            return self.failed(f"No conversation {argument}. /sessions lists them.")
        self.display.info(continuing(self.conversation, "/history shows it."))

    def do_history(self, argument: str) -> None:
        if not self.conversation.history:
            self.display.info("Nothing yet in this conversation.")
        turns = itertools.count(1)
        for message in self.conversation.history:
            role, text = message.get("role"), shorten(" ".join(str(message.get("content") or "").split()))
            if role == "user":
                self.display.info(f"[{next(turns)}] you: {text}")
            elif role == "assistant":
                for call in message.get("tool_calls") or []:
                    function = call.get("function") or {}
                    self.display.info(shorten(f"      → {function.get('name')} {compact(function.get('arguments'))}"))
                if text:
                    self.display.info(f"    agent: {text}")

    def do_usage(self, argument: str) -> None:
        conversation, settings = self.conversation, self.settings
        turn, total = conversation.turn_usage, conversation.session_usage()
        sent, tokens = (self.model if isinstance(self.model, Model) else Model(settings)).request(conversation.history)
        calls = f" ({turn.calls} API calls)" if turn.calls else ""
        in_all = (f"{total.prompt:,} prompt + {total.completion:,} completion tokens in all"
                  if total.prompt or total.completion else "no tokens reported yet")
        self.display.info(f"last answer : {turn}{calls}\nconversation: {in_all}\n"
                          f"next request: ~{tokens:,} of {settings.context_tokens:,} tokens (CONTEXT_TOKENS), "
                          f"carrying {len(sent) - 1} of {len(conversation.history)} messages")

    def do_sent(self, argument: str) -> str | None:
        if argument.lower() not in ("", "all"):
            return self.failed("Usage: /sent [all]")
        print(visible(sent.report(self.conversation.store, self.conversation.session_id, self.settings.kb,
                                  argument.lower() == "all"), lines=True), flush=True)

    def do_undo(self, argument: str) -> str | None:
        message, undone = self.notebook.undo()
        if not undone:
            return self.failed(message)
        self.conversation.undone(message)
        self.display.info(message)


def show_sessions(store: sessions.SessionStore, write, current: int | None = None, kb: Path | None = None) -> None:
    """The recent conversations about `kb` (every folder's, each named, when None), `current` marked with *."""
    listed = store.list_sessions(kb)
    for info in listed:
        write(("*" if info.id == current else " ") + sessions.format_session_line(info, show_kb=kb is None))
    if not listed:
        print(f"No saved conversations yet{f' about {kb}' if kb else ''} (in {store.path}).", file=sys.stderr)
    elif len(listed) == sessions.LIST_LIMIT:
        print(f"(the {sessions.LIST_LIMIT} most recent; older ones still open by ID)", file=sys.stderr)


def continuing(conversation: sessions.Conversation, otherwise: str = "") -> str:
    """The line a resumed conversation opens with; it says so when that was about another notes folder."""
    info = conversation.store.session_info(conversation.session_id)
    if info and info.kb and info.kb != str(conversation.kb):
        otherwise = f"Conversation {info.id} was about {info.kb}; it goes on with the notes in {conversation.kb}."
    return (f"Continuing conversation {conversation.session_id} ({len(conversation.history)} messages). "
            + otherwise).rstrip()


def repl(notebook: Notebook, model, display: Display, conversation: sessions.Conversation | None = None) -> int:
    settings = notebook.settings
    conversation = conversation or open_conversation(settings, display)
    display.interactive = True
    chat = Chat(notebook, model, display, conversation)
    readline, save_history = start_line_editing(display) or (None, lambda: None)
    display.info(f"knowledge-agent {VERSION} · model {settings.model} at {settings.base_url} · notes {settings.kb}\n"
                 f"tools: {', '.join(tools.offered(settings))}")
    display.info("Ask about your notes. /help lists commands; /undo reverts the agent's last change. "
                 "Ctrl+C cancels an answer; Ctrl+D or /exit leaves." if model else NO_KEY.format(key_hint()))
    if settings.allow_shell:
        display.info(shell_banner(settings))
    if model:  # the openai SDK (about half a second) loads while the person types the first question
        threading.Thread(target=__import__, args=("openai",)).start()
    try:
        while (line := read_question(readline)) is not None:
            try:
                if line and chat.line(line) == "exit":
                    break
            except KeyboardInterrupt:  # cancels this answer or command, not the chat
                display.end_answer()
                display.info("[cancelled]")
        display.info("")
    finally:
        save_history()
    if conversation.session_id is not None and conversation.store.persistent:
        display.info(f"Conversation {conversation.session_id} is saved: {COMMAND} --continue picks it up.")
    return EXIT_OK


def shell_banner(settings: Settings) -> str:
    if (problem := shell.sandbox_problem()) and not settings.shell_unsandboxed:
        return (f"shell is OFF: {problem}. To use it anyway, knowing commands then run as you and can change "
                "anything you can, set SHELL_UNSANDBOXED=1 (each command is still asked about).")
    if problem:
        return (f"shell is ON WITHOUT A SANDBOX: {problem}. The model can run commands as you in {settings.kb}; "
                "every command is asked about, even with --yes.")
    approval = "commands run without asking (--yes)" if settings.auto_approve else "you approve each command"
    return (f"shell is ON, sandboxed: commands can read the notes and the system but change nothing outside a "
            f"scratch folder, {'with' if settings.shell_network else 'without'} network; {approval}.")


def open_conversation(settings: Settings, display: Display, resume=None, latest=False) -> sessions.Conversation:
    """The conversation to carry on: a new one, this folder's latest (`latest`) or conversation number `resume`."""
    conversation = sessions.Conversation(sessions.SessionStore(settings.data_dir / "sessions.db"), settings.kb)
    wanted = conversation.store.latest_session_id(settings.kb) if latest else resume
    if latest and wanted is None:
        display.info(f"No earlier conversation about {settings.kb} to continue; starting a new one.")
    elif wanted is not None and not conversation.resume(wanted):
        raise ConfigError(f"No conversation {wanted}. {COMMAND} --list-sessions lists them.")
    if conversation.session_id is not None:
        display.info(continuing(conversation))
    return conversation


def with_piped_text(question: str, settings: Settings) -> str:
    """The question with what was piped to stdin, as `cat notes.txt | python main.py "summarise this"` means."""
    if sys.stdin is None or sys.stdin.isatty():
        return question
    room = settings.context_tokens // 2  # piped text may fill at most half the context budget
    data = sys.stdin.buffer.read(room * 12 + 1)  # a token holds at most about 4 characters of 3 bytes
    piped = readable_text(data)  # GBK or UTF-16 text too, as in the notes
    if piped is None:
        raise ConfigError("The piped input looks binary, not text; nothing was sent.")
    if not piped.strip():
        return question
    if len(data) > room * 12 or context.estimate_tokens([{"role": "user", "content": piped}]) > room:
        raise ConfigError(f"The piped text is too long for one question (more than ~{room:,} tokens, half of "
                          "CONTEXT_TOKENS). Pipe a part of it, or save it in the notes folder and ask about it.")
    return f"{question}\n\n--- piped input ---\n{piped.rstrip()}"


def run(args, display: Display) -> int:
    if args.reindex:
        return embeddings.reindex(Notebook(load_settings(kb=args.kb)))
    if args.list_sessions:
        data_dir = load_settings(kb=args.kb, notes_required=False).data_dir  # a bad notes folder does not matter
        show_sessions(sessions.SessionStore(data_dir / "sessions.db"), print)
        return EXIT_OK
    flags = {name: getattr(args, name) for name in SETTING_FLAGS}
    settings = load_settings(**flags, thinking={"on": "enabled", "off": "disabled"}.get(args.thinking))
    display.show_reasoning, display.verbose = settings.show_reasoning, args.verbose
    if args.web:
        import web  # only the web UI needs the HTTP server
        return web.serve(settings, args.port, not args.no_browser)
    question = " ".join(args.question).strip()
    if args.question and not question:
        display.error("The question is empty. Ask something, or run without arguments to chat.")
        return EXIT_USAGE
    asking = bool(question) and not question.startswith("/")  # a question for the model, not a /command
    if asking:
        question = with_piped_text(question, settings)
    # Without a key the REPL opens and /commands run, for the notes alone; a question needs the key.
    model = make_client(settings) if settings.api_key or asking else None
    notebook = Notebook(settings)  # closed as the process ends (or, in a test calling main(), as it is dropped)
    conversation = open_conversation(settings, display, args.resume, args.continue_last)
    if not question and sys.stdin.isatty():
        return repl(notebook, model, display, conversation)
    if args.verbose:
        display.info(f"model {settings.model} at {settings.base_url} · notes {settings.kb}")
    if settings.allow_shell and shell.sandbox_problem():  # said once: a one-shot run has no banner
        display.info(shell_banner(settings))
    chat = Chat(notebook, model, display, conversation)
    # The one question, or each piped line a turn of one conversation (/commands too) until "exit" or EOF.
    typed = [question] if question else (line.strip() for line in sys.stdin if line.strip())
    results = list(itertools.takewhile(lambda result: result != "exit", map(chat.line, typed)))
    if args.verbose:
        total = conversation.session_usage()
        counted = total.prompt or total.completion
        in_all = f"; this conversation {total.prompt:,} + {total.completion:,} in all" if counted else ""
        display.info(f"usage: {conversation.run_usage}{in_all}")
    return EXIT_FAILED if "failed" in results else EXIT_INCOMPLETE if "incomplete" in results else EXIT_OK


def main(argv=None) -> int:
    args = parse_args(argv)
    display = Display()
    db.show_notices(lambda text: display.info(f"knowledge-agent: {visible(text)}"))  # every module's, on stderr
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
