"""Tests for shell.py: the Landlock sandbox, and run_shell's processes, output and environment.

Every test runs real bash commands in tmp_path. Harmful commands are judged by what they leave behind:
the notes byte-identical, the secret unread, the background process gone (looked up by pid, so a leak
shows up as a failure, not as a hang).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import shell  # noqa: E402
from shell import run_shell  # noqa: E402

PROBLEM = shell.sandbox_problem()
sandboxed = pytest.mark.skipif(PROBLEM is not None, reason=f"no Landlock sandbox here: {PROBLEM}")
TIMEOUT = 20  # generous: only the timeout tests expect a command to run into it


def press_ctrl_c_when_exists(path, seen=None):
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


def section(result: str, name: str) -> str:
    """The text of the stdout: or stderr: section of a run_shell result."""
    match = re.search(rf"^{name}:(?: \(empty\)|\n(.*?))(?=\nstderr:|\Z)", result, re.S | re.M)
    assert match, result
    return match.group(1) or ""


def exit_code(result: str) -> int:
    match = re.search(r"^exit_code=(\d+)$", result, re.M)
    assert match, result
    return int(match.group(1))


@pytest.fixture
def kb(tmp_path):
    """A notes folder with two notes, beside a home folder holding a fake SSH key."""
    notes = tmp_path / "notes"
    (notes / "work").mkdir(parents=True)
    (notes / "a.md").write_text("alpha\nbeta\n")
    (notes / "note.md").write_text("# Note\nkeep me\n")
    (notes / "work" / "plan.md").write_text("plan\n")
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE KEY-----\n")
    return notes


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Make the command's scratch folder a known path, to look inside it while the command runs."""
    known = tmp_path / "scratch"
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: (known.mkdir(), str(known))[1])
    return known


# --- running commands ---------------------------------------------------------------------------

def test_exit_code_and_both_streams(kb):
    result = run_shell("echo out; echo err >&2; exit 7", kb, TIMEOUT)
    assert exit_code(result) == 7
    assert section(result, "stdout") == "out"
    assert section(result, "stderr") == "err"
    assert run_shell("true", kb, TIMEOUT).endswith("exit_code=0\nstdout: (empty)\nstderr: (empty)")


def test_runs_in_the_notes_folder_with_bash(kb):
    result = run_shell('pwd; ls; echo "bash=${BASH_VERSION:+yes}"', kb, TIMEOUT)
    assert section(result, "stdout").splitlines() == [str(kb), "a.md", "note.md", "work", "bash=yes"]


@pytest.mark.parametrize("command, expected", [
    ("ls work", "plan.md"), ("grep -rn keep .", "./note.md:2:keep me"),
    ("wc -l a.md", "2 a.md"), ("sort -r a.md", "beta\nalpha"), ("awk '/.*/' a.md", "alpha\nbeta"),
    ("git --version", "git version"), ("python3 -c 'print(1)'", "1"),
    ("find . -name '*.md' | sort | head -1", "./a.md"),
])
def test_harmless_commands_work(kb, command, expected):
    result = run_shell(command, kb, TIMEOUT)
    assert exit_code(result) == 0, result
    assert expected in section(result, "stdout")


def test_pipeline_counts_notes_by_folder(kb):
    (kb / "日记").mkdir()
    for i in range(2):
        (kb / "日记" / f"n{i}.md").write_text("x")
    result = run_shell("find . -name '*.md' -path './*/*' | cut -d/ -f2 | sort | uniq -c", kb, TIMEOUT)
    counts = {line.split()[1]: int(line.split()[0]) for line in section(result, "stdout").splitlines()}
    assert counts == {"work": 1, "日记": 2}


def test_missing_folder_is_an_error_not_a_traceback(tmp_path):
    result = run_shell("ls", tmp_path / "nope", TIMEOUT)
    assert result.startswith("Error: could not start the shell")


def test_the_scratch_folder_is_home_and_tmpdir_and_is_removed_afterwards(kb, scratch):
    result = run_shell('echo draft > "$TMPDIR/d.txt" && cat ~/d.txt && echo "$HOME $TMPDIR"', kb, TIMEOUT)
    assert section(result, "stdout").splitlines() == ["draft", f"{scratch} {scratch}"]
    assert not scratch.exists()


def test_stdin_is_closed(kb):
    # Give this process a stdin with a line waiting, as a person's terminal would have.
    reader, writer = os.pipe()
    os.write(writer, b"typed by the person\n")
    saved = os.dup(0)
    os.dup2(reader, 0)
    try:
        result = run_shell('read line; echo "read=$? $line"', kb, TIMEOUT)
    finally:
        os.dup2(saved, 0)
        for fd in (saved, reader, writer):
            os.close(fd)
    assert section(result, "stdout") == "read=1"


# --- the sandbox ----------------------------------------------------------------------------------

