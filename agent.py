"""The tool loop: ask the model, run the tools it calls, repeat until it answers.

    run_agent(question, history, settings, client, ui) -> answer
      └ step: query (one API call, streamed or not) → execute (every tool call it made)

`history` is the state: a plain list of OpenAI-format messages that run_agent extends in place. It is
always valid to send — every assistant message with tool calls is followed by one tool message per call
id, also after Ctrl+C or a failed request — and `ui.history_changed(history)` is called after every
change, so the session store can commit each message as it happens. Each request carries as much of the
history as fits the context budget (context.fit_to_budget). An API fault leaves as one `AgentError` whose
message is one readable line; it never prints anything itself: everything the person sees goes to `ui`.
"""

import json
import re
import time
from datetime import date

import openai

import context
import tools
from config import Settings, load_settings

REQUEST_TIMEOUT = 120.0  # seconds per API request; the SDK's 600 s is too long for a chat
CONNECT_TIMEOUT = 10.0
API_MAX_RETRIES = 2  # the SDK retries connection errors, 429 and 5xx with backoff and Retry-After
STREAM_RETRIES = 1  # a stream that breaks before anything was shown is asked again once
CONTEXT_SHRINK = 0.7  # after "context too long", requests aim at this share of what was refused
MAX_TOKEN_RATIO = 3.0  # a server counting more than this per estimated token is not believed
# How many tokens the server counts per token we estimate: learnt from each reply's usage (it only rises;
# trimming a little early is cheap, a refused request is not) and from "context too long" answers.
# It belongs to the server this process talks to, so it outlives one question.
TOKEN_RATIO = {"ratio": 1.0}
SYSTEM_PROMPT = """You are knowledge-agent, an assistant for the person's own notes (a folder of Markdown files).
Today is {today}.
- Answer from what the notes say. Search first (search_notes), then read_note the relevant hits before
  answering; never guess what a note contains. Name the notes you used (their paths).
- If the notes do not cover the question, say so plainly, then answer from general knowledge if useful,
  marked as such.
- When asked to write a note, pick a short descriptive file name (e.g. git-cheatsheet.md) and write clean
  Markdown with a top-level heading. Never replace an existing note unless the person asked for it.
- To change a note, read it first, then edit_note the exact passage (append_note to add at the end);
  rewrite a whole note (write_note with overwrite) only when asked. Move or delete only when asked.
- Reply in the language the person writes in."""
CANCELLED = "not executed: the user cancelled the answer (Ctrl+C)"
ROUND_LIMIT = "not executed: the limit of model calls for one question was reached"
# How servers word "the request is longer than the model's window" (OpenAI, DeepSeek, vLLM, llama.cpp…);
# other 400s that merely say "too long" or "maximum" must not shrink the history.
CONTEXT_ERROR = re.compile(r"context.{0,20}(length|window|size)|maximum context|too many tokens|"
                           r"prompt is too long|context_length_exceeded", re.I)


class AgentError(Exception):
    """A failure that ends one answer; its message is one line for the person."""


class RequestRejected(AgentError):
    """The API refused the request itself (HTTP 400): resending the same history would fail again."""


class ContextTooLong(RequestRejected):
    """The server said the request exceeds the model's window (`window` tokens, when it said)."""

    def __init__(self, message: str, window: int | None = None):
        super().__init__(message)
        self.window = window


class UI:
    """What run_agent tells the person while it works; every method does nothing by default.

    main.py's terminal, the tests' recorder and a web page override what they show. `confirm` answers
    True/False, or None when nobody can be asked (then tools that need a yes refuse)."""

    def text(self, text: str) -> None: ...
    def reasoning(self, text: str) -> None: ...
    def tool_call(self, name: str, arguments: str) -> None: ...
    def tool_result(self, name: str, result: tools.Result) -> None: ...
    def confirm(self, question: str) -> bool | None: return None
    def history_changed(self, history: list[dict]) -> None: ...
    def usage(self, usage) -> None: ...


def make_client(settings: Settings) -> openai.OpenAI:
    if not settings.api_key:
        raise AgentError("No API key: set DEEPSEEK_API_KEY (or OPENAI_API_KEY) in the environment or in .env "
                         "beside main.py.")
    return openai.OpenAI(api_key=settings.api_key, base_url=settings.base_url, max_retries=API_MAX_RETRIES,
                         timeout=openai.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT))


# --- What went wrong, in one line ---

def _error_detail(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or exc.message).strip()


