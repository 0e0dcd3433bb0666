"""Shared test fixtures and helpers: a notes folder in tmp_path, Settings and a Notebook for it (each test makes its
own: nothing of one test's index, vectors or privacy verdicts reaches the next), a stub OpenAI client and the
replies it is scripted with (`call`, `tool_call`), the one environment for programs a test starts (`child_env`),
the one tool runner (`run_tool`), the command line run in this process (`call_main`) or as its own process
(`run_main`), the one pty driver (`Terminal`), the shell tests' process checks, the real vault (`garden`), the
MCP server as a client drives it (`McpProcess`) and the page's server with a client for it (`make_web`).
What test modules share is here: none imports another."""

import dataclasses
import http.client
import io
import json
import logging
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

# Bytecode is cached outside the project, also where PYTHONDONTWRITEBYTECODE is set (many images) or the checkout
# is read-only: else each worker and each program a test starts compiles the app and the tests again.
PYCACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "knowledge-agent-tests" / "pycache"
sys.dont_write_bytecode, sys.pycache_prefix = False, str(PYCACHE)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_server  # noqa: E402
import main  # noqa: E402
import shell  # noqa: E402
import terminal  # noqa: E402
import tools  # noqa: E402
import web  # noqa: E402
from agent import UI  # noqa: E402
import config  # noqa: E402
from config import Settings  # noqa: E402
from notebook import Notebook  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MAIN = ROOT / "main.py"
NO_SERVER = "http://127.0.0.1:9/v1"  # the discard port: a connection there is refused at once
MCP_SERVER = ROOT / "mcp_server.py"
MCP_LATEST = "2025-11-25"  # the newest MCP version the server speaks
REPLY_TIMEOUT = 30  # seconds; only reached when a reply that should come never does

# A runner that starts the tests in the background (bash's `&` without job control) hands them SIGINT ignored,
# and every child would inherit that: the Ctrl+C tests need the person's Ctrl+C back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every variable a setting is read from (each provider's too): a test sees none of the developer's.
SETTINGS_VARIABLES = tuple(dict.fromkeys(field.metadata["variable"].format(provider=provider)
                                         for field in dataclasses.fields(Settings) for provider in config.PROVIDERS))
CLEARED = SETTINGS_VARIABLES + ("NO_COLOR", "PYTHONDONTWRITEBYTECODE")  # the last: see PYCACHE


# The tests' folders (tmp_path) in memory where there is a RAM disk: the tests write and fsync thousands of small
# files (notes, versions, SQLite), which on a disk takes longer than all they compute. PYTEST_DEBUG_TEMPROOT
# (where pytest makes them) or --basetemp puts them elsewhere.
SHM_NEEDED = 2 * 1024 ** 3  # bytes free: a container's 64 MB /dev/shm would fill up, so the tests stay on disk
if os.access("/dev/shm", os.W_OK | os.X_OK) and shutil.disk_usage("/dev/shm").free > SHM_NEEDED:
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", "/dev/shm")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No test sees the developer's keys, .env-loaded settings or real cache and data folders."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PASSAGES", "0")  # they change every first request: tests/test_passages.py has them on
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(PYCACHE))  # for every program a test starts
    logging.getLogger("knowledge-agent").handlers[:] = []  # a test's UI set up before must not hear this one's


def child_env(**extra) -> dict:
    """The environment of a program a test starts: the test's own, cleaned as clean_environment cleans it (even
    of what the test set since), its streams in UTF-8, the question's passages off (as clean_environment), then
    `extra`."""
    return {name: value for name, value in os.environ.items() if name not in CLEARED} | {
        "PYTHONIOENCODING": "utf-8", "PASSAGES": "0", "PYTHONPYCACHEPREFIX": str(PYCACHE)} | extra


def main_env(kb, base_url=NO_SERVER, key="test-key", extra_env=None) -> dict:
    """The settings `python main.py` gets from its environment in the command-line tests."""
    return {"KNOWLEDGE_BASE": str(kb)} | ({"DEEPSEEK_BASE_URL": base_url} if base_url else {}) | (
        {"DEEPSEEK_API_KEY": key} if key else {}) | (extra_env or {})


def run_main(*args, kb, base_url=NO_SERVER, stdin="", key="test-key", extra_env=None) -> subprocess.CompletedProcess:
    """`python main.py ARGS` as its own process, `stdin` piped: for what only a process shows (exit status, the
    real streams and their encodings, a kill)."""
    return subprocess.run([sys.executable, str(MAIN), *args], input=stdin, capture_output=True, text=True,
                          env=child_env(**main_env(kb, base_url, key, extra_env)), timeout=60, encoding="utf-8")


