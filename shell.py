"""The shell tool's engine: a guard for commands and a careful way to run them.

Enabling the shell hands a language model your account. Two things here make that less dangerous,
neither makes it safe:

- check_command(command, kb) refuses obviously destructive or exfiltrating commands (`rm -rf ~`, `mkfs`,
  `curl … | sh`, reading `.env` files, touching `~/.ssh`, deleting the notes folder by any name, ...)
  with a reason. It is a seat belt, not a sandbox: it reads the command text, and a determined or
  obfuscated command gets past it.
- run_shell(command, cwd, timeout) runs bash (Git Bash on Windows, else the platform shell) with stdin
  closed, in a session of its own, with API keys and tokens removed from the environment. A timeout or
  Ctrl+C kills the whole process tree (TERM, then KILL after a grace period), and so does the end of the
  command for whatever it left in the background. On Linux this process becomes a child subreaper, so
  even processes that left the command's session (`setsid`, daemons) come back to it and are stopped.
  The output comes back as `exit_code=N` / `stdout:` / `stderr:`, each stream cut to its head and tail
  so a huge output cannot flood the model's context or this process's memory.
"""
import ctypes
import fnmatch
import os
import posixpath
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from config import (HISTORY_DIR, SHELL_KILL_GRACE, SHELL_OUTPUT_GRACE, SHELL_STDERR_CHARS,
                    SHELL_STDOUT_CHARS, SHELL_TIMEOUT)

# ---------------------------------------------------------------------------------------------------
# The guard
# ---------------------------------------------------------------------------------------------------

# Words that run the command after them; stripped so `sudo rm -rf /` is judged as `rm -rf /`.
# The value is the set of their options that take an argument.
PREFIX_COMMANDS = {
    "sudo": {"-u", "-g", "-C", "-h", "-p", "-U", "-r", "-t", "-D"}, "doas": {"-u", "-C"},
    "command": set(), "builtin": set(), "exec": {"-a"}, "nohup": set(), "time": set(),
    "nice": {"-n"}, "ionice": {"-c", "-n", "-p"}, "env": {"-u", "-C", "-S"}, "stdbuf": set(),
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "xargs": {"-I", "-i", "-n", "-L", "-l", "-d", "-P", "-s", "-E", "-e", "-a"},
    "then": set(), "do": set(), "else": set(), "if": set(), "elif": set(), "while": set(),
    "until": set(), "!": set(), "{": set(),
}
SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "ash", "busybox"}
INTERPRETERS = SHELLS | {"python", "python3", "perl", "ruby", "node", "php", "source", ".", "eval"}
FETCHERS = {"curl", "wget", "fetch", "aria2c"}
RAW_NETWORK = {"nc", "ncat", "netcat", "socat", "telnet"}
DISK_TOOLS = {"mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted", "gdisk", "sgdisk"}
POWER = {"shutdown", "reboot", "halt", "poweroff"}
# Commands whose arguments are text, not files read: `echo .env` reads nothing.
TEXT_ONLY = {"echo", "printf", "true", "false", ":", "test", "[", "which", "type"}
NAMES_ONLY = {"ls", "du", "stat"}  # they show a .env file's name and size, never what it holds
PATTERN_FIRST = {"grep", "egrep", "fgrep", "rg", "ag", "ack"}
SAFE_DEVICES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"}
SECRET_PLACES = [  # (pattern on a path-like word, what it is)
    (re.compile(r"(^|/)\.ssh(/|$)"), "SSH keys (~/.ssh)"),
    (re.compile(r"(^|/)\.gnupg(/|$)"), "GnuPG keys (~/.gnupg)"),
    (re.compile(r"(^|/)\.aws(/|$)"), "AWS credentials (~/.aws)"),
    (re.compile(r"(^|/)\.(netrc|git-credentials|pgpass)$"), "saved passwords"),
    (re.compile(r"(^|/)\.(docker/config\.json|kube/config|config/gh/hosts\.yml)$"), "saved credentials"),
    (re.compile(r"^/etc/(shadow|gshadow|sudoers)"), "system password files"),
    (re.compile(r"^/proc/[^/]+/(task/[^/]+/)?(environ|mem)$"),
     "another process's environment or memory (the agent's holds the API key)"),
]
ENV_FILE = re.compile(r"^\.env(rc|\.(?!(example|sample|template|dist|defaults?)$)[\w.-]+)?$")
ENV_FILE_NAMES = (".env", ".env.local", ".envrc")  # a glob that can match one of these can match a .env file
MAX_BRACE_WORDS = 64
FORK_BOMB = re.compile(r"([\w:.-]+)\s*\(\s*\)\s*\{([^}]{0,200})\}")  # bombs are short; unbounded is quadratic
MAX_NESTING = 4
MAX_FOLDERS = 32  # folders a command may have cd'd into that the guard keeps track of
NOTES_FOLDER = "the notes folder"


