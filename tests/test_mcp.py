"""mcp_server.py as an MCP client sees it: a subprocess driven with JSON-RPC lines on stdin and stdout.

Most tests share one server process (re-initializing is allowed, so each test sets the version it needs).
Tests about flags, exit codes and stray output start their own. The last test connects the official `mcp`
Python SDK's stdio client (requirements-dev.txt), and says so when it skips without it.
"""

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tools
from config import VERSION
from conftest import MCP_LATEST, MCP_SERVER, REPLY_TIMEOUT, ROOT, McpProcess, server_env
from mcp_server import MCP_MAX_MESSAGE_BYTES

VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]

# A server with three extra tools, to test what the core does not have yet: a tool that needs a person's
# confirmation (reports what confirm answered), one that only a shell flag may serve, and one that makes
# stray output on stdout in every way a tool could.
PATCHED_SERVER = """
import os, subprocess, sys
sys.path.insert(0, {root!r})
import approval, tools

def forget_note(notebook, file_path="", *, approve):
    approve(approval.Approval("change", "Forget it?"))
    return "confirm answered True"

def fake_shell(notebook, command=""):
    return "ran " + command

def noisy(notebook):
    print("stray print")
    os.write(1, b"stray fd write\\n")
    subprocess.run([sys.executable, "-c", "print('stray child output')"])
    return "made noise"

tools.TOOLS.update(forget_note=tools.tool(forget_note, "Test tool forget_note", {{"file_path": ("string", "a note")}},
                                          asks=True),
                   fake_shell=tools.tool(fake_shell, "Test tool fake_shell", {{"command": ("string", "a command")}},
                                         opt_in="allow_shell"),
                   noisy=tools.tool(noisy, "Test tool noisy", {{}}, read_only=True))

import mcp_server
sys.exit(mcp_server.main())
"""


@pytest.fixture(scope="module")
def notes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mcp")
    kb = root / "notes"
    (kb / "work").mkdir(parents=True)
    (kb / "python.md").write_text("# Python 学习笔记\n\n装饰器很有用。\nUse venv for projects.\n", encoding="utf-8")
    (kb / "work" / "meeting.md").write_text("# Meeting\n\nDecided: ship search in December.\n", encoding="utf-8")
    (root / "secret.md").write_text("the secret outside the notes\n", encoding="utf-8")
    return kb.resolve()


@pytest.fixture(scope="module")
def server(notes):
    # Module-scoped, so it starts before the autouse fixture that moves the cache: give it its own.
    process = McpProcess(notes, env=server_env(KA_INDEX_DIR=str(notes.parent / "index"),
                                               XDG_CACHE_HOME=str(notes.parent / "cache")))
    process.initialize()
    yield process
    assert process.close() == 0
    assert "Traceback" not in process.stderr()


def served_by_default() -> list[dict]:
    """The functions of the registered tools a server started without flags should list, in order."""
    return [t.schema["function"] for t in tools.TOOLS.values() if not t.asks and t.opt_in is None]


def assert_alive(server: McpProcess) -> None:
    assert server.request("ping")["result"] == {}


# --- The handshake ---

@pytest.mark.parametrize("version", VERSIONS)
def test_initialize_answers_the_version_the_client_asked_for(server, version):
    result = server.initialize(version)
    assert result["protocolVersion"] == version
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["serverInfo"]["name"] == "knowledge-agent" and result["serverInfo"]["version"]


@pytest.mark.parametrize("asked", ["2099-01-01", "1.0", ""])
def test_an_unknown_version_gets_the_latest(server, asked):
    assert server.initialize(asked)["protocolVersion"] == MCP_LATEST


# --- Tools ---

def test_tools_list_is_tool_schemas_with_annotations(server):
    server.initialize()
    listed = server.request("tools/list")["result"]["tools"]
    expected = served_by_default()
    assert [tool["name"] for tool in listed] == [function["name"] for function in expected]
    for tool, function in zip(listed, expected):
        assert tool["inputSchema"] == function["parameters"]
        assert tool["description"] == function["description"]
        registered = tools.TOOLS[tool["name"]]
        assert tool["annotations"]["readOnlyHint"] is registered.read_only
        if not registered.read_only:
            assert tool["annotations"]["destructiveHint"] is registered.destructive
    by_name = {tool["name"]: tool for tool in listed}
    assert by_name["search_notes"]["annotations"]["readOnlyHint"] is True
    assert by_name["write_note"]["annotations"]["destructiveHint"] is True  # overwrite: true replaces a note


