"""Tests for shell.py: the sandbox (Landlock, capabilities, seccomp), and run_shell's processes, output
and environment.

Every test runs real bash commands in tmp_path. Harmful commands are judged by what they leave behind:
the notes byte-identical, the secret unread, the background process gone (looked up by pid or by a mark
in its command line in /proc, so a leak shows up as a failure, not as a hang). The sandbox's promises are
checked both for this test run's user and, when it is root, for an ordinary user made with useradd.
"""
import ctypes
import fcntl
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import shell  # noqa: E402
import warden  # noqa: E402
from conftest import group_members, make_notebook, press_ctrl_c_when_exists, running, sandboxed, snapshot  # noqa: E402
from shell import run_shell  # noqa: E402

x86_64 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64's other ABIs")
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="what root could do; this test run is not root")
TIMEOUT = 20  # generous: only the timeout tests expect a command to run into it
TEST_USER = "ka-shell-test"  # the ordinary user made for these tests when they run as root
# Run inside the sandbox as `python3 probe.py STATEMENT...`: one line per statement, `ok` or its errno's name.
PROBE = """import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def syscall(*args):
    if libc.syscall(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args)) == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
for statement in sys.argv[1:]:
    try:
        exec(statement)
        print("ok")
    except OSError as exc:
        print(errno.errorcode.get(exc.errno, exc.errno))
"""


