"""The shell tool's warden: run as `python -I -S warden.py` by shell.run_shell, one per command, its orders on stdin.

It starts the command and adopts (as child subreaper) every process the command leaves behind, so that when the
command's shell ends, times out or is interrupted, everything it started is killed, even what left its session
(`setsid`, `nohup`, a double fork). Before running bash, the command's process enters the sandbox, which binds it and
all it starts, root included:
- Landlock (as in OpenAI's Codex CLI): read and run the system folders and the agent's interpreter's (its venv too),
  read the notes folder less what the agent found unreadable (what is private, all that is hidden), write only a
  fresh scratch folder (its HOME and TMPDIR), no TCP unless allowed, no signal to a process outside it. So `rm *.md`,
  `> note.md`, `cat ~/.ssh/id_rsa` or the agent's /proc/<pid>/environ (the API key) are refused by the kernel,
  however spelled.
- no capabilities at all, and no_new_privs: a setuid program gains nothing;
- a seccomp filter for what Landlock does not see: sockets other than socketpairs (with the network allowed, TCP and
  UDP over IPv4/IPv6), chmod and chown, times and extended attributes set by a path (only a descriptor sets them),
  device nodes, the kernel keyring, ptrace, mounts and namespaces, signals to the warden, and what would go around
  the filter (io_uring, x32 calls; another architecture's calls kill the process). Refused calls fail with EPERM.
sandbox_problem() says, on the agent's side, why the sandbox cannot be built here. Off Linux the warden stops the
command's process group, as orphans are not adopted there. It never runs a command unsandboxed where the sandbox
should apply: if entering it fails, nothing runs. It imports nothing of the project: its start-up is every command's.
"""

import ctypes
import marshal  # the orders: the agent's interpreter writes them, this one reads them, nothing else does
import os
import resource  # caps the size of the files a command writes
import select
import signal
import stat
import struct
import sys
import time

ON_LINUX = sys.platform.startswith("linux")
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty")

# Landlock, from <linux/landlock.h>. Below ABI 4 (Linux 6.7) `truncate` of a note (ABI 3) and TCP (ABI 4)
# are out of its reach; a sandbox keeping only some of its promises would be trusted as if it kept all.
MIN_ABI = 4
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
FS_RIGHTS = (0, 13, 14, 15, 15, 16)  # how many filesystem rights each ABI knows; ABIs 6 and 7 add none
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR, TRUNCATE, IOCTL_DEV = 1, 2, 4, 8, 1 << 14, 1 << 15
MAKE_CHAR, MAKE_BLOCK = 1 << 6, 1 << 11  # device nodes: not even in the scratch folder
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # all a rule on a non-folder may hold
READ, READ_EXEC, DEVICE = READ_FILE | READ_DIR, READ_FILE | READ_DIR | EXECUTE, READ_FILE | WRITE_FILE | TRUNCATE
NET_TCP = 1 | 2  # bind, connect (ABI 4)
SCOPES = 1 | 2  # abstract Unix sockets and signals that reach outside the sandbox (ABI 6)

# prctl and capabilities, from <linux/prctl.h> and <linux/capability.h>
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_CAPBSET_READ, PR_CAPBSET_DROP = 1, 22, 23, 24
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 36, 38, 47, 4
CAPABILITY_VERSION_3, CAP_SETPCAP = 0x20080522, 8