def test_search_then_read_round_trip(server):
    found = server.call("search_notes", {"query": "装饰器"})
    assert found["isError"] is False and "python.md" in found["content"][0]["text"]
    read = server.call("read_note", {"file_path": "python.md"})
    assert read["isError"] is False
    assert read["content"] == [{"type": "text", "text": read["content"][0]["text"]}]
    assert "装饰器很有用。" in read["content"][0]["text"]
    listed = server.call("list_notes", {"folder": "work"})
    assert "work/meeting.md" in listed["content"][0]["text"]


def test_a_date_range_and_an_unknown_argument_reach_the_tools(server):
    assert {"after", "before"} <= set(server.request("tools/list")["result"]["tools"][0]["inputSchema"]["properties"])
    found = server.call("search_notes", {"query": "", "after": "2000-01-01"})  # every note: made after that day
    assert found["isError"] is False and "python.md — Python 学习笔记 (" in found["content"][0]["text"]
    assert ", modified)\n" in found["content"][0]["text"]
    none = server.call("list_notes", {"folder": "work", "before": "2000-01-31"})
    assert none["content"][0]["text"] == "No notes in work/ dated 2000-01-31 or earlier."
    wrong = server.call("search_notes", {"query": "venv", "path": "python.md"})
    assert wrong["isError"] is True and "its arguments are query, folder, after, before" in wrong["content"][0]["text"]


def test_write_note_creates_a_note_and_refuses_to_replace_it(server, notes):
    created = server.call("write_note", {"file_path": "ideas/mcp.md", "content": "# MCP\n\n一个想法\n"})
    assert created["isError"] is False
    assert (notes / "ideas" / "mcp.md").read_text(encoding="utf-8") == "# MCP\n\n一个想法\n"
    again = server.call("write_note", {"file_path": "ideas/mcp.md", "content": "lost?"})
    assert again["isError"] is True and "already exists" in again["content"][0]["text"]
    assert (notes / "ideas" / "mcp.md").read_text(encoding="utf-8") == "# MCP\n\n一个想法\n"


@pytest.mark.parametrize("path", ["../secret.md", "/etc/passwd", "work/../../secret.md", "~/secret.md"])
def test_a_path_escape_is_a_tool_error_that_leaks_nothing(server, path):
    result = server.call("read_note", {"file_path": path})
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert text.startswith("Error: ") and "the secret" not in text and "root:" not in text


@pytest.mark.parametrize("arguments", [{}, {"file_path": 3}, {"file_path": "python.md", "start_line": "two"}])
def test_bad_arguments_come_back_as_tool_errors_the_model_can_fix(server, arguments):
    result = server.call("read_note", arguments)
    assert result["isError"] is True and result["content"][0]["text"].startswith("Error: ")


# --- JSON-RPC errors ---

@pytest.mark.parametrize("line, code, reply_id", [
    (b"{not json", -32700, None),
    (b"\xff\xfe\x00\x80 binary garbage \xc3", -32700, None),
    (b"[" * 100_000, -32700, None),
    (b'"just a string"', -32600, None),
    (b'{"jsonrpc":"2.0","id":7}', -32600, 7),
    (b'{"jsonrpc":"1.0","id":8,"method":"ping"}', -32600, 8),
    (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":9,"method":17}', -32600, 9),
    (b'{"jsonrpc":"2.0","id":10,"method":"no/such/method"}', -32601, 10),
    (b'{"jsonrpc":"2.0","id":11,"method":"resources/list"}', -32601, 11),
    (b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"no_such_tool"}}', -32602, 12),
    (b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"arguments":{}}}', -32602, 13),
    (b'{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"read_note","arguments":"x"}}', -32602, 14),
    (b'{"jsonrpc":"2.0","id":"s","method":"tools/list","params":[1]}', -32602, "s"),
    (b'{"jsonrpc":"2.0","id":15,"method":"initialize","params":{}}', -32602, 15),
])
def test_each_bad_message_gets_its_error_code_and_the_server_goes_on(server, line, code, reply_id):
    server.send(line)
    reply = server.receive()
    assert reply["jsonrpc"] == "2.0" and reply["id"] == reply_id
    assert reply["error"]["code"] == code and reply["error"]["message"]
    assert ("not UTF-8" in reply["error"]["message"]) == (line.startswith(b"\xff")), reply["error"]["message"]
    assert "result" not in reply
    assert_alive(server)