def explain_api_error(exc: Exception, settings: Settings) -> str:
    """One line per kind of failure, saying what happened and what to do."""
    if isinstance(exc, openai.APITimeoutError):
        return (f"The API did not answer within {REQUEST_TIMEOUT:.0f} s ({API_MAX_RETRIES + 1} tries). "
                f"Try again, or check {settings.base_url}.")
    if isinstance(exc, openai.APIConnectionError):
        return f"Could not connect to {settings.base_url} ({exc.__cause__ or exc}). Check the network or DEEPSEEK_BASE_URL."
    if not isinstance(exc, openai.APIStatusError):
        return f"The API reported an error: {getattr(exc, 'message', None) or exc}"
    status, detail = exc.status_code, _error_detail(exc)
    known = {
        401: "The API rejected the key (401). Check DEEPSEEK_API_KEY (or OPENAI_API_KEY) in the environment or .env.",
        402: f"The API account has insufficient balance (402): {detail}",
        403: f"The API refused access (403): {detail}",
        404: (f"Model {settings.model!r} or the endpoint was not found (404) at {settings.base_url}. "
              "Check MODEL (--model) and DEEPSEEK_BASE_URL (--base-url)."),
        429: f"Rate limited (429) even after {API_MAX_RETRIES} retries: {detail} Wait a moment and ask again.",
    }
    if status == 400 and CONTEXT_ERROR.search(detail):
        return f"The conversation is too long for the model's context (400): {detail} Start a new conversation."
    if status >= 500:
        return f"The API server failed (HTTP {status}) even after {API_MAX_RETRIES} retries. Try again later."
    return known.get(status, f"The API rejected the request (HTTP {status}): {detail}")


def _api_error(exc: openai.APIError, settings: Settings) -> AgentError:
    message = explain_api_error(exc, settings)
    if getattr(exc, "status_code", None) != 400:
        return AgentError(message)
    if CONTEXT_ERROR.search(_error_detail(exc)):
        window = re.search(r"context (?:length|window)\D{0,20}(\d{3,})", _error_detail(exc))
        return ContextTooLong(message, int(window[1]) if window else None)
    return RequestRejected(message)


# --- One API call ---

class _Reply:
    """What one API call produced, accumulated from a stream or read from a whole response."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Empty again, for a new attempt or round. `content` is the answer text the person has seen,
        which run_agent keeps if the round is cut off."""
        self.content, self.reasoning, self.finish_reason, self.usage = "", None, None, None
        self.calls: dict[int, dict] = {}  # by stream index
        self.shown = False  # the person has seen part of it

    def add_call(self, index: int, call_id, name, arguments) -> None:
        call = self.calls.setdefault(index, {"id": None, "name": None, "arguments": ""})
        call["id"] = call_id or call["id"]  # some servers repeat id and name in later chunks: set, never append
        call["name"] = name or call["name"]
        call["arguments"] += arguments or ""

    def message(self, round_number: int) -> dict:
        message = {"role": "assistant", "content": self.content or (None if self.calls else "")}
        if self.calls:
            message["tool_calls"] = [
                {"id": call["id"] or f"call_{round_number}_{index}", "type": "function",
                 "function": {"name": call["name"] or "", "arguments": _valid_json(call["arguments"])}}
                for index, call in sorted(self.calls.items())]
            if self.reasoning is not None:  # DeepSeek answers 400 unless this comes back with the calls
                message["reasoning_content"] = self.reasoning
        return message


def _valid_json(arguments: str) -> str:
    """Keep history sendable: some servers reject a call whose arguments are not a JSON object."""
    try:
        return arguments if isinstance(json.loads(arguments), dict) else "{}"
    except ValueError:
        return "{}"


def _reasoning_of(part) -> str | None:
    """DeepSeek's reasoning_content; "" when the server sends the field as null (it must still go back)."""
    reasoning = getattr(part, "reasoning_content", None)
    return "" if reasoning is None and "reasoning_content" in (part.model_extra or {}) else reasoning


def _show(reply: _Reply, ui: UI, reasoning: str | None, content: str | None) -> None:
    if reasoning is not None:
        reply.reasoning = (reply.reasoning or "") + reasoning
    if reasoning:
        reply.shown = True
        ui.reasoning(reasoning)
    if content:
        reply.content += content
        reply.shown = True
        ui.text(content)


class _Broken(Exception):
    """The connection failed or the server sent an error event after the stream had started."""


