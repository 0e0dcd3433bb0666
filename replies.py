"""What model servers send back that the openai SDK leaves to us: each response's parts as plain values, tool
calls written as text, "too long" in each server's words, a prompt cut short, the usage as one value.

Small local models, and servers with no tool parser for the model's template, write a tool call as the answer's
text: bare JSON, a ```json fence (maybe after a sentence), a `<tools></tools>` echo (JSON or `<function …/>` inside)
or Hermes/Qwen `<tool_call>` tags. text_tool_calls() recognises those shapes, broken calls too (running one tells
the model what is wrong); JSON among words stays an answer. While a reply streams, held_from() says from where the
text may still become calls, to hold that back. Pure functions and values: no I/O, nothing of the project imported,
nothing decided.
"""

import json
import re
from typing import NamedTuple

TOOLS_ECHO = ("<tools>", "</tools>")  # Qwen's template lists the tools so; small models repeat the tags
TAGGED = ("<tool_call>", "</tool_call>")  # Hermes / Qwen2.5 tool-call tags
# Qwen2.5-Coder-1.5B on llama.cpp, inside a <tools> echo: <function name="search_notes" arguments='{"query": …}'/>
XML_CALL = re.compile(r"""<function\s+name="([^"]*)"\s+arguments='([^']*)'\s*/>""")
FENCE = "```"
FENCE_LANGUAGES = ("", "json")
# Lines a small model puts among calls written one a line: its template's tags, a fence never opened or closed
STRAY_LINES = ("<tool_response>", "</tool_response>", TAGGED[0], TAGGED[1], FENCE, FENCE + "json")
CALL_KEYS = {"name", "arguments", "parameters", "type", "id"}  # Llama 3.x says "parameters"
WRAPPER_KEYS = {"type", "id", "function"}  # {"type": "function", "function": {...}}, as the API's own calls
FIRST_KEYS = CALL_KEYS | WRAPPER_KEYS  # a streamed object whose first key is another one is not a call

# The window a server names in its "too long" answer (the number is the window, never the request or excess):
WINDOW_WORDINGS = [
    re.compile(r"context size \((\d[\d,]*) tokens\)", re.I),  # llama.cpp: "… available context size (1024 tokens)"
    re.compile(r"maximum context length is (\d[\d,]*)", re.I),  # OpenAI, DeepSeek, vLLM
    re.compile(r"(\d[\d,]*) maximum context length", re.I),  # Mistral: "too large for model with N maximum …"
    re.compile(r"context length of (?:only )?(\d[\d,]*)", re.I),  # LM Studio: "… context length of only N tokens"
    re.compile(r"\(context length (\d[\d,]*)\)", re.I),  # vLLM's engine: "… to fit into the model (context length N)"
    re.compile(r"\bn_ctx\W{1,4}(\d[\d,]*)", re.I),  # llama.cpp's "n_ctx": N field; LM Studio's "n_ctx: N", "n_ctx (N)"
]
# "The request is longer than the model's window", as each server words it; other 400s that say "too long" or
# "maximum" (a tool description over a length limit, say) are not. Ollama's "exceeded … by N tokens" names
# the excess, not the window, so it has no WINDOW_WORDINGS entry.
CONTEXT_ERROR = re.compile("|".join([
    r"exceeds? the available context size|exceed_context_size_error|larger than the max context size",  # llama.cpp
    r"maximum context length|context_length_exceeded|exceeds the context window",  # OpenAI, DeepSeek, vLLM
    r"too long to fit into the model",  # vLLM's engine
    r"prompt too long; exceeded (?:max )?context length|input length exceeds the context length",  # Ollama
    r"greater than the context length|when context the overflows|cannot truncate prompt with n_keep",  # LM Studio
]), re.I)

# The marks tool results come between, and the tags of Qwen's template around a result (1.5B echoed a result so)
MARK_LINE = re.compile(r"^[ \t]*(?:(?:<<<data|>>>end)\b.*|</?tool_response>[ \t]*)(?:\n|$)", re.M)
MARKS = ("<<<data", ">>>end", "<tool_response>", "</tool_response>")
REPEATED_LINES = 6  # a reply whose last lines are one line this many times over is looping: it is stopped
LOOP_WINDOW = 4_000  # characters at a reply's end a loop (of lines under a seventh of it) is looked for in
ECHO_LINE_CHARS = 20  # an answer that begins with a result's first two lines, this long at least, copies it
ECHO_SCAN_CHARS = 2_000  # how much of a result, and of an answer, a copy is looked for in

