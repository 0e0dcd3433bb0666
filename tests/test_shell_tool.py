"""The `bash` tool as the agent and the person meet it: off by default, confirmed, sandboxed, interruptible.

Unit-level checks go through tools.execute_tool; end-to-end ones run main.py against the fake server (in this
process, or as one where Ctrl+C must reach it).
Inside the sandbox the notes folder is read-only, so a command that must leave a trace writes to $TMPDIR
(its scratch folder) or stdout. Where a test needs a command that could change the notes, it makes
shell.sandbox_problem() name a reason, as on a system without Landlock.
"""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from fake_server import unfenced

import main
import terminal
import mcp_server
import shell
import approval
import tools
from agent import run_agent
from config import load_settings
from conftest import (MAIN, ROOT, Recorder, StubClient, Terminal, call, child_env, group_members, make_notebook,
                      make_settings, posix_only, press_ctrl_c_when_exists, running, sandboxed, snapshot)

NO_SANDBOX = "Landlock is not available on this system"
# Starts a background sleep, leaves "its pid, the group's id" in $TMPDIR/pids, then sleeps in the foreground.
START_AND_WAIT = 'sleep 30 & echo $! $$ > "$TMPDIR/p"; mv "$TMPDIR/p" "$TMPDIR/pids"; sleep 30'


def names(schemas) -> list[str]:
    return [schema["function"]["name"] for schema in schemas]


def tool_results(request: dict) -> list[str]:
    return [unfenced(m["content"]) for m in request["messages"] if m["role"] == "tool"]


@pytest.fixture
def unsandboxed(monkeypatch):
    """As on a system without Landlock: commands run as the person, and can change the notes."""
    monkeypatch.setattr(shell, "sandbox_problem", lambda: NO_SANDBOX)


# --- off by default -------------------------------------------------------------------------------

def test_shell_is_off_by_default(kb, monkeypatch):
    monkeypatch.setenv("KNOWLEDGE_BASE", str(kb))
    settings = load_settings()
    assert settings.allow_shell is False
    assert "bash" in tools.TOOLS and "bash" not in tools.offered(settings)
    assert "bash" not in names(tools.tool_schemas(settings))


def test_allow_shell_env_and_flag_offer_the_tool(kb, monkeypatch):
    monkeypatch.setenv("KNOWLEDGE_BASE", str(kb))
    assert "bash" in names(tools.tool_schemas(load_settings(allow_shell=True)))
    monkeypatch.setenv("ALLOW_SHELL", "1")
    monkeypatch.setenv("SHELL_TIMEOUT", "5")
    settings = load_settings()
    assert "bash" in names(tools.tool_schemas(settings)) and settings.shell_timeout == 5.0


def test_called_while_disabled_it_runs_nothing(notebook, kb, unsandboxed):
    asked = []
    result = tools.execute_tool("bash", {"command": "touch made.txt"}, notebook,
                                ask=lambda a: asked.append(a.detail) or True)
    assert result.error and result.text.startswith("Error: the shell tool is disabled")
    assert "--allow-shell" in result.text
    assert not (kb / "made.txt").exists() and asked == []


# --- confirmation and the sandbox -----------------------------------------------------------------

def test_approved_command_runs_in_the_notes_folder(kb):
    notebook = make_notebook(kb, allow_shell=True)
    asked = []
    result = tools.execute_tool("bash", {"command": "pwd; ls"}, notebook,
                                ask=lambda a: asked.append(a.detail) or True)
    assert not result.error and "exit_code=0" in result.text
    assert str(kb) in result.text and "python.md" in result.text and "work" in result.text
    assert "pwd; ls" in asked[0]


def test_declined_command_does_not_run(kb, unsandboxed):
    notebook = make_notebook(kb, allow_shell=True, shell_unsandboxed=True)
    result = tools.execute_tool("bash", {"command": "touch made.txt"}, notebook, ask=lambda a: False)
    assert result.error and result.text.startswith("Error: not done: the person declined")
    assert not (kb / "made.txt").exists()