def assert_clean_failure(result: subprocess.CompletedProcess, code: int) -> None:
    """The program failed with exit status `code` and said why in one line: never a traceback."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.strip().count("\n") == 0


@pytest.fixture
def call_main(monkeypatch, capfd):
    """`python main.py ARGS` run in this process through main.main, as run_main runs it as a process: the same
    environment, `stdin` piped (str or bytes), stdout and stderr caught at their file descriptors, the exit code
    main() returns (or argparse's), and a fresh start each call (main makes its own Notebook)."""

    def call(*args, kb, base_url=NO_SERVER, stdin="", key="test-key", extra_env=None):
        capfd.readouterr()  # what the test printed before is not this run's output
        handlers = logging.getLogger("knowledge-agent").handlers[:]  # main() shows notices its own way
        with monkeypatch.context() as patch:
            patch.delenv("DEEPSEEK_API_KEY", raising=False)
            patch.delenv("DEEPSEEK_BASE_URL", raising=False)
            for name, value in main_env(kb, base_url, key, extra_env).items():
                patch.setenv(name, value)
            data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
            patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
            patch.setattr(main, "COMMAND", "python main.py")  # its name when started as a process
            try:
                code = main.main(list(args))
            except SystemExit as exc:  # argparse: --help, --version, a bad flag
                code = exc.code or 0
            finally:
                logging.getLogger("knowledge-agent").handlers[:] = handlers
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["main.py", *args], code, out, err)

    return call


def run_repl(monkeypatch, notebook, lines, replies, answers=()):
    """Drive main.repl with typed lines (and y/N answers), against a scripted model."""
    typed = iter(list(lines))
    answered = iter(list(answers))

    def fake_input(prompt=""):
        source = typed if prompt.startswith("\n>") else answered
        try:
            return next(source)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    client = StubClient(replies)
    assert main.repl(notebook, client, terminal.Display()) == main.EXIT_OK
    return client


def run_tool(notebook, name, ask=None, **args) -> str:
    """One tool call as the model sends it (arguments as JSON) through tools.execute_tool: the text it returns.
    `ask(approval)` answers a confirmation: True, False or None (nobody to ask)."""
    return tools.execute_tool(name, json.dumps(args, ensure_ascii=False), notebook, ask).text


def tool_call(name, **args) -> dict:
    """A tool call in a scripted reply (fake_server's format), its arguments as the model sends them."""
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}


def call(name, **args) -> dict:
    """A scripted reply (fake_server's format) that calls one tool."""
    return {"tool_calls": [tool_call(name, **args)]}


def assert_valid_history(messages: list[dict]) -> None:
    """What the chat API checks of a conversation: after the system prompt a user's message first, every tool
    call answered at once by one tool message each, in order, and no tool message unasked."""
    i = 0
    while messages[i]["role"] == "system":
        i += 1
    assert messages[i]["role"] == "user", messages[i]
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"orphan tool message at {i}"
        if message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            answered = [m.get("tool_call_id") for m in messages[i + 1: i + 1 + len(ids)]]
            assert answered == ids, f"calls {ids} answered by {answered}"
            i += len(ids)
        i += 1


def api_error(status: int, message: str) -> openai.APIStatusError:
    """The error the openai SDK raises for an HTTP `status` whose body says `message`."""
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    response = httpx2.Response(status, request=request, json={"error": {"message": message}})
    return {
        400: openai.BadRequestError, 401: openai.AuthenticationError, 404: openai.NotFoundError,
        429: openai.RateLimitError, 500: openai.InternalServerError,
    }[status](message, response=response, body={"error": {"message": message}})


posix_only = pytest.mark.skipif(os.name == "nt", reason="needs a pty, POSIX signals and process groups")
SANDBOX_PROBLEM = shell.sandbox_problem()
sandboxed = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no Landlock sandbox here: {SANDBOX_PROBLEM}")


def snapshot(folder: Path) -> dict:
    """Every file's bytes (None for a folder) under `folder`, by path: equal snapshots, nothing changed."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The shell command's scratch folder ($TMPDIR) made at a known path, to look inside it while it runs."""
    known = tmp_path / "scratch"
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: (known.mkdir(), str(known))[1])
    return known