def _stream(client, params: dict, ui: UI, reply: _Reply) -> None:
    stream = client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True})
    try:
        for chunk in stream:
            reply.usage = getattr(chunk, "usage", None) or reply.usage
            if not chunk.choices:  # the usage chunk has none
                continue
            choice, delta = chunk.choices[0], chunk.choices[0].delta
            _show(reply, ui, _reasoning_of(delta), delta.content)
            for call in delta.tool_calls or []:
                function = call.function
                reply.add_call(call.index, call.id, function and function.name, function and function.arguments)
            reply.finish_reason = choice.finish_reason or reply.finish_reason
    except openai.APIError as exc:  # the SDK does not retry errors raised while iterating a stream
        raise _Broken() from exc
    if reply.finish_reason is None and not (reply.content or reply.calls or reply.reasoning):
        raise ValueError("the stream held no answer")  # e.g. an HTML page served as text/event-stream


def _whole(client, params: dict, ui: UI, reply: _Reply) -> None:
    response = client.chat.completions.create(**params)
    reply.usage = getattr(response, "usage", None)
    if not response.choices:
        raise AgentError("The API returned a response with no answer in it. Try again.")
    choice = response.choices[0]
    reply.finish_reason = choice.finish_reason
    _show(reply, ui, _reasoning_of(choice.message), choice.message.content)
    for index, call in enumerate(choice.message.tool_calls or []):
        function = getattr(call, "function", None)
        reply.add_call(index, call.id, getattr(function, "name", None), getattr(function, "arguments", None))


def query(client, settings: Settings, messages: list[dict], ui: UI, reply: _Reply) -> None:
    """One API call, filling `reply`. A stream that breaks before anything was shown is asked again;
    after, it is an error (asking again would show the same text twice)."""
    params = {"model": settings.model, "messages": messages, "tools": tools.tool_schemas(settings)}
    extra = {"thinking": {"type": settings.thinking}} if settings.thinking else {}
    if settings.reasoning_effort:
        extra["reasoning_effort"] = settings.reasoning_effort
    if extra:  # other providers reject fields they do not know, so send them only when set
        params["extra_body"] = extra
    for attempt in range(STREAM_RETRIES + 1):
        reply.reset()
        try:
            return (_stream if settings.stream else _whole)(client, params, ui, reply)
        except (AgentError, KeyboardInterrupt):
            raise
        except openai.APIError as exc:  # the SDK already retried what is worth retrying
            raise _api_error(exc, settings) from None
        except _Broken as broken:
            exc = broken.__cause__
            dropped = isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)
            cause = f"The connection to {settings.base_url} dropped during the answer." if dropped \
                else explain_api_error(exc, settings)
            if reply.shown:
                raise AgentError(f"The answer broke off midway: {cause} What was shown above is incomplete.") from None
            if attempt == STREAM_RETRIES:
                raise AgentError(cause) from None
        except Exception as exc:  # HTML, malformed JSON or SSE: the base URL is not a chat completions API
            raise AgentError(f"The server at {settings.base_url} sent something that is not an OpenAI-compatible "
                             f"answer ({type(exc).__name__}). Check DEEPSEEK_BASE_URL (it usually ends in /v1).") from None


# --- Running the calls ---

def execute(calls: list[dict], history: list[dict], settings: Settings, ui: UI) -> None:
    """Run each call and append its result; if interrupted, answer every call left with a reason."""
    started = time.monotonic()
    answered = 0
    try:
        for call, raw_arguments in calls:
            ui.tool_call(call["function"]["name"], raw_arguments)
            started = time.monotonic()
            result = tools.execute_tool(call["function"]["name"], raw_arguments, settings, ui.confirm)
            history.append({"role": "tool", "tool_call_id": call["id"], "content": result.text})
            answered += 1
            ui.history_changed(history)  # a note may have changed: keep the result even if we crash next
            ui.tool_result(call["function"]["name"], result)
    except KeyboardInterrupt:
        left = [call["id"] for call, _ in calls[answered:]]
        if left:  # the first was running when Ctrl+C came, and may have done part of its work
            stopped = f"stopped: the user pressed Ctrl+C after {time.monotonic() - started:.1f} s; it may be half done"
            answer_unrun(left[:1], history, stopped)
            answer_unrun(left[1:], history, CANCELLED)
        raise


def answer_unrun(call_ids: list[str], history: list[dict], reason: str) -> None:
    history.extend({"role": "tool", "tool_call_id": call_id, "content": reason} for call_id in call_ids)