@sandboxed  # without a sandbox --yes would not help, so it is not offered (see below)
def test_nobody_to_ask_means_refused_with_how_to_allow(kb):
    notebook = make_notebook(kb, allow_shell=True)
    result = tools.execute_tool("bash", {"command": "echo ran"}, notebook, ask=None)
    assert result.error and result.text.startswith("Error: not done")
    assert "--yes" in result.text and "AUTO_APPROVE=1" in result.text and "ran" not in result.text


@sandboxed
def test_the_versions_and_undo_log_of_private_notes_are_out_of_reach(kb):  # found by a red team
    (kb / ".kaignore").write_text("diary/\n*.secret.md\n")
    (kb / "diary").mkdir()
    (kb / "diary" / "d1.md").write_text("SECRET day, see [it](../python.md)\n")
    (kb / "bank.secret.md").write_text("SECRET pin, see [it](python.md)\n")
    notebook = make_notebook(kb, allow_shell=True, auto_approve=True)
    moved = tools.execute_tool("move_note", {"from_path": "python.md", "to_path": "lang/python.md"}, notebook)
    assert not moved.error and "SECRET" in "".join(p.read_text() for p in (kb / ".history").rglob("d1.md*"))
    result = tools.execute_tool("bash", {"command": "grep -r SECRET .history; grep -c diary .history/undo.jsonl"},
                                notebook)
    assert "SECRET" not in result.text and "Permission denied" in result.text, result.text


@sandboxed
def test_auto_approved_rm_in_the_sandbox_leaves_the_notes_unchanged(kb):
    notebook = make_notebook(kb, allow_shell=True, auto_approve=True)
    before, asked = snapshot(kb), []
    result = tools.execute_tool("bash", {"command": "rm -f *.md"}, notebook,
                                ask=lambda a: asked.append(a.detail) or True)
    assert snapshot(kb) == before
    assert re.search(r"Permission denied|Operation not permitted", result.text), result.text
    assert "exit_code=0" not in result.text
    assert asked == []  # sandboxed and auto-approved: it ran without asking


def test_without_a_sandbox_auto_approve_still_asks(kb, unsandboxed):
    notebook = make_notebook(kb, allow_shell=True, auto_approve=True, shell_unsandboxed=True)
    asked = []
    result = tools.execute_tool("bash", {"command": "touch made.txt"}, notebook,
                                ask=lambda a: asked.append(a.detail) or False)
    assert len(asked) == 1 and "touch made.txt" in asked[0]
    assert result.text.startswith("Error: not done: the person declined") and not (kb / "made.txt").exists()
    result = tools.execute_tool("bash", {"command": "touch made.txt"}, notebook, ask=lambda a: True)
    assert result.text.startswith(f"(not sandboxed: {NO_SANDBOX})") and (kb / "made.txt").exists()


@pytest.mark.parametrize("auto_approve", [False, True], ids=["asking", "auto-approved"])
def test_without_a_sandbox_nobody_to_ask_means_refused(kb, unsandboxed, auto_approve):
    notebook = make_notebook(kb, allow_shell=True, auto_approve=auto_approve, shell_unsandboxed=True)
    result = tools.execute_tool("bash", {"command": "touch made.txt"}, notebook, ask=None)
    assert result.error and result.text.startswith("Error: not done") and "approval" in result.text
    assert "--yes" not in result.text  # it would not help
    assert not (kb / "made.txt").exists()


def test_the_banner_says_whether_commands_are_sandboxed(kb, monkeypatch):
    settings = make_settings(kb, allow_shell=True, auto_approve=True)
    monkeypatch.setattr(shell, "sandbox_problem", lambda: None)
    banner = main.shell_banner(settings)
    assert "sandboxed" in banner and "WITHOUT" not in banner and "without asking" in banner
    monkeypatch.setattr(shell, "sandbox_problem", lambda: NO_SANDBOX)
    banner = main.shell_banner(settings)
    assert banner.startswith("shell is OFF") and NO_SANDBOX in banner and "SHELL_UNSANDBOXED=1" in banner
    banner = main.shell_banner(make_settings(kb, allow_shell=True, auto_approve=True, shell_unsandboxed=True))
    assert "WITHOUT A SANDBOX" in banner and NO_SANDBOX in banner and "even with --yes" in banner


