"""The tool loop: ask the model, run the tools it calls, repeat until it answers.

    run_agent(question, history) -> answer
      └ each round: query (one API call, streamed or not) → execute (every tool call it made)

`history` is the conversation — a plain list of OpenAI-format messages that run_agent extends in place.
It is always valid to send: every assistant message with tool calls is followed by one tool message per
call id, also after Ctrl+C or a failed request. API faults leave as one `AgentError` with a readable line.
Each request carries as much of the history as fits the context budget (context.fit_to_budget), and
`on_change(history)` is called after every change to the history, so the session store can commit each
message as it happens.
"""

import json
import re
import time
from datetime import date
from typing import Callable

import openai

import context
import tools
from config import API_MAX_RETRIES, CONNECT_TIMEOUT, REQUEST_TIMEOUT, STREAM_RETRIES, Settings, load_settings

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


class AgentError(Exception):
    """A failure that ends one answer; its message is one line for the person."""


class RequestRejected(AgentError):
    """The API refused the request itself (HTTP 400): resending the same history would fail again."""


class ContextTooLong(RequestRejected):
    """The server said the request exceeds the model's context window (`window` tokens, if it said)."""

    def __init__(self, message: str, window: int | None = None):
        super().__init__(message)
        self.window = window


class _StreamBroken(Exception):
    """The connection failed or the server sent an error event after the stream had started."""


def make_client(settings: Settings) -> openai.OpenAI:
    if not settings.api_key:
        raise AgentError(
            "No API key: set DEEPSEEK_API_KEY (or OPENAI_API_KEY) in the environment or in .env beside main.py."
        )
    return openai.OpenAI(
        api_key=settings.api_key,
        base_url=settings.base_url,
        timeout=openai.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT),
        max_retries=API_MAX_RETRIES,
    )


def explain_api_error(exc: Exception, settings: Settings) -> str:
    """One line per kind of failure, saying what happened and what to do."""
    if isinstance(exc, openai.APITimeoutError):
        return (f"The API did not answer within {REQUEST_TIMEOUT:.0f} s ({API_MAX_RETRIES + 1} tries). "
                f"Try again, or check {settings.base_url}.")
    if isinstance(exc, openai.APIConnectionError):
        return f"Could not connect to {settings.base_url} ({exc.__cause__ or exc}). Check the network or DEEPSEEK_BASE_URL."
    if not isinstance(exc, openai.APIStatusError):
        message = getattr(exc, "message", None) or str(exc)
        return f"The API reported an error: {message}"
    status, detail = exc.status_code, _error_detail(exc)
    if status == 401:
        return "The API rejected the key (401). Check DEEPSEEK_API_KEY (or OPENAI_API_KEY) in the environment or .env."
    if status == 402:
        return f"The API account has insufficient balance (402): {detail}"
    if status == 403:
        return f"The API refused access (403): {detail}"
    if status == 404:
        return (f"Model {settings.model!r} or the endpoint was not found (404) at {settings.base_url}. "
                "Check MODEL (--model) and DEEPSEEK_BASE_URL (--base-url).")
    if status == 400 and CONTEXT_ERROR.search(detail):
        return f"The conversation is too long for the model's context (400): {detail} Start a new conversation."
    if status == 429:
        return f"Rate limited (429) even after {API_MAX_RETRIES} retries: {detail} Wait a moment and ask again."
    if status >= 500:
        return f"The API server failed (HTTP {status}) even after {API_MAX_RETRIES} retries. Try again later."
    return f"The API rejected the request (HTTP {status}): {detail}"


# How servers word "the request is longer than the model's window" (OpenAI, DeepSeek, vLLM, llama.cpp, …);
# other 400s that merely say "too long" or "maximum" (a tool description, say) must not shrink the history.
CONTEXT_ERROR = re.compile(r"context.{0,20}(length|window|size)|maximum context|too many tokens|"
                           r"prompt is too long|context_length_exceeded", re.I)


def _is_context_error(exc: Exception) -> bool:
    return isinstance(exc, openai.APIStatusError) and exc.status_code == 400 and bool(CONTEXT_ERROR.search(_error_detail(exc)))


def _context_window(exc: openai.APIStatusError) -> int | None:
    """The window size when the error names it ("maximum context length is 65536 tokens")."""
    match = re.search(r"context (?:length|window)\D{0,20}(\d{3,})", _error_detail(exc))
    return int(match[1]) if match else None


def _error_detail(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or exc.message).strip()


