"""The shell tool's engine: run one command in a kernel sandbox and describe what happened.

On Linux, Landlock (as in OpenAI's Codex CLI) confines the command and all it starts: it may read and run
the system folders, read the notes folder, write only a fresh scratch folder (its HOME and TMPDIR), open no
TCP connection unless allowed, signal no process outside it. So `rm *.md`, `> note.md`, `cat ~/.ssh/id_rsa`
or the agent's /proc/<pid>/environ (the API key) are refused by the kernel, however spelled. Elsewhere
sandbox_problem() says why not, and the caller must ask about every command. Never run a command
unsandboxed where the sandbox should apply: if entering it fails, nothing runs.

Commands run with stdin closed, in a process group of their own, without secrets in their environment. A
timeout, Ctrl+C or the command's end kills the whole group. Output goes to files (each capped at
MAX_FILE_BYTES); the model sees each stream's head and tail.
"""
import contextlib
import ctypes
import functools
import os
import re
import resource  # caps the size of the files a command writes
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STDOUT_CHARS = 4000  # the model sees the head and tail of each stream, the middle is cut
STDERR_CHARS = 2000
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when stopping a command
POLL = 0.02  # seconds between looks at whether a stopped process group is gone
MAX_FILE_BYTES = 256 * 1024 * 1024  # any file the command writes, its output included: the disk is finite
SECRET_VARIABLE = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|ACCESS_KEY", re.I)

SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty")

# Landlock, from <linux/landlock.h>. Below ABI 4 (Linux 6.7) `truncate` of a note (ABI 3) and TCP (ABI 4)
# are out of its reach; a sandbox keeping only some of its promises would be trusted as if it kept all.
MIN_ABI = 4
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
FS_RIGHTS = (0, 13, 14, 15, 15, 16)  # how many filesystem rights each ABI knows; ABIs 6 and 7 add none
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR, TRUNCATE, IOCTL_DEV = 1, 2, 4, 8, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # all a rule on a non-folder may hold
READ, READ_EXEC, DEVICE = READ_FILE | READ_DIR, READ_FILE | READ_DIR | EXECUTE, READ_FILE | WRITE_FILE | TRUNCATE
NET_TCP = 1 | 2  # bind, connect (ABI 4)
SCOPES = 1 | 2  # abstract Unix sockets and signals that reach outside the sandbox (ABI 6)


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, loaded once; use_errno so that a failed call's errno can be read."""
    return ctypes.CDLL(None, use_errno=True)


def _call(function: str, *args) -> int:
    """Call a C library function (syscall, prctl), raising OSError when it fails."""
    result = getattr(libc(), function)(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def _abi() -> int:
    """The Landlock ABI version (create_ruleset's answer to flag 1, VERSION); 0 without Landlock (it answers -1)."""
    return max(libc().syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_long(1)), 0)


def sandbox_problem() -> str | None:
    """None when commands can run in the Landlock sandbox here, else why not, in one line for the person."""
    if not sys.platform.startswith("linux"):
        return "the sandbox (Landlock) exists only on Linux: commands would run unsandboxed here"
    abi = _abi()
    found = f"has Landlock ABI {abi}" if abi else "has no Landlock (too old, or turned off)"
    return None if abi >= MIN_ABI else \
        f"this Linux kernel {found}; ABI {MIN_ABI} (Linux 6.7+) is needed: commands would run unsandboxed"


