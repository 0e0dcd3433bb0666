"""The tool loop: ask the model, run the tools it calls, repeat until it answers.

    run_agent(question, history, …) -> Answer:  each round, Model.ask (one API call) → execute (its tool calls)

`history`, a list of OpenAI-format messages extended in place, is the state: always valid to send, also after
Ctrl+C or a failed request, and saved after every change when it keeps itself (sessions.Conversation).
model.py talks to the chat endpoint; an API fault leaves it as one `AgentError`, one readable line.
This module never prints: everything the person sees goes to `ui`.
"""

import time

import citations
import context
import embeddings
import search
import tools
from approval import Allowance, Approval
from config import Settings, load_settings
from model import AgentError, Model, Reply, RequestRejected, make_client
from notebook import Notebook
from notes import ToolError

PASSAGES_SHARE, PASSAGES_MAX_TOKENS = 0.1, 1200  # of the window, for what a search for the question found
ROUND_LIMIT = "not executed: the limit of model calls for one question was reached"
FAILING_ROUNDS = 2  # rounds in a row of failed calls, after which the model is asked with no tools
STUCK = "not executed: the calls before it failed, and no tools were offered"
STUCK_NOTICE = "[No answer: the model kept making tool calls that failed.]"
REPEATED = tools.Result("Error: this call was made before in this answer and nothing has changed since: its result "
                        "is above. Answer from it.", True, {"error": True})
ROUND_NOTICE = ("[Stopped: reached the limit of {} model calls for one question (MAX_TOOL_ROUNDS or --max-rounds). "
                "Ask again to continue, or raise the limit.]")
LENGTH_NOTICE = "[The answer was cut off: the model reached its output limit (finish_reason=length).]"
REPEAT_NOTICE = "[The answer was cut off: the model kept repeating the same line.]"
EMPTY_NOTICE = "[The model returned an empty answer. Try rephrasing the question.]"
ECHO_NOTICE = "[No answer: the model only copied what a tool returned. Try rephrasing the question.]"
CUT_NOTICES = {"length": LENGTH_NOTICE, "repeat": REPEAT_NOTICE}  # by finish_reason


class Answer(str):
    """The answer's text, then the `notice` saying why when it is not `complete`; `citations`: their Report."""
    complete, notice, citations = True, "", citations.NOTHING


class UI:
    """What run_agent shows the person. `approve`: None when nobody can be asked (the tool refuses);
    `reviews_changes`: every change to a note is asked about, its diffs shown."""

    reviews_changes = False

    def text(self, text: str) -> None: ...
    def reasoning(self, text: str) -> None: ...
    def tool_call(self, name: str, arguments: str) -> None: ...
    def tool_result(self, name: str, result: tools.Result) -> None: ...
    def passages(self, lines: dict) -> None: ...  # what was found for the question and goes with it: {note: lines}
    def notice(self, text: str) -> None: ...  # the answer is incomplete: round limit, cut off, or empty
    def citations(self, report: citations.Report) -> None: ...  # the answer's citations, checked
    def approve(self, approval: Approval) -> bool | None: return None


def _question(question: str, notebook: Notebook, ui: UI) -> dict:
    """The question's message, with the passages a search for it found (PASSAGES), shown as a tool result is."""
    message, settings = {"role": "user", "content": tools.clean_text(question)}, notebook.settings
    room = min(PASSAGES_MAX_TOKENS, int(settings.context_tokens * PASSAGES_SHARE))
    try:
        found = search.passages(notebook, message["content"], room, embeddings.embedder_of(settings)) \
            if settings.passages else None
    except (ToolError, embeddings.EmbedError):  # the index failed (its notice said so), or the embedder: none
        found = None
    if found:
        message[context.SHOWN] = {"lines": found.lines, "named": list(found.named), "passages": str(found)}
        ui.passages(found.lines)
    return message


def run_agent(question: str, history: list[dict] | None = None, settings: Settings | None = None,
              client=None, ui: UI | None = None, notebook: Notebook | None = None) -> Answer:
    """Answer one question, extending `history` in place with the whole turn. `client`: a Model, or an
    OpenAI-compatible client to wrap in one (a test's stub); without a `notebook`, the call opens its own."""
    if notebook is None:
        with Notebook(settings or load_settings()) as notebook:
            return run_agent(question, history, notebook.settings, client, ui, notebook)
    settings = notebook.settings
    model = client if isinstance(client, Model) else Model(settings, client) if client else make_client(settings)
    history, ui = [] if history is None else history, ui or UI()
    turn_start = len(history)
    history.append(_question(question, notebook, ui))
    _save(history)
    try:
        reply, notice = _rounds(model, history, notebook, ui)
    except (KeyboardInterrupt, AgentError) as exc:
        # Keep the history sendable: drop a turn the API rejected or that kept nothing (no tool ran, no text was
        # shown); else answer the calls left unanswered, as a reloaded conversation would be.
        if isinstance(exc, RequestRejected) or all(m.get("tool_calls") for m in history[turn_start + 1:]):
            del history[turn_start:]
        else:
            history[turn_start:] = context.repair_history(history[turn_start:])
        _save(history)
        raise
    if notice:  # the answer is incomplete: the person is shown why apart from the answer
        ui.notice(notice)
    answer = Answer(reply.content + ("\n\n" if reply.content and notice else "") + notice)
    answer.complete, answer.notice = not notice, notice
    answer.citations = citations.check(reply.content, history, turn_start, citations.reader(notebook))
    ui.citations(answer.citations)
    return answer