class _Where:
    """Where a command's paths point: the folders it may be in, and the places it must not delete.

    Every `cd` adds a folder instead of replacing one: `(cd x); rm -rf y` and `cd x || rm -rf y` run rm
    in either, and the guard cannot tell which, so a target is judged against all of them.
    """

    def __init__(self, kb):
        home = _posix(os.path.expanduser("~"))
        self.home = home if home.startswith("/") else None
        self.kb = _posix(kb) if kb else None
        self.folders: list[str | None] = [self.kb]  # None: a folder the guard cannot work out
        self.protected: dict[str, str] = {}  # absolute path -> what deleting it would delete
        places = [(path, what) for place, what in ((self.kb, NOTES_FOLDER), (self.home, "your home directory"))
                  for path in _spellings(place)]
        for path, what in places:  # the places themselves first: their names win over "a folder holding"
            self.protected.setdefault(path, what)
        for path, what in places:
            while posixpath.dirname(path) != path:
                path = posixpath.dirname(path)
                self.protected.setdefault(path, f"a folder holding {what}")


def _posix(path) -> str:
    return str(path).replace("\\", "/")


def _spellings(path: str | None) -> set[str]:
    """The path as given and with symlinks resolved: either may be how a command names it."""
    if not path or not path.startswith("/"):
        return set()
    return {posixpath.normpath(path), _posix(os.path.realpath(path))}


def check_command(command: str, kb=None) -> str | None:
    """Why this command is refused, or None to let it run. A seat belt, not a sandbox.

    kb is the notes folder, where the command will run: deleting it, or a folder that holds it,
    is refused by whatever name the command gives it.
    """
    return _check(command, 0, _Where(kb))


def _check(command: str, depth: int, where: _Where) -> str | None:
    if depth > MAX_NESTING:
        return "nested too deeply to check (shells inside shells inside shells)"
    reason = _fork_bomb(_unquoted(command))  # `echo ":(){ :|:& };:"` only prints one
    if reason:
        return reason
    tokens, inner = _tokenize(command)
    for pipeline in _pipelines(tokens):
        reason = _check_pipeline(pipeline, depth, where)
        if reason:
            return reason
    for body in inner:  # $(...), `...`, <(...): they run too
        reason = _check(body, depth + 1, where)
        if reason:
            return reason
    return None


def _fork_bomb(command: str) -> str | None:
    for name, body in FORK_BOMB.findall(command):
        me = rf"(?<![\w:.-]){re.escape(name)}(?![\w:.-])"
        if re.search(rf"{me}\s*[|&]\s*{me}", body):  # calls itself twice at once, forever
            return "a fork bomb: it starts copies of itself until the machine stops responding"
    return None


def _unquoted(command: str) -> str:
    """The command with the text of its quoted strings left out: what bash reads as code.
    A `$(...)` inside double quotes is code too, but _check looks at it on its own."""
    kept, i, n = [], 0, len(command)
    while i < n:
        c = command[i]
        if c == "\\":
            kept.append(command[i:i + 2])
            i += 2
        elif c == "'":
            close = command.find("'", i + 1)
            i = n if close < 0 else close + 1
            kept.append("''")
        elif c == '"':
            i += 1
            while i < n and command[i] != '"':
                i += 2 if command[i] == "\\" else 1
            i += 1
            kept.append('""')
        else:
            kept.append(c)
            i += 1
    return "".join(kept)