def _request_params(settings: Settings, messages: list[dict]) -> dict:
    params = {"model": settings.model, "messages": messages, "tools": tools.tool_schemas(settings)}
    extra = {}
    if settings.thinking:
        extra["thinking"] = {"type": settings.thinking}
    if settings.reasoning_effort:
        extra["reasoning_effort"] = settings.reasoning_effort
    if extra:  # other providers reject fields they do not know, so send them only when set
        params["extra_body"] = extra
    return params


class _Reply:
    """What one API call produced, accumulated from a stream or read from a whole response."""

    def __init__(self):
        self.content, self.reasoning, self.finish_reason, self.usage = "", None, None, None
        self.calls: dict[int, dict] = {}  # by stream index

    def add_tool_call_delta(self, delta) -> None:
        call = self.calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
        if delta.id:
            call["id"] = delta.id  # some servers repeat id and name in later chunks: set, never append
        if delta.function and delta.function.name:
            call["name"] = delta.function.name
        if delta.function and delta.function.arguments:
            call["arguments"] += delta.function.arguments

    def message(self, round_number: int) -> dict:
        message = {"role": "assistant", "content": self.content or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": call["id"] or f"call_{round_number}_{index}", "type": "function",
                 "function": {"name": call["name"] or "", "arguments": _valid_json(call["arguments"])}}
                for index, call in sorted(self.calls.items())
            ]
            if self.reasoning is not None:  # DeepSeek answers 400 unless this comes back with the calls
                message["reasoning_content"] = self.reasoning
        elif message["content"] is None:
            message["content"] = ""
        return message

    def calls_to_run(self, message: dict) -> list[tuple[str, str, str]]:
        """(id, name, arguments as the model sent them): the tool sees the raw text, to explain any error."""
        raw = [call["arguments"] for _, call in sorted(self.calls.items())]
        return [(call["id"], call["function"]["name"], arguments)
                for call, arguments in zip(message["tool_calls"], raw)]


def _valid_json(arguments: str) -> str:
    """Keep history sendable: some servers reject a call whose arguments are not a JSON object."""
    try:
        return arguments if isinstance(json.loads(arguments), dict) else "{}"
    except ValueError:
        return "{}"


def _stream_reply(client, params: dict, on_text, on_reasoning) -> _Reply:
    reply = _Reply()
    stream = client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True})
    try:
        for chunk in stream:
            _add_chunk(reply, chunk, on_text, on_reasoning)
    except openai.APIError as exc:  # the SDK does not retry errors raised while iterating a stream
        raise _StreamBroken(exc) from exc
    if reply.finish_reason is None and not (reply.content or reply.calls or reply.reasoning):
        raise ValueError("the stream held no answer")  # e.g. an HTML page served as text/event-stream
    return reply


def _add_chunk(reply: _Reply, chunk, on_text, on_reasoning) -> None:
    if getattr(chunk, "usage", None):
        reply.usage = chunk.usage
    if not chunk.choices:  # the usage chunk has none
        return
    choice = chunk.choices[0]
    delta = choice.delta
    reasoning = getattr(delta, "reasoning_content", None)
    if reasoning is not None or "reasoning_content" in (delta.model_extra or {}):
        reply.reasoning = (reply.reasoning or "") + (reasoning or "")
        if reasoning and on_reasoning:
            on_reasoning(reasoning)
    if delta.content:
        reply.content += delta.content
        if on_text:
            on_text(delta.content)
    for call_delta in delta.tool_calls or []:
        reply.add_tool_call_delta(call_delta)
    if choice.finish_reason:
        reply.finish_reason = choice.finish_reason


def _whole_reply(client, params: dict, on_text, on_reasoning) -> _Reply:
    reply = _Reply()
    response = client.chat.completions.create(**params)
    reply.usage = getattr(response, "usage", None)
    if not response.choices:
        raise AgentError("The API returned a response with no answer in it. Try again.")
    choice = response.choices[0]
    message = choice.message
    reply.finish_reason = choice.finish_reason
    reply.reasoning = getattr(message, "reasoning_content", None)
    if reply.reasoning is None and "reasoning_content" in (message.model_extra or {}):
        reply.reasoning = ""
    if reply.reasoning and on_reasoning:
        on_reasoning(reply.reasoning)
    reply.content = message.content or ""
    if reply.content and on_text:
        on_text(reply.content)
    for index, call in enumerate(message.tool_calls or []):
        function = getattr(call, "function", None)
        reply.calls[index] = {"id": call.id, "name": getattr(function, "name", None),
                              "arguments": getattr(function, "arguments", None) or ""}
    return reply