def marked(mark: str) -> list[int]:
    """The processes (zombies included) whose command line holds `mark`, from /proc."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                if mark.encode() in file.read():
                    found.append(int(pid))
        except OSError:
            pass  # ended meanwhile
    return found


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


@pytest.fixture(scope="session")
def ordinary_user():
    """(name, python) of an ordinary user to run run_shell as, made with useradd (and removed) if need be."""
    if os.geteuid() != 0:
        pytest.skip("this test run is an ordinary user already: the same tests run as it")
    if not (shutil.which("useradd") and shutil.which("runuser")):
        pytest.skip("no useradd or runuser here to run as an ordinary user")
    try:
        pwd.getpwnam(TEST_USER)
        made = False
    except KeyError:
        made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER],
                              capture_output=True).returncode == 0
        if not made:
            pytest.skip(f"useradd could not make the user {TEST_USER}")
    # This interpreter may sit in root's home, out of the user's reach; the system's then.
    pythons = [python for python in (sys.executable, "/usr/bin/python3") if subprocess.run(
        ["runuser", "-u", TEST_USER, "--", python, "-c", "import sys; assert sys.version_info >= (3, 10)"],
        capture_output=True).returncode == 0]
    try:
        if not pythons:
            pytest.skip(f"no Python 3.10+ that {TEST_USER} may run")
        yield TEST_USER, pythons[0]
    finally:
        if made:
            subprocess.run(["userdel", TEST_USER], capture_output=True)


@pytest.fixture(params=["this test run's user", "an ordinary user"])
def sandbox(request, kb):
    """(notes folder, run) where run(command, **run_shell's keywords) runs the command through run_shell, as
    this test run's user, or, when that is root, as an ordinary user (our modules, python and the notes are its)."""
    (kb / "probe.py").write_text(PROBE)
    if request.param == "this test run's user":
        return kb, lambda command, timeout=TIMEOUT, **kw: run_shell(command, kb, timeout, **kw)
    user, python = request.getfixturevalue("ordinary_user")
    home = tempfile.mkdtemp(prefix="ka-shell-user-")
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    for module in ("shell.py", "warden.py"):  # what run_shell imports
        shutil.copy(os.path.join(ROOT, module), home)
    notes = shutil.copytree(kb, os.path.join(home, "notes"), symlinks=True)
    subprocess.run(["chown", "-R", f"{user}:", home], check=True)
    os.chmod(home, 0o755)

    def run(command, timeout=TIMEOUT, **kw):
        script = (f"import sys; sys.path.insert(0, {home!r}); import shell\n"
                  f"print(shell.run_shell({command!r}, {notes!r}, {timeout}, **{kw!r}), end='')")
        done = subprocess.run(["runuser", "-u", user, "--", python, "-c", script], cwd=home,
                              capture_output=True, text=True, timeout=TIMEOUT * 3)
        assert done.returncode == 0 and not done.stderr, done.stderr
        return done.stdout
    return type(kb)(notes), run


@pytest.fixture
def mark():
    """A mark for the command lines of processes a test starts (`sleep MARK`); any left are killed at the end."""
    mark = f"600.{time.time_ns()}"
    yield mark
    for pid in marked(mark):
        os.kill(pid, signal.SIGKILL)


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
@pytest.mark.skipif(warden._abi() < 6, reason="signal scoping needs Landlock ABI 6 (Linux 6.12)")
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
        assert "connected" not in section(denied, "stdout") and "Operation not permitted" in denied
        allowed = run_shell(connect, kb, TIMEOUT, allow_network=True)
        assert section(allowed, "stdout") == "connected"


@sandboxed
def test_a_failing_sandbox_runs_nothing(kb, tmp_path):
    # As on a kernel refusing landlock_restrict_self: a Python whose every child gets ENOSYS for it.
    script = f"""import sys; sys.path.insert(0, {ROOT!r}); import shell, warden
warden._call("prctl", warden.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
warden._install_filter([("ld", warden.NR), ("jeq", warden.SYS_RESTRICT_SELF, "no", None), ("ret", warden.ALLOW),
                       ("label", "no"), ("ret", warden.ERRNO | 38)])
print(shell.run_shell("touch {tmp_path}/ran", {str(kb)!r}, 20))"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout
    assert result.startswith("Error: the sandbox could not be applied, so the command did not run: "), result
    assert result.endswith("Function not implemented\n") and not (tmp_path / "ran").exists()


def test_without_a_sandbox_the_output_says_so(kb, monkeypatch):
    monkeypatch.setattr(shell, "sandbox_problem", lambda: "Landlock is not available on this system")
    result = run_shell("echo hi > made.txt && cat made.txt", kb, TIMEOUT)
    assert result.splitlines()[:2] == ["(not sandboxed: Landlock is not available on this system)", "exit_code=0"]
    assert (kb / "made.txt").read_text() == "hi\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")
def test_an_old_kernel_is_named_in_one_line(monkeypatch):
    for abi, expected in ((0, "has no Landlock"), (2, "has Landlock ABI 2")):
        monkeypatch.setattr(warden, "_abi", lambda: abi)
        problem = shell.sandbox_problem()
        assert expected in problem and "commands would run unsandboxed" in problem and "\n" not in problem
    monkeypatch.setattr(warden, "_abi", lambda: warden.MIN_ABI)
    assert shell.sandbox_problem() is None
    monkeypatch.setattr(warden, "_has_seccomp_filters", lambda: False)
    problem = shell.sandbox_problem()
    assert "no seccomp filters" in problem and "commands would run unsandboxed" in problem and "\n" not in problem


# --- what Landlock does not see: capabilities and seccomp ------------------------------------------

def probe(run, *statements, **kw) -> list[str]:
    """Run PROBE's statements in the sandbox: `ok` or the errno's name for each."""
    result = run("python3 probe.py " + " ".join(map(shlex.quote, statements)), **kw)
    return section(result, "stdout").splitlines()


@sandboxed
@pytest.mark.parametrize("network", [False, True])
def test_sockets_landlock_cannot_see_are_refused(sandbox, network):
    kb, run = sandbox
    plain = "ok" if network else "EPERM"  # TCP and UDP over IP with the network allowed, then Landlock's
    assert probe(run, "socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)",  # MPTCP
                 "socket.socket(socket.AF_INET6, socket.SOCK_STREAM, 262)",
                 "socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)",
                 "socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)",  # ping
                 "socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132)",  # SCTP
                 "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)", "socket.socket(socket.AF_NETLINK)",
                 "socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)",
                 "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)",
                 "socket.socketpair()", allow_network=network) == ["EPERM"] * 7 + [plain, plain, "ok"]


@sandboxed
@pytest.mark.parametrize("network", [False, True])
def test_mptcp_cannot_reach_a_listening_server(kb, network):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        (kb / "probe.py").write_text(PROBE)
        port = server.getsockname()[1]
        connect = f"socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect((\"127.0.0.1\", {port}))"
        assert probe(lambda c, **kw: run_shell(c, kb, TIMEOUT, **kw), connect, allow_network=network) == ["EPERM"]


@sandboxed
def test_local_services_behind_socket_files_are_unreachable(sandbox, tmp_path):
    kb, run = sandbox
    bus = tempfile.mktemp(prefix="ka-bus-", dir="/tmp")  # as the session bus or an ssh-agent would listen
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(bus)
        os.chmod(bus, 0o777)
        server.listen(1)
        try:
            assert probe(run, f"socket.socket(socket.AF_UNIX).connect(\"{bus}\")") == ["EPERM"]
        finally:
            os.unlink(bus)


@sandboxed
def test_modes_and_owners_cannot_change(sandbox):
    kb, run = sandbox
    before = {path: os.stat(path).st_mode for path in (kb / "note.md", kb / "work")}
    result = run("chmod 000 note.md; chmod 666 note.md; chmod 777 work; chmod go-r a.md; chown 0 note.md;"
                 "touch $TMPDIR/s; chmod u+s $TMPDIR/s; chgrp 0 $TMPDIR/s")
    assert result.count("Operation not permitted") == 7, result
    assert probe(run, "os.chmod(\"note.md\", 0)", "os.chmod(os.open(\"note.md\", os.O_RDONLY), 0)",
                 "syscall(452, -100, b\"note.md\", 0, 0)",  # fchmodat2
                 "os.chown(\"note.md\", 0, 0)", "os.lchown(\"note.md\", 0, 0)") == ["EPERM"] * 5
    assert {path: os.stat(path).st_mode for path in before} == before


@sandboxed
def test_times_and_attributes_change_only_through_a_descriptor(sandbox):  # a red team's `touch ~/.ssh/id_rsa`
    kb, run = sandbox
    key = kb.parent / "id_rsa"  # outside the notes, the command's user's own
    key.write_text("KEY\n")
    os.chown(key, kb.stat().st_uid, kb.stat().st_gid)
    before = {path: os.stat(path).st_mtime_ns for path in (key, kb / "note.md")}
    result = run(f"touch -d 2001-01-01 {key} note.md; touch {key}; touch -h {key}")
    assert result.count("Operation not permitted") + result.count("Permission denied") == 4, result
    assert probe(run, f"os.utime({str(key)!r}, (0, 0))", f"os.setxattr({str(key)!r}, \"user.k\", b\"1\")",
                 f"os.removexattr({str(key)!r}, \"user.k\")", f"syscall(261, -100, {str(key).encode()!r}, 0)",
                 f"syscall(280, os.open(\"..\", os.O_PATH), b\"\", 0, 0x1000)",  # AT_EMPTY_PATH on an O_PATH descriptor
                 ) == ["EPERM"] * 5 if os.uname().machine == "x86_64" else pytest.skip("x86_64 numbers")
    assert {path: os.stat(path).st_mtime_ns for path in before} == before and not os.listxattr(key)
    result = run("cd $TMPDIR && touch f && touch -d 2001-01-01 f && cp -p f g && stat -c %y g | cut -c1-4 && mkdir d"
                 " && touch d/h && tar cf t.tar d && rm -r d && tar xmf t.tar --no-same-owner --no-same-permissions"
                 " && ls d")
    assert section(result, "stdout") == "2001\nh", result  # in the scratch folder a file's times are the command's


@sandboxed
@root_only
def test_root_has_no_capabilities_left(kb):
    (kb / "probe.py").write_text(PROBE)
    result = run_shell("mknod $TMPDIR/disk b 8 0; mknod $TMPDIR/tty c 5 0; mkfifo $TMPDIR/fifo && echo fifo;"
                       "touch $TMPDIR/f; chown 1:1 $TMPDIR/f; chattr +i $TMPDIR/f 2>/dev/null && echo immutable",
                       kb, TIMEOUT)
    assert section(result, "stdout") == "fifo"  # a FIFO is fine; devices, owners and flags are not
    assert result.count("Operation not permitted") == 3, result
    run = lambda command, **kw: run_shell(command, kb, TIMEOUT, **kw)
    assert probe(run, "header = ctypes.create_string_buffer(b\"\\x22\\x05\\x08\\x20\" + bytes(4)); "
                 "data = ctypes.create_string_buffer(24); libc.capget(header, data); assert not any(data.raw)",
                 "assert not any(libc.prctl(23, cap, 0, 0, 0) == 1 for cap in range(64))",  # PR_CAPBSET_READ
                 "assert libc.prctl(39, 0, 0, 0, 0) == 1") == ["ok"] * 3  # PR_GET_NO_NEW_PRIVS


@sandboxed
def test_the_keyring_ptrace_mounts_namespaces_and_io_uring_are_refused(sandbox):
    kb, run = sandbox
    assert probe(run, "syscall(250, 0, -3, 0)",  # keyctl(GET_KEYRING_ID, the session keyring)
                 "syscall(248, b\"user\", b\"k\", b\"v\", 1, -3)",  # add_key
                 "syscall(249, b\"user\", b\"k\", 0, -3)",  # request_key
                 "syscall(101, 0, 0, 0, 0)",  # ptrace(TRACEME)
                 "syscall(310, os.getpid(), 0, 0, 0, 0, 0)",  # process_vm_readv
                 "syscall(272, 0x10000000)", "syscall(272, 0x20000)",  # unshare(NEWUSER), unshare(NEWNS)
                 "syscall(308, 0, 0)",  # setns
                 "syscall(56, 0x10000000 | 17, 0, 0, 0, 0)",  # clone(NEWUSER | SIGCHLD)
                 "syscall(165, b\"none\", os.environ[\"TMPDIR\"].encode(), b\"tmpfs\", 0, 0)",  # mount
                 "syscall(430, b\"tmpfs\", 0)",  # fsopen
                 "syscall(425, 8, ctypes.create_string_buffer(120))",  # io_uring_setup
                 ) == ["EPERM"] * 12 if os.uname().machine == "x86_64" else pytest.skip("x86_64 numbers")
    assert probe(run, "syscall(435, 0, 0)") == ["ENOSYS"]  # clone3: libc falls back to clone


@sandboxed
@x86_64
def test_other_abis_cannot_go_around_the_filter(kb):
    run = lambda command, **kw: run_shell(command, kb, TIMEOUT, **kw)
    (kb / "probe.py").write_text(PROBE)
    assert probe(run, "syscall(0x40000000 | 39)") == ["EPERM"]  # x32's getpid
    # i386's getpid through int 0x80, from executable memory: the filter kills the process (SIGSYS).
    result = run("python3 -c 'import ctypes, mmap; m = mmap.mmap(-1, 4096, prot=7); "
                 "m.write(b\"\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3\"); "
                 "print(ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))())'")
    assert exit_code(result) == 128 + signal.SIGSYS and section(result, "stdout") == "", result


@sandboxed
def test_the_filter_alone_guards_the_warden(tmp_path):
    # Where Landlock cannot scope signals (ABI < 6), the filter keeps the warden alive: checked without Landlock,
    # with this test run standing for the warden.
    script = f"""import os, sys; sys.path.insert(0, {ROOT!r}); import shell, warden
warden._call("prctl", warden.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
warden._install_filter(warden._seccomp_program(os.uname().machine, False, os.getppid()))
for target in (os.getppid(), -os.getppid(), -1, os.getpid()):
    try:
        os.kill(target, 0)
        print("ok")
    except OSError as exc:
        print(exc.strerror)
os.chmod({str(tmp_path)!r}, 0o700)"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.splitlines() == ["Operation not permitted"] * 3 + ["ok"]
    assert "PermissionError" in done.stderr


def test_the_filters_call_numbers_are_the_kernels():
    try:
        libseccomp = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        pytest.skip("no libseccomp here to check the numbers against")
    resolve = libseccomp.seccomp_syscall_resolve_name_arch
    resolve.argtypes, checked = [ctypes.c_uint32, ctypes.c_char_p], 0
    for name, numbers in warden.SYSCALLS.items():
        for arch, number in zip(warden.AUDIT_ARCH.values(), numbers):
            known = resolve(arch, name.encode())  # -1: newer than this libseccomp; below: not on that arch
            assert known < 0 if number is None else known in (number, -1), (name, hex(arch))
            checked += known >= 0
    assert checked > 60


# --- private notes ----------------------------------------------------------------------------------

@pytest.fixture
def private_notes(kb):
    """Notes holding "secret text", marked private: a file, a file in a folder, a folder, a deep file."""
    for path in ("private.md", "work/secret.md", "diary/2024/day.md", "deep/er/still/hidden.md"):
        (kb / path).parent.mkdir(parents=True, exist_ok=True)
        (kb / path).write_text(f"secret text of {path}\n")
    (kb / "deep" / "er" / "open.md").write_text("secret text everyone may read\n")
    (kb / "alias.md").symlink_to("private.md")
    return ("private.md", "./work/secret.md", "diary/", "deep/er/still/hidden.md")


@sandboxed
def test_private_notes_cannot_be_read(private_notes, sandbox):  # made before the sandbox copies them
    kb, run = sandbox
    for command in ("cat private.md", "cat alias.md", "cat work/secret.md", "cat diary/2024/day.md",
                    "cat deep/er/still/hidden.md", "head -c 100 diary/*/*", "cp private.md $TMPDIR/p"):
        result = run(command, unreadable=private_notes)
        assert "secret text" not in result and "Permission denied" in result, command
    result = run("grep -r 'secret text' . | sort; find . -type f -exec cat {} + | grep -c secret",
                 unreadable=private_notes)
    assert section(result, "stdout").splitlines() == ["./deep/er/open.md:secret text everyone may read", "1"]
    result = run("ls; ls work; cat work/plan.md a.md", unreadable=private_notes)
    assert {"a.md", "note.md", "work", "plan.md", "secret.md", "plan", "alpha"} <= set(result.split())


@sandboxed
def test_without_private_notes_everything_in_the_folder_is_readable(kb, private_notes):
    result = run_shell("cat private.md alias.md diary/2024/day.md", kb, TIMEOUT)
    assert section(result, "stdout").count("secret text") == 3


@sandboxed
def test_what_kaignore_matches_is_unreadable_even_what_the_index_never_reads(kb, sandbox):  # found by a red team
    """The notebook's list holds what its index does not: attachments in a private folder, names that are not
    UTF-8, the trash, sync-conflict copies, Obsidian's Excluded files; every hidden folder and the top folder's
    hidden files, but not each folder's .DS_Store (a refusal for each would bury grep -r's output)."""
    kb, run = sandbox
    (kb / ".kaignore").write_text("diary/\n*.secret.md\nsecret.md\n")
    (kb / ".obsidian").mkdir()
    (kb / ".obsidian" / "app.json").write_text('{"userIgnoreFilters": ["archive/"]}')
    secrets = ["diary/bank.csv", "diary/plan.canvas", ".trash/old.secret.md", "secret.md",
               "secret.sync-conflict-20240101-123456-ABCDEFG.md", "secret (John's conflicted copy 2024-01-01).md",
               ".history/undo.jsonl", ".git/COMMIT_EDITMSG", ".env", os.fsdecode(b"diary/caf\xe9.md")]
    for path in secrets:
        (kb / path).parent.mkdir(parents=True, exist_ok=True)
        (kb / path).write_text("SECRET\n")
    (kb / "archive").mkdir()
    (kb / "archive" / "old.md").write_text("---\nprivate: true\n---\nSECRET\n")  # never indexed: excluded
    (kb / os.fsdecode(b"na\xefve.md")).write_text("---\nprivate: yes\n---\nSECRET\n")  # nor this name
    (kb / "archive" / "open.md").write_text("open text\n")
    (kb / "archive" / ".DS_Store").write_text("open text\n")
    result = run("grep -r SECRET .; grep -rh 'open text' .", unreadable=tuple(make_notebook(kb).unreadable()))
    assert "SECRET" not in result and section(result, "stdout") == "open text\nopen text", result
    assert ".DS_Store" not in result
    assert result.count("Permission denied") >= 5, result  # the private folders are refused, not missing


@sandboxed
@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "stat"])
def test_what_the_sandbox_may_not_read_stays_current_as_files_come_and_go(kb, watch):
    """The notebook's list is its index's walk, kept current by the watcher: what appears later is sealed too."""
    (kb / ".kaignore").write_text("diary/\n*.secret.md\n")
    (kb / ".obsidian").mkdir()
    (kb / ".obsidian" / "app.json").write_text('{"userIgnoreFilters": ["archive/"]}')
    (kb / "archive").mkdir()
    notebook = make_notebook(kb, search_watch=watch)
    before = set(notebook.unreadable())
    assert before == {".kaignore", ".obsidian"}
    later = {".env": "KEY=1\n", "bank.secret.md": "pin\n", "archive/old.md": "---\nprivate: true\n---\nmine\n",
             "bank.secret (John's conflicted copy 2024-01-01).md": "pin\n"}  # in folders watched: no walk needed
    for path, text in later.items():
        (kb / path).write_text(text)
    (kb / "work" / ".DS_Store").write_text("open\n")  # a folder's own hidden files stay readable
    (kb / "archive" / "open.md").write_text("open\n")
    assert set(notebook.unreadable()) == before | set(later)
    (kb / ".env").unlink()
    (kb / "diary").mkdir()
    (kb / "diary" / "day.md").write_text("mine\n")
    assert set(notebook.unreadable()) == before | set(later) - {".env"} | {"diary", "diary/day.md"}