def _tokenize(command: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Split shell text into ("word"|"op", text) tokens, the way bash would for this purpose.

    Also returns the bodies of command substitutions found outside single quotes, which run too.
    Good enough for a guard; not a full bash parser (no aliases, no expansion).
    """
    tokens, inner = [], []
    word, in_word, i, n = [], False, 0, len(command)

    def end_word():
        nonlocal word, in_word
        if in_word:
            tokens.append(("word", "".join(word)))
        word, in_word = [], False

    while i < n:
        c = command[i]
        if c in " \t":
            end_word()
        elif c == "\n":
            end_word()
            tokens.append(("op", ";"))
        elif c == "#" and not in_word:
            while i < n and command[i] != "\n":
                i += 1
            continue
        elif c == "'":
            close = command.find("'", i + 1)
            close = n if close < 0 else close
            word.append(command[i + 1:close])
            in_word, i = True, close + 1
            continue
        elif c == '"':
            i, text = _double_quoted(command, i + 1, inner)
            word.append(text)
            in_word = True
            continue
        elif c == "\\":
            word.append(command[i + 1:i + 2] if command[i + 1:i + 2] != "\n" else "")
            in_word, i = True, i + 2
            continue
        elif c == "`" or (c in "$<>" and command[i + 1:i + 2] == "("):
            body, end = _substitution(command, i)
            inner.append(body)
            word.append(command[i:end])
            in_word, i = True, end
            continue
        elif c in "|&;()<>":
            end_word()
            start = i
            while i < n and command[i] in "|&;()<>" and not (command[i] in "<>" and
                                                             command[i + 1:i + 2] == "(" and i > start):
                i += 1
            tokens.append(("op", command[start:i]))
            continue
        else:
            word.append(c)
            in_word = True
        i += 1
    end_word()
    return tokens, inner


def _double_quoted(command: str, i: int, inner: list[str]) -> tuple[int, str]:
    """Read a "..." string from i (just past the quote); returns (index after it, its text)."""
    text, n = [], len(command)
    while i < n and command[i] != '"':
        c = command[i]
        if c == "\\" and i + 1 < n:
            text.append(command[i + 1])
            i += 2
            continue
        if c == "`" or (c == "$" and command[i + 1:i + 2] == "("):
            body, end = _substitution(command, i)
            inner.append(body)
            text.append(command[i:end])
            i = end
            continue
        text.append(c)
        i += 1
    return i + 1, "".join(text)


def _substitution(command: str, i: int) -> tuple[str, int]:
    """The body of the `…`, $(…), <(…) or >(…) that starts at i, and the index just past it."""
    if command[i] == "`":
        close = command.find("`", i + 1)
        close = len(command) if close < 0 else close
        return command[i + 1:close], close + 1
    close = _matching_paren(command, i + 1)
    return command[i + 2:close], close + 1


def _matching_paren(command: str, open_at: int) -> int:
    """Index of the ")" closing the "(" at open_at (len(command) if unbalanced); quotes ignored."""
    depth = 0
    for j in range(open_at, len(command)):
        if command[j] == "(":
            depth += 1
        elif command[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return len(command)


def _pipelines(tokens):
    """Group tokens into pipelines of simple commands: [[{argv, writes, reads}, ...], ...]."""
    pipelines, pipeline = [], []
    current = {"argv": [], "writes": [], "reads": []}
    pending = None  # "writes"/"reads" when the next word is a redirection target
    for kind, text in tokens:
        if kind == "word":
            current[pending or "argv"].append(text)
            pending = None
        elif ">" in text or "<" in text:
            pending = "writes" if ">" in text else "reads"
        else:
            pipeline.append(current)
            current = {"argv": [], "writes": [], "reads": []}
            if text not in ("|", "|&"):
                pipelines.append(pipeline)
                pipeline = []
    pipeline.append(current)
    pipelines.append(pipeline)
    return [[cmd for cmd in p if cmd["argv"] or cmd["writes"] or cmd["reads"]] for p in pipelines]


def _strip_prefixes(argv: list[str]) -> list[str]:
    """`sudo -u x env A=1 nice -n 5 /bin/rm -rf /` -> ["rm", "-rf", "/"]."""
    argv = list(argv)
    while argv:
        while argv and re.match(r"^[A-Za-z_]\w*=", argv[0]):  # VAR=value before a command
            argv.pop(0)
        if not argv or _name(argv[0]) not in PREFIX_COMMANDS:
            break
        takes_value = PREFIX_COMMANDS[_name(argv.pop(0))]
        while argv and (argv[0].startswith("-") or re.match(r"^[A-Za-z_]\w*=", argv[0])):
            option = argv.pop(0)
            if option in takes_value and argv:
                argv.pop(0)
        if argv and re.match(r"^\d+(\.\d+)?[smhd]?$", argv[0]):  # timeout's duration
            argv.pop(0)
    if argv:
        argv[0] = _name(argv[0])
    return argv


def _name(word: str) -> str:
    return word.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".exe")


def _check_pipeline(pipeline, depth: int, where: _Where) -> str | None:
    fetched = False
    for position, cmd in enumerate(pipeline):
        argv = _strip_prefixes(cmd["argv"])
        name = argv[0] if argv else ""
        if fetched and name in INTERPRETERS:
            return "runs code downloaded from the internet (`curl … | sh`); download it, read it, then run it"
        fetched = fetched or name in FETCHERS
        if name in RAW_NETWORK and (position > 0 or cmd["reads"]):
            return f"sends data over a raw network connection ({name})"
        if name in SHELLS and position > 0 and not [a for a in argv[1:] if not a.startswith("-")]:
            for earlier in pipeline[:position]:  # `echo 'rm -rf ~' | sh` runs what echo prints
                words = _strip_prefixes(earlier["argv"])
                reason = words[:1] in (["echo"], ["printf"]) and _check(" ".join(words[1:]), depth + 1, where)
                if reason:
                    return reason
        reason = _check_simple(argv, cmd["writes"], cmd["reads"], depth, where)
        if reason:
            return reason
        if name in ("cd", "pushd", "popd") and len(pipeline) == 1:
            _change_folder(argv, where)
    return None


def _change_folder(argv: list[str], where: _Where) -> None:
    args = [a for a in argv[1:] if a not in ("-L", "-P", "-e", "-@", "--")]
    if argv[0] == "popd" or args[:1] == ["-"]:
        new = [None]
    else:
        new = [_resolve(args[0] if args else "~", folder, where) for folder in where.folders]
    for folder in new:
        if folder and re.search(r"[*?\[]", folder):
            folder = None
        if folder not in where.folders:
            where.folders.append(folder if len(where.folders) < MAX_FOLDERS else None)


def _check_simple(argv: list[str], writes: list[str], reads: list[str], depth: int, where: _Where) -> str | None:
    """The rules for one simple command (prefixes already stripped)."""
    name, args = (argv[0], argv[1:]) if argv else ("", [])
    for target in writes:
        reason = _device_or_network(target, writing=True) or _secret_file(target)
        if reason:
            return reason
    for source in reads:
        reason = _device_or_network(source, writing=False) or _secret_file(source)
        if reason:
            return reason
    if name in SHELLS or name in ("eval", "su"):
        for arg in args:
            if re.search(r"([$<]\(|`)\s*(curl|wget|fetch)\b", arg):
                return "runs code downloaded from the internet (`sh <(curl …)`); download it, read it, then run it"
        script = _script_argument(name, args)
        if script is not None:
            return _check(script, depth + 1, where)
    if name not in TEXT_ONLY:
        for arg in _drop_pattern(args) if name in PATTERN_FIRST else args:
            reason = _secret_file(arg, env_files=name not in NAMES_ONLY)
            if reason:
                return reason
    if name in ("rm", "find"):
        return RULES[name](args, where)
    rule = RULES.get(name)
    if rule:
        return rule(args)
    if name.startswith("mkfs") or name in DISK_TOOLS:
        return f"formats or repartitions a disk ({name})"
    if name in POWER:
        return f"shuts down or restarts the machine ({name})"
    return None


def _drop_pattern(args: list[str]) -> list[str]:
    """grep's arguments minus its pattern (the first non-option, unless -e/-f gave the pattern)."""
    if any(a in ("-e", "-f") or a.startswith(("--regexp", "--file")) for a in args):
        return args
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            return args[:i] + args[i + 1:]
    return args


def _script_argument(name: str, args: list[str]) -> str | None:
    """The command text a shell, `eval` or `su -c` will run, if given inline."""
    if name == "eval":
        return " ".join(args)
    for i, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:] and i + 1 < len(args):
            return args[i + 1]
    return None


