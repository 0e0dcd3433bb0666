"""A small OpenAI-compatible chat server on 127.0.0.1 for tests and offline demos (standard library only).

Tests queue scripted replies; the real openai SDK talks to it over HTTP, streamed (SSE, chunked) or plain
JSON, so the whole client path is exercised. A reply is a dict:

    {"content": "text", "reasoning": "…", "tool_calls": [{"name": "read_note", "arguments": "{…}"}],
     "finish_reason": "stop"}
    {"status": 500, "message": "boom", "headers": {"retry-after": "0"}}   an HTTP error
    {"content": "partial", "break_after": 2}   stream 2 pieces, then drop the connection
    {"content": "partial", "error_event": "overloaded"}   an error event inside the stream

When the queue is empty, `responder(request_json)` makes the reply (default: a "demo brain" that searches,
reads the first hit and answers from it, so `python tests/fake_server.py` gives a working offline demo).

`FakeLLM(context_limit=N)` answers 400 "maximum context length" like real servers when a request counts more
than N tokens by the fake's own tokenizer (prompt_tokens below: JSON characters / 3, harsher than the
client's estimate on purpose); `.rejected` counts such answers and `.max_prompt_tokens` the largest request.
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
_call_ids = itertools.count(1)


def demo_brain(request: dict) -> dict:
    """A rule-based stand-in for a model: search → read → answer, write a note, and the direct phrases below."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        call = _call_for(messages, last["tool_call_id"])
        name = call["function"]["name"] if call else ""
        if name == "search_notes":
            match = re.search(r"^(\S+\.(?:md|txt)) — ", last["content"], re.M)
            if match:
                return {"tool_calls": [{"name": "read_note", "arguments": json.dumps({"file_path": match[1]})}]}
            return {"content": "I found no note about that."}
        if name == "read_note":
            body = [line for line in last["content"].splitlines()[1:] if line.strip()][:3]
            return {"content": "According to your note: " + " / ".join(body)}
        return {"content": "Done:\n" + last["content"][:600]}
    question = last["content"]
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
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class FakeLLM(Loopback):
    def __init__(self, replies=None, responder=demo_brain, port: int = 0, thinking_mode: bool = False,
                 context_limit: int | None = None):
        self.replies = list(replies or [])
        self.thinking_mode = thinking_mode  # answer 400, as DeepSeek does, if reasoning is not sent back
        self.responder = responder
        self.requests: list[dict] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header: which key was sent
        self.context_limit = context_limit
        self.rejected = 0
        self.max_prompt_tokens = 0
        self.lock = threading.Lock()
        self.listen(_handler_for(self), port)

    def too_long(self, request: dict) -> str | None:
        """The error message real servers give when the request exceeds the context window, if it does."""
        tokens = prompt_tokens(request)
        with self.lock:
            self.max_prompt_tokens = max(self.max_prompt_tokens, tokens)
            if self.context_limit is None or tokens <= self.context_limit:
                return None
            self.rejected += 1
        return (f"This model's maximum context length is {self.context_limit} tokens. However, you requested "
                f"{tokens} tokens. Please reduce the length of the messages.")

    def next_reply(self, request: dict) -> dict:
        with self.lock:
            self.requests.append(request)
            if self.replies:
                return self.replies.pop(0)
        return self.responder(request)


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
                return self._json(400, {"error": {"message": too_long, "type": "invalid_request_error",
                                                  "code": "context_length_exceeded"}})
            if fake.thinking_mode and _reasoning_dropped(request):
                return self._json(400, {"error": {"message": "The `reasoning_content` in the thinking mode "
                                                             "must be passed back to the API."}})
            reply = fake.next_reply(request)
            if "status" in reply:
                return self._json(reply["status"], {"error": {"message": reply.get("message", "error")}},
                                  reply.get("headers"))
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
                self._send_event(event)
                if PACE:
                    time.sleep(PACE)
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


def _usage(request: dict, reply: dict) -> dict:
    prompt = prompt_tokens(request)
    completion = len(reply.get("content") or "") // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(request: dict, reply: dict) -> dict:
    message = {"role": "assistant", "content": reply.get("content")}
    if reply.get("reasoning") is not None:
        message["reasoning_content"] = reply["reasoning"]
    if reply.get("tool_calls"):
        message["tool_calls"] = _tool_calls(reply)
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": request.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
            "usage": _usage(request, reply)}


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
    if request.get("stream_options", {}).get("include_usage"):
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
