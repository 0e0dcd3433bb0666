"""Shared test fixtures and helpers: a notes folder in tmp_path, Settings and a Notebook for it (each test makes its
own: nothing of one test's index, vectors or privacy verdicts reaches the next), a stub OpenAI client, the one
environment for programs a test starts (`child_env`), the one tool runner (`run_tool`), the command line run in
this process (`call_main`) or as its own process (`run_main`), and the one pty driver (`Terminal`)."""

import dataclasses
import io
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_server  # noqa: E402
import main  # noqa: E402
import tools  # noqa: E402
from agent import UI  # noqa: E402
import config  # noqa: E402
from config import Settings  # noqa: E402
from notebook import Notebook  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MAIN = ROOT / "main.py"
NO_SERVER = "http://127.0.0.1:9/v1"  # the discard port: a connection there is refused at once

# A runner that starts the tests in the background (bash's `&` without job control) hands them SIGINT ignored,
# and every child would inherit that: the Ctrl+C tests need the person's Ctrl+C back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every variable a setting is read from (each provider's too): a test sees none of the developer's.
SETTINGS_VARIABLES = tuple(dict.fromkeys(field.metadata["variable"].format(provider=provider)
                                         for field in dataclasses.fields(Settings) for provider in config.PROVIDERS))
CLEARED = SETTINGS_VARIABLES + ("NO_COLOR",)


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
    logging.getLogger("knowledge-agent").handlers[:] = []  # a test's UI set up before must not hear this one's


def child_env(**extra) -> dict:
    """The environment of a program a test starts: the test's own, cleaned as clean_environment cleans it (even
    of what the test set since), its streams in UTF-8, then `extra`."""
    return {name: value for name, value in os.environ.items() if name not in CLEARED} | {
        "PYTHONIOENCODING": "utf-8"} | extra


def main_env(kb, base_url=NO_SERVER, key="test-key", extra_env=None) -> dict:
    """The settings `python main.py` gets from its environment in the command-line tests."""
    return {"KNOWLEDGE_BASE": str(kb)} | ({"DEEPSEEK_BASE_URL": base_url} if base_url else {}) | (
        {"DEEPSEEK_API_KEY": key} if key else {}) | (extra_env or {})


def run_main(*args, kb, base_url=NO_SERVER, stdin="", key="test-key", extra_env=None) -> subprocess.CompletedProcess:
    """`python main.py ARGS` as its own process, `stdin` piped: for what only a process shows (exit status, the
    real streams and their encodings, a kill)."""
    return subprocess.run([sys.executable, str(MAIN), *args], input=stdin, capture_output=True, text=True,
                          env=child_env(**main_env(kb, base_url, key, extra_env)), timeout=60, encoding="utf-8")


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


def run_tool(notebook, name, ask=None, **args) -> str:
    """One tool call as the model sends it (arguments as JSON) through tools.execute_tool: the text it returns.
    `ask(approval)` answers a confirmation: True, False or None (nobody to ask)."""
    return tools.execute_tool(name, json.dumps(args, ensure_ascii=False), notebook, ask).text


def tool_call(name, **args) -> dict:
    """A tool call in a scripted reply (fake_server's format), its arguments as the model sends them."""
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}


posix_only = pytest.mark.skipif(os.name == "nt", reason="needs a pty")


class Terminal:
    """`python main.py ARGS` on a pty that is its controlling terminal, so Ctrl+C is a real SIGINT."""

    def __init__(self, env: dict, *args):
        import fcntl
        import pty
        import termios
        self.controller, terminal = pty.openpty()

        def become_controlling_terminal():
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # a test run in the background ignores it
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        self.proc = subprocess.Popen([sys.executable, str(MAIN), *args], stdin=terminal, stdout=terminal,
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

    def interrupt(self) -> None:
        """Ctrl+C once the program waits for a key: CPython's readline misses a SIGINT that comes while it
        is handling the key before (it only looks for one when select() is interrupted)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self._waiting_for_a_key():
            select.select([self.controller], [], [], 0.01)
        self.send(b"\x03")

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


GARDEN = Path("/work/shared/corpus/knowledge-garden.tar.gz")  # a real vault; absent on a clean clone: those tests skip


def unpack_garden(folder: Path) -> Path:
    """The knowledge-garden vault unpacked into folder (its one top folder), or the test is skipped."""
    if not GARDEN.exists():
        pytest.skip("the knowledge-garden corpus is not on this machine")
    with tarfile.open(GARDEN) as archive:
        archive.extractall(folder, filter="data")
    return next(path for path in folder.iterdir() if path.is_dir()).resolve()


@pytest.fixture(scope="module")
def garden(tmp_path_factory) -> Path:
    return unpack_garden(tmp_path_factory.mktemp("garden"))


def make_settings(kb: Path, **changes) -> Settings:
    values = dict(api_key="test-key", base_url="http://127.0.0.1:9/v1", model="test-model", kb=kb,
                  max_rounds=10, stream=True, thinking=None, reasoning_effort=None, show_reasoning=True,
                  auto_approve=False)
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