def _device_or_network(path: str, writing: bool) -> str | None:
    if path.startswith(("/dev/tcp/", "/dev/udp/")):
        return "opens a network connection through /dev/tcp"
    if writing and path.startswith("/dev/") and path not in SAFE_DEVICES and not path.startswith("/dev/fd/"):
        return f"writes straight to a device ({path}), which can destroy a disk"
    return None


def _secret_file(word: str, env_files: bool = True) -> str | None:
    """Why reading or writing the file this word names is refused. A `$(...)` in it counts by the words
    it holds: `cat "$(echo .env)"` reads .env."""
    names = [word] + [part for body in _tokenize(word)[1] for kind, part in _tokenize(body)[0] if kind == "word"]
    for name in names:
        reason = _secret(name) or (env_files and _env_file(name))
        if reason:
            return reason
    return None


def _secret(word: str) -> str | None:
    word = _home_form(word)
    if not (word.startswith(("~", "/")) or "/" in word):
        return None
    for pattern, what in SECRET_PLACES:
        if pattern.search(word):
            return f"touches {what}; reading or changing them is not something a notes agent should do"
    return None


def _env_file(word: str) -> str | None:
    for name in _braces(posixpath.basename(word.rstrip("/"))):
        if ENV_FILE.match(name) or (re.search(r"[*?\[]", name) and
                                    any(_glob_matches(name, env) for env in ENV_FILE_NAMES)):
            return "reads or changes a .env file, which usually holds API keys and passwords"
    return None