def test_notifications_and_stray_responses_get_no_reply(server):
    for message in [{"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
                    {"jsonrpc": "2.0", "method": "no/such/notification"},
                    {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "read_note"}},
                    {"jsonrpc": "2.0", "id": 99, "result": {}}]:
        server.send(message)
    server.send(b"   ")  # blank lines are skipped too
    reply = server.request("ping")  # replies come in order, so anything owed would arrive first
    assert reply["result"] == {}


def test_a_line_with_a_byte_order_mark_or_crlf_is_still_read(server):
    server.send(b'\xef\xbb\xbf{"jsonrpc":"2.0","id":"bom","method":"ping"}\r')
    assert server.receive() == {"jsonrpc": "2.0", "id": "bom", "result": {}}


def test_batches_only_in_the_version_that_had_them(server):
    batch = [{"jsonrpc": "2.0", "id": "a", "method": "ping"},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": "b", "method": "tools/call",
              "params": {"name": "read_note", "arguments": {"file_path": "python.md"}}},
             {"jsonrpc": "2.0", "id": "c", "method": "initialize", "params": {"protocolVersion": MCP_LATEST}},
             "junk"]
    try:
        server.initialize("2025-06-18")
        server.send(batch)
        refused = server.receive()
        assert refused["id"] is None and refused["error"]["code"] == -32600

        server.initialize("2025-03-26")
        server.send(batch)
        replies = server.receive()
        assert [reply["id"] for reply in replies] == ["a", "b", "c", None]
        assert replies[0]["result"] == {} and "装饰器" in replies[1]["result"]["content"][0]["text"]
        assert replies[2]["error"]["code"] == -32600 and replies[3]["error"]["code"] == -32600
        server.send([])
        assert server.receive()["error"]["code"] == -32600
        server.send([{"jsonrpc": "2.0", "method": "notifications/initialized"}])  # nothing to answer
        assert_alive(server)
    finally:
        server.initialize(MCP_LATEST)


def test_a_huge_line_is_skipped_and_a_big_one_is_served(server, notes):
    server.send(b'{"jsonrpc":"2.0","id":1,"method":"ping","junk":"' + b"x" * MCP_MAX_MESSAGE_BYTES + b'"}')
    reply = server.receive()
    assert reply["id"] is None and reply["error"]["code"] == -32600 and "longer than" in reply["error"]["message"]
    assert_alive(server)
    content = "# Big\n" + "长笔记的一行。\n" * 100_000  # 2 MB of UTF-8, well inside the limit
    result = server.call("write_note", {"file_path": "big.md", "content": content})
    assert result["isError"] is False and (notes / "big.md").read_text(encoding="utf-8") == content


# --- Own processes: flags, exits, stdout hygiene ---

@pytest.fixture(scope="module")
def patched_server_script(tmp_path_factory) -> Path:
    script = tmp_path_factory.mktemp("patched") / "patched_mcp_server.py"
    script.write_text(PATCHED_SERVER.format(root=str(ROOT)), encoding="utf-8")
    return script