# server_kept_fewer: a server keeping the whole prompt counts at least ~0.6 of context.py's estimate (Qwen2.5 on
# llama.cpp, 600 real requests), and KEPT_SHARE times a learnt ratio of up to 1.62 stays under that. Below
# MIN_JUDGED_ESTIMATE the chat template's own tokens swamp the comparison.
KEPT_SHARE = 0.35
MIN_JUDGED_ESTIMATE = 1000


def text_tool_calls(content: str) -> list[dict] | None:
    """The calls, as [{"name": …, "arguments": "<JSON text>"}], when `content` is only tool calls; else None.
    A call that cannot run as written keeps what it wrote as its arguments, so running it tells the model why."""
    text = without_echo(content or "")
    bodies = _tagged_bodies(text) if text.startswith(TAGGED[0]) else _fenced_body(text) if text.startswith(FENCE) \
        else [text]
    calls = []
    for body in bodies or []:
        values = _json_values(_rebraced(body))
        lines = _lines(body)
        written = [line for line in lines if line not in STRAY_LINES]
        if values is None and len(lines) > 1 and written and all(map(_opens_like_call, written)):
            found = [_line_call(line) for line in written]  # one call a line: a bad line spoils no other
        elif values is None:
            found = [_opens_like_call(body.strip()) and _broken_call(body.strip()) or None]
        else:
            found = [_call(item) or _call_shaped(item, body) for item in _items(values or [None])]
        if None in found:
            return None
        calls += found
    return calls or None


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _items(values: list) -> list:
    """The call objects JSON values hold: each value, or each item of a list (None for an empty one)."""
    return [item for value in values for item in (value if isinstance(value, list) and value else [value])]


def _rebraced(text: str) -> str:
    """A call written with braces too many ({{"name": …}}}) as the one object it means."""
    text = text.strip()
    text = "{" + text.lstrip("{") if text.startswith("{{") else text
    try:
        _, end = json.JSONDecoder().raw_decode(text) if text.startswith("{") else (None, 0)
    except ValueError:
        return text
    return text[:end] if end and text[end:].strip() and not text[end:].strip("} \t\r\n") else text


def _line_call(line: str) -> dict:
    values = _json_values(_rebraced(line)) or []
    return len(values) == 1 and _call(values[0]) or _broken_call(line) or {"name": "", "arguments": line}


def _broken_call(text: str) -> dict | None:
    """A call-shaped text that is not one valid call, with its name if readable; None: JSON followed by words."""
    try:
        _, end = json.JSONDecoder().raw_decode(text)
        if re.search(r"[^\W\d_]", text[end:]):
            return None
    except ValueError:
        pass
    name = re.search(r'"name"\s*:\s*"([^"\\]{1,100})"', text)
    return {"name": name[1] if name else "", "arguments": text}


def could_be_tool_call(prefix: str) -> bool:
    """Whether text streamed so far may still turn out to be only tool calls: hold it back while True."""
    text = prefix.lstrip()
    if text.startswith(TOOLS_ECHO[0]):
        end = text.find(TOOLS_ECHO[1])
        if end < 0:
            return True
        text = text[end + len(TOOLS_ECHO[1]):].lstrip()
    if any(opening.startswith(text) for opening in (TOOLS_ECHO[0], TAGGED[0], FENCE)):
        return True  # nothing yet, or an opening still arriving ("<tool", "``")
    if text.startswith(TAGGED[0]):
        return _body_may_be_call(text[len(TAGGED[0]):], TAGGED[1])
    if text.startswith(FENCE):
        language, newline, body = text[len(FENCE):].partition("\n")
        if not newline:
            return any(name.startswith(language.strip().lower()) for name in FENCE_LANGUAGES)
        return language.strip().lower() in FENCE_LANGUAGES and _body_may_be_call(body, FENCE)
    return _json_may_be_call(text) or _lines_may_be_calls(text)