def _braces(word: str) -> list[str]:
    """The words bash's brace expansion makes of word: `.e{n,x}v` -> [".env", ".exv"] (bounded)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not match:
        return [word]
    words = []
    for choice in match.group(1).split(","):
        words += _braces(word[:match.start()] + choice + word[match.end():])
        if len(words) >= MAX_BRACE_WORDS:
            break
    return words[:MAX_BRACE_WORDS]


def _home_form(word: str) -> str:
    """$HOME, ${HOME}, ${HOME:?} and ~ written the same way, as "~"; likewise the current folder as "."."""
    word = re.sub(r"^(\$HOME|\$\{HOME(:?[-?=+][^}]*)?\}|~)(?=/|$)", "~", word)
    return re.sub(r"^(\$PWD|\$\{PWD(:?[-?=+][^}]*)?\}|\$\(pwd\)|`pwd`)(?=/|$)", ".", word)


def _doomed(target: str) -> str | None:
    """What deleting/moving/chmod-ing this target would wreck, if it is a place nobody means to."""
    word = _home_form(target)
    norm = posixpath.normpath(word) if word else word
    if norm in ("/", "/*", "//") or re.match(r"^[A-Za-z]:[\\/]*\*?$", word):
        return "the whole filesystem"
    if re.match(r"^~[\w.-]*/?\*?$", word) or norm in ("~", "~/*"):
        return "your home directory"
    if re.match(r"^/(home|Users)/[^/]+/?\*?$", norm):
        return "a home directory"
    if re.match(r"^/[^/]+$", norm):
        return f"the system directory {norm}"
    if re.match(r"^\$\{?\w+\}?/+\*?$", word):
        return f"/ if {word.split('/')[0]} happens to be empty"
    if norm in (".", "*", ".*", "..", "../*") or norm.startswith("../.."):
        return "the whole knowledge base folder (or the one above it)"
    return None


def _rm(args: list[str], where: _Where) -> str | None:
    if "--no-preserve-root" in args:
        return "rm --no-preserve-root: deletes everything on the machine"
    targets, options_done = [], False
    for arg in args:
        if arg == "--":
            options_done = True
        elif options_done or not arg.startswith("-") or arg == "-":
            targets.append(arg)
    for target in targets:
        doomed = _doomed(target)
        if doomed:
            return f"removing `{target}` would delete {doomed}"
        if posixpath.normpath(target).split("/")[0] == HISTORY_DIR:
            return f"deletes {HISTORY_DIR}, the backups that let a person undo the agent's edits"
        for path in _resolutions(target, where):
            doomed = _protected(path, where)
            if doomed:
                return f"removing `{target}` would delete {doomed} ({path})"
            history = posixpath.join(where.kb or "", HISTORY_DIR)
            if where.kb and (path == history or path.startswith(history + "/")):
                return f"deletes {HISTORY_DIR}, the backups that let a person undo the agent's edits"
    return None


def _resolutions(target: str, where: _Where) -> list[str]:
    """The absolute paths target may name, one for each folder the command may be in."""
    paths = {_resolve(target, folder, where) for folder in where.folders}
    return sorted(path for path in paths if path)


def _resolve(target: str, folder: str | None, where: _Where) -> str | None:
    """target as an absolute, normalised path, or None when it depends on what the guard cannot know."""
    word = _home_form(target)
    if re.search(r"[$`]", word) or (word.startswith("~") and not re.match(r"^~(/|$)", word)):
        return None
    if word.startswith("~"):
        if not where.home:
            return None
        word = where.home + word[1:]
    elif not word.startswith("/"):
        if not folder:
            return None
        word = folder + "/" + word
    return "/" + posixpath.normpath(word).lstrip("/")


def _protected(path: str, where: _Where) -> str | None:
    """What deleting path would delete, if that is the notes folder, the home directory or a folder
    holding either. A glob counts if it can match one, or names everything inside one (`kb/*`)."""
    if not re.search(r"[*?\[]", path):
        for spelling in {path, _posix(os.path.realpath(path))}:
            if spelling in where.protected:
                return where.protected[spelling]
        return None
    folder, last = posixpath.split(path)
    if last in ("*", ".*", "*.*", "**") and not re.search(r"[*?\[]", folder):
        doomed = _protected(folder, where)
        if doomed:
            return f"everything in {doomed}"
    return next((what for place, what in where.protected.items() if _glob_matches(path, place)), None)


def _glob_matches(pattern: str, path: str) -> bool:
    """Whether bash would expand pattern to path (no dotglob: `*` skips names starting with a dot)."""
    wanted, parts = pattern.split("/"), path.split("/")
    return len(wanted) == len(parts) and all(
        fnmatch.fnmatchcase(part, want) and (want.startswith(".") or not part.startswith("."))
        for want, part in zip(wanted, parts))


def _recursive_change(args: list[str]) -> str | None:
    if not any(a in ("-R", "--recursive") or re.match(r"^-[a-zA-Z]*R", a) for a in args):
        return None
    for target in (a for a in args if not a.startswith("-")):
        doomed = _doomed(target)
        if doomed and "knowledge base" not in doomed:
            return f"changes owner or permissions of everything in {doomed}"
    return None


def _mv(args: list[str]) -> str | None:
    paths = [a for a in args if not a.startswith("-")]
    for source in paths[:-1]:
        doomed = _doomed(source)
        if doomed and "knowledge base" not in doomed:
            return f"moves {doomed} away"
    return None


FIND_FILTERS = {"-name", "-iname", "-path", "-ipath", "-wholename", "-regex", "-iregex", "-empty"}


def _find(args: list[str], where: _Where) -> str | None:
    deleting = "-delete" in args or any(
        a in ("-exec", "-execdir", "-ok") and i + 1 < len(args) and _name(args[i + 1]) in ("rm", "shred")
        for i, a in enumerate(args))
    if not deleting:
        return None
    filtered = any(a in FIND_FILTERS for a in args)  # `find . -name '*.tmp' -delete` is a cleanup
    for start in args:
        if start.startswith(("-", "(", "!")):
            break
        doomed = _doomed(start)
        if doomed and not ("knowledge base" in doomed and filtered):
            return f"deletes files all over {doomed}"
        for path in _resolutions(start, where):
            doomed = _protected(path, where)
            if doomed and not (doomed == NOTES_FOLDER and filtered):
                return f"deletes files all over {doomed} ({path})"
    return None


def _dd(args: list[str]) -> str | None:
    for arg in args:
        if arg.startswith("of=/dev/") and arg[3:] not in SAFE_DEVICES:
            return f"dd writes straight to a device ({arg[3:]}), which can destroy a disk"
    return None


def _shred(args: list[str]) -> str | None:
    if any(a.startswith("/dev/") for a in args):
        return "shreds a whole device"
    return None


def _kill(args: list[str]) -> str | None:
    args = list(args)
    if args[:1] in (["-s"], ["-n"]):
        args = args[2:]
    elif args and args[0].startswith("-") and args[0] != "--":
        args = args[1:]  # the signal, like -9 or -KILL
    if "-1" in args:
        return "kill -1 kills every process you own"
    return None


def _init(args: list[str]) -> str | None:
    return "shuts down or restarts the machine (init)" if args[:1] in (["0"], ["6"]) else None


def _systemctl(args: list[str]) -> str | None:
    if any(a in ("poweroff", "reboot", "halt", "kexec", "suspend", "hibernate") for a in args):
        return "shuts down or restarts the machine (systemctl)"
    return None


def _git(args: list[str]) -> str | None:
    words = [a for a in args if not a.startswith("-")]
    verb = words[0] if words else ""
    if verb == "clean" and any(re.match(r"^-[a-zA-Z]*f", a) or a == "--force" for a in args):
        return "git clean -f deletes untracked files: notes not yet committed would be lost for good"
    if verb == "reset" and "--hard" in args:
        return "git reset --hard throws away uncommitted changes to notes, with no way back"
    if verb in ("checkout", "restore") and words[-1:] == ["."]:
        return f"git {verb} . throws away uncommitted changes to every note, with no way back"
    return None


def _curl(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        value = args[i + 1] if i + 1 < len(args) else ""
        if arg in ("-T", "--upload-file") or arg.startswith("-T") and len(arg) > 2:
            return "uploads a local file to the internet"
        if arg in ("-d", "--data", "--data-binary", "--data-raw", "--data-urlencode", "-F", "--form") \
                and re.search(r"(^|=)[@<]", value):
            return "uploads a local file to the internet"
    return None


def _wget(args: list[str]) -> str | None:
    if any(a.startswith(("--post-file", "--body-file")) for a in args):
        return "uploads a local file to the internet"
    return None


RULES = {"rm": _rm, "chmod": _recursive_change, "chown": _recursive_change, "chgrp": _recursive_change,
         "mv": _mv, "find": _find, "dd": _dd, "shred": _shred, "kill": _kill, "init": _init,
         "systemctl": _systemctl, "git": _git, "curl": _curl, "wget": _wget}


# ---------------------------------------------------------------------------------------------------
# Running a command
# ---------------------------------------------------------------------------------------------------

SECRET_VARIABLE = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|ACCESS_KEY", re.I)
READ_CHUNK = 65536
PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>
STRAY_ROUNDS = 10  # stopping a stray can hand us its children; this many sweeps at most
_subreaper: bool | None = None  # None until the first command asks for it
_running: set[int] = set()  # pids (and session ids) of commands running now


def run_shell(command: str, cwd, timeout: float | None = None, hide: tuple[str, ...] = ()) -> str:
    """Run one command and describe what happened; never raises except KeyboardInterrupt.

    Ctrl+C kills the command's whole process tree, then re-raises KeyboardInterrupt so the caller can
    end the turn. `hide` lists secret values (the API key) to drop from the environment whatever
    the variable holding them is called.
    """
    timeout = SHELL_TIMEOUT if timeout is None else timeout
    started = time.monotonic()
    _become_subreaper()
    try:
        proc = subprocess.Popen(shell_argv(command), cwd=cwd, env=clean_env(hide),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, **_own_group())
    except (OSError, ValueError) as exc:
        return f"Error: could not start the shell: {exc}"
    born = _start_time(proc.pid)  # read before it can be reaped: what the command starts is younger
    _running.add(proc.pid)
    out = _Capture(proc.stdout, SHELL_STDOUT_CHARS)
    err = _Capture(proc.stderr, SHELL_STDERR_CHARS)
    try:
        finished = _wait(proc, (out, err), started + timeout)
        leftovers = kill_tree(proc)  # the command is over; whatever it left in the background goes too
        leftovers = stop_strays(proc.pid, born) or leftovers
    except KeyboardInterrupt:
        try:
            kill_tree(proc)
            stop_strays(proc.pid, born)
        except KeyboardInterrupt:  # a second Ctrl+C: no more grace
            _kill_now(proc)
            stop_strays(proc.pid, born, grace=0)
        raise
    finally:
        _running.discard(proc.pid)
    notes = []
    if not finished:
        notes.append(f"stopped after {timeout:g} s (timeout): the command and everything it started were "
                     f"killed. Split the work into shorter steps, or raise SHELL_TIMEOUT.")
    elif leftovers:
        notes.append("note: processes the command left running in the background were stopped")
    if not (out.done() and err.done()):
        notes.append("note: output may be incomplete: a process that escaped its group still holds it open")
    return _format(proc.returncode, notes, out.text(), err.text())


def shell_argv(command: str) -> list[str] | str:
    """How to hand the command to a shell on this machine: bash if there is one."""
    bash = _find_bash()
    if bash:
        return [bash, "-c", command]
    if os.name == "nt":  # cmd.exe parses its own command line; this is what shell=True builds
        return f'"{os.environ.get("COMSPEC", "cmd.exe")}" /d /s /c "{command}"'
    return ["/bin/sh", "-c", command]


def _find_bash() -> str | None:
    if os.name != "nt":
        return shutil.which("bash")
    # On Windows `bash` on PATH is often WSL's launcher (System32), which runs in another system.
    candidates = []
    found = shutil.which("bash")
    if found and not re.search(r"system32|windowsapps", found, re.I):
        candidates.append(Path(found))
    git = shutil.which("git")
    if git:
        root = Path(git).resolve().parent.parent
        candidates += [root / "bin" / "bash.exe", root / "usr" / "bin" / "bash.exe"]
    candidates.append(Path(os.environ.get("ProgramFiles", r"C:\Program Files")) / "Git" / "bin" / "bash.exe")
    return next((str(p) for p in candidates if p.is_file()), None)


def clean_env(hide: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment minus anything that looks like a key, token, password or secret."""
    hidden = {value for value in hide if value}
    return {name: value for name, value in os.environ.items()
            if not SECRET_VARIABLE.search(name) and value not in hidden}