def _prepare_child(kb: str, scratch: str, allow_network: bool, sandboxed: bool) -> None:
    """In the child before exec: cap file sizes, confine it and all it starts. A failure: the command does not run."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    if not sandboxed:
        return
    abi = _abi()  # at least MIN_ABI: sandboxed means sandbox_problem() found no problem
    fs = (1 << FS_RIGHTS[min(abi, 5)]) - 1  # handle every right the ABI knows: what no rule allows is denied
    attr = struct.pack("=QQQ", fs, 0 if allow_network else NET_TCP, SCOPES if abi >= 6 else 0)  # ruleset_attr
    ruleset = _call("syscall", SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), 0)
    rules = [(folder, READ_EXEC) for folder in (*SYSTEM_FOLDERS, sys.base_prefix, sys.prefix)]
    for path, access in rules + [(kb, READ), (scratch, fs)] + [(device, DEVICE) for device in DEVICES]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)  # closes at exec, like the ruleset
        except OSError:
            continue  # only paths that exist get a rule
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FILE_RIGHTS
        rule = struct.pack("=Qi", access & fs, fd)  # struct landlock_path_beneath_attr, packed
        _call("syscall", SYS_ADD_RULE, ruleset, 1, rule, 0)  # 1: LANDLOCK_RULE_PATH_BENEATH
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # required: no setuid program regains what is dropped
    _call("syscall", SYS_RESTRICT_SELF, ruleset, 0)  # the ruleset's descriptor closes at exec


def run_shell(command: str, kb: Path, timeout: float, allow_network: bool = False,
              hide: tuple[str, ...] = ()) -> str:
    """Run one command in the notes folder, sandboxed unless sandbox_problem() says it cannot be, and
    describe what happened. Raises only KeyboardInterrupt, after killing the command's process group.
    `hide`: secret values (the API key) no variable passed on may hold, shown as [hidden] in the output."""
    problem = sandbox_problem()
    # Adopt the commands' orphans so they are reaped here: where init is slow to reap them (containers),
    # their zombies would keep a stopped group looking alive. Not Linux: init adopts them.
    with contextlib.suppress(OSError, AttributeError):
        _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    scratch = tempfile.mkdtemp(prefix="ka-shell-")
    setup = functools.partial(_prepare_child, os.path.abspath(kb), scratch, allow_network, not problem)
    env = {name: value for name, value in os.environ.items()  # none that looks like a key, token or password
           if not SECRET_VARIABLE.search(name) and not any(secret and secret in value for secret in hide)}
    # This interpreter's folder first: the sandbox can run it, not version-manager shims in the home folder.
    path = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", os.defpath)
    try:
        # In the scratch folder, unnamed: `>/dev/stderr` reopens them, yet the command cannot find them.
        with tempfile.TemporaryFile(dir=scratch) as out, tempfile.TemporaryFile(dir=scratch) as err:
            try:
                proc = subprocess.Popen([shutil.which("bash") or "/bin/sh", "-c", command], cwd=kb,
                                        env={**env, "HOME": scratch, "TMPDIR": scratch, "PATH": path},
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        start_new_session=True, preexec_fn=setup)
            except subprocess.SubprocessError:  # what an exception in preexec_fn becomes
                return "Error: the sandbox could not be applied, so the command did not run"
            except OSError as exc:
                return f"Error: could not start the shell: {exc}"
            parts = _wait(proc, timeout)
            if max(os.fstat(f.fileno()).st_size for f in (out, err)) >= MAX_FILE_BYTES:
                parts.append(f"note: the output reached {MAX_FILE_BYTES:,} bytes and its writer was stopped")
            for label, file, chars in (("stdout", out, STDOUT_CHARS), ("stderr", err, STDERR_CHARS)):
                text = _read(file, chars, hide)
                parts.append(f"{label}:\n{text.rstrip()}" if text.strip() else f"{label}: (empty)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = "\n".join(parts)
    return f"(not sandboxed: {problem})\n{result}" if problem else result


def _wait(proc: subprocess.Popen, timeout: float) -> list[str]:
    """Wait for the command's shell, then stop its whole group: TERM, KILL after KILL_GRACE (at once on a
    second Ctrl+C), back when none of it is left. The exit code and what happened, as the result's lines."""
    notes = []
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        notes.append(f"stopped after {timeout:g} s (timeout): the command and everything it started were "
                     f"killed. Split the work into shorter steps, or raise SHELL_TIMEOUT.")
    finally:  # after a timeout, Ctrl+C or the shell's end alike, nothing the command started outlives it
        if _signal_group(proc, 0):
            try:
                _signal_group(proc, signal.SIGTERM, KILL_GRACE)
            finally:
                _signal_group(proc, signal.SIGKILL, KILL_GRACE)  # KILL too takes effect a moment later
                proc.wait()
            notes = notes or ["note: processes the command left running in the background were stopped"]
    code = 128 - proc.returncode if proc.returncode < 0 else proc.returncode  # killed by signal N: 128+N
    return [f"exit_code={code}", *notes]


def _signal_group(proc: subprocess.Popen, sig: int, wait: float = 0.0) -> bool:
    """Send sig to the command's group (a session leader's pid is its group id), then give it up to `wait`
    seconds to end; whether any of it is left. Ended orphans are reaped (see run_shell): no zombie counts."""
    deadline = time.monotonic() + wait
    while True:
        if proc.poll() is not None:  # the shell is reaped: waiting on its group takes only orphans
            with contextlib.suppress(ChildProcessError):  # none left to reap
                while os.waitpid(-proc.pid, os.WNOHANG)[0]:
                    pass
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        if time.monotonic() >= deadline:
            return True
        sig = 0  # signalled once; from now on only look
        time.sleep(POLL)


def _read(file, chars: int, hide: tuple[str, ...]) -> str:
    """The output file's text for the model: all of it, or its head and tail, reading no more than those."""
    keep, half = chars * 4, chars // 2  # bytes for `chars` characters of UTF-8: a character cut in two at
    size = file.seek(0, os.SEEK_END)    # either end of what is read, or a secret hidden, stays out of view
    file.seek(0)
    if size <= 2 * keep:
        text = _mask(file.read().decode("utf-8", "replace"), hide)
        if len(text) <= chars:
            return text
        head, tail, cut = text[:half], text[-(chars - half):], f"{len(text) - chars:,} characters"
    else:
        head = _mask(file.read(keep).decode("utf-8", "replace"), hide)[:half]
        file.seek(size - keep)
        tail = _mask(file.read(keep).decode("utf-8", "replace"), hide)[-(chars - half):]
        cut = f"{size - len(head.encode()) - len(tail.encode()):,} bytes"
    return f"{head}\n[... {cut} cut; narrow the command (grep, head, tail) to see them ...]\n{tail}"


def _mask(text: str, hide: tuple[str, ...]) -> str:
    for secret in filter(None, hide):
        text = text.replace(secret, "[hidden]")
    return text