@sandboxed
@pytest.mark.parametrize("command", [
    "rm -f *.md", "rm -rf work", "sed -i d *.md", "> note.md", "echo x >> a.md", "truncate -s 0 note.md",
    "find . -delete", "mv note.md x.md", "cd .. && mv notes moved", "touch new.md", "mkdir sub",
    "ln -s a.md link.md", "cp note.md \"$TMPDIR/n\" && cp \"$TMPDIR/n\" copy.md",
])
def test_the_kernel_keeps_the_notes_unchanged(kb, command):
    before = snapshot(kb)
    result = run_shell(command, kb, TIMEOUT)
    assert exit_code(result) != 0, result
    assert re.search(r"Permission denied|Operation not permitted|cannot", result), result
    assert snapshot(kb) == before


@sandboxed
def test_secrets_outside_the_notes_cannot_be_read(kb, tmp_path):
    key = tmp_path / "home" / ".ssh" / "id_rsa"
    for command in (f"cat {key}", f"cat {tmp_path}/home/.ss?/id_rsa", f"ls {tmp_path}/home", "ls /tmp",
                    f"cd .. && cat home/.ssh/id_rsa"):
        result = run_shell(command, kb, TIMEOUT)
        assert "FAKE KEY" not in result and exit_code(result) != 0, command
        assert re.search(r"Permission denied|No such file", result), command  # a glob sees no folder it may not read


@sandboxed
def test_the_agents_environment_cannot_be_read(kb, monkeypatch):
    monkeypatch.setenv("KA_TEST_MARK", "visible-in-environ")
    for command in (f"cat /proc/{os.getpid()}/environ", f"cat /proc/{os.getpid()}/./environ",
                    "cat /proc/$PPID/environ", "strings /proc/*/environ"):
        result = run_shell(command, kb, TIMEOUT)
        assert "visible-in-environ" not in result and exit_code(result) != 0, command


@sandboxed
@pytest.mark.skipif(shell._abi() < 6, reason="signal scoping needs Landlock ABI 6 (Linux 6.12)")
def test_the_command_cannot_signal_processes_outside_it(kb):
    result = run_shell(f"kill -TERM {os.getpid()}; kill -0 1", kb, TIMEOUT)  # this test run is the agent
    assert result.count("Operation not permitted") == 2


@sandboxed
def test_tcp_is_denied_unless_allowed(kb):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        connect = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        denied = run_shell(connect, kb, TIMEOUT)
        assert "connected" not in section(denied, "stdout") and "Permission denied" in denied
        allowed = run_shell(connect, kb, TIMEOUT, allow_network=True)
        assert section(allowed, "stdout") == "connected"


@sandboxed
def test_a_failing_sandbox_runs_nothing(kb, tmp_path, monkeypatch):
    monkeypatch.setattr(shell, "SYS_RESTRICT_SELF", 99999)  # no such system call: entering the sandbox fails
    result = run_shell(f"touch {tmp_path}/ran", kb, TIMEOUT)
    assert result.startswith("Error: the sandbox could not be applied, so the command did not run")
    assert not (tmp_path / "ran").exists()


def test_without_a_sandbox_the_output_says_so(kb, monkeypatch):
    monkeypatch.setattr(shell, "sandbox_problem", lambda: "Landlock is not available on this system")
    result = run_shell("echo hi > made.txt && cat made.txt", kb, TIMEOUT)
    assert result.splitlines()[:2] == ["(not sandboxed: Landlock is not available on this system)", "exit_code=0"]
    assert (kb / "made.txt").read_text() == "hi\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")
def test_an_old_kernel_is_named_in_one_line(monkeypatch):
    for abi, expected in ((0, "has no Landlock"), (2, "has Landlock ABI 2")):
        monkeypatch.setattr(shell, "_abi", lambda: abi)
        problem = shell.sandbox_problem()
        assert expected in problem and "commands would run unsandboxed" in problem and "\n" not in problem
    monkeypatch.setattr(shell, "_abi", lambda: shell.MIN_ABI)
    assert shell.sandbox_problem() is None


# --- stopping commands ----------------------------------------------------------------------------

def test_timeout_kills_the_whole_group(kb):
    result = run_shell("sleep 30 & echo $! $$; sleep 30", kb, timeout=1)
    assert "stopped after 1 s (timeout)" in result
    background, group = map(int, section(result, "stdout").split())
    assert not running(background)
    assert group_members(group) == []


def test_timeout_kills_processes_that_ignore_term(kb, monkeypatch):
    monkeypatch.setattr(shell, "KILL_GRACE", 0.2)
    result = run_shell("trap '' TERM; sh -c 'trap \"\" TERM; sleep 30' & echo $! $$; sleep 30", kb, timeout=1)
    assert "stopped after 1 s (timeout)" in result
    background, group = map(int, section(result, "stdout").split())
    assert not running(background) and group_members(group) == []


def test_background_processes_do_not_outlive_the_command(kb):
    result = run_shell("sleep 30 >/dev/null 2>&1 & echo $!", kb, TIMEOUT)
    assert exit_code(result) == 0
    assert "left running in the background were stopped" in result
    assert not running(int(section(result, "stdout")))


def test_a_background_process_does_not_hide_the_exit_code(kb):
    result = run_shell("sleep 30 & echo $!; exit 3", kb, TIMEOUT)
    assert "timeout" not in result and exit_code(result) == 3
    assert not running(int(section(result, "stdout")))