def held_from(text: str, start: int = 0) -> int:
    """From where the text streamed so far may still turn out to be only tool calls (0: all of it; a ``` fence
    after a sentence; else len(text)). `start`: what it said for a shorter text (each piece costs what it adds)."""
    if start == 0 and could_be_tool_call(text):
        return 0
    at = text.find("\n`", max(start - 1, 0))
    while at >= 0 and not could_be_tool_call(text[at + 1:]):
        at = text.find("\n`", at + 1)
    return at + 1 if at >= 0 else len(text)


def without_marks(text: str) -> str:
    """The text without the lines holding tool results' marks, which a small model copies into its answer."""
    return MARK_LINE.sub("", text)


def echo_heads(results: list[str]) -> list[str]:
    """What a copy of each tool result begins with: its first two lines that hold something (the tool's own words,
    then what it found), stripped; a one-line result may well be the answer, so it has none."""
    heads = ("\n".join(_lines(result[:ECHO_SCAN_CHARS])[:2]) for result in results)
    return [head for head in heads if "\n" in head and len(head) >= ECHO_LINE_CHARS]


def echo_of(text: str, heads: list[str]) -> bool | None:
    """Whether an answer is a copy of a tool result (the 1.5B answered with the search result it got): True once it
    begins with one of `heads` (echo_heads), blank lines and indents aside; None while its start may still become
    one, to hold it back; False when it cannot."""
    if not heads:
        return False
    start = "\n".join(_lines(without_marks(text[:ECHO_SCAN_CHARS])))
    if not start or any(mark.startswith(start) for mark in MARKS):
        return None
    if any(start.startswith(head) for head in heads):
        return True
    return None if any(head.startswith(start) for head in heads) else False


def open_mark(text: str) -> int:
    """Where the line still being written starts, if it may yet be a mark line; else len(text)."""
    start = text.rfind("\n") + 1
    line = text[start:start + 200].lstrip(" \t")  # its start says it: a long line is never copied
    return start if line and any(mark.startswith(line[:len(mark)]) for mark in MARKS) else len(text)


def looping(text: str) -> int | None:
    """Where a reply that keeps repeating one line should end, after the first repeat, or one that writes a tool
    call it wrote before (a small model reciting its calls over and over), before it; None while it is not."""
    end = repeats_from(text)
    if text.count("\n", end) >= REPEATED_LINES - 1:
        return end
    last = text.rfind("\n")
    start = text.rfind("\n", 0, max(last, 0)) + 1
    line = text[start:last].strip() if 0 < last - start < LOOP_WINDOW else ""
    if line.startswith("{") and _broken_call(line) and text.find(line, max(0, start - LOOP_WINDOW), start) >= 0:
        return start
    return None


def repeats_from(text: str) -> int:
    """Where the last whole line's repeats begin (the line being written may be one), to hold them back until it is
    clear; len(text) when there are none."""
    start, at = max(0, len(text) - LOOP_WINDOW), len(text)
    for _ in range(REPEATED_LINES + 1):  # only the last lines are looked at: each piece costs what it adds
        at = text.rfind("\n", start, at) if at > start else -1
    if at < 0 < start:  # the window's first line may be cut short: it is no whole line
        at = text.find("\n", start)
    *lines, partial = text[at + 1:].split("\n") if at >= 0 or not start else ("",)
    if not lines or not lines[-1].strip():
        return len(text)
    first = len(lines) - 1
    while first > 0 and lines[first - 1] == lines[-1]:
        first -= 1
    if first < len(lines) - 1:
        return len(text) - len(partial) - sum(len(line) + 1 for line in lines[first + 1:])
    return len(text) - len(partial) if partial and lines[-1].startswith(partial) else len(text)


def error_message(body, fallback: str) -> str:
    """The server's words in an error body as the SDK keeps it (`exc.body`: an object, or a bare string from LM
    Studio and Ollama that the SDK leaves out of `exc.message`), else `fallback`."""
    if isinstance(body, dict):
        body = body.get("error", body)
        body = body.get("message") if isinstance(body, dict) else body
    return body.strip() if isinstance(body, str) and body.strip() else fallback


def context_window(message: str) -> int | None:
    match = next(filter(None, (wording.search(message or "") for wording in WINDOW_WORDINGS)), None)
    return int(match[1].replace(",", "")) if match else None


def is_context_error(message: str) -> bool:
    return bool(CONTEXT_ERROR.search(message or ""))


