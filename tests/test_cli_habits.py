"""The habits users of llm, aider and any Unix tool expect, through the real entry point: main.main in this
process for what a flag, a setting or piped text does (`call_main`), a process for the scripting contract (exit
status, the real streams, what a fresh start imports) and the installed command, and a real terminal (a pty
that is the program's controlling terminal, conftest.Terminal) for the chat."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import fake_server
import config
import main
import reading
from conftest import MAIN, MCP_SERVER, NO_SERVER, ROOT, Terminal, child_env, posix_only, run_main, run_tool
from notebook import Notebook

PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"


# --- Providers: a key goes to its own provider only ---

def test_an_openai_key_is_sent_to_openai_base_url_only(call_main, kb):
    with fake_server.FakeLLM(replies=[{"content": "hi"}]) as openai_like:
        result = call_main("-v", "hello", kb=kb, base_url=None, key=None,
                           extra_env={"OPENAI_API_KEY": "sk-openai", "OPENAI_BASE_URL": openai_like.base_url})
    assert result.returncode == 0, result.stderr
    assert openai_like.authorizations == ["Bearer sk-openai"]
    assert openai_like.requests[0]["model"] == "gpt-5.4-mini"  # OpenAI's default, not DeepSeek's
    assert f"model gpt-5.4-mini at {openai_like.base_url}" in result.stderr


def test_a_deepseek_endpoint_never_receives_the_openai_key(call_main, kb):
    with fake_server.FakeLLM(replies=[{"content": "hi"}]) as deepseek_like:
        result = call_main("hello", kb=kb, base_url=deepseek_like.base_url, key=None,
                           extra_env={"OPENAI_API_KEY": "sk-openai"})
    assert result.returncode == 2 and "No API key" in result.stderr
    assert deepseek_like.authorizations == []


def test_a_local_server_in_the_environment_beats_a_deepseek_key_in_config_env(call_main, kb, tmp_path):
    """Found by an outside tester: the config file's DeepSeek key sent the question to the cloud although the
    environment pointed at a local server. (The file's DeepSeek is a dead port here, so no test leaves 127.0.0.1.)"""
    user_file = tmp_path / "config" / "knowledge-agent" / "config.env"
    user_file.parent.mkdir(parents=True)
    user_file.write_text(f"DEEPSEEK_API_KEY=sk-cloud\nDEEPSEEK_BASE_URL={NO_SERVER}\n")
    with fake_server.FakeLLM(replies=[{"content": "hi"}]) as local:
        result = call_main("-v", "q", kb=kb, base_url=None, key=None,
                           extra_env={"OPENAI_BASE_URL": local.base_url, "OPENAI_API_KEY": "x"})
    assert result.returncode == 0 and local.authorizations == ["Bearer x"], result.stderr
    assert f"at {local.base_url}" in result.stderr


def test_verbose_usage_after_a_connection_failure_is_never_0_plus_0(call_main, kb):
    """Found by an outside tester: -v with no server listening printed "usage: 0 prompt + 0 completion tokens"."""
    result = call_main("-v", "q", kb=kb)  # NO_SERVER: refused at once
    assert result.returncode == 1 and "Could not connect" in result.stderr
    assert "usage: no API call was answered" in result.stderr and "0 prompt" not in result.stderr
    before = call_main(kb=kb, stdin="/usage\n", key=None)
    assert "last answer : no API call was answered\n" in before.stderr, before.stderr
    assert "conversation: no tokens reported yet\n" in before.stderr and "0 prompt" not in before.stderr


def test_help_names_only_what_this_copy_has(call_main, kb, monkeypatch):
    """Found by an outside tester: an installed `ka --help` named a default knowledge_base/ and .env.example,
    neither of which it has (the installed command is checked below too)."""
    clone = " ".join(call_main("--help", kb=kb).stdout.split())
    assert f"--kb PATH notes folder (KNOWLEDGE_BASE; default the sample notes in {ROOT / 'knowledge_base'})" in clone
    monkeypatch.setattr(main, "SAMPLE_NOTES", ROOT / "no-such-folder")
    installed = " ".join(call_main("--help", kb=kb).stdout.split())
    assert "--kb PATH notes folder (KNOWLEDGE_BASE) -m" in installed
    for text in (clone, installed):
        assert ".env.example" not in text and "knowledge-agent/config.env" in text


def test_flags_for_key_model_thinking_and_effort(call_main, fake_llm, kb):
    fake_llm.replies = [{"content": "ok"}]
    result = call_main("--api-key", "sk-flag", "-m", "my-model", "--thinking", "off", "--effort", "high", "q",
                      kb=kb, base_url=fake_llm.base_url, key=None)
    assert result.returncode == 0, result.stderr
    request = fake_llm.requests[0]
    assert fake_llm.authorizations == ["Bearer sk-flag"] and request["model"] == "my-model"
    assert request["thinking"] == {"type": "disabled"} and request["reasoning_effort"] == "high"


def test_version_and_bad_base_url(call_main, kb):
    version = call_main("--version", kb=kb)
    assert version.returncode == 0 and re.fullmatch(r"knowledge-agent \d+\.\d+\.\d+\n", version.stdout)
    for url in ("notaurl", "https://api.openai.com/v1   (Ollama: http://localhost:11434/v1)"):
        bad = call_main("q", kb=kb, base_url=url)
        assert bad.returncode == 2 and f"DEEPSEEK_BASE_URL={url!r} is not an API address" in bad.stderr
        assert "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1


# --- The scripting contract: stdout is the answer, a notice goes to stderr with exit code 3 ---

@pytest.mark.parametrize("reply, notice", [
    ({"content": "half an ans", "finish_reason": "length"}, "cut off"),
    ({"content": ""}, "empty answer"),
])
def test_an_incomplete_answer_says_so_on_stderr_and_exits_3(fake_llm, kb, reply, notice):
    fake_llm.replies = [reply, reply]  # an empty reply is asked once more
    result = run_main("q", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 3
    assert notice in result.stderr and notice not in result.stdout
    assert result.stdout.strip() == reply["content"]


def test_the_round_limit_is_not_part_of_the_answer(call_main, fake_llm, kb):
    fake_llm.replies = [{"tool_calls": [{"name": "list_notes", "arguments": "{}"}]}] * 2
    result = call_main("--max-rounds", "2", "loop", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 3 and "limit of 2 model calls" in result.stderr
    assert "limit" not in result.stdout


# --- Piped input ---

def test_piped_text_goes_with_the_question(call_main, fake_llm, kb):
    fake_llm.replies = [{"content": "a summary"}]
    result = call_main("summarise this", kb=kb, base_url=fake_llm.base_url, stdin="line one\nline two\n")
    assert result.returncode == 0 and result.stdout == "a summary\n"
    sent = fake_llm.requests[0]["messages"][-1]["content"]
    assert sent.startswith("summarise this") and "line one\nline two" in sent
    assert len(fake_llm.requests) == 1  # one question, not one per piped line


def test_huge_piped_text_is_refused_before_any_call(call_main, fake_llm, kb):
    result = call_main("summarise this", kb=kb, base_url=fake_llm.base_url, stdin="word " * 100_000,
                      extra_env={"CONTEXT_TOKENS": "8000"})
    assert result.returncode == 2 and "piped text is too long" in result.stderr
    assert fake_llm.requests == []


# --- Conversations belong to a notes folder ---

def test_continue_and_sessions_are_per_notes_folder(call_main, fake_llm, kb, tmp_path):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "soup.md").write_text("# Soup\n")
    fake_llm.replies = [{"content": "work answer"}, {"content": "recipe answer"}, {"content": "again"},
                        {"content": "other"}]
    assert call_main("about work", kb=kb, base_url=fake_llm.base_url).returncode == 0
    assert call_main("about soup", kb=recipes, base_url=fake_llm.base_url).returncode == 0
    again = call_main("--continue", "and then?", kb=kb, base_url=fake_llm.base_url)
    sent = [m["content"] for m in fake_llm.requests[2]["messages"] if m["role"] == "user"]
    assert sent == ["about work", "and then?"], again.stderr
    listed = call_main("--list-sessions", kb=kb)
    assert f"(notes: {kb})" in listed.stdout and f"(notes: {recipes})" in listed.stdout
    soup_id = re.search(r"(\d+) .*about soup", listed.stdout)[1]
    other = call_main("--resume", soup_id, "q", kb=kb, base_url=fake_llm.base_url)
    assert f"was about {recipes}" in other.stderr


# --- The chat in a real terminal ---

@pytest.fixture
def terminal_env(kb, fake_llm, tmp_path):
    return child_env(DEEPSEEK_API_KEY="x", DEEPSEEK_BASE_URL=fake_llm.base_url, KNOWLEDGE_BASE=str(kb),
                     NO_COLOR="1", XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"),
                     TERM="xterm")


@posix_only
def test_a_pasted_block_and_a_continued_line_are_one_question_each(terminal_env, fake_llm, tmp_path):
    fake_llm.replies = [{"content": "one"}, {"content": "two"}]
    chat = Terminal(terminal_env)
    chat.expect("\n> ")
    chat.send(PASTE_START + b"first line\nsecond line" + PASTE_END + b"\r")
    chat.expect("\n> ", 2)
    chat.send(b"typed on \\\r")
    chat.expect("… ")
    chat.send(b"purpose\r")
    chat.expect("\n> ", 3)
    chat.send(b"\x04")
    assert chat.close() == 0
    questions = [r["messages"][-1]["content"] for r in fake_llm.requests]
    assert questions == ["first line\nsecond line", "typed on \npurpose"]
    history = (tmp_path / "state" / "knowledge-agent" / "history").read_text().splitlines()
    assert history == ["first line second line", "typed on  purpose"]  # one entry each for the up arrow


@posix_only
def test_ctrl_c_clears_a_typed_line_then_leaves_and_lines_are_kept(terminal_env, fake_llm, tmp_path):
    fake_llm.replies = [{"content": "answered"}]
    chat = Terminal(terminal_env)
    chat.expect("\n> ")
    chat.send(b"never sent")
    chat.expect("never sent")
    chat.interrupt()
    chat.expect("\n> ", 2)
    chat.send(b"find vim notes\r")
    chat.expect("answered")
    chat.expect("\n> ", 3)
    chat.interrupt()  # on an empty line: leave
    assert chat.close() == 0
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["find vim notes"]
    history = tmp_path / "state" / "knowledge-agent" / "history"
    assert "find vim notes" in history.read_text() and oct(history.stat().st_mode)[-3:] == "600"
    again = Terminal(terminal_env)  # the up arrow brings it back in the next run
    again.expect("\n> ")
    again.send(b"\x1b[A")
    again.expect("find vim notes")
    again.interrupt()
    again.expect("\n> ", 2)
    again.send(b"\x04")
    assert again.close() == 0


@posix_only
def test_waiting_and_reasoning_fold_to_one_line(terminal_env, fake_llm):
    fake_llm.replies = [{"reasoning": "Let me weigh the notes carefully. " * 8, "content": "The answer."}]
    chat = Terminal(terminal_env)
    chat.expect("\n> ")
    chat.send(b"think hard\r")
    screen = chat.expect("The answer.")
    assert "waiting for the model…" in screen and re.search(r"thought for \d+ s \(/reasoning shows it\)", screen)
    chat.expect("\n> ", 2)
    chat.send(b"/reasoning\r")
    assert "Let me weigh the notes carefully. " * 8 in chat.expect("\n> ", 3).replace("\r\n", "")
    chat.send(b"\x04")
    assert chat.close() == 0


def test_no_status_line_when_stderr_is_not_a_terminal(call_main, fake_llm, kb):
    fake_llm.replies = [{"reasoning": "pondering", "content": "ok"}]
    result = call_main("q", kb=kb, base_url=fake_llm.base_url)
    assert "waiting" not in result.stderr and "thinking: pondering" in result.stderr


# --- /read for a person ---

def test_read_goes_past_the_first_screenful_in_a_persons_words(call_main, kb):
    (kb / "long.md").write_text("".join(f"line {n}\n" for n in range(1, 501)))
    result = call_main(kb=kb, stdin="/read long.md\n/read long.md 450\n/read long.md 900\n/read nothing.md\n", key=None)
    first, second = result.stdout.split("long.md (lines ")[1:]
    assert first.startswith("1-200 of 500") and "[… more: /read long.md 201]" in first
    assert second.startswith("450-500 of 500") and "line 500" in second
    assert "line 900 is outside the note" in result.stderr and "/search or /list" in result.stderr
    assert not re.search(r"read_note|search_notes|list_notes|start_line|file_path", result.stdout + result.stderr)


def test_list_speaks_to_the_person_not_the_model(call_main, kb):
    """Found by an outside tester: /list of a missing folder said "Call list_notes to see the folders.", and its
    private-notes line "(the person keeps them from the model)"; the model's wording stays the model's."""
    (kb / "diary.md").write_text("---\nprivate: true\n---\nmine\n")
    (kb / "plans.md").write_text("---\nprivate: true\n---\nmine too\n")
    result = call_main(kb=kb, stdin="/list\n/list nofolder\n", key=None)
    assert "2 private notes not listed (.kaignore or private: true)." in result.stdout
    assert "there is no folder 'nofolder' in the notes. Use /list to see every note and its folder." in result.stderr
    assert not re.search(r"list_notes|the model", result.stdout + result.stderr)
    notebook = Notebook(config.load_settings(kb=str(kb)))
    assert "2 private note(s) not listed (the person keeps them from the model)." in reading.list_notes(notebook)
    listed = run_tool(notebook, "list_notes", folder="nofolder")  # a folder a small model made up: all notes, said so
    assert listed.startswith('(There is no folder "nofolder" in the notes, so all of them are listed.)\n3 note(s)')


def test_a_failed_command_is_not_output_and_exits_1(kb):
    for command in ("/read nothing.md", "/nonsense", "/search", "/undo", "/resume 99"):
        result = run_main(command, kb=kb, key=None)
        assert result.returncode == 1 and result.stdout == "", command
        assert result.stderr.startswith("error: "), command
    assert run_main("/read vim.md", kb=kb, key=None).returncode == 0


def test_piped_text_in_a_legacy_encoding_is_decoded(call_main, fake_llm, kb):
    fake_llm.replies = [{"content": "好"}]
    result = call_main("总结一下", kb=kb, base_url=fake_llm.base_url, key="x",
                       stdin="会议纪要：明天发布".encode("gbk"))
    assert result.returncode == 0, result.stderr
    assert "会议纪要：明天发布" in fake_llm.requests[0]["messages"][-1]["content"]


# --- An installable command: one package, nothing generic at the top level of site-packages ---

TOOLS_LIST = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip install .` would install, built once by this Python's setuptools without network, from a
    copy of the clone that also holds what must never be packaged (a .env with a key, caches, a build/)."""
    source, out = tmp_path_factory.mktemp("clone"), tmp_path_factory.mktemp("dist")
    shutil.copytree(ROOT, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".history"))
    (source / ".env").write_text("DEEPSEEK_API_KEY=sk-secret\n")
    build = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "build_meta.build_wheel(sys.argv[1])", str(out)],
                           cwd=source, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return next(out.glob("*.whl"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv where pip installed the wheel beside another distribution's top-level `config` package
    (as `pip install config`, PyPI's, puts it). The requirements come from this Python: no network."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    (site / "requirements.pth").write_text("".join(f"{Path(importlib.util.find_spec(name).origin).parent.parent}\n"
                                                   for name in ("openai", "dotenv")))
    (site / "config").mkdir()
    (site / "config" / "__init__.py").write_text('"""Another project\'s config."""\n')
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--quiet", "--no-index", "--no-deps", str(wheel)], capture_output=True, text=True,
                             timeout=300)
    assert install.returncode == 0, install.stderr
    return venv


def test_the_wheel_is_one_package_of_the_modules_and_the_page(wheel):
    from config import VERSION
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {name.split("/")[0] for name in names} == {"knowledge_agent", f"knowledge_agent-{VERSION}.dist-info"}
    page = {f"knowledge_agent/{path.relative_to(ROOT).as_posix()}" for path in (ROOT / "static").rglob("*")
            if path.is_file()}
    modules = {f"knowledge_agent/{path.name}" for path in ROOT.glob("*.py")}
    assert {name for name in names if name.startswith("knowledge_agent/")} == modules | page  # no .env, no tests
    assert "knowledge_agent/index.html" not in page and "knowledge_agent/static/index.html" in page
    entry_points = zipfile.ZipFile(wheel).read(f"knowledge_agent-{VERSION}.dist-info/entry_points.txt").decode()
    assert {"knowledge-agent", "ka", "knowledge-agent-mcp"} <= set(re.findall(r"^([\w-]+) =", entry_points, re.M))


def test_pip_installs_a_knowledge_agent_command(installed, kb, tmp_path):
    env = child_env(KNOWLEDGE_BASE=str(kb))
    for command in ("knowledge-agent", "ka"):
        result = subprocess.run([installed / "bin" / command, "--version"], capture_output=True, text=True,
                                env=env, cwd=tmp_path, timeout=60)
        assert result.returncode == 0 and result.stdout.startswith("knowledge-agent "), result.stderr
    listed = subprocess.run([installed / "bin" / "ka", "--kb", str(kb), "/list"], capture_output=True, text=True,
                            env=child_env(DEEPSEEK_API_KEY="x"), cwd=tmp_path, timeout=60)
    assert listed.returncode == 0 and "vim.md" in listed.stdout, listed.stderr
    unset = subprocess.run([installed / "bin" / "ka", "q"], capture_output=True, text=True, timeout=60,
                           env=child_env(DEEPSEEK_API_KEY="x"), cwd=tmp_path)
    assert unset.returncode == 2 and "config.env" in unset.stderr  # no sample notes: says where to set them
    served = subprocess.run([installed / "bin" / "knowledge-agent-mcp", "--kb", str(kb)], input=TOOLS_LIST,
                            capture_output=True, text=True, env=child_env(), cwd=tmp_path, timeout=60)
    assert "search_notes" in [tool["name"] for tool in json.loads(served.stdout)["result"]["tools"]], served.stderr
    helped = subprocess.run([installed / "bin" / "ka", "--help"], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=60)
    assert helped.stdout.startswith("usage: ka ") and "knowledge_base" not in helped.stdout, helped.stderr
    for flag, start in (("--version", "knowledge-agent "), ("--help", "usage: knowledge-agent-mcp ")):
        mcp = subprocess.run([installed / "bin" / "knowledge-agent-mcp", flag], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=60)
        assert mcp.returncode == 0 and mcp.stdout.startswith(start), mcp.stderr


def test_installing_adds_no_generic_name_and_the_package_finds_its_page(installed, tmp_path):
    python = installed / "bin" / "python"
    other = subprocess.run([python, "-c", "import config; print(config.__doc__)"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert other.stdout == "Another project's config.\n", other.stderr  # still the other project's
    tools = subprocess.run([python, "-c", "import tools"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert "No module named 'tools'" in tools.stderr
    page = subprocess.run([python, "-c", "import sys, knowledge_agent; sys.path.insert(0, knowledge_agent.__path__[0]); "
                           "import web; print(web.STATIC)"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert page.stdout.startswith(str(installed)) and (Path(page.stdout.strip()) / "index.html").is_file(), page.stderr


# --- Commands that need no model start without loading the openai SDK (half a second) ---

@pytest.mark.parametrize("command", ["--version", "--help", "/search vim", "/list", "/read vim.md", "--list-sessions",
                                     "--reindex", "mcp_server.py tools/list"])
def test_commands_without_the_model_never_import_openai(kb, command):
    mcp = command.startswith("mcp_server.py")
    script, argument, stdin = (MCP_SERVER, [], TOOLS_LIST) if mcp else (MAIN, [command], "")
    result = subprocess.run([sys.executable, "-X", "importtime", script, "--kb", str(kb), *argument], input=stdin,
                            capture_output=True, text=True, env=child_env(DEEPSEEK_API_KEY="x"), timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"\| +config$", result.stderr, re.M)  # -X importtime names every module imported
    assert not re.search(r"\| +openai$", result.stderr, re.M)


def test_a_question_imports_openai(fake_llm, kb):
    result = subprocess.run([sys.executable, "-X", "importtime", MAIN, "--kb", str(kb), "hello"], capture_output=True,
                            text=True, env=child_env(DEEPSEEK_API_KEY="x", DEEPSEEK_BASE_URL=fake_llm.base_url),
                            stdin=subprocess.DEVNULL, timeout=60)
    assert result.returncode == 0 and re.search(r"\| +openai$", result.stderr, re.M)


def test_piped_lines_that_are_not_utf8_never_crash(kb):
    result = subprocess.run([sys.executable, str(MAIN)], input=b"/search vim\n/search \xc4\xe3\n", capture_output=True,
                            env=child_env(KNOWLEDGE_BASE=str(kb), PYTHONIOENCODING="utf-8:strict"), timeout=60)
    assert b"Traceback" not in result.stderr and b"vim.md" in result.stdout