def test_processes_this_program_started_itself_are_left_alone(kb):
    own = subprocess.Popen(["sleep", "30"])
    try:
        run_shell("sleep 30 >/dev/null 2>&1 & echo started", kb, TIMEOUT)
        assert own.poll() is None
    finally:
        own.kill()
        own.wait()


def test_ctrl_c_kills_the_group_and_reraises(kb, scratch):
    seen = []
    press_ctrl_c_when_exists(scratch / "pids", seen)
    with pytest.raises(KeyboardInterrupt):
        run_shell('sleep 30 & echo $! $$ > "$TMPDIR/p"; mv "$TMPDIR/p" "$TMPDIR/pids"; sleep 30', kb, TIMEOUT)
    background, group = map(int, seen[0].split())
    assert not running(background)
    assert group_members(group) == []
    assert not scratch.exists()


# --- output ---------------------------------------------------------------------------------------

def test_huge_output_keeps_head_and_tail(kb):
    result = run_shell("seq 1 2000000; seq 1 300000 >&2", kb, TIMEOUT)
    out, err = section(result, "stdout"), section(result, "stderr")
    assert out.startswith("1\n2\n3\n") and out.endswith("1999999\n2000000")
    assert err.startswith("1\n2\n") and err.endswith("300000")
    assert re.search(r"\[\.\.\. [\d,]+ bytes cut", out)
    assert len(out) < shell.STDOUT_CHARS + 200
    assert len(err) < shell.STDERR_CHARS + 200


def test_fifty_megabytes_come_back_clipped(kb):
    result = run_shell("yes | head -c 50000000; printf END", kb, TIMEOUT)
    out = section(result, "stdout")
    assert out.startswith("y\ny\n") and out.endswith("y\nEND")
    cut = int(re.search(r"\[\.\.\. ([\d,]+) bytes cut", out).group(1).replace(",", ""))
    assert 49_990_000 < cut < 50_000_000 and len(out) < shell.STDOUT_CHARS + 200


def test_a_runaway_writer_is_stopped_at_the_file_size_cap(kb, monkeypatch):
    monkeypatch.setattr(shell, "MAX_FILE_BYTES", 1_000_000)
    result = run_shell("yes", kb, TIMEOUT)
    assert "timeout" not in result and "reached 1,000,000 bytes" in result
    assert exit_code(result) == 128 + signal.SIGXFSZ


def test_slightly_long_output_says_how_many_characters_were_cut(kb):
    result = run_shell("printf 'a%.0s' $(seq 4500); printf 'END'", kb, TIMEOUT)
    out = section(result, "stdout")
    assert "[... 503 characters cut" in out
    assert out.startswith("aaa") and out.endswith("aEND")


def test_non_utf8_bytes_are_replaced_not_fatal(kb):
    result = run_shell(r"printf '\377\376 ok \344\270'; printf '中文笔记' >&2", kb, TIMEOUT)
    assert exit_code(result) == 0
    assert "\ufffd" in section(result, "stdout") and " ok " in section(result, "stdout")
    assert section(result, "stderr") == "中文笔记"


def test_cutting_chinese_output_does_not_break_characters(kb):
    result = run_shell("for i in $(seq 3000); do printf '中文笔记内容'; done", kb, TIMEOUT)
    out = section(result, "stdout")
    assert "bytes cut" in out and "\ufffd" not in out
    assert out.startswith("中文笔记") and out.endswith("笔记内容")


def test_writing_to_dev_stdout_and_stderr_works(kb):
    result = run_shell("echo out > /dev/stdout; echo err > /dev/stderr; echo gone > /dev/null", kb, TIMEOUT)
    assert section(result, "stdout") == "out" and section(result, "stderr") == "err"


# --- secrets ----------------------------------------------------------------------------------------

def test_api_keys_and_tokens_are_not_in_the_environment(kb, monkeypatch):
    secrets = {"DEEPSEEK_API_KEY": "sk-deepseek-123", "OPENAI_API_KEY": "sk-openai-456",
               "GITHUB_TOKEN": "ghp_789", "MY_SECRET": "hush", "AWS_SECRET_ACCESS_KEY": "aws-000",
               "ANTHROPIC_API_KEY": "sk-ant-111", "LLM_KEY": "sk-custom-222", "DB_PASSWORD": "pw-333"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KA_HARMLESS", "still-here")
    result = run_shell("env", kb, TIMEOUT, hide=("sk-custom-222",))
    for name, value in secrets.items():
        assert value not in result, name
    assert "KA_HARMLESS=still-here" in result


def test_a_hidden_value_is_masked_in_the_output(kb):
    (kb / "leak.md").write_text("key: sk-live-999\n")
    result = run_shell("cat leak.md; echo sk-live-999 >&2", kb, TIMEOUT, hide=("sk-live-999", ""))
    assert "sk-live-999" not in result
    assert section(result, "stdout") == "key: [hidden]" and section(result, "stderr") == "[hidden]"