def press_ctrl_c_when_exists(path: Path, seen: list | None = None) -> None:
    """Send this process SIGINT once `path` appears (the command under test has started); its text
    goes to `seen` first, since the command's scratch folder is gone once run_shell is back."""
    def watch():
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # polling for the command to start, not sleeping in its place
        if seen is not None and path.exists():
            seen.append(path.read_text())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=watch, daemon=True).start()


def running(pid: int) -> bool:
    """True if the process still exists, even as an unreaped zombie: run_shell reaps what it stops."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def group_members(pgid: int) -> list[str]:
    """[] once no process (zombies included) is left in the process group, else a line saying so."""
    try:
        os.killpg(pgid, 0)
        return [f"process group {pgid} still has processes"]
    except ProcessLookupError:
        return []


class Terminal:
    """`python main.py ARGS` (or another `program`) on a pty that is its controlling terminal, so Ctrl+C is a real
    SIGINT."""

    def __init__(self, env: dict, *args, program: Path = MAIN):
        import fcntl
        import pty
        import termios
        self.controller, terminal = pty.openpty()

        def become_controlling_terminal():
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # a test run in the background ignores it
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen([sys.executable, str(program), *args], stdin=terminal, stdout=terminal,
                                     stderr=terminal, env=env, close_fds=True, preexec_fn=become_controlling_terminal)
        os.close(terminal)
        self.shown = b""

    def expect(self, text: str | bytes, count: int = 1, timeout: float = 30) -> str:
        """Read until `text` has been shown `count` times in all (or the program ends); the screen so far."""
        text = text.encode() if isinstance(text, str) else text
        deadline = time.monotonic() + timeout
        while self.shown.count(text) < count and time.monotonic() < deadline and self._read(0.1):
            pass
        assert self.shown.count(text) >= count, self.shown.decode(errors="replace")[-2000:]
        return self.shown.decode(errors="replace")

    def _read(self, wait: float) -> bool:
        """Whatever the program shows within `wait` seconds; False once it has closed the terminal."""
        if select.select([self.controller], [], [], wait)[0]:
            try:
                data = os.read(self.controller, 65536)
            except OSError:  # EIO: every end of the terminal in the program is closed
                return False
            self.shown += data
            return bool(data)
        return True

    def send(self, data: bytes) -> None:
        os.write(self.controller, data)

    def press(self, keys: bytes) -> None:
        """Type `keys` once the program waits for a key, as a person would: typed before readline has the
        terminal, the terminal's own line editing would echo an Enter; and CPython's readline misses a SIGINT
        that comes while it is handling the key before (it only looks for one when select() is interrupted)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self._waiting_for_a_key():
            select.select([self.controller], [], [], 0.01)
        self.send(keys)

    def interrupt(self) -> None:
        self.press(b"\x03")  # Ctrl+C

    def _waiting_for_a_key(self) -> bool:
        try:
            with open(f"/proc/{self.proc.pid}/wchan") as wchan:
                return wchan.read().startswith(("poll_schedule_timeout", "do_select"))
        except OSError:  # no /proc: nothing better to wait on
            return True

    def close(self, timeout: float = 30) -> int:
        """The exit code, once the program has ended; everything it showed is in .shown."""
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._read(0.1):
                pass
            return self.proc.wait(max(deadline - time.monotonic(), 0.1))
        finally:
            if self.proc.poll() is None:  # it hung: end it, and the test fails on the wait above
                self.proc.kill()
                self.proc.wait()
            os.close(self.controller)


@pytest.fixture
def notices():
    """The notices meant for the person (db.notice), as a list of their texts."""
    told = []
    handler = logging.Handler()
    handler.emit = lambda record: told.append(record.getMessage())
    logging.getLogger("knowledge-agent").handlers[:] = [handler]
    yield told
    logging.getLogger("knowledge-agent").handlers[:] = []


@pytest.fixture
def kb(tmp_path) -> Path:
    root = tmp_path / "notes"
    (root / "work").mkdir(parents=True)
    (root / "python.md").write_text("# Python 学习笔记\n\n装饰器很有用。\nUse venv for projects.\n", encoding="utf-8")
    (root / "vim.md").write_text("# Vim\n\n`dd` deletes a line.\n`:wq` saves and quits.\n", encoding="utf-8")
    (root / "work" / "meeting.md").write_text("# Meeting\n\nDecided: ship search in December.\n", encoding="utf-8")
    return root.resolve()


