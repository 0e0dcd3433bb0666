"""The shell tool's engine: run one command in a kernel sandbox and describe what happened.

Each command has a warden (warden.py, run as `python -I -S warden.py`, its orders on stdin), which starts it in the
sandbox and kills everything it leaves behind. This side builds the orders: the command, an environment from an
allow-list (never the agent's own minus secret-looking names), the scratch folder, and what the sandbox must not let
it read (what is private, all that is hidden: the caller asks the Notebook, whose index's walk finds them). Stdin is
closed; output goes to files (each capped at MAX_FILE_BYTES), and the model sees each stream's head and tail,
secrets masked.
"""

import marshal
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import warden
from warden import sandbox_problem

STDOUT_CHARS = 4000  # the model sees the head and tail of each stream, the middle is cut
STDERR_CHARS = 2000
MIN_SECRET = 8  # a shorter "key" is a local server's placeholder (x, ollama): masking it would garble the output
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when stopping a command
MAX_FILE_BYTES = 256 * 1024 * 1024  # any file the command writes, its output included: the disk is finite
PASSED_VARIABLES = ("PATH", "LANG", "TERM", "TZ", "USER", "LOGNAME", "SHELL")  # and LC_*; HOME, TMPDIR: scratch

FAILURES = {"sandbox": "the sandbox could not be applied, so the command did not run",  # the warden's reports
            "start": "could not start the shell"}


def run_shell(command: str, kb, timeout: float, allow_network: bool = False, hide: tuple[str, ...] = (),
              unreadable: tuple[str, ...] = ()) -> str:
    """Run one command in the notes folder, sandboxed unless sandbox_problem() says it cannot be; raises only
    KeyboardInterrupt, after all it started is gone. `hide`: secrets (the API key) no variable passed on may hold,
    shown as [hidden] in the output; `unreadable`: what it may not read in the notes folder (Notebook.unreadable)."""
    problem = sandbox_problem()
    scratch = tempfile.mkdtemp(prefix="ka-shell-")
    status_read, status_write = os.pipe()
    orders = {"command": command, "shell": shutil.which("bash") or "/bin/sh", "env": _environment(scratch, hide),
              "kb": os.path.abspath(kb), "scratch": scratch, "network": allow_network, "sandboxed": not problem,
              "private": unreadable, "status": status_write, "agent": os.getpid(),
              "max_file_bytes": MAX_FILE_BYTES, "kill_grace": KILL_GRACE,
              "pythons": [sys.base_prefix, sys.prefix]}  # the warden's (-S) is the base one, venv or not
    try:
        # In the scratch folder, unnamed: `>/dev/stderr` reopens them, yet the command cannot find them.
        with tempfile.TemporaryFile(dir=scratch) as out, tempfile.TemporaryFile(dir=scratch) as err:
            try:
                proc = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(warden.__file__)], cwd=kb,
                                        env=orders["env"], stdin=subprocess.PIPE, stdout=out, stderr=err,
                                        start_new_session=True, pass_fds=(status_write,))
            except OSError as exc:
                return f"Error: could not start the shell: {exc}"
            finally:
                os.close(status_write)
            remarks = _wait(proc, timeout, marshal.dumps(orders), status_read)
            with open(status_read, "rb", closefd=False) as status:
                kind, _, detail = status.readline().decode("utf-8", "replace").strip().partition(" ")
            if kind != "exit":
                what = FAILURES.get(kind, f"the command's warden failed (exit {proc.returncode})")
                return f"Error: {what}: {detail or 'it said nothing'}"
            code, left = map(int, detail.split())
            if left:
                remarks = remarks or ["note: processes the command left running in the background were stopped"]
            parts = [f"exit_code={128 - code if code < 0 else code}", *remarks]  # killed by signal N: 128+N
            if max(os.fstat(f.fileno()).st_size for f in (out, err)) >= MAX_FILE_BYTES:
                parts.append(f"note: the output reached {MAX_FILE_BYTES:,} bytes and its writer was stopped")
            for label, file, chars in (("stdout", out, STDOUT_CHARS), ("stderr", err, STDERR_CHARS)):
                text = _head_and_tail(file, chars, hide)
                parts.append(f"{label}:\n{text.rstrip()}" if text.strip() else f"{label}: (empty)")
    finally:
        os.close(status_read)
        shutil.rmtree(scratch, ignore_errors=True)
    result = "\n".join(parts)
    return f"(not sandboxed: {problem})\n{result}" if problem else result


def _environment(scratch: str, hide: tuple[str, ...]) -> dict[str, str]:
    """This interpreter's folder goes first on PATH: the sandbox can run it, not version-manager shims in the home
    folder. Tokens, passwords and bus addresses stay out: only PASSED_VARIABLES and LC_* are passed on."""
    secrets = [secret for secret in hide if len(secret) >= MIN_SECRET]
    env = {name: value for name, value in os.environ.items()
           if (name in PASSED_VARIABLES or name.startswith("LC_")) and not any(s in value for s in secrets)}
    path = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", os.defpath)
    return {**env, "PATH": path, "HOME": scratch, "TMPDIR": scratch}


def _wait(proc: "subprocess.Popen", timeout: float, orders: bytes, status: int) -> list[str]:
    """Wait for the warden's report (it writes it as it ends: Popen.wait(timeout) would poll) and all to be gone; on
    a timeout or Ctrl+C have it stop the command (SIGTERM: TERM, KILL after the grace; Ctrl+C again, SIGINT: KILL)."""
    remarks = []
    try:
        with proc.stdin:
            proc.stdin.write(orders)
        if select.select([status], [], [], timeout)[0]:
            proc.wait()
        else:
            remarks.append(f"stopped after {timeout:g} s (timeout): the command and everything it started were "
                         f"killed. Split the work into shorter steps, or raise SHELL_TIMEOUT.")
    except BrokenPipeError:
        pass  # the warden is gone already; its report, or its absence, says why
    finally:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    proc.wait()
    return remarks


def _head_and_tail(file, chars: int, hide: tuple[str, ...]) -> str:
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
    for secret in (value for value in hide if len(value) >= MIN_SECRET):
        text = text.replace(secret, "[hidden]")
    return text