def test_python_runs_in_the_sandbox_when_the_agent_runs_from_a_venv(kb, tmp_path):  # found by a red team
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True)
    script = (f"import sys; sys.path.insert(0, {ROOT!r}); import shell\n"
              f"print(shell.run_shell('python3 -c \"import sys; print(sys.prefix)\"', {str(kb)!r}, {TIMEOUT}))")
    done = subprocess.run([venv / "bin" / "python", "-c", script], capture_output=True, text=True, timeout=TIMEOUT)
    assert section(done.stdout, "stdout") == str(venv), done.stdout + done.stderr


def test_private_paths_become_a_tree_of_names():
    assert warden._private_tree(["a/b/c.md", "a/d.md", "a/b", "e.md", "x/./y.md"]) == \
        {"a": {"b": None, "d.md": None}, "e.md": None, "x": {"y.md": None}}
    assert warden._private_tree([".", "a.md"]) is None  # the whole folder
    assert warden._private_tree([]) == {}


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


# Each stands for `sleep MARK` and, once it has left its session or group, says so ($TMPDIR/up).
SLEEPER = """sh -c 'touch "$TMPDIR/up"; exec sleep {mark}'"""
UNTIL_UP = '\nuntil [ -e "$TMPDIR/up" ]; do :; done'


@pytest.mark.parametrize("command", [
    "setsid {sleeper} >/dev/null 2>&1 &", "setsid -f {sleeper}", "nohup {sleeper} >/dev/null 2>&1 &",
    "set -m; {sleeper} &", "({sleeper} &)", "(setsid sh -c \"{sleeper} & exit\" &)",
    "for i in 1 2 3 4 5 6 7 8; do setsid {sleeper} & done",
    "kill -9 $PPID; setsid {sleeper} &",  # its warden is out of its reach
])
def test_no_process_outlives_the_command(sandbox, mark, command):
    kb, run = sandbox
    result = run(command.format(sleeper=SLEEPER.format(mark=mark)) + UNTIL_UP)
    assert exit_code(result) == 0 and "stopped" in result, result
    assert marked(mark) == []