def _own_group() -> dict:
    """Popen arguments that put the command in a process group of its own, so it can be killed whole
    (and, on POSIX, without a terminal: nothing it starts can read the keyboard or get Ctrl+C)."""
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def _wait(proc, captures, deadline: float) -> bool:
    """Wait until the command's shell exited, or the deadline; True if it exited in time.

    Then its output gets SHELL_OUTPUT_GRACE to close. A background process still holding it open
    (`sleep 100 & echo hi`) is left to kill_tree, instead of keeping the command waiting until its
    timeout and hiding its real exit code.
    """
    while proc.poll() is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            proc.wait(min(remaining, 0.1))  # short slices keep Ctrl+C responsive everywhere
        except subprocess.TimeoutExpired:
            pass
    grace_ends = time.monotonic() + SHELL_OUTPUT_GRACE
    for capture in captures:
        while capture.thread.is_alive() and time.monotonic() < grace_ends:
            capture.thread.join(max(min(grace_ends - time.monotonic(), 0.1), 0))
    return True


def kill_tree(proc) -> bool:
    """Stop the command's whole process group: TERM, then KILL after a grace period.

    Returns True if anything was still running. Always reaps the direct child.
    """
    if os.name == "nt":
        return _kill_tree_windows(proc)
    group = proc.pid  # a session leader's pgid is its pid
    proc.poll()  # reap the shell if it is done, or its zombie looks like a live member
    if not _group_alive(group):
        proc.wait()
        return False
    _signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + SHELL_KILL_GRACE
    while time.monotonic() < deadline:
        proc.poll()
        if not _group_alive(group):
            break
        time.sleep(0.02)
    else:
        _signal_group(group, signal.SIGKILL)
    proc.wait()
    return True


