"""A small OpenAI-compatible chat server on 127.0.0.1 for tests and offline demos (standard library only).

Tests queue scripted replies; the real openai SDK talks to it over HTTP, streamed (SSE, chunked) or plain
JSON, so the whole client path is exercised. A reply is a dict:

    {"content": "text", "reasoning": "…", "tool_calls": [{"name": "read_note", "arguments": "{…}"}],
     "finish_reason": "stop"}
    {"status": 500, "message": "boom", "headers": {"retry-after": "0"}}   an HTTP error
    {"content": "partial", "break_after": 2}   stream 2 pieces, then drop the connection
    {"content": "partial", "error_event": "overloaded"}   an error event inside the stream
    {"content": "slow", "hold_after": 1, "until": event}   stream 1 piece, then nothing until event.set()
    {"content": "steady", "pace": 0.05}   seconds between streamed pieces
    {"content": "hi", "prompt_tokens": 10}   the usage it reports; {"content": "hi", "usage": False}: none
    {"content": "hi", "cache_hit_tokens": 8}   cache hits as DeepSeek reports them; "cached_tokens": as OpenAI does
    context_error("llamacpp", 1024, 1516)   HTTP 400 "too long" in that server's words (CONTEXT_ERRORS)
    {"content": as_text([{"name": "read_note", "arguments": "{…}"}], "tagged")}   a tool call written as text

When the queue is empty, `responder(request_json)` makes the reply (default: a "demo brain" that searches,
reads the first hit and answers from it, citing the lines it used, so `python tests/fake_server.py` gives a
working offline demo).

Modes of the whole server, as real ones behave:
- `FakeLLM(context_limit=N, wording="openai")` answers 400 "too long" in CONTEXT_ERRORS[wording] when a
  request counts more than N tokens by the fake's own tokenizer (prompt_tokens below: JSON characters / 3,
  harsher than the client's estimate on purpose); `.rejected` counts such answers, `.max_prompt_tokens` the
  largest request.
- `FakeLLM(keeps_tokens=N)` is Ollama: it drops messages from the start until the rest counts N tokens or
  fewer, answers from what is left, says nothing and reports N prompt tokens; `.truncated` counts those.
- `FakeLLM(text_calls="fenced")` is a small model or a server with no tool parser: every tool call, scripted
  or from the responder, arrives as content in that shape of TEXT_CALL_SHAPES.
- `FakeLLM(usage=False)` reports no usage at all.
"""

import itertools
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PIECE = 12  # characters of content per streamed chunk
PACE = float(os.environ.get("FAKE_PACE", "0"))  # seconds between chunks, to watch streaming (and Ctrl+C) by hand
HOLD_LIMIT = 30  # seconds a held stream waits for its event at most, so a failing test cannot hang the server
_call_ids = itertools.count(1)