# seccomp, from <linux/seccomp.h>, <linux/filter.h> and <linux/audit.h>
SECCOMP_MODE_FILTER = 2
ALLOW, KILL_PROCESS, ERRNO = 0x7FFF0000, 0x80000000, 0x00050000  # SECCOMP_RET_*; ERRNO | errno
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers
BPF = {"ld": 0x20, "and": 0x54, "ret": 0x06, "jeq": 0x15, "jge": 0x35, "jset": 0x45}  # ld = BPF_LD|W|ABS
NR, ARCH = 0, 4  # offsets in struct seccomp_data; its args (u64) start at 16, their low half first
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
SOCK_TYPE_MASK, SOCK_STREAM, SOCK_DGRAM, IPPROTO_TCP, IPPROTO_UDP = 0xF, 1, 2, 6, 17
S_IFMT, S_IFCHR, S_IFBLK = 0o170000, 0o020000, 0o060000
CLONE_NEW_NAMESPACES = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
# System calls: name: (x86_64, aarch64), AUDIT_ARCH's order; None where the architecture has no such call.
CHECKED = {  # allowed or refused by their arguments (clone3 by none: ENOSYS)
    "socket": (41, 198), "socketpair": (53, 199), "clone": (56, 220), "clone3": (435, 435),
    "mknod": (133, None), "mknodat": (259, 33), "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240), "pidfd_open": (434, 434),
    "utimensat": (280, 88),
}
REFUSED = {  # refused whatever their arguments
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452),
    "chown": (92, None), "lchown": (94, None), "fchown": (93, 55), "fchownat": (260, 54),
    "utime": (132, None), "utimes": (235, None), "futimesat": (261, None), "setxattr": (188, 5),
    "lsetxattr": (189, 6), "removexattr": (197, 14), "lremovexattr": (198, 15), "setxattrat": (463, 463),
    "removexattrat": (466, 466),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442), "open_tree_attr": (467, 467),
    "unshare": (272, 97), "setns": (308, 268),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
}
SYSCALLS = {**CHECKED, **REFUSED}
LIBC = ctypes.CDLL(None, use_errno=True)


def _call(function: str, *args) -> int:
    result = getattr(LIBC, function)(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def _abi() -> int:
    """The Landlock ABI version (create_ruleset's answer to flag 1, VERSION); 0 without Landlock (it answers -1)."""
    return max(LIBC.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_long(1)), 0)


def _has_seccomp_filters() -> bool:
    """A filter-capable kernel answers a missing program with EFAULT; one without (CONFIG_SECCOMP_FILTER) EINVAL."""
    return LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, None, 0, 0) == -1 and ctypes.get_errno() == 14


def sandbox_problem() -> str | None:
    """None when commands can run in the sandbox here, else why not, in one line for the person."""
    if not ON_LINUX:
        return "the sandbox (Landlock) exists only on Linux: commands would run unsandboxed here"
    abi, machine = _abi(), os.uname().machine
    if abi < MIN_ABI:
        found = f"has Landlock ABI {abi}" if abi else "has no Landlock (too old, or turned off)"
        return f"this Linux kernel {found}; ABI {MIN_ABI} (Linux 6.7+) is needed: commands would run unsandboxed"
    if machine not in AUDIT_ARCH or struct.calcsize("P") != 8:
        return f"the sandbox's seccomp filter knows x86_64 and aarch64, not {machine}: commands would run unsandboxed"
    if not _has_seccomp_filters():
        return "this Linux kernel has no seccomp filters (CONFIG_SECCOMP_FILTER): commands would run unsandboxed"
    return None