def test_without_a_sandbox_the_shell_is_refused_unless_the_person_insists(kb, unsandboxed):
    """Where the kernel lacks what the sandbox needs, commands would run as the person: the shell is not offered,
    and a call says why and how to insist; insisting offers it, described as running without a sandbox."""
    notebook = make_notebook(kb, allow_shell=True, auto_approve=True)
    assert "bash" not in names(tools.tool_schemas(notebook.settings))
    result = tools.execute_tool("bash", {"command": "touch made.txt"}, notebook, ask=lambda a: True)
    assert result.error and NO_SANDBOX in result.text and "SHELL_UNSANDBOXED=1" in result.text
    assert not (kb / "made.txt").exists()
    insisted = make_settings(kb, allow_shell=True, shell_unsandboxed=True)
    [schema] = [s for s in tools.tool_schemas(insisted) if s["function"]["name"] == "bash"]
    assert "WITHOUT a sandbox" in schema["function"]["description"] and "in a sandbox" not in schema["function"][
        "description"]


def test_the_mcp_server_serves_an_unsandboxed_shell_only_to_one_who_insisted_and_says_so(kb, unsandboxed):
    import mcp_server
    both = dict(allow_shell=True, mcp_allow_shell=True, mcp_allow_destructive=True)
    assert "bash" not in mcp_server.served_tools(make_settings(kb, **both))
    served = mcp_server.served_tools(make_settings(kb, **both, shell_unsandboxed=True))
    assert "WITHOUT a sandbox" in served["bash"]["description"]


def test_api_key_is_not_in_the_commands_environment(kb, monkeypatch):
    monkeypatch.setenv("KA_PROBE", "visible")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-live-1")
    monkeypatch.setenv("SOME_ODD_NAME", "sk-settings-key")  # the key under a name no pattern catches
    notebook = make_notebook(kb, allow_shell=True, api_key="sk-settings-key")
    result = tools.execute_tool("bash", {"command": "env"}, notebook, ask=lambda a: True)
    assert "KA_PROBE" not in result.text  # the environment is an allow-list (shell.PASSED_VARIABLES)
    assert "sk-live-1" not in result.text and "sk-settings-key" not in result.text


def test_the_question_cannot_hide_the_real_command(monkeypatch):
    sneaky = "rm -r notes\r\x1b[2Kecho hello \u202e"
    approve, prompts = terminal_approve(monkeypatch, [""])
    approve(shell_command(sneaky))
    question = prompts[0][0]
    assert question.startswith("Run this shell command in the notes folder?")
    assert "\x1b" not in question and "\r" not in question and "\u202e" not in question
    assert "rm -r notes" in question and "\\x1b[2K" in question


def shell_command(command: str) -> approval.Approval:
    return approval.Approval("shell", "Run this shell command in the notes folder?", command)


DELETE = approval.Approval("change", "Delete vim.md?")


def terminal_approve(monkeypatch, replies: list[str]) -> tuple:
    """The REPL's approve, answered with `replies` typed in turn; and (question, choices) of each prompt."""
    typed, prompts = iter(replies), []
    monkeypatch.setattr("builtins.input", lambda: next(typed))
    monkeypatch.setattr(terminal, "ask", lambda q, choices, real=terminal.ask: prompts.append((q, choices))
                        or real(q, choices))
    return terminal.Display(interactive=True).approve, prompts


def test_always_approves_the_rest_of_the_session(monkeypatch):
    approve, prompts = terminal_approve(monkeypatch, ["a"])
    assert approve(shell_command("ls")) is True
    assert approve(shell_command("wc -l *.md")) is True  # not asked again
    assert [choices for _, choices in prompts] == ["y/N/a=always this session"]