# "The request is longer than the window" (window n, request m) as each server answers it, HTTP 400:
CONTEXT_ERRORS = {
    # OpenAI's chat completions (webtimemachine/wtm2#579)
    "openai": lambda n, m: {"error": {
        "message": f"This model's maximum context length is {n} tokens. However, your messages resulted in {m} "
                   "tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}},
    # DeepSeek: OpenAI's older wording, and code "invalid_request_error" (evalstate/fast-agent#621)
    "deepseek": lambda n, m: {"error": {
        "message": f"This model's maximum context length is {n} tokens. However, you requested {m} tokens ({m} "
                   "in the messages, 0 in the completion). Please reduce the length of the messages or completion.",
        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}},
    # vLLM (vllm/entrypoints/renderer.py)
    "vllm": lambda n, m: {"error": {
        "message": f"This model's maximum context length is {n} tokens. However, your request has {m} input "
                   "tokens. Please reduce the length of the input messages.",
        "type": "BadRequestError", "param": None, "code": 400}},
    # llama.cpp's llama-server, as the xllamacpp 2026.10 wheel answered here
    "llamacpp": lambda n, m: {"error": {
        "code": 400, "message": f"request ({m} tokens) exceeds the available context size ({n} tokens), try "
                                "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": m, "n_ctx": n}},
    # LM Studio: the error is a bare string (Gitlawb/openclaude#353)
    "lmstudio": lambda n, m: {"error": f"The number of tokens to keep from the initial prompt is greater than the "
                                       f"context length (n_keep: {m}>= n_ctx: {n}). Try to load the model with a "
                                       "larger context length, or provide a shorter input."},
    # Ollama's cloud models; it names the excess, not the window (dyad-sh/dyad#3498). Local Ollama cuts instead.
    "ollama": lambda n, m: {"error": f"prompt too long; exceeded max context length by {m - n} tokens"},
}

# Tool calls written as content, as small models and servers without a tool parser send them:
TEXT_CALL_SHAPES = {
    "bare": lambda calls: _objects(calls),
    "fenced": lambda calls: "```json\n" + _objects(calls, indent=2) + "\n```",
    "tagged": lambda calls: "\n".join(f"<tool_call>\n{_objects([call])}\n</tool_call>" for call in calls),
    "tools_echo": lambda calls: "<tools></tools>\n" + _objects(calls),
    "parameters": lambda calls: _objects(calls, key="parameters"),  # Llama 3.x
    "string_arguments": lambda calls: _objects(calls, encode=json.dumps),  # arguments as a JSON string
}


def _objects(calls: list[tuple[str, dict]], key="arguments", encode=lambda args: args, indent=None) -> str:
    return "\n".join(json.dumps({"name": name, key: encode(args)}, indent=indent) for name, args in calls)


def as_text(calls: list[dict], shape: str) -> str:
    """Tool calls ({"name", "arguments": JSON text}) written as content in one of TEXT_CALL_SHAPES."""
    return TEXT_CALL_SHAPES[shape]([(call["name"], json.loads(call.get("arguments") or "{}")) for call in calls])


def context_error(wording: str, window: int, requested: int) -> dict:
    """A scripted reply: HTTP 400 "too long" as the server named by `wording` (CONTEXT_ERRORS) words it."""
    return {"status": 400, "body": CONTEXT_ERRORS[wording](window, requested)}


def demo_brain(request: dict) -> dict:
    """A rule-based stand-in for a model: search → read → answer, write a note, and the direct phrases below."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "tool":  # a model reads the result between its marks (model.py's fence)
        last = {**last, "content": unfenced(last["content"])}
        call = _call_for(messages, last["tool_call_id"])
        name = call["function"]["name"] if call else ""
        if name == "search_notes":
            match = re.search(r"^(\S+\.(?:md|txt)) — ", last["content"], re.M)
            if match:
                return {"tool_calls": [{"name": "read_note", "arguments": json.dumps({"file_path": match[1]})}]}
            return {"content": "I found no note about that."}
        if name == "read_note":  # the first three lines with text, and where they are: "python.md:1-4"
            lines = last["content"].splitlines()
            head = next((i for i, line in enumerate(lines) if re.match(r".+ \(lines \d+-", line)), None)
            if head is None:
                return {"content": "According to your note: " + " / ".join(lines[:3])}
            path, first = re.match(r"(.+) \(lines (\d+)-", lines[head]).groups()
            used = [(n, line) for n, line in enumerate(lines[head + 1:], int(first)) if line.strip()][:3]
            cited = f" ({path}:{used[0][0]}-{used[-1][0]})" if used else ""
            return {"content": "According to your note: " + " / ".join(line for _, line in used) + cited}
        return {"content": "Done:\n" + last["content"][:600]}
    question = re.sub(r"\A<<<data .*?\n>>>end \w+\n\n", "", last["content"], flags=re.S)  # the passages before it
    direct = _direct_request(question)
    if direct:
        return {"tool_calls": [direct]}
    if re.search(r"写|write", question, re.I):
        content = "# Git 常用命令\n\n- git status\n- git add -A\n- git commit -m \"msg\"\n- git log --oneline\n"
        return {"tool_calls": [{"name": "write_note",
                                "arguments": json.dumps({"file_path": "git-cheatsheet.md", "content": content})}]}
    if re.search(r"summar|总结|一句话", question, re.I):
        earlier = [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]
        return {"content": "In one line: " + (earlier[-1][:80] if earlier else "nothing yet.")}
    for filler in ("帮我", "找", "关于", "的", "笔记", "一下"):
        question = question.replace(filler, " ")
    words = re.findall(r"[A-Za-z]{3,}|[\u4e00-\u9fff]{2,}", question)
    query = " ".join(w for w in words if w.lower() not in {"find", "notes", "about", "the", "my"})[:40]
    return {"tool_calls": [{"name": "search_notes", "arguments": json.dumps({"query": query or question})}]}


def unfenced(text: str) -> str:
    """A tool result without the marks model.py puts around it (tools.fenced)."""
    lines = text.split("\n")
    return "\n".join(lines[1:-1]) if lines[0].startswith("<<<data ") and lines[-1].startswith(">>>end ") else text


def _direct_request(question: str):
    """Phrases that map straight onto one tool, so every tool can be tried by hand in the demo."""
    rules = [
        (r"^(?:run|运行)[:：]?\s+(.+)$", lambda m: ("bash", {"command": m[1]})),
        (r"count my notes by folder|按文件夹统计", lambda m: (
            "bash", {"command": "find . -name '*.md' -not -path './.*' | cut -d/ -f2 | sort | uniq -c"})),
        (r"^delete\s+(\S+)$", lambda m: ("delete_note", {"file_path": m[1]})),
        (r"^move\s+(\S+)\s+to\s+(\S+)$", lambda m: ("move_note", {"from_path": m[1], "to_path": m[2]})),
        (r"^in\s+(\S+)\s+replace\s+(.+?)\s+with\s+(.+)$", lambda m: (
            "edit_note", {"file_path": m[1], "old_text": m[2], "new_text": m[3]})),
        (r"^append to\s+(\S+):\s*(.+)$", lambda m: ("append_note", {"file_path": m[1], "content": m[2]})),
    ]
    for pattern, make in rules:
        match = re.search(pattern, question.strip(), re.I)
        if match:
            name, args = make(match)
            return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
    return None


def _call_for(messages: list, call_id: str):
    for message in messages:
        for call in message.get("tool_calls") or []:
            if call["id"] == call_id:
                return call
    return None


def prompt_tokens(request: dict) -> int:
    """The fake's token count of a request: what the client estimates must be corrected towards it."""
    body = {"messages": request.get("messages", []), "tools": request.get("tools") or []}
    return len(json.dumps(body, ensure_ascii=False)) // 3


class Loopback:
    """A test server on 127.0.0.1 (port 0: any free one), serving from a daemon thread inside a `with` block."""

    def listen(self, handler, port: int) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # a client hanging up is not news
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        # it looks whether to stop every 10 ms, not every 500 ms: ending one (in many tests) takes no half second
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class FakeLLM(Loopback):
    def __init__(self, replies=None, responder=demo_brain, port: int = 0, thinking_mode: bool = False,
                 context_limit: int | None = None, wording: str = "openai", keeps_tokens: int | None = None,
                 text_calls: str | None = None, usage: bool = True):
        self.replies = list(replies or [])
        self.thinking_mode = thinking_mode  # answer 400, as DeepSeek does, if reasoning is not sent back
        self.responder = responder
        self.requests: list[dict] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header: which key was sent
        self.context_limit, self.wording = context_limit, wording
        self.keeps_tokens, self.text_calls, self.usage = keeps_tokens, text_calls, usage
        self.rejected = self.truncated = 0
        self.max_prompt_tokens = 0
        self.lock = threading.Lock()
        self.listen(_handler_for(self), port)

    def too_long(self, request: dict) -> dict | None:
        """The error body real servers send when the request exceeds the context window, if it does."""
        tokens = prompt_tokens(request)
        with self.lock:
            self.max_prompt_tokens = max(self.max_prompt_tokens, tokens)
            if self.context_limit is None or tokens <= self.context_limit:
                return None
            self.rejected += 1
        return CONTEXT_ERRORS[self.wording](self.context_limit, tokens)

    def kept(self, request: dict) -> dict:
        """The request as an Ollama-like server (keeps_tokens) sees it: its oldest messages silently dropped."""
        messages = list(request.get("messages") or [])
        if self.keeps_tokens is None or prompt_tokens(request) <= self.keeps_tokens:
            return request
        while len(messages) > 1 and prompt_tokens({**request, "messages": messages}) > self.keeps_tokens:
            messages.pop(0)
        with self.lock:
            self.truncated += 1
        return {**request, "messages": messages}

    def next_reply(self, request: dict) -> dict:
        seen = self.kept(request)
        with self.lock:
            self.requests.append(request)  # what the client sent, whole
            scripted = self.replies.pop(0) if self.replies else None
        reply = dict(scripted if scripted is not None else self.responder(seen))
        if seen is not request:
            reply.setdefault("prompt_tokens", self.keeps_tokens)
        if not self.usage:
            reply["usage"] = False
        if self.text_calls and reply.get("tool_calls"):
            reply["content"] = as_text(reply.pop("tool_calls"), self.text_calls)
        return reply


def _handler_for(fake: FakeLLM):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # chunked bodies, so a dropped connection is an error, not an end

        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("content-length", 0))
            try:
                request = json.loads(self.rfile.read(length))
            except ValueError:
                return self._json(400, {"error": {"message": "invalid JSON body"}})
            fake.authorizations.append(self.headers.get("authorization"))
            if not self.path.endswith("/chat/completions"):
                return self._json(404, {"error": {"message": f"no route {self.path}"}})
            too_long = fake.too_long(request)
            if too_long:
                return self._json(400, too_long)
            if fake.thinking_mode and _reasoning_dropped(request):
                return self._json(400, {"error": {"message": "The `reasoning_content` in the thinking mode "
                                                             "must be passed back to the API."}})
            reply = fake.next_reply(request)
            if "status" in reply:
                body = reply.get("body") or {"error": {"message": reply.get("message", "error")}}
                return self._json(reply["status"], body, reply.get("headers"))
            if request.get("stream"):
                return self._stream(request, reply)
            return self._json(200, _completion(request, reply))

        def _json(self, status: int, body: dict, headers=None):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, request: dict, reply: dict):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for number, event in enumerate(_chunks(request, reply)):
                if reply.get("break_after") == number:
                    self.wfile.flush()
                    self.connection.shutdown(2)  # mid-body: the client sees an incomplete chunked read
                    return
                if reply.get("hold_after") == number:
                    reply["until"].wait(HOLD_LIMIT)  # silence between chunks, for as long as the test wants
                self._send_event(event)
                if reply.get("pace", PACE):
                    time.sleep(reply.get("pace", PACE))
            self._send_event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")

        def _send_event(self, event):
            data = event if isinstance(event, str) else json.dumps(event)
            payload = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

    return Handler