def write(kb: Path, rel: str, text, encoding: str = "utf-8") -> Path:
    """A file in the notes (its folders made), from text or bytes."""
    path = kb / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode(encoding))
    return path


def hits(output: str) -> list:
    """Paths of the search hits, best first, as the model reads them."""
    return re.findall(r"^(\S.*?) — ", output, re.M)


# A real Obsidian vault, where the benches find it: in the shared corpus folder beside the project, or KA_CORPUS.
GARDEN = Path(os.environ.get("KA_CORPUS", ROOT.parent / "shared" / "corpus")) / "knowledge-garden.tar.gz"


@pytest.fixture(scope="session")
def garden(tmp_path_factory) -> Path:
    """The knowledge-garden vault unpacked once (its one top folder), or the test is skipped: only read it; a test
    that writes copies it first."""
    if not GARDEN.exists():
        pytest.skip(f"no knowledge-garden corpus at {GARDEN} (the shared/corpus folder beside the project, or "
                    "KA_CORPUS=FOLDER)")
    folder = tmp_path_factory.mktemp("garden")
    with tarfile.open(GARDEN) as archive:
        archive.extractall(folder, filter="data")
    return next(path for path in folder.iterdir() if path.is_dir()).resolve()


def make_settings(kb: Path, **changes) -> Settings:
    values = dict(api_key="test-key", base_url="http://127.0.0.1:9/v1", model="test-model", kb=kb,
                  max_rounds=10, stream=True, thinking=None, reasoning_effort=None, show_reasoning=True,
                  auto_approve=False, passages=False)  # as clean_environment
    values.update(changes)
    return Settings(**values)


def make_notebook(kb: Path, **changes) -> Notebook:
    """A Notebook of make_settings(kb, **changes); dropped with the test, it closes its index's watcher."""
    return Notebook(make_settings(kb, **changes))


@pytest.fixture
def settings(kb) -> Settings:
    return make_settings(kb)


@pytest.fixture
def notebook(settings) -> Notebook:
    with Notebook(settings) as notebook:
        yield notebook


class StubClient:
    """Stands in for openai.OpenAI: returns scripted replies (fake_server's format) as SDK objects."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.chat = self
        self.completions = self

    def create(self, **params):
        self.requests.append(params)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        request = {"messages": params["messages"], "model": params["model"], "tools": params.get("tools") or [],
                   "stream_options": params.get("stream_options") or {}}
        if params.get("stream"):
            return (ChatCompletionChunk.model_validate(c) if isinstance(c, dict) else c
                    for c in fake_server._chunks(request, reply) if not (isinstance(c, dict) and "error" in c))
        return ChatCompletion.model_validate(fake_server._completion(request, reply))


@pytest.fixture
def fake_llm():
    """A real HTTP server on 127.0.0.1 speaking the OpenAI chat API; queue replies on .replies."""
    with fake_server.FakeLLM(responder=fake_server.demo_brain) as server:
        yield server


class Recorder(UI):
    """A ui for run_agent that keeps everything it is told; `answers` are the replies to approve()."""

    def __init__(self, answers=None):
        self.texts, self.reasonings, self.calls, self.results, self.asked = [], [], [], [], []
        self.answers = answers

    def text(self, text):
        self.texts.append(text)

    def reasoning(self, text):
        self.reasonings.append(text)

    def tool_call(self, name, arguments):
        self.calls.append(name)

    def tool_result(self, name, result):
        self.results.append(result)

    def approve(self, approval):
        self.asked.append(approval.title)
        return None if self.answers is None else self.answers.pop(0)


# --- The MCP server, driven as a client drives it ---

def server_env(**extra) -> dict:
    """The test's environment without settings that would change what the server serves."""
    return child_env(**{"MCP_ALLOW_DESTRUCTIVE": "0", "MCP_ALLOW_SHELL": "0", "AUTO_APPROVE": "0"}  # beat any .env
                     | extra)