def _rounds(model: Model, history: list[dict], notebook: Notebook, ui: UI) -> tuple[Reply, str]:
    """Ask the model, run the calls it makes, until it answers: its last reply, and why the answer is cut short."""
    settings, allowance = notebook.settings, Allowance()  # what this answer may write without asking
    failing = 0  # rounds in a row of failed calls: a small model stuck on calls it cannot make
    made: set = set()  # the calls made since the notes last changed: a model repeating one is stuck
    for round_number in range(1, settings.max_rounds + 1):
        offer_tools = failing < FAILING_ROUNDS
        reply = model.ask(history, ui, offer_tools)
        can_ask_again = offer_tools and round_number < settings.max_rounds  # with no tools, for the answer
        if can_ask_again and not (reply.calls or reply.content.strip() or reply.finish_reason in CUT_NOTICES):
            _save(history, reply.usage, (settings.base_url, settings.model))
            failing = FAILING_ROUNDS  # an empty reply (a small model's, after tool results): asked to answer now
            continue
        history.append(message := reply.message(round_number))
        _save(history, reply.usage, (settings.base_url, settings.model))
        if not reply.calls:  # decided by the calls, not finish_reason: servers differ
            return reply, _notice(reply)
        if round_number == settings.max_rounds or not offer_tools:  # these calls are not run
            history.extend(_result(call["id"], ROUND_LIMIT if offer_tools else STUCK) for call in message["tool_calls"])
            _save(history)
            return reply, ROUND_NOTICE.format(settings.max_rounds) if offer_tools else STUCK_NOTICE
        # The history keeps arguments the API accepts; the tool gets them as sent, to explain errors.
        results = execute(message["tool_calls"], reply.arguments(), history, notebook, ui, allowance, made)
        # Calls written as text come from a model that does not speak the tool protocol: one failed is enough.
        failing = failing + 1 if (any if reply.written else all)(result.error for result in results) else 0
        if all(result is REPEATED for result in results):  # made again, its result above: stuck, asked to answer now
            failing = FAILING_ROUNDS


def _notice(reply: Reply) -> str:
    """Why an answer is incomplete, or "": cut off, empty, a copy of a tool result."""
    if reply.finish_reason in CUT_NOTICES or reply.content.strip():
        return CUT_NOTICES.get(reply.finish_reason, "")
    return ECHO_NOTICE if reply.finish_reason == "echo" else EMPTY_NOTICE


def execute(calls: list[dict], arguments: list[str], history: list[dict], notebook: Notebook, ui: UI,
            allowance: Allowance, made: set) -> list[tools.Result]:
    """Run each call with its arguments as sent, appending its result; the results. One that Ctrl+C stops is
    answered saying so (it may have done part of its work)."""
    results = []
    for call, sent in zip(calls, arguments):
        name = call["function"]["name"]
        ui.tool_call(name, sent)
        started, key = time.monotonic(), (name, " ".join(sent.split()))
        try:
            result = REPEATED if key in made else \
                tools.execute_tool(name, sent, notebook, ui.approve, ui.reviews_changes, allowance)
        except KeyboardInterrupt:
            stopped = f"stopped: the user pressed Ctrl+C after {time.monotonic() - started:.1f} s; it may be half done"
            history.append(_result(call["id"], stopped))
            raise
        history.append(_result(call["id"], result.text, result.shown))
        _save(history)  # a note may have changed: keep the result even if we crash next
        ui.tool_result(name, result)
        results.append(result)
        if not result.error and not getattr(tools.TOOLS.get(name), "read_only", True):
            made.clear()  # the notes may have changed: the same call may show something new
        else:
            made.add(key)
    return results


def _result(call_id: str, text: str, shown: dict | None = None) -> dict:
    """The tool message answering a call: its result and what it showed, or why it did not run."""
    return {"role": "tool", "tool_call_id": call_id, "content": text, context.SHOWN: shown or {}}


def _save(history: list[dict], usage=None, endpoint: tuple[str, str] | None = None) -> None:
    """Let a history that keeps itself commit what changed; after an API call, with its `usage` and `endpoint`."""
    if hasattr(history, "save"):
        history.save(usage, endpoint)