def _reasoning_dropped(request: dict) -> bool:
    return any(m.get("tool_calls") and "reasoning_content" not in m for m in request["messages"])


def _tool_calls(reply: dict) -> list[dict]:
    for call in reply.get("tool_calls") or []:
        call.setdefault("id", f"call_{next(_call_ids)}")  # unique across rounds, as real servers do
    return [{"id": call["id"], "type": "function",
             "function": {"name": call["name"], "arguments": call.get("arguments") or ""}}
            for call in reply.get("tool_calls") or []]


def _finish(reply: dict) -> str:
    return reply.get("finish_reason") or ("tool_calls" if reply.get("tool_calls") else "stop")


def _usage(request: dict, reply: dict) -> dict | None:
    if reply.get("usage") is False:
        return None
    prompt = reply["prompt_tokens"] if "prompt_tokens" in reply else prompt_tokens(request)
    completion = len(reply.get("content") or "") // 4 + 1
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if "cache_hit_tokens" in reply:  # DeepSeek's fields
        usage |= {"prompt_cache_hit_tokens": reply["cache_hit_tokens"],
                  "prompt_cache_miss_tokens": prompt - reply["cache_hit_tokens"]}
    if "cached_tokens" in reply:  # OpenAI's
        usage["prompt_tokens_details"] = {"cached_tokens": reply["cached_tokens"]}
    return usage