def server_kept_fewer(sent_estimate: int, reported_prompt_tokens: int, ratio: float, cached_tokens: int = 0) -> bool:
    """Whether the server counted far fewer prompt tokens than were sent (Ollama cuts beyond num_ctx silently);
    `ratio`: the learnt one. Cache hits count: Ollama 0.30 counts only what it computed (ollama/ollama#16414)."""
    counted = (reported_prompt_tokens or 0) + (cached_tokens or 0)
    return sent_estimate >= MIN_JUDGED_ESTIMATE and 0 < counted < KEPT_SHARE * sent_estimate * ratio


class Usage(NamedTuple):
    """Tokens as the server counted them, of one call (`of` its usage) or a sum (+); str() never says "0 + 0"."""
    prompt: int = 0
    completion: int = 0
    hits: int = 0  # of the prompt, cache hits: DeepSeek's prompt_cache_hit_tokens, or OpenAI's cached_tokens
    calls: int = 0
    unreported: int = 0  # calls the server reported no usage for

    @classmethod
    def of(cls, usage) -> "Usage":
        if usage is None:
            return cls(calls=1, unreported=1)
        hits = getattr(usage, "prompt_cache_hit_tokens", None)
        hits = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None) if hits is None else hits
        return cls(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0), int(hits or 0), 1)

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*map(sum, zip(self, other)))

    def __str__(self) -> str:
        if not self.calls:  # e.g. no server listening
            return "no API call was answered"
        if self.unreported == self.calls:
            return "not reported by the server"
        some = f" ({self.unreported} of {self.calls} API calls not reported)" * bool(self.unreported)
        return f"{self.prompt:,} prompt + {self.completion:,} completion tokens{some}"


class NotOpenAI(Exception):
    """The server's answer is not shaped as an OpenAI-compatible one: an HTML page, malformed JSON or SSE."""


def pieces(parts, stream: bool):
    """Each part of a response (a stream's chunks, or one completion) as (Usage or None, finish_reason, reasoning,
    content, [(index, id, name, arguments)]). Server objects are read here alone: only a bad shape raises NotOpenAI."""
    try:
        for part in parts if stream else [parts]:
            usage = getattr(part, "usage", None) and Usage.of(part.usage)
            if not part.choices:  # a stream's usage chunk has none
                yield usage, None, None, None, []
                continue
            delta = part.choices[0].delta if stream else part.choices[0].message
            reasoning = getattr(delta, "reasoning_content", None)
            if reasoning is None and "reasoning_content" in (delta.model_extra or {}):
                reasoning = ""  # a null, which must go back as ""
            calls = [(new.index if stream else position, new.id, _text(getattr(new.function, "name", None)),
                      _text(getattr(new.function, "arguments", None)) or "")  # a whole message numbers none
                     for position, new in enumerate(delta.tool_calls or [])]
            yield usage, part.choices[0].finish_reason, _text(reasoning), _text(delta.content), calls
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise NotOpenAI(type(exc).__name__) from None


def _text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{type(value).__name__} where text belongs")


def without_echo(text: str) -> str:
    """The text without a leading or trailing <tools>…</tools> echo of the tool list; calls inside are kept."""
    text = text.strip()
    opening, closing = TOOLS_ECHO
    if text.startswith(opening) and closing in text:
        inside, _, after = text[len(opening):].partition(closing)
        xml = XML_CALL.findall(inside)
        if xml and not XML_CALL.sub("", inside).strip():
            inside = "\n".join(json.dumps({"name": name, "arguments": arguments}) for name, arguments in xml)
        items = _items(_json_values(_rebraced(inside)) or [])
        written = items and all(_call(item) and {"arguments", "parameters"} & set(item) for item in items)
        text = (inside.strip() + "\n" if written else "") + after.strip()  # not the tool list: calls
    if text.endswith(closing) and opening in text:
        text = text[:text.rindex(opening)].strip()
    return text


def _tagged_bodies(text: str) -> list[str] | None:
    """What each <tool_call>…</tool_call> holds, when the text is only such blocks (the last may be unclosed)."""
    bodies = []
    while text:
        if not text.startswith(TAGGED[0]):
            return None
        body, _, text = text[len(TAGGED[0]):].partition(TAGGED[1])
        bodies.append(body)
        text = text.lstrip()
    return bodies


