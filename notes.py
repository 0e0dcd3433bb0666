"""The notes folder on disk: which paths are notes, how a note is read and written, and the lock.

Every tool, search and versions.py go through it: the path guard (`safe_path`, `safe_folder`) admits visible
.md/.txt notes inside the folder only; a note's encoding (UTF-8, UTF-16 with a BOM, GBK/GB18030), BOM and line
endings are kept byte for byte (a note in any other encoding is read, never changed); files are reached from the
folder's own descriptor, never through a link, and replaced atomically. It must never read or write outside the
notes folder: a failure raises `ToolError`.
"""

import codecs
import contextlib
import os
import re
import stat
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import fcntl

NOTE_SUFFIXES = (".md", ".txt")
HISTORY_DIR = ".history"  # versions and the undo log, inside the notes folder, hidden from the tools
LOCK_FILE = "lock"  # in .history: held while a change reads and writes a note
LOCK_WAIT = 10.0  # seconds a change waits for another process's change before giving up
# Control characters and bidi overrides in a name could redraw a confirmation prompt.
HIDING_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Shown as escapes too: line separators a terminal may break on, and every default-ignorable code point (tests
# check this class holds all ignorable() finds), tag characters included; a joiner doing its work (joins) stays.
SHOWN_ESCAPED = re.compile(HIDING_CHARACTERS.pattern[:-1] + "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891"
                           "\u08e2\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200d\u2028\u2029\u2060-\u206f\u3164"
                           "\ufe00-\ufe0f\uffa0\ufeff\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
                           "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
# Default-ignorable but neither Cf, Cn nor a variation selector: U+034F, Khmer's inherent vowels, the Hangul fillers.
OTHER_IGNORABLE = "\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0"
# Encodings a note is read and kept in: with a byte order mark its encoding; without one UTF-8, then GBK
# (what Chinese Windows calls ANSI), then its superset GB18030, so a GBK note stays readable by GBK tools.
BOMS = {"utf-8": codecs.BOM_UTF8, "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}
UNMARKED_ENCODINGS = ("utf-8", "gbk", "gb18030")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
MAX_CONTROL_SHARE = 0.01  # more control characters than this in a note not in UTF-8: binary data


class ToolError(Exception):
    """A tool call that cannot be done; the notes are as they were. `str()` is `message` (for anyone) and `advice`
    (in the model's words); `kind` names the failure for code that words it for a person ("missing", "folder")."""

    def __init__(self, message: str, advice: str = "", kind: str = "", lines: dict | None = None):
        super().__init__(f"{message} {advice}".strip())
        self.message, self.advice, self.kind = message, advice, kind
        self.lines = lines or {}  # the note lines the message shows, as Shown.lines (edit_note's closest lines)


class Shown(str):
    """A tool's text for the model, and as data what it showed: `lines` {note: line numbers}, `named` the notes it
    named, `unlisted` whether it may hold note text beyond those lines (a shell command's output)."""

    def __new__(cls, text: str, lines: dict | None = None, named=(), unlisted: bool = False):
        shown = super().__new__(cls, text)
        shown.lines, shown.named, shown.unlisted = lines or {}, tuple(named), unlisted
        return shown


def plural(number: int, thing: str) -> str:
    return f"{number} {thing}{'s' * (number != 1)}"


def visible(text: str, lines: bool = False) -> str:
    """Text from the model or a note with control characters shown as escapes, for a person to read: no escape
    sequence, carriage return or direction mark of theirs reaches the terminal. `lines`: newlines and tabs stay."""
    if lines:
        text = text.replace("\r\n", "\n")
    return SHOWN_ESCAPED.sub(lambda m: m[0] if lines and m[0] in "\n\t" or joins(text, m.start())
                             else m[0].encode("unicode_escape").decode(), text)


def ignorable(character: str) -> bool:
    """Whether Unicode makes the character show nothing (default-ignorable), as far as unicodedata tells."""
    return unicodedata.category(character) in ("Cf", "Cn") or character in OTHER_IGNORABLE or \
        "VARIATION SELECTOR" in unicodedata.name(character, "")


def joins(text: str, i: int) -> bool:
    """Whether text[i] is a joiner or variation selector doing its work: in an emoji (after a symbol, a skin tone or
    a selector), or a ZWNJ or ZWJ after a virama or between Arabic-script letters (Persian's می‌خواهم)."""
    before, after, category = text[i - 1:i] or " ", text[i + 1:i + 2] or " ", unicodedata.category
    if text[i] in "\u200c\u200d":
        return unicodedata.combining(before) == 9 or unicodedata.bidirectional(before) == unicodedata.bidirectional(
            after) == "AL" or text[i] == "\u200d" and category(after) == "So" and (
                category(before) in ("So", "Sk") or before == "\ufe0f")
    return "VARIATION SELECTOR" in unicodedata.name(text[i], "") and category(before) == "So"


# --- The path guard ---

def is_utf8(path: str) -> bool:
    """False for a path holding a name that is not UTF-8 (os gives its bytes as lone surrogates)."""
    return not re.search("[\ud800-\udfff]", path)


def is_hidden_name(name: str) -> bool:
    """Dot-files and dot-folders (.git, .obsidian, .history) are hidden; `..md` is a note named '.'."""
    return name.startswith(".") and not name.startswith("..")


def is_note_path(rel_path: str) -> bool:
    parts = PurePosixPath(str(rel_path).replace("\\", "/")).parts
    return (bool(parts) and parts[-1].lower().endswith(NOTE_SUFFIXES)
            and not any(p in ("..", "/") or is_hidden_name(p) for p in parts))


def safe_folder(kb: Path, folder: str, what: str = "folder") -> Path:
    """The folder (or file) inside the notes, resolved; a refusal names the argument `what` ("" for a person)."""
    who = f"{what} " if what else ""
    if not isinstance(folder, str) or not folder.strip():
        raise ToolError(f"{who}must be a non-empty path relative to the notes folder, like 'python.md'.")
    if HIDING_CHARACTERS.search(folder):
        raise ToolError(f"{who}'{visible(folder)}' contains control characters; note names may not.")
    text = folder.strip()
    if text.startswith("~"):
        raise ToolError(f"{who}may not start with '~': use a path relative to the notes folder.")
    if PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute() or PureWindowsPath(text).drive:
        raise ToolError(f"{who}must be relative to the notes folder, not absolute.")
    try:
        resolved = (kb / text.replace("\\", "/")).resolve()
    except (OSError, RuntimeError):  # a symlink loop; the message would show the host path
        raise ToolError(f"{who}{folder!r} cannot be resolved (a symlink loop?).") from None
    if not resolved.is_relative_to(kb):
        raise ToolError(f"{who}{folder!r} is outside the notes folder.")
    if any(is_hidden_name(part) for part in resolved.relative_to(kb).parts):
        raise ToolError(f"{who}{folder!r} is hidden (a dot-file or dot-folder such as .git or .history), "
                        "which the tools do not touch.")
    return resolved


def safe_path(kb: Path, file_path: str, what: str = "file_path") -> Path:
    who = f"{what} " if what else ""
    resolved = safe_folder(kb, file_path, what)
    if not resolved.name.lower().endswith(NOTE_SUFFIXES):
        raise ToolError(f"{who}{file_path!r} is not a note: only {' and '.join(NOTE_SUFFIXES)} files are allowed.")
    return resolved


def rel(kb: Path, path: Path) -> str:
    return path.relative_to(kb).as_posix()


# --- Reading and writing faithfully ---

@dataclass(frozen=True)
class NoteFormat:
    bom: bool = False
    newline: str = "\n"  # "\n", "\r\n", or "" when a note mixes both and is kept exactly as it is
    encoding: str = "utf-8"  # or utf-16-le/-be (always with a BOM), gbk, gb18030


def _decode(data: bytes) -> tuple[str, str, bool] | None:
    """(text, encoding, BOM?) if the data is text in an encoding a change can keep; it may end mid-character."""
    bom = next((name for name, mark in BOMS.items() if data.startswith(mark)), None)
    for encoding in [bom] if bom else UNMARKED_ENCODINGS:
        try:
            text = codecs.getincrementaldecoder(encoding)().decode(data[len(BOMS[bom]) if bom else 0:])
        except UnicodeDecodeError:
            continue
        if "\0" in text[:8192]:
            return None
        if encoding == "utf-8" or _plausible(text, data, encoding):
            return text, encoding, bool(bom)
    return None


def _plausible(text: str, data: bytes, encoding: str) -> bool:
    """Text, not binary that decodes by chance; for GBK, Chinese rather than Latin-1, cp1252 or damaged UTF-8."""
    if len(CONTROL_CHARACTERS.findall(text)) > MAX_CONTROL_SHARE * len(text):
        return False
    if encoding.startswith("utf-16"):
        return True
    wide = {ch for ch in set(text) if ch > "\x7f"}
    common = sum(1 for ch in wide if ch.encode("gb2312", "ignore"))  # the simplified Chinese set
    utf8_errors = data.decode("utf-8", "replace").count("\ufffd")  # about one per character of real GBK
    return 2 * common >= len(wide) and 2 * utf8_errors >= len(re.findall(r"[^\x00-\x7f]", text))


def readable_text(data: bytes) -> str | None:
    """Text to read and search (undecodable bytes replaced), or None when it looks binary."""
    if decoded := _decode(data):
        return decoded[0]
    return None if b"\0" in data[:8192] else data.decode("utf-8-sig", errors="replace")


def decode_note(data: bytes) -> tuple[str, NoteFormat]:
    """Text to change, strictly: a note that would not be written back byte for byte is refused."""
    text, encoding, bom = _decode(data) or ("", "", False)
    if not encoding or encode_note(text, NoteFormat(bom, "\n", encoding)) != data:
        if b"\0" in data[:8192]:
            raise ToolError("binary, not a text note; it was left alone")
        raise ToolError("not UTF-8, nor UTF-16 with a BOM, nor GBK/GB18030 text, so it cannot be changed without "
                        "garbling it; it was left alone")
    crlf = text.count("\r\n")
    newline = "" if crlf and text.count("\n") > crlf else "\r\n" if crlf else "\n"
    return (text.replace("\r\n", "\n") if newline == "\r\n" else text), NoteFormat(bom, newline, encoding)


def encode_note(text: str, fmt: NoteFormat) -> bytes:
    if fmt.newline == "\r\n":  # only "\n" is translated: a stray "\r" round-trips untouched
        text = text.replace("\n", "\r\n")
    try:
        return (BOMS[fmt.encoding] if fmt.bom else b"") + text.encode(fmt.encoding)
    except UnicodeEncodeError as e:
        char = text[e.start]
        raise ToolError(f"the note is {fmt.encoding.upper()} text, which cannot hold {visible(char)!r} "
                        f"(U+{ord(char):04X}); nothing was changed. Leave such characters out, or the person can "
                        "convert the note to UTF-8 first.") from None


# --- Race-free paths: one component at a time from the notes folder's descriptor, never through a link, so what
# the guard checked is what is touched even if a folder is swapped for a link between the check and the change.

@contextlib.contextmanager
def in_folder(kb: Path, rel_path: str, create: bool = False):
    """(descriptor of rel_path's folder, its file name), closed afterwards. `create`: missing folders are made, and
    removed again if what is done there fails."""
    made = []
    *folders, name = str(rel_path).split("/")  # plain strings: this runs for every note an index build reads
    fd = os.open(kb, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth, folder in enumerate(folders):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(folder, dir_fd=fd)
                    made.append("/".join(folders[:depth + 1]))
            inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        yield fd, name
    except BaseException:
        remove_folders(kb, made)
        raise
    finally:
        os.close(fd)


def remove_folders(kb: Path, folders: list[str]) -> None:
    """Remove these folders, deepest first, where they are empty now: rmdir refuses any other, and a link."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError), in_folder(kb, folder) as (parent, name):
            os.rmdir(name, dir_fd=parent)


def read_bytes(kb: Path, rel_path: str, limit: int = -1) -> bytes:
    with in_folder(kb, rel_path) as (folder, name):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)  # NONBLOCK: a FIFO
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolError("that is not a regular file (a pipe or device?), so it is not read.")
            return f.read(limit)


def write_bytes(kb: Path, rel_path: str, data: bytes, new: bool = False) -> None:
    """Replace the file all at once (readers see the old or the new file, never half); `new`: refuse to replace."""
    with in_folder(kb, rel_path, True) as (folder, name):
        for stale in os.listdir(folder):  # every write holds the lock, so a temp file found now is a leftover
            if stale.startswith(".~") and stale.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(stale, dir_fd=folder)
        tmp = f".~{name}.{os.urandom(4).hex()}.tmp"  # a dot name stays out of search and listings
        mode = None  # a new file gets 0o666 less the umask, as any new file does
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if mode is not None:
                os.chmod(tmp, mode, dir_fd=folder)
            _put(folder, tmp, folder, name, replace=not new)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
        with contextlib.suppress(OSError):  # makes the rename itself durable where the system allows it
            os.fsync(folder)


def _put(src_folder: int, src: str, dst_folder: int, dst: str, replace: bool) -> None:
    """Rename src to dst; without `replace`, fail if dst exists even if it appeared a moment ago."""
    if replace:
        return os.replace(src, dst, src_dir_fd=src_folder, dst_dir_fd=dst_folder)
    try:
        os.link(src, dst, src_dir_fd=src_folder, dst_dir_fd=dst_folder, follow_symlinks=False)
    except FileExistsError:
        raise ToolError(f"{dst} already exists; nothing was replaced") from None
    except OSError:  # no hard links here (some network or FAT drives): check, then rename
        with contextlib.suppress(FileNotFoundError):
            os.stat(dst, dir_fd=dst_folder, follow_symlinks=False)
            raise ToolError(f"{dst} already exists; nothing was replaced")
        return os.rename(src, dst, src_dir_fd=src_folder, dst_dir_fd=dst_folder)
    os.unlink(src, dir_fd=src_folder)


def move_file(kb: Path, src: str, dst: str, replace: bool = False) -> None:
    with in_folder(kb, src) as (src_folder, src_name), in_folder(kb, dst, True) as (dst_folder, dst_name):
        _put(src_folder, src_name, dst_folder, dst_name, replace)


def remove_file(kb: Path, rel_path: str) -> None:
    with in_folder(kb, rel_path) as (folder, name):
        os.unlink(name, dir_fd=folder)


@contextlib.contextmanager
def locked(kb: Path):
    """One change at a time across knowledge-agent processes, held from reading a note to writing it."""
    try:
        with in_folder(kb, f"{HISTORY_DIR}/{LOCK_FILE}", create=True) as (folder, name):
            handle = os.fdopen(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666, dir_fd=folder), "w")
    except OSError:  # no .history here: a change that needs a copy of the old text fails on its own
        yield
        return
    with handle:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            if time.monotonic() > deadline:
                raise ToolError(f"another knowledge-agent has been changing these notes for {LOCK_WAIT:.0f} s; "
                                "nothing was changed, try again")
            time.sleep(0.02)
        yield