def _completion(request: dict, reply: dict) -> dict:
    message = {"role": "assistant", "content": reply.get("content")}
    if reply.get("reasoning") is not None:
        message["reasoning_content"] = reply["reasoning"]
    if reply.get("tool_calls"):
        message["tool_calls"] = _tool_calls(reply)
    completion = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": request.get("model"),
                  "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}]}
    usage = _usage(request, reply)
    return {**completion, "usage": usage} if usage else completion


def _chunk(request: dict, delta: dict, finish=None, choices=True) -> dict:
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": request.get("model"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}


def _chunks(request: dict, reply: dict):
    """The reply as stream chunks, in the awkward shapes real servers send."""
    yield _chunk(request, {"role": "assistant", "content": ""})
    reasoning = reply.get("reasoning") or ""
    for start in range(0, len(reasoning), PIECE):
        yield _chunk(request, {"content": None, "reasoning_content": reasoning[start:start + PIECE]})
    content = reply.get("content") or ""
    for start in range(0, len(content), PIECE):
        yield _chunk(request, {"content": content[start:start + PIECE]})
    if reply.get("error_event"):
        yield {"error": {"message": reply["error_event"], "type": "server_error"}}
    for index, call in enumerate(_tool_calls(reply)):
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": None}}
        yield _chunk(request, {"tool_calls": [head]})
        arguments = call["function"]["arguments"]
        for start in range(0, len(arguments), 7):
            # id and name repeated, as some servers do: a client must set them, not append
            piece = {"index": index, "id": call["id"], "function": {"name": call["function"]["name"],
                                                                    "arguments": arguments[start:start + 7]}}
            yield _chunk(request, {"tool_calls": [piece]})
    yield _chunk(request, {}, finish=_finish(reply))
    if request.get("stream_options", {}).get("include_usage") and reply.get("usage") is not False:
        usage_chunk = _chunk(request, {}, choices=False)
        usage_chunk["usage"] = _usage(request, reply)
        yield usage_chunk


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8765
    with FakeLLM(port=port) as fake:
        print(f"fake OpenAI-compatible server (demo brain) on {fake.base_url}; Ctrl+C stops", file=sys.stderr)
        try:
            fake.thread.join()
        except KeyboardInterrupt:
            pass