def test_always_is_only_for_shell_commands(monkeypatch):
    approve, prompts = terminal_approve(monkeypatch, ["a", "a", "y"])
    assert approve(DELETE) is False  # "a" is not an answer offered here
    assert approve(DELETE) is False
    assert approve(DELETE) is True
    assert [choices for _, choices in prompts] == ["y/N"] * 3



def test_blank_lines_and_spaces_cannot_push_the_command_out_of_sight(monkeypatch):
    approve, prompts = terminal_approve(monkeypatch, ["", "", "", ""])
    approve(shell_command("cat ~/.ssh/id_rsa; echo pwned" + "\n" * 120 + "ls"))
    approve(shell_command(" " * 3000 + "rm -rf important\u2028ls -la\x1f \t"))
    approve(shell_command("\n".join(f"echo {n}" for n in range(12))))
    approve(shell_command("echo " + "x" * 3000 + "; rm -rf important"))  # one line, many rows
    hidden, wide, tall, long = (question for question, _ in prompts)
    assert hidden.splitlines()[1:] == ["    cat ~/.ssh/id_rsa; echo pwned", "    [119 blank lines]", "    ls"]
    assert wide.splitlines()[1] == "    [3000 spaces]rm -rf important\\u2028ls -la\\x1f"
    assert tall.splitlines()[-1] == long.splitlines()[-1] == \
        "Run this shell command in the notes folder? (the command is above)"

def test_plain_enter_declines(monkeypatch):
    approve, _ = terminal_approve(monkeypatch, [""])
    assert approve(shell_command("ls")) is False


def test_not_at_a_terminal_nobody_is_asked(monkeypatch):
    monkeypatch.setattr("builtins.input", lambda: pytest.fail("asked where nobody can answer"))
    assert terminal.Display().approve(shell_command("ls")) is None


ASK_IN_A_TERMINAL = """
import readline, sys
sys.path.insert(0, sys.argv[1])
import terminal
terminal.ask("Run this?", "y/N")
sys.stderr.write("NEXT LINE\\n")
"""


def answer_in_a_terminal(keys: bytes, tmp_path) -> str:
    """What a terminal shows when `keys` are typed at terminal.ask's prompt and the next line is printed."""
    script = tmp_path / "ask.py"
    script.write_text(ASK_IN_A_TERMINAL, encoding="utf-8")
    prompt = Terminal(child_env(), str(ROOT), program=script)
    prompt.expect("[y/N] ")
    prompt.press(keys)
    assert prompt.close() == 0
    return prompt.shown.decode(errors="replace").replace("\r\n", "\n")


@posix_only
@pytest.mark.parametrize("keys", [b"\r", b"y\r", b"no\r", b"\x04"], ids=["enter", "y", "no", "ctrl-d"])
def test_the_prompt_line_ends_whatever_the_answer(keys, tmp_path):
    shown = answer_in_a_terminal(keys, tmp_path)
    assert "NEXT LINE" in shown, shown
    assert re.search(r"\[y/N\] [^\n]*\nNEXT LINE", shown), repr(shown)  # on a line of its own, no blank one


# --- the agent loop and the command line ----------------------------------------------------------

@posix_only
def test_ctrl_c_during_a_command_kills_it_and_ends_the_turn_cleanly(kb, scratch):
    client = StubClient([call("bash", command=START_AND_WAIT)])
    settings = make_settings(kb, allow_shell=True, auto_approve=True)
    seen, history = [], []
    press_ctrl_c_when_exists(scratch / "pids", seen)
    with pytest.raises(KeyboardInterrupt):
        run_agent("run it", history, settings=settings, client=client, ui=Recorder(answers=[True]))
    background, group = map(int, seen[0].split())
    assert not running(background) and group_members(group) == []
    call_id = history[-2]["tool_calls"][0]["id"]
    assert history[-1]["tool_call_id"] == call_id
    assert history[-1]["content"].startswith("stopped: the user pressed Ctrl+C after")