def test_unsandboxed_commands_leave_nothing_either(kb, mark, monkeypatch):
    monkeypatch.setattr(shell, "sandbox_problem", lambda: "Landlock is not available on this system")
    result = run_shell(f"setsid {SLEEPER.format(mark=mark)} &" + UNTIL_UP, kb, TIMEOUT)
    assert result.startswith("(not sandboxed") and "stopped" in result
    assert marked(mark) == []


def test_nothing_is_left_after_a_timeout(sandbox, mark):
    kb, run = sandbox
    sleeper = SLEEPER.format(mark=mark)
    result = run(f"setsid {sleeper} & set -m; {sleeper} & sleep 30", timeout=1)
    assert "stopped after 1 s (timeout)" in result
    assert marked(mark) == []


def test_ctrl_c_leaves_nothing_either(kb, scratch, mark):
    press_ctrl_c_when_exists(scratch / "up")
    with pytest.raises(KeyboardInterrupt):
        run_shell(f"setsid {SLEEPER.format(mark=mark)} & sleep 30", kb, TIMEOUT)
    assert marked(mark) == []


def test_a_lock_taken_by_a_command_is_released_when_it_ends(sandbox, mark):
    kb, run = sandbox
    lock = kb / ".history" / "lock"
    lock.parent.mkdir()
    lock.touch()
    result = run(f"setsid flock .history/lock sleep {mark} & until ! flock -n .history/lock true; do :; done")
    assert exit_code(result) == 0, result
    with open(lock) as file:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while the lock is held