def test_confirm_first_tools_are_served_only_with_the_flag(notes, patched_server_script):
    plain = McpProcess(notes, script=patched_server_script, env=server_env(AUTO_APPROVE="1"))
    try:
        plain.initialize()
        assert "forget_note" not in plain.tool_names()  # AUTO_APPROVE is for the chat, not for MCP
        refused = plain.request("tools/call", {"name": "forget_note", "arguments": {"file_path": "python.md"}})
        assert refused["error"]["code"] == -32602 and "not served" in refused["error"]["message"]
        assert "start the server with --allow-destructive)" in refused["error"]["message"]  # a flag, not a file
        refused = plain.request("tools/call", {"name": "fake_shell", "arguments": {"command": "ls"}})
        assert "start the server with --allow-shell (with ALLOW_SHELL=1))" in refused["error"]["message"]
    finally:
        assert plain.close() == 0

    for args, env in ((["--allow-destructive"], server_env()), ([], server_env(MCP_ALLOW_DESTRUCTIVE="1"))):
        allowed = McpProcess(notes, *args, script=patched_server_script, env=env)
        try:
            allowed.initialize()
            listed = {t["name"]: t for t in allowed.request("tools/list")["result"]["tools"]}
            assert listed["forget_note"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
            result = allowed.call("forget_note", {"file_path": "python.md"})
            assert result == {"content": [{"type": "text", "text": "confirm answered True"}], "isError": False}
        finally:
            assert allowed.close() == 0


def test_shell_tools_need_their_own_flag(notes, patched_server_script):
    for args, served in ((["--allow-destructive"], False), (["--allow-shell"], True)):
        process = McpProcess(notes, *args, script=patched_server_script, env=server_env(ALLOW_SHELL="1"))
        try:
            process.initialize()
            assert ("fake_shell" in process.tool_names()) is served
        finally:
            assert process.close() == 0


def test_stdout_carries_only_protocol_messages(notes, patched_server_script):
    process = McpProcess(notes, script=patched_server_script)
    process.initialize()
    assert process.call("noisy", {})["content"][0]["text"] == "made noise"
    assert_alive(process)
    assert process.close() == 0
    stdout_lines = []
    while (line := process.lines.get(timeout=REPLY_TIMEOUT)) is not None:
        stdout_lines.append(line)
    assert stdout_lines == []  # every line was a reply already received and parsed as JSON
    for noise in ("stray print", "stray fd write", "stray child output"):
        assert noise in process.stderr()


def test_version_and_help_name_the_command_run(tmp_path):
    """Found by an outside tester: --version was an unrecognized argument, and --help named mcp_server.py even
    for the installed knowledge-agent-mcp (its install is checked in test_cli_habits)."""
    version = subprocess.run([sys.executable, str(MCP_SERVER), "--version"], capture_output=True, text=True,
                             env=server_env(), timeout=REPLY_TIMEOUT)
    assert (version.returncode, version.stdout) == (0, f"knowledge-agent {VERSION}\n"), version.stderr
    renamed = tmp_path / "knowledge-agent-mcp"
    renamed.write_text(f"import sys; sys.path.insert(0, {str(ROOT)!r}); import mcp_server; mcp_server.main()")
    usage = subprocess.run([sys.executable, str(renamed), "--help"], capture_output=True, text=True,
                           env=server_env(), timeout=REPLY_TIMEOUT)
    assert usage.stdout.startswith("usage: knowledge-agent-mcp [-h] [--version]"), usage.stderr


def test_closed_stdin_exits_0_quietly(notes):
    process = McpProcess(notes)
    assert process.close() == 0
    assert process.lines.get(timeout=REPLY_TIMEOUT) is None  # not one byte on stdout
    assert "Traceback" not in process.stderr()


def test_a_client_that_stops_reading_ends_the_server_quietly(notes):
    proc = subprocess.Popen([sys.executable, str(MCP_SERVER), "--kb", str(notes)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env())
    proc.stdout.close()  # the reply to the ping below has nowhere to go
    _, stderr = proc.communicate(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', timeout=REPLY_TIMEOUT)
    assert proc.returncode == 0 and b"Traceback" not in stderr


@pytest.mark.skipif(sys.platform == "win32", reason="no SIGINT delivery to a child on Windows")
def test_ctrl_c_exits_without_a_traceback(notes):
    process = McpProcess(notes)
    process.initialize()
    assert_alive(process)  # the loop is running
    process.proc.send_signal(signal.SIGINT)
    assert process.proc.wait(timeout=REPLY_TIMEOUT) == 130
    process.lines.get(timeout=REPLY_TIMEOUT)  # stdout closed: the stderr reader has everything too
    assert "Traceback" not in process.stderr()


# --- The notes folder ---

@pytest.fixture
def app(tmp_path) -> Path:
    """A copy of the app with its sample notes and no .env: what a fresh clone sees, whatever the
    developer's .env or user settings hold."""
    copy = tmp_path / "app"
    copy.mkdir()
    for source in ROOT.glob("*.py"):
        shutil.copy(source, copy)
    shutil.copytree(ROOT / "knowledge_base", copy / "knowledge_base", ignore=shutil.ignore_patterns(".history"))
    return copy


@pytest.fixture
def here(tmp_path) -> Path:
    """The folder the server starts in, resolved as the server names it (macOS: /private/var/…)."""
    return tmp_path.resolve()


def start(app: Path, *args: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    """The server run until its stdin closes at once: exit 0 after its start-up log line, or 2 with the error."""
    return subprocess.run([sys.executable, str(app / "mcp_server.py"), *args], input=b"", capture_output=True,
                          cwd=cwd, env=server_env(XDG_CONFIG_HOME=str(cwd / "config"), **env), timeout=REPLY_TIMEOUT)


def test_without_a_notes_folder_it_refuses_in_one_line_rather_than_serve_the_sample_notes(app, here):
    result = start(app, cwd=here)
    assert result.returncode == 2 and result.stdout == b""
    stderr = result.stderr.decode()
    assert stderr.count("\n") == 1 and "--kb PATH" in stderr and "KNOWLEDGE_BASE" in stderr
    assert start(app, "--kb", str(app / "knowledge_base"), cwd=here).returncode == 0  # named: served


def test_knowledge_base_from_the_environment_or_dotenv_is_served(app, here):
    (here / "notes").mkdir()
    served = f"for the notes in {here / 'notes'}\n"
    assert served in start(app, cwd=here, KNOWLEDGE_BASE=str(here / "notes")).stderr.decode()
    (app / ".env").write_text(f"KNOWLEDGE_BASE={here / 'notes'}\n", encoding="utf-8")
    assert served in start(app, cwd=here).stderr.decode()


def test_a_relative_kb_is_taken_from_the_working_directory_and_named_in_full(app, here):
    (here / "notes").mkdir()
    (here / "a.md").write_text("a note, not a folder\n", encoding="utf-8")
    result = start(app, "--kb", "notes", cwd=here)
    assert result.returncode == 0 and f"for the notes in {here / 'notes'}\n" in result.stderr.decode()
    for given, problem in [("nope", "not found"), ("a.md", "is a file")]:
        result = start(app, "--kb", given, cwd=here)
        stderr = result.stderr.decode()
        assert result.returncode == 2 and result.stdout == b"" and stderr.count("\n") == 1
        assert problem in stderr and str(here / given) in stderr


# --- A real client ---

def test_the_official_python_sdk_connects_lists_and_calls(notes):
    mcp = pytest.importorskip("mcp", reason="the official MCP SDK is not installed: pip install -r "
                                            "requirements-dev.txt")
    import anyio  # the SDK's own dependency
    from mcp.client.stdio import stdio_client

    async def session() -> list[dict]:
        params = mcp.StdioServerParameters(command=sys.executable, args=[str(MCP_SERVER), "--kb", str(notes)],
                                           env=server_env())
        async with stdio_client(params) as (read, write), mcp.ClientSession(read, write) as client:
            results = [await client.initialize(), await client.list_tools(),
                       await client.call_tool("search_notes", {"query": "December"}),
                       await client.call_tool("read_note", {"file_path": "../secret.md"})]
            # The same JSON for SDK 1.x (camelCase fields) and 2.x (snake_case fields, camelCase aliases).
            return [result.model_dump(by_alias=True, mode="json") for result in results]

    initialized, listed, found, escaped = anyio.run(session)
    assert initialized["protocolVersion"] in VERSIONS
    assert [tool["name"] for tool in listed["tools"]] == [function["name"] for function in served_by_default()]
    assert found["isError"] is False and "work/meeting.md" in found["content"][0]["text"]
    assert escaped["isError"] is True and "the secret" not in escaped["content"][0]["text"]