def _rewind(history: list[dict], turn_start: int, rejected: bool, kept_text: str) -> None:
    """Drop what cannot be sent again: a turn the API rejected or in which nothing ran or was shown; else
    answer the unanswered calls. Answer text the person already saw is kept, marked, so "summarise it"
    still works."""
    tools_ran = any(m.get("role") == "tool" for m in history[turn_start:])
    if rejected or not (tools_ran or kept_text.strip()):
        del history[turn_start:]
        return
    if history[-1].get("role") == "assistant" and history[-1].get("tool_calls"):
        answer_unrun([call["id"] for call in history[-1]["tool_calls"]], history, CANCELLED)
    if kept_text.strip():
        history.append({"role": "assistant", "content": kept_text + "\n[cut off before the end]"})


# --- The loop ---

def system_message() -> dict:
    return {"role": "system", "content": SYSTEM_PROMPT.format(today=date.today().isoformat())}


def request_budget(settings: Settings) -> int:
    """Estimated tokens the messages of a request may take: CONTEXT_TOKENS in the server's own count,
    less the tool schemas sent with them."""
    return int(settings.context_tokens / TOKEN_RATIO["ratio"]) - context.estimate_tokens([], tools.tool_schemas(settings))


def _query_within_budget(client, settings: Settings, history: list[dict], ui: UI, reply: _Reply) -> None:
    """One call carrying as much of the conversation as fits. If the server still says "too long" (a model
    smaller than CONTEXT_TOKENS assumes), ask once more with less; the ratio keeps later requests short."""
    for attempt in (1, 2):
        messages = context.fit_to_budget([system_message()] + history, request_budget(settings))
        estimate = context.estimate_tokens(messages, tools.tool_schemas(settings))
        try:
            query(client, settings, messages, ui, reply)
        except ContextTooLong as exc:
            if attempt == 2:
                raise
            fits = CONTEXT_SHRINK * min(estimate, (exc.window or estimate) / TOKEN_RATIO["ratio"])
            TOKEN_RATIO["ratio"] = max(TOKEN_RATIO["ratio"], settings.context_tokens / fits)
            continue
        counted = getattr(reply.usage, "prompt_tokens", None) or 0
        if estimate >= 500 and counted:  # tiny requests teach nothing: the template's overhead swamps them
            TOKEN_RATIO["ratio"] = max(TOKEN_RATIO["ratio"], min(counted / estimate, MAX_TOKEN_RATIO))
        return


def run_agent(question: str, history: list[dict] | None = None, settings: Settings | None = None,
              client=None, ui: UI | None = None) -> str:
    """Answer one question, using the tools as needed. Extends `history` in place with the whole turn."""
    settings = settings or load_settings()
    client = client or make_client(settings)
    history = [] if history is None else history
    ui = ui or UI()
    turn_start, reply = len(history), _Reply()
    history.append({"role": "user", "content": tools.clean_text(question)})
    ui.history_changed(history)
    try:
        for round_number in range(1, settings.max_rounds + 1):
            _query_within_budget(client, settings, history, ui, reply)
            if reply.usage:
                ui.usage(reply.usage)
            message = reply.message(round_number)
            history.append(message)
            ui.history_changed(history)
            if not reply.calls:  # decided by the calls, not finish_reason: servers differ
                return _final_answer(reply, ui)
            # The history keeps arguments the API accepts; the tool gets them as sent, to explain any error.
            calls = list(zip(message["tool_calls"], [c["arguments"] for _, c in sorted(reply.calls.items())]))
            if round_number == settings.max_rounds:
                answer_unrun([call["id"] for call, _ in calls], history, ROUND_LIMIT)
                ui.history_changed(history)
                break
            reply.content = ""  # shown and stored: a Ctrl+C during the tools keeps nothing twice
            execute(calls, history, settings, ui)
    except (KeyboardInterrupt, AgentError) as exc:
        _rewind(history, turn_start, isinstance(exc, RequestRejected), reply.content if reply.shown else "")
        ui.history_changed(history)
        raise
    notice = (f"[Stopped: reached the limit of {settings.max_rounds} model calls for one question "
              "(MAX_TOOL_ROUNDS or --max-rounds). Ask again to continue, or raise the limit.]")
    ui.text(notice)
    return (message["content"] + "\n\n" if message["content"] else "") + notice


def _final_answer(reply: _Reply, ui: UI) -> str:
    notice = ""
    if reply.finish_reason == "length":
        notice = "[The answer was cut off: the model reached its output limit (finish_reason=length).]"
    elif not reply.content:
        notice = "[The model returned an empty answer. Try rephrasing the question.]"
    if notice:
        notice = ("\n\n" if reply.content else "") + notice
        ui.text(notice)
    return reply.content + notice