def _kill_now(proc) -> None:
    """KILL the whole tree at once, no grace period."""
    if os.name == "nt":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    else:
        _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _group_alive(group: int) -> bool:
    """Whether any process of the group still runs. Zombies do not count: where the init process is
    slow to reap orphans (containers), they linger for seconds and would make every kill wait."""
    if not os.path.isdir("/proc/self"):
        return _signal_group(group, 0)
    return any(info.group == group and info.alive for info in _processes().values())


class _Process:
    """One line of the process table, from /proc/<pid>/stat (Linux, or any system with that file)."""

    def __init__(self, stat: bytes):
        fields = stat.rsplit(b")", 1)[1].split()  # the name in (...) may hold anything
        self.alive = fields[0] not in (b"Z", b"X")  # zombies are dead, just not yet reaped
        self.parent, self.group, self.session = int(fields[1]), int(fields[2]), int(fields[3])
        self.started = int(fields[19])  # clock ticks after boot


def _processes() -> dict[int, _Process]:
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    table[int(entry.name)] = _Process(stat.read())
            except (OSError, IndexError, ValueError):
                continue  # the process ended while we looked
    return table


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return _Process(stat.read()).started
    except (OSError, IndexError, ValueError):
        return None


def _become_subreaper() -> bool:
    """Ask Linux to hand this process the orphans of its descendants, once.

    Without it a process that leaves the command's session (`setsid sleep 999 &`, any daemon) is
    adopted by init when the shell exits, and no group or session kill reaches it. Elsewhere this
    does nothing, and such processes can outlive the command (the README says so).
    """
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                pass
    return _subreaper