def _fenced_body(text: str) -> list[str] | None:
    """What a ```json (or bare ```) fence that opens the text holds (maybe unclosed). Words after it are a small
    model's narration of the call ("The results will show…"): the call runs, they go."""
    language, _, body = text[len(FENCE):].partition("\n")
    return [body.partition(FENCE)[0]] if language.strip().lower() in FENCE_LANGUAGES else None


def _json_values(text: str) -> list | None:
    """One or more JSON values separated by whitespace (some models write one object per call), or None."""
    decoder, values, text, at = json.JSONDecoder(), [], text.strip(), 0
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        values.append(value)
        at = len(text) - len(text[at:].lstrip())
    return values


def _call(item) -> dict | None:
    """{"name", "arguments"} from one call object in any known shape; None if it is not one."""
    if isinstance(item, dict) and isinstance(item.get("function"), dict) and set(item) <= WRAPPER_KEYS:
        item = item["function"]
    elif isinstance(item, dict) and isinstance(item.get("function"), str) and "name" not in item:
        item = {"name": item["function"], **{k: v for k, v in item.items() if k != "function"}}  # Qwen2.5 1.5B
    if not isinstance(item, dict) or set(item) - CALL_KEYS or item.get("type", "function") != "function" \
            or not isinstance(item.get("name"), str):
        return None
    arguments = item["arguments"] if "arguments" in item else item.get("parameters")
    if isinstance(arguments, str):  # a JSON string holding the object, as the API itself sends arguments
        try:
            arguments = json.loads(arguments.strip() or "{}")
        except ValueError:
            return {"name": item["name"], "arguments": arguments}  # running it says what is wrong
    return {"name": item["name"], "arguments": json.dumps({} if arguments is None else arguments, ensure_ascii=False)}


def _body_may_be_call(text: str, closing: str) -> bool:
    """Whether what a tag or fence holds so far may be calls (once closed, with what follows)."""
    body, closed, rest = text.partition(closing)
    if closed:
        values = _json_values(body)
        calls = _are_calls(values) if values else _opens_like_call(body.strip())
        return calls and (closing == FENCE or could_be_tool_call(rest))  # what follows a fenced call: _fenced_body
    arriving = next((size for size in range(len(closing) - 1, 0, -1) if body.endswith(closing[:size])), 0)
    body = body[:len(body) - arriving]  # the closing may be arriving: "</tool_" or "``"
    return not body.strip() or _json_may_be_call(body.strip())


def _json_may_be_call(text: str) -> bool:
    if not text.startswith(("{", "[")):
        return False
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return _opens_like_call(text)
    return _are_calls([value]) and could_be_tool_call(text[end:])


def _lines_may_be_calls(text: str) -> bool:
    """One call a line, some of them perhaps broken: every line so far opens like a call and has no words after it."""
    lines = _lines(text)
    if len(lines) > 1 and any(stray.startswith(lines[-1]) for stray in STRAY_LINES):
        lines.pop()  # what may become a stray line
    lines = [line for line in lines if line not in STRAY_LINES]
    return bool(lines) and all(_opens_like_call(line) and _broken_call(line) for line in lines)


def _are_calls(values: list) -> bool:
    return all(_call(item) or _call_shaped(item, "") for item in _items(values))


def _call_shaped(item, body: str) -> dict | None:
    """A call object with keys no call has (a small model's `"required": […]`): run, it says what is wrong."""
    if isinstance(item, dict) and isinstance(item.get("name"), str) and {"arguments", "parameters"} & set(item) \
            and "description" not in item:  # not a tool's schema, echoed
        return {"name": item["name"], "arguments": body.strip()}
    return None


def _opens_like_call(text: str) -> bool:
    """An unfinished `{"name": …` or `[{"name": …`: true while its first key may still be a call's."""
    rest = text[1:].lstrip() if text.startswith("[") else text
    if not rest.startswith("{"):
        return not rest
    rest = rest.lstrip("{").lstrip()
    key = re.match(r'"([^"\\]*)(")?', rest)
    if key is None:
        return not rest
    return key[1] in FIRST_KEYS if key[2] else any(name.startswith(key[1]) for name in FIRST_KEYS)