def query(client, settings: Settings, messages: list[dict], on_text=None, on_reasoning=None) -> _Reply:
    """One API call. A stream that breaks before anything was shown is asked again; after, it is an error."""
    params = _request_params(settings, messages)
    for attempt in range(STREAM_RETRIES + 1):
        shown = []

        def show_text(text):
            shown.append(text)
            on_text and on_text(text)

        def show_reasoning(text):
            shown.append(text)
            on_reasoning and on_reasoning(text)

        try:
            if settings.stream:
                return _stream_reply(client, params, show_text, show_reasoning)
            return _whole_reply(client, params, show_text, show_reasoning)
        except openai.APIError as exc:  # the SDK already retried what is worth retrying
            if _is_context_error(exc):
                raise ContextTooLong(explain_api_error(exc, settings), _context_window(exc)) from None
            error = RequestRejected if getattr(exc, "status_code", None) == 400 else AgentError
            raise error(explain_api_error(exc, settings)) from None
        except _StreamBroken as broken:
            cause = _explain_broken_stream(broken.__cause__, settings)
            if shown:  # asking again would print the same text twice
                raise AgentError(f"The answer broke off midway: {cause} What was shown above is incomplete.") from None
            if attempt == STREAM_RETRIES:
                raise AgentError(cause) from None
        except (AgentError, KeyboardInterrupt):
            raise
        except Exception as exc:  # HTML, malformed JSON or SSE: the base URL is not a chat completions API
            raise AgentError(
                f"The server at {settings.base_url} sent something that is not an OpenAI-compatible answer "
                f"({type(exc).__name__}). Check DEEPSEEK_BASE_URL (it usually ends in /v1)."
            ) from None


def _explain_broken_stream(exc: Exception, settings: Settings) -> str:
    if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
        return f"The connection to {settings.base_url} dropped during the answer."
    return explain_api_error(exc, settings)


def execute(calls: list[tuple[str, str, str]], history: list[dict], settings: Settings, confirm,
            on_tool_call, on_tool_result, on_change=None) -> None:
    """Run each (id, name, arguments) call and append its result; if interrupted, say so for every call left."""
    first_result, started = len(history), time.monotonic()  # started: also if Ctrl+C comes before the first tool
    try:
        for call_id, name, arguments in calls:
            on_tool_call and on_tool_call(name, arguments)
            started = time.monotonic()
            result = tools.execute_tool(name, arguments, settings, confirm)
            history.append({"role": "tool", "tool_call_id": call_id, "content": result})
            on_change and on_change(history)  # a note may have changed: keep the result even if we crash next
            on_tool_result and on_tool_result(name, result)
    except KeyboardInterrupt:
        unanswered = [call_id for call_id, _, _ in calls][len(history) - first_result:]
        if unanswered:  # the first was running when Ctrl+C came, and may have done part of its work
            stopped = f"stopped: the user pressed Ctrl+C after {time.monotonic() - started:.1f} s; it may be half done"
            answer_unrun(unanswered[:1], history, stopped)
            answer_unrun(unanswered[1:], history, CANCELLED)
        raise


def answer_unrun(call_ids: list[str], history: list[dict], reason: str) -> None:
    for call_id in call_ids:
        history.append({"role": "tool", "tool_call_id": call_id, "content": reason})


def _rewind_failed_turn(history: list[dict], turn_start: int, rejected: bool, kept_text: str = "") -> None:
    """Drop what cannot be sent again: a turn the API rejected or in which no tool ran, else unanswered calls.

    Answer text the person already saw before the cut is kept, marked, so "summarise it" still works."""
    tools_ran = any(m.get("role") == "tool" for m in history[turn_start:])
    if rejected or not (tools_ran or kept_text.strip()):
        del history[turn_start:]
        return
    last = history[-1]
    if last.get("role") == "assistant" and last.get("tool_calls"):
        answer_unrun([call["id"] for call in last["tool_calls"]], history, CANCELLED)
    if kept_text.strip():
        history.append({"role": "assistant", "content": kept_text + "\n[cut off before the end]"})