@sandboxed
def test_the_warden_and_every_process_are_out_of_signals_reach(sandbox):
    kb, run = sandbox
    assert probe(run, "os.kill(os.getppid(), 0)", "os.kill(-os.getppid(), 0)", "os.kill(-1, 0)",
                 "os.kill(os.getpid(), 0)") == ["EPERM", "EPERM", "EPERM", "ok"]


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

def test_the_environment_is_built_from_an_allow_list(sandbox, monkeypatch):
    kb, run = sandbox
    secrets = {"DEEPSEEK_API_KEY": "sk-deepseek-123", "GITHUB_TOKEN": "ghp_789", "AWS_SECRET_ACCESS_KEY": "aws-000",
               "LLM_KEY": "sk-custom-222", "DATABASE_URL": "postgres://app:pw-333@db/app",
               "GITHUB_PAT": "github_pat_444", "PIP_INDEX_URL": "https://me:pw-555@pypi.example/simple",
               "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/0/bus", "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_TIME", "C")
    result = run("env; echo $DATABASE_URL $GITHUB_PAT $PIP_INDEX_URL", hide=("sk-custom-222",))
    for name, value in secrets.items():
        assert name not in result and value not in result, name
    names = {line.split("=")[0] for line in section(result, "stdout").splitlines() if "=" in line}
    assert names <= {*shell.PASSED_VARIABLES, "LC_TIME", "HOME", "TMPDIR", "PWD", "SHLVL", "_"}, names
    assert {"PATH", "HOME", "TMPDIR", "LC_TIME"} <= names


def test_a_hidden_value_is_masked_in_the_output(kb):
    (kb / "leak.md").write_text("key: sk-live-999\n")
    result = run_shell("cat leak.md; echo sk-live-999 >&2", kb, TIMEOUT, hide=("sk-live-999", ""))
    assert "sk-live-999" not in result
    assert section(result, "stdout") == "key: [hidden]" and section(result, "stderr") == "[hidden]"
    result = run_shell("echo xylophone box", kb, TIMEOUT, hide=("x",))  # OPENAI_API_KEY=x for llama.cpp
    assert section(result, "stdout") == "xylophone box"