def _warden() -> None:
    """Carry out run_shell's orders (on stdin); report `exit CODE LEFT`, or what kept the command from running
    (`sandbox …`, `start …`), on the status pipe. Nothing the command starts outlives the warden's end."""
    orders = marshal.loads(sys.stdin.buffer.read())
    status = orders["status"]
    os.set_inheritable(status, False)  # the command must not write a status of its own
    wakeup, wakeup_write = os.pipe()  # signals only wake the loop (_watch); they never interrupt the warden
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)  # a full pipe wakes the loop all the same
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    if ON_LINUX:
        _call("prctl", PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # the agent killed: stop the command too
        _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of the command become the warden's
    if os.getppid() != orders["agent"]:
        return  # the agent ended before the line above
    try:
        ruleset = _ruleset(orders) if orders["sandboxed"] else -1
    except OSError as exc:
        os.write(status, f"sandbox {exc}\n".encode())
        return
    command = os.fork()
    if command == 0:
        _start(orders, ruleset, os.getppid())
    if ruleset >= 0:
        os.close(ruleset)
    try:
        code, left = _watch(command, orders["kill_grace"], wakeup)
    except BaseException:
        _kill_all(command, {})  # a fault here leaves nothing running either
        raise
    os.write(status, f"exit {os.waitstatus_to_exitcode(code)} {int(left)}\n".encode())


def _start(orders: dict, ruleset: int, warden: int) -> None:
    """In the forked child: enter the sandbox and become bash, or report why not. Never returns."""
    step = "sandbox"
    try:
        os.setsid()  # its own session and group: `kill 0` does not reach the warden
        devnull = os.open(os.devnull, os.O_RDONLY)  # the warden's stdin held its orders
        os.dup2(devnull, 0)
        os.close(devnull)
        resource.setrlimit(resource.RLIMIT_FSIZE, (orders["max_file_bytes"], orders["max_file_bytes"]))
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; `yes | head` needs them back
            signal.signal(sig, signal.SIG_DFL)
        if ruleset >= 0:
            _drop_capabilities()
            _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid program regains what is dropped
            _call("syscall", SYS_RESTRICT_SELF, ruleset, 0)  # the ruleset's descriptor closes at exec
            _install_filter(_seccomp_program(os.uname().machine, orders["network"], warden))
        step = "start"
        os.execve(orders["shell"], [orders["shell"], "-c", orders["command"]], orders["env"])
    except BaseException as exc:
        os.write(orders["status"], f"{step} {exc}\n".encode())  # the first line is what the agent reads
    finally:
        os._exit(127)


def _ruleset(orders: dict) -> int:
    abi = _abi()  # at least MIN_ABI: sandboxed means sandbox_problem() found no problem
    fs = (1 << FS_RIGHTS[min(abi, 5)]) - 1  # handle every right the ABI knows: what no rule allows is denied
    attr = struct.pack("=QQQ", fs, 0 if orders["network"] else NET_TCP, SCOPES if abi >= 6 else 0)
    ruleset = _call("syscall", SYS_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), 0)
    rules = [(folder, READ_EXEC) for folder in (*SYSTEM_FOLDERS, *orders["pythons"])]
    rules += [(orders["scratch"], fs & ~(MAKE_CHAR | MAKE_BLOCK))] + [(device, DEVICE) for device in DEVICES]
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # only paths that exist get a rule
        _allow(ruleset, fd, access & fs)
    kb = os.path.realpath(orders["kb"])
    private = [os.path.relpath(os.path.realpath(os.path.join(kb, path)), kb) for path in orders["private"]]
    tree = _private_tree([path for path in private if path.split(os.sep)[0] != os.pardir])
    _allow_notes(ruleset, os.open(kb, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), tree)
    return ruleset


def _private_tree(paths: list[str]) -> dict | None:
    """The private paths as a tree of names: None for a private entry, a dict for a folder holding some;
    None as a whole when the notes folder itself is private."""
    tree = {}
    for parts in sorted(tuple(part for part in path.split(os.sep) if part != os.curdir) for path in paths):
        if not parts:
            return None
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if node is None:
                break  # inside a private folder already
        else:
            node[parts[-1]] = None
    return tree