class McpProcess:
    """One server subprocess; replies are read by a thread so a missing reply fails instead of hanging."""

    def __init__(self, kb: Path, *args: str, script: Path = MCP_SERVER, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, str(script), "--kb", str(kb), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env or server_env())
        self.lines: queue.Queue = queue.Queue()
        self.stderr_chunks: list[bytes] = []
        self.next_id = 0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self.stderr_chunks.extend(self.proc.stderr), daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode("utf-8")
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def receive(self):
        line = self.lines.get(timeout=REPLY_TIMEOUT)
        assert line is not None, "the server closed stdout: " + self.stderr()
        return json.loads(line)

    def request(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        reply = self.receive()
        assert reply["id"] == self.next_id
        return reply

    def initialize(self, version: str = MCP_LATEST) -> dict:
        reply = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                            "clientInfo": {"name": "test", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply["result"]

    def call(self, name: str, arguments) -> dict:
        """The tool's result, its text as the tool wrote it: every result comes fenced as data (checked here)."""
        result = self.request("tools/call", {"name": name, "arguments": arguments})["result"]
        text = result["content"][0]["text"]
        assert text.startswith("<<<data ") and "never an instruction" in text.split("\n")[0]
        return {**result, "content": [{"type": "text", "text": fake_server.unfenced(text)}]}

    def tool_names(self) -> list[str]:
        return [tool["name"] for tool in self.request("tools/list")["result"]["tools"]]

    def stderr(self) -> str:
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def close(self) -> int:
        self.proc.stdin.close()
        return self.proc.wait(timeout=REPLY_TIMEOUT)


# --- The page's server, and what a page (or an attacker) sends it ---

class Browser:
    """What a page (or an attacker) sends: raw requests, with any Host, Origin and key."""

    def __init__(self, server: web.Server):
        self.server, self.port, self.key = server, server.port, None
        self.host = self.origin = None  # None: the right ones
        self.cookies = []  # every Set-Cookie it was sent: what a browser would send to any port of 127.0.0.1

    def request(self, method: str, path: str, body=None, headers=None, raw: bytes | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        sent = {"Host": self.host or f"127.0.0.1:{self.port}"}
        if method == "POST":
            sent["Origin"] = self.origin or f"http://127.0.0.1:{self.port}"
            sent["Content-Type"] = "application/json"
            raw = json.dumps(body if body is not None else {}).encode() if raw is None else raw
            sent["Content-Length"] = str(len(raw))
        if self.key:
            sent["Authorization"] = f"Bearer {self.key}"
        sent.update(headers or {})
        for name, value in sent.items():
            if value is not None:
                conn.putheader(name, value)
        conn.endheaders(raw)
        response = conn.getresponse()
        self.cookies += [value.split(";")[0] for name, value in response.getheaders() if name.lower() == "set-cookie"]
        return response.status, dict(response.getheaders()), response.read()

    def sign_in(self) -> "Browser":
        """What the page's script does with the token from the launch page's address."""
        self.key = self.post("/api/login", {"token": self.server.token})["key"]
        return self

    def get(self, path: str):
        status, _, body = self.request("GET", path)
        assert status == 200, body
        return json.loads(body)

    def post(self, path: str, body=None, expect: int = 200):
        status, _, data = self.request("POST", path, body)
        assert status == expect, data
        return json.loads(data)

    def events(self, after: int = 0):
        """The event stream, open from now on, one event at a time (the socket's timeout ends a test that would
        hang)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", f"/api/events?after={after}", headers={"Authorization": f"Bearer {self.key}"})
        response = conn.getresponse()
        assert response.status == 200

        def read():
            while line := response.fp.readline():
                if line.startswith(b"data: "):
                    yield json.loads(line[6:])
        return read()

    def until(self, kind: str, stream, seen=None) -> dict:
        for event in stream:
            if seen is not None:
                seen.append(event)
            if event["type"] == kind:
                return event
        raise AssertionError(f"the stream ended before a {kind} event")

    def ask(self, text: str):
        """Ask; the event stream from just before, to follow the answer."""
        stream = self.events(self.get("/api/state")["seq"])
        self.post("/api/ask", {"text": text})
        return stream


def start_web(settings) -> web.Server:
    """The page's server for `settings` on a free port of 127.0.0.1, serving from a thread."""
    server = web.Server(settings, 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def make_web(kb, tmp_path, fake_llm):
    """make(notes, **settings): the page's server on the fake model, and a Browser signed in to it."""
    servers = []

    def make(notes: Path = kb, **changes) -> Browser:
        values = dict(base_url=fake_llm.base_url, data_dir=tmp_path / "data", index_dir=tmp_path / "index")
        servers.append(start_web(make_settings(notes, **{**values, **changes})))
        return Browser(servers[-1]).sign_in()
    yield make
    for server in servers:
        server.app.close()
        server.shutdown()
        server.server_close()
