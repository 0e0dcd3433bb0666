"""Shared test fixtures: a notes folder in tmp_path, Settings for it, and a stub OpenAI client."""

import dataclasses
import logging
import sys
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent  # noqa: E402
import fake_server  # noqa: E402
from agent import UI  # noqa: E402
import config  # noqa: E402
from config import Settings  # noqa: E402

# Every variable a setting is read from (each provider's too): a test sees none of the developer's.
SETTINGS_VARIABLES = tuple(dict.fromkeys(field.metadata["variable"].format(provider=provider)
                                         for field in dataclasses.fields(Settings) for provider in config.PROVIDERS))


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No test sees the developer's keys, .env-loaded settings or real cache and data folders."""
    for name in SETTINGS_VARIABLES + ("NO_COLOR",):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    logging.getLogger("knowledge-agent").handlers[:] = []  # a test's UI set up before must not hear this one's


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


def make_settings(kb: Path, **changes) -> Settings:
    values = dict(api_key="test-key", base_url="http://127.0.0.1:9/v1", model="test-model", kb=kb,
                  max_rounds=10, stream=True, thinking=None, reasoning_effort=None, show_reasoning=True,
                  auto_approve=False)
    values.update(changes)
    return Settings(**values)


@pytest.fixture
def settings(kb) -> Settings:
    return make_settings(kb)


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