def _allow_notes(ruleset: int, folder: int, private: dict | None) -> None:
    """Let the command read the folder (an open descriptor, closed here) whole, or, where private paths sit
    below it, list it and read each entry but those: Landlock rules only allow, and what one allows on a
    folder holds for all beneath it. Symbolic links get no rule: the kernel checks their target's own."""
    if private is None:
        return os.close(folder)
    if not private:
        return _allow(ruleset, folder, READ)
    _allow(ruleset, os.dup(folder), READ_DIR)
    with os.scandir(folder) as entries:  # their types without a stat each
        for entry in entries:
            below = private.get(entry.name, {})
            if below is None or entry.is_symlink():
                continue
            is_folder = entry.is_dir(follow_symlinks=False)
            flags = os.O_RDONLY | os.O_DIRECTORY if below and is_folder else os.O_PATH
            try:
                fd = os.open(entry.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            except FileNotFoundError:
                continue  # removed since it was listed
            if below and is_folder:
                _allow_notes(ruleset, fd, below)
            else:
                _allow(ruleset, fd, READ if is_folder else READ_FILE)
    os.close(folder)


def _allow(ruleset: int, fd: int, access: int) -> None:
    """Add a path-beneath rule for an open descriptor, then close it (thousands of notes: descriptors run out)."""
    try:
        if access & ~FILE_RIGHTS and not stat.S_ISDIR(os.fstat(fd).st_mode):  # the kernel refuses more on a file
            access &= FILE_RIGHTS
        rule = struct.pack("=Qi", access, fd)  # struct landlock_path_beneath_attr, packed
        _call("syscall", SYS_ADD_RULE, ruleset, 1, rule, 0)  # 1: LANDLOCK_RULE_PATH_BENEATH
    finally:
        os.close(fd)


def _drop_capabilities() -> None:
    """Give up every capability, root's included: the bounding set (with CAP_SETPCAP only; without it, exec
    cannot gain any under no_new_privs), the ambient set, then effective, permitted and inheritable."""
    header = ctypes.create_string_buffer(struct.pack("=Ii", CAPABILITY_VERSION_3, 0))  # this process
    data = ctypes.create_string_buffer(24)  # effective, permitted, inheritable: twice 32 bits each
    _call("capget", header, data)
    if struct.unpack_from("=I", data.raw)[0] >> CAP_SETPCAP & 1:
        cap = 0
        while LIBC.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0:  # EINVAL past the last one this kernel knows
            _call("prctl", PR_CAPBSET_DROP, cap, 0, 0, 0)
            cap += 1
    _call("prctl", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _call("capset", header, ctypes.create_string_buffer(24))


def _seccomp_program(machine: str, allow_network: bool, warden: int) -> list[tuple]:
    """The filter, as ("label", name) and (op, k[, if_true, if_false]) steps for _install_filter: a foreign
    architecture kills, x32 and the calls named in the module docstring fail with EPERM, clone3 with ENOSYS
    (its flags are out of a filter's sight; libc falls back to clone, whose flags are checked)."""
    number = {name: numbers[tuple(AUDIT_ARCH).index(machine)] for name, numbers in SYSCALLS.items()}
    arg = [16 + 8 * i for i in range(6)]  # the low 32 bits of each argument: int arguments are only those
    code = [("ld", ARCH), ("jeq", AUDIT_ARCH[machine], None, "foreign"), ("ld", NR)]
    if machine == "x86_64":
        code.append(("jge", X32_SYSCALL_BIT, "refuse", None))
    code += [("jeq", number[name], "refuse", None) for name in REFUSED if number[name] is not None]
    signals = ("tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")  # a pid first, as kill
    label = {"clone3": "nosys", **dict.fromkeys(signals, "signal")}  # every other checked call: its own label
    code += [("jeq", number[name], label.get(name, name), None) for name in CHECKED if number[name] is not None]
    code += [("ret", ALLOW), ("label", "socket")]
    if allow_network:  # TCP and UDP (names must resolve) over IPv4 and IPv6; never MPTCP, SCTP, raw, ICMP
        code += [("ld", arg[0]), ("jeq", AF_INET, "ip", None), ("jeq", AF_INET6, "ip", "refuse"), ("label", "ip"),
                 ("ld", arg[1]), ("and", SOCK_TYPE_MASK), ("jeq", SOCK_STREAM, "tcp", None),
                 ("jeq", SOCK_DGRAM, "udp", "refuse"),
                 ("label", "tcp"), ("ld", arg[2]), ("jeq", 0, "allow", None), ("jeq", IPPROTO_TCP, "allow", "refuse"),
                 ("label", "udp"), ("ld", arg[2]), ("jeq", 0, "allow", None), ("jeq", IPPROTO_UDP, "allow", "refuse")]
    else:
        code += [("ret", ERRNO | 1)]  # EPERM; pipes between processes are socketpairs
    code += [("label", "socketpair"), ("ld", arg[0]), ("jeq", AF_UNIX, "allow", "refuse"),
             ("label", "clone"), ("ld", arg[0]), ("jset", CLONE_NEW_NAMESPACES, "refuse", "allow")]
    # Times and attributes are set only through a descriptor (futimens, fsetxattr), which Landlock gave for what
    # the command may read or write; by a path (touch ~/.ssh/id_rsa) never: a path's pointer must be NULL.
    code += [("label", "utimensat"), ("ld", arg[1]), ("jeq", 0, None, "refuse"), ("ld", arg[1] + 4),
             ("jeq", 0, "allow", "refuse")]
    for label, mode in (("mknod", arg[1]), ("mknodat", arg[2])):  # FIFOs and files may be made, devices not
        code += [("label", label), ("ld", mode), ("and", S_IFMT), ("jeq", S_IFCHR, "refuse", None),
                 ("jeq", S_IFBLK, "refuse", "allow")]
    # The warden must outlive the command: no signal to it, to its group, or to every process (-1).
    code += [("label", "kill"), ("ld", arg[0]), ("jeq", 0xFFFFFFFF, "refuse", None),
             ("jeq", -warden & 0xFFFFFFFF, "refuse", "pid"),
             ("label", "signal"), ("ld", arg[0]), ("label", "pid"), ("jeq", warden, "refuse", "allow"),
             ("label", "allow"), ("ret", ALLOW), ("label", "refuse"), ("ret", ERRNO | 1),  # EPERM
             ("label", "nosys"), ("ret", ERRNO | 38), ("label", "foreign"), ("ret", KILL_PROCESS)]
    return code


def _install_filter(code: list[tuple]) -> None:
    """Assemble _seccomp_program's steps into classic BPF, labels becoming forward jump offsets (struct sock_filter),
    and load the filter onto this process and all it will start (it is never lifted)."""
    where, steps, program = {}, [], []
    for step in code:
        if step[0] == "label":
            where[step[1]] = len(steps)
        else:
            steps.append(step)
    for i, (op, k, *targets) in enumerate(steps):
        jt, jf = ((where[t] - i - 1 if t else 0) for t in targets) if targets else (0, 0)
        program.append(struct.pack("=HBBI", BPF[op], jt, jf, k))  # a jump beyond 255 steps would raise here
    buffer = ctypes.create_string_buffer(b"".join(program))
    fprog = struct.pack("@HP", len(program), ctypes.addressof(buffer))  # struct sock_fprog
    _call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0)


def _watch(command: int, grace: float, wakeup: int) -> tuple[int, bool]:
    """Wait for the command's shell, then stop whatever it left: TERM, then KILL after `grace` seconds.
    SIGTERM from the agent (timeout, Ctrl+C, the agent ending) starts that stop while the shell runs, SIGINT
    (a second Ctrl+C) kills at once. The shell's wait status, and whether it had left processes running."""
    statuses, kill_at, left = {}, None, False
    while True:
        timeout = None if kill_at is None else max(0.0, kill_at - time.monotonic())
        signals = os.read(wakeup, 512) if select.select([wakeup], [], [], timeout)[0] else b""
        # Reap what ended; is anything the command started left? On Linux that is the warden's children, orphans
        # included; elsewhere orphans go to init and the command's process group stands for them.
        if not (_reap(statuses) or (not ON_LINUX and _signal_all(command, 0))):
            return statuses[command], left
        if signal.SIGINT in signals or (kill_at is not None and time.monotonic() >= kill_at):
            _kill_all(command, statuses)
            return statuses[command], left
        if kill_at is None and (signal.SIGTERM in signals or command in statuses):
            left = command in statuses
            _signal_all(command, signal.SIGTERM)
            kill_at = time.monotonic() + grace


def _reap(statuses: dict) -> bool:
    """Collect the wait status of every child that ended; whether any child is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if not pid:
            return True
        statuses[pid] = status


def _kill_all(command: int, statuses: dict) -> None:
    """SIGKILL everything the command started until none of it is left: what a killed process had started
    becomes the warden's, and is killed in the next round."""
    while _signal_all(command, signal.SIGKILL):
        if _reap(statuses):  # children left: wait for one of them to end
            pid, status = os.waitpid(-1, 0)
            statuses[pid] = status
    _reap(statuses)


def _signal_all(command: int, sig: int) -> bool:
    """Send sig to every process below the warden, or off Linux to the command's process group; whether any."""
    sent = False
    for pid in _descendants(os.getpid()) if ON_LINUX else [-command]:
        try:
            os.kill(pid, sig)
            sent = True
        except (ProcessLookupError, PermissionError):
            pass  # ended meanwhile
    return sent


def _descendants(root: int) -> list[int]:
    """The pids of every process below root, zombies included, from each process's parent in /proc."""
    children = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                parent = int(file.read().rsplit(b")", 1)[1].split()[1])  # after the name, in brackets
        except OSError:
            continue  # it has just ended
        children.setdefault(parent, []).append(int(name))
    found = children.get(root, [])
    for pid in found:  # the list grows as it is walked
        found += children.get(pid, [])
    return found


if __name__ == "__main__":
    _warden()
    os._exit(0)  # all is reported and reaped: skip the interpreter's teardown, the agent waits for this exit