def stop_strays(shell_pid: int, born: int | None, grace: float | None = None) -> bool:
    """Stop what the command started outside its session, and reap it. True if any was still running.

    As a subreaper this process adopts them once their parents exit. A stray is a child of ours that
    the command could have started: younger than its shell, in a session that is neither ours (what
    this program starts itself) nor another running command's.
    """
    if not _subreaper or born is None:
        return False
    me, mine, others = os.getpid(), os.getsid(0), _running - {shell_pid}
    stopped = False
    for _ in range(STRAY_ROUNDS):
        table = _processes()
        strays = [pid for pid, info in table.items()
                  if info.parent == me and pid != shell_pid and info.started >= born
                  and info.session != mine and info.session not in others]
        if not strays:
            break
        doomed = [pid for pid in _with_descendants(table, strays) if table[pid].alive]
        if doomed:
            stopped = True
            _term_then_kill(doomed, strays, SHELL_KILL_GRACE if grace is None else grace)
        for pid in strays:  # our children now: only we can reap them (not one stuck in the kernel)
            _reap(pid, block=not _alive(pid))
    return stopped


def _with_descendants(table: dict[int, _Process], roots: list[int]) -> list[int]:
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [child for child, info in table.items() if info.parent == pid and child not in found]
    return found


def _term_then_kill(pids: list[int], children: list[int], grace: float) -> None:
    """TERM the processes, KILL those still running after grace seconds."""
    signals = [signal.SIGTERM, signal.SIGKILL] if grace > 0 else [signal.SIGKILL]
    for sig in signals:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while True:
            for pid in children:
                _reap(pid, block=False)
            pids = [pid for pid in pids if _alive(pid)]
            if not pids or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return _Process(stat.read()).alive
    except (OSError, IndexError, ValueError):
        return False


def _reap(pid: int, block: bool) -> None:
    try:
        os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # already reaped
        pass


def _signal_group(group: int, sig: int) -> bool:
    """Send sig to the group; False when no process is left in it."""
    try:
        os.killpg(group, sig)
        return True
    except (ProcessLookupError, PermissionError):  # gone, or only zombies we may not signal
        return False


def _kill_tree_windows(proc) -> bool:
    if proc.poll() is not None:
        return False
    try:
        proc.send_signal(signal.CTRL_BREAK_EVENT)  # the closest thing to TERM for a process group
        proc.wait(SHELL_KILL_GRACE)
    except (OSError, subprocess.TimeoutExpired):
        pass
    # Kill the tree while it is still linked to its root; children of an exited root are missed.
    subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    proc.wait()
    return True


class _Capture:
    """Reads one output pipe on a thread, keeping only its head and tail, so a command that prints
    gigabytes neither blocks on a full pipe nor fills memory."""

    def __init__(self, pipe, chars: int):
        self.chars = chars
        self.keep = chars * 4  # bytes: a UTF-8 character is at most 4 of them
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe):
        with pipe:
            while chunk := pipe.read1(READ_CHUNK):
                self.total += len(chunk)
                room = self.keep - len(self.head)
                self.head += chunk[:room]
                self.tail += chunk[room:] if room > 0 else chunk
                if len(self.tail) > self.keep:
                    del self.tail[:-self.keep]

    def done(self) -> bool:
        self.thread.join(SHELL_KILL_GRACE)
        return not self.thread.is_alive()

    def text(self) -> str:
        """What the model sees: the whole output, or its head and tail with a marker between."""
        head, tail = bytes(self.head), bytes(self.tail)  # copies: the thread may still be appending
        kept = len(head) + len(tail)
        if kept == self.total and kept <= self.keep:
            return truncate(head.decode("utf-8", "replace"), self.chars)
        if kept == self.total:  # all bytes still here, split in two: decode them as one
            return truncate((head + tail).decode("utf-8", "replace"), self.chars)
        half = self.chars // 2
        head_text = head.decode("utf-8", "replace")[:half]
        tail_text = _decode_tail(tail)[-(self.chars - half):]
        cut = self.total - len(head_text.encode()) - len(tail_text.encode())
        return f"{head_text}\n[... {cut:,} bytes cut; narrow the command (grep, head, tail) " \
               f"to see them ...]\n{tail_text}"


def _decode_tail(data: bytes) -> str:
    """Decode bytes that may start in the middle of a UTF-8 character."""
    for skip in range(4):
        if skip >= len(data) or data[skip] & 0xC0 != 0x80:  # not a continuation byte
            return data[skip:].decode("utf-8", "replace")
    return data.decode("utf-8", "replace")


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of text within about limit characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit:,} characters cut; narrow the command " \
           f"(grep, head, tail) to see them ...]\n{text[-(limit - half):]}"


def _format(returncode: int, notes: list[str], stdout: str, stderr: str) -> str:
    code = 128 - returncode if returncode < 0 else returncode  # killed by signal N: 128+N, as bash says
    parts = [f"exit_code={code}", *notes]
    for label, text in (("stdout", stdout), ("stderr", stderr)):
        parts.append(f"{label}:\n{text.rstrip()}" if text.strip() else f"{label}: (empty)")
    return "\n".join(parts)