def test_count_notes_by_folder_end_to_end(call_main, fake_llm, kb):
    fake_llm.replies = [call("bash", command="find . -name '*.md' | cut -d/ -f2 | sort | uniq -c"),
                        {"content": "You have 2 notes at the top and 1 in work."}]
    result = call_main("--allow-shell", "--yes", "count my notes by folder", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0, result.stderr
    assert "bash" in names(fake_llm.requests[0]["tools"])
    shell_result = tool_results(fake_llm.requests[1])[0]
    assert "exit_code=0" in shell_result
    assert "1 work" in shell_result and "1 python.md" in shell_result
    assert "→ bash" in result.stderr
    assert result.stdout == "You have 2 notes at the top and 1 in work.\n"


def test_the_request_offers_bash_only_when_enabled(kb):
    for allow in (False, True):
        client = StubClient([{"content": "ok"}])
        run_agent("q", settings=make_settings(kb, allow_shell=allow), client=client)
        assert ("bash" in names(client.requests[0]["tools"])) is allow


def test_one_shot_without_yes_refuses_and_says_how_to_allow(call_main, fake_llm, kb):
    fake_llm.replies = [call("bash", command="echo ran"), {"content": "I could not run it."}]
    result = call_main("--allow-shell", "run it", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0, result.stderr
    assert "--yes" in result.stderr  # the person sees how to allow it
    assert tool_results(fake_llm.requests[1])[0].startswith("Error: not done")


def test_piped_without_yes_refuses_too(call_main, fake_llm, kb):
    fake_llm.replies = [call("bash", command="echo ran"), {"content": "no"}]
    result = call_main("--allow-shell", kb=kb, base_url=fake_llm.base_url, stdin="run it\n")
    assert result.returncode == 0, result.stderr
    assert "--yes" in result.stderr
    assert tool_results(fake_llm.requests[1])[0].startswith("Error: not done")


def test_timeout_is_reported_to_the_model(kb):
    client = StubClient([call("bash", command="echo started; sleep 30"), {"content": "It was too slow."}])
    settings = make_settings(kb, allow_shell=True, shell_timeout=0.5)
    run_agent("run the slow thing", settings=settings, client=client, ui=Recorder(answers=[True]))
    shell_result = tool_results(client.requests[1])[0]
    assert "stopped after 0.5 s (timeout)" in shell_result and "started" in shell_result


@posix_only
def test_ctrl_c_in_one_shot_stops_the_command_and_exits_130(fake_llm, kb, tmp_path):
    temp = tmp_path / "temp"  # main.py's temporary folder: the command's scratch folder is made inside it
    temp.mkdir()
    fake_llm.replies = [call("bash", command=START_AND_WAIT)]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update({"DEEPSEEK_BASE_URL": fake_llm.base_url, "KNOWLEDGE_BASE": str(kb), "DEEPSEEK_API_KEY": "k",
                "PYTHONIOENCODING": "utf-8", "TMPDIR": str(temp)})
    proc = subprocess.Popen([sys.executable, str(MAIN), "--allow-shell", "--yes", "run it"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, pids = time.monotonic() + 20, []
        while not pids and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)  # polling for the command to start, not sleeping in its place
            pids = list(temp.glob("*/pids"))
        assert pids, proc.communicate(timeout=5)
        background, group = map(int, pids[0].read_text().split())
        proc.send_signal(signal.SIGINT)  # what Ctrl+C in the terminal sends to main.py
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "[interrupted]" in err and "Traceback" not in err
    assert not running(background) and group_members(group) == []


def test_mcp_serves_bash_only_when_the_chat_and_the_server_both_allow_it(kb):
    def served(allow_shell, destructive, shell):
        return mcp_server.served_tools(make_settings(kb, allow_shell=allow_shell, mcp_allow_destructive=destructive,
                                                     mcp_allow_shell=shell))

    assert "bash" in served(True, True, True)
    assert "bash" not in served(False, True, True)  # ALLOW_SHELL is not set
    assert "bash" not in served(True, True, False)  # the server was not started with --allow-shell
    assert "bash" not in served(True, False, True)  # nobody would approve the commands