def run_agent(
    user_query: str,
    history: list[dict] | None = None,
    *,
    settings: Settings | None = None,
    client=None,
    on_text: Callable[[str], None] | None = None,
    on_reasoning: Callable[[str], None] | None = None,
    on_tool_call: Callable[[str, str], None] | None = None,
    on_tool_result: Callable[[str, str], None] | None = None,
    on_usage: Callable[[object], None] | None = None,
    confirm: Callable[[str], bool] | None = None,
    on_change: Callable[[list[dict]], None] | None = None,
    calibration: context.Calibration | None = None,
) -> str:
    """Answer one question, using the tools as needed. Extends `history` in place with the whole turn."""
    settings = settings or load_settings()
    client = client or make_client(settings)
    history = [] if history is None else history
    calibration = calibration or CALIBRATION
    changed = on_change or (lambda history: None)
    turn_start = len(history)
    history.append({"role": "user", "content": tools.clean_text(user_query)})
    changed(history)
    system = _system_message()
    shown: list[str] = []  # text of the reply being streamed: the person has read it even if it is cut

    def show(text: str) -> None:
        shown.append(text)
        on_text and on_text(text)

    try:
        for round_number in range(1, settings.max_rounds + 1):
            reply = _query_within_budget(client, settings, [system] + history, calibration, show, on_reasoning)
            if reply.usage and on_usage:
                on_usage(reply.usage)
            message = reply.message(round_number)
            history.append(message)
            changed(history)
            shown.clear()
            if not message.get("tool_calls"):  # decided by the calls, not finish_reason: servers differ
                return _final_answer(reply, on_text)
            calls = reply.calls_to_run(message)
            if round_number == settings.max_rounds:
                answer_unrun([call_id for call_id, _, _ in calls], history, ROUND_LIMIT)
                changed(history)
                break
            execute(calls, history, settings, confirm, on_tool_call, on_tool_result, changed)
    except (KeyboardInterrupt, AgentError) as exc:
        _rewind_failed_turn(history, turn_start, rejected=isinstance(exc, RequestRejected), kept_text="".join(shown))
        changed(history)
        raise
    notice = (f"[Stopped: reached the limit of {settings.max_rounds} model calls for one question "
              "(MAX_TOOL_ROUNDS or --max-rounds). Ask again to continue, or raise the limit.]")
    on_text and on_text(notice)
    return (reply.content + "\n\n" if reply.content else "") + notice


# What this process has learnt about the server's token counts; shared by every run_agent call.
CALIBRATION = context.Calibration()
CONTEXT_RETRIES = 2  # a "context too long" answer is retried with this many ever-shorter requests


def _system_message() -> dict:
    return {"role": "system", "content": SYSTEM_PROMPT.format(today=date.today().isoformat())}


def _tools_tokens(settings: Settings) -> int:
    return context.estimate_tokens([], _request_params(settings, [])["tools"])


def next_request_size(history: list[dict], settings: Settings) -> tuple[int, int]:
    """(estimated tokens, messages of the history) the next request would carry, for /usage."""
    sent = context.fit_to_budget([_system_message()] + history, CALIBRATION.budget(settings.context_tokens),
                                 CALIBRATION.factor, _tools_tokens(settings))
    tokens = (context.estimate_tokens(sent) + _tools_tokens(settings)) * CALIBRATION.factor
    return round(tokens), len(sent) - 1


def _query_within_budget(client, settings: Settings, messages: list[dict], calibration: context.Calibration,
                         on_text, on_reasoning) -> _Reply:
    """One API call carrying as much of the conversation as fits; learns the server's real count from
    `usage`. If the server still says "too long" (a model smaller than CONTEXT_TOKENS assumes), it asks
    again with less, and keeps every later request of this run below that too."""
    fixed = _tools_tokens(settings)
    for attempt in range(CONTEXT_RETRIES + 1):
        sent = context.fit_to_budget(messages, calibration.budget(settings.context_tokens), calibration.factor, fixed)
        try:
            reply = query(client, settings, sent, on_text, on_reasoning)
        except ContextTooLong as exc:
            if attempt == CONTEXT_RETRIES:
                raise
            calibration.rejected(round((context.estimate_tokens(sent) + fixed) * calibration.factor), exc.window)
            continue
        if reply.usage:
            calibration.observe(context.estimate_tokens(sent) + fixed, getattr(reply.usage, "prompt_tokens", 0))
        return reply


def _final_answer(reply: _Reply, on_text) -> str:
    notice = ""
    if reply.finish_reason == "length":
        notice = "[The answer was cut off: the model reached its output limit (finish_reason=length).]"
    elif not reply.content:
        notice = "[The model returned an empty answer. Try rephrasing the question.]"
    if notice:
        notice = ("\n\n" if reply.content else "") + notice
        on_text and on_text(notice)
    return reply.content + notice
