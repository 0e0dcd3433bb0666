"""Settings for knowledge-agent: every limit as a named constant, every setting from the environment.

Precedence, lowest to highest: defaults here < a `.env` file beside main.py < environment variables
< command-line flags (passed to `load_settings` as keyword overrides). A bad value raises `ConfigError`
with one line saying what to set and where; main.py prints it instead of a traceback.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from dotenv import dotenv_values

PROJECT_DIR = Path(__file__).resolve().parent
ENV_FILE = PROJECT_DIR / ".env"

# --- API ---
DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODEL = "deepseek-flash"
REQUEST_TIMEOUT = 120.0  # seconds per API request; the SDK's default of 600 s is too long for a chat
CONNECT_TIMEOUT = 10.0
API_MAX_RETRIES = 2  # the SDK retries connection errors, 429 and 5xx with backoff and Retry-After
STREAM_RETRIES = 1  # re-ask once when a stream breaks before anything was shown

# --- The loop ---
DEFAULT_MAX_TOOL_ROUNDS = 10  # LLM calls per question

# --- Notes and tool output ---
NOTE_SUFFIXES = (".md", ".txt")
HISTORY_DIR = ".history"  # versions of changed notes, inside the knowledge base, hidden from the tools
MAX_TOOL_OUTPUT = 8000  # characters; no tool result is longer
READ_MAX_LINES = 200  # read_note returns at most this many lines per call
MAX_NOTE_BYTES = 5_000_000  # larger files are not read whole
SEARCH_MAX_HITS = 10
SEARCH_LINES_PER_HIT = 3
SEARCH_OUTPUT_CHARS = 4000
LIST_MAX_NOTES = 200

# --- Sessions and context budget (issue 5) -------------------------------------------------------------
# The session store lives in $KA_DATA_DIR, else $XDG_DATA_HOME/knowledge-agent, else
# ~/.local/share/knowledge-agent. One SQLite file keeps every conversation.
DATA_DIR_ENV = "KA_DATA_DIR"
SESSIONS_DB_NAME = "sessions.db"
# How long a write waits for another REPL holding the database before giving up (seconds).
SESSIONS_BUSY_TIMEOUT = 10.0
# How many conversations /sessions and --list-sessions show.
SESSIONS_LIST_LIMIT = 20

# deepseek-flash has a 128k-token window. The thinking model may spend up to ~32k tokens reasoning and
# answering, and the estimate is only approximate until the API's own count corrects it, so a request
# aims at 88k (env CONTEXT_TOKENS).
CONTEXT_TOKENS = 88_000
# When an old tool result is shortened, this many characters stay in front of "[… elided, N chars]".
ELIDED_TOOL_HEAD_CHARS = 300
# Turns just before the current one whose tool results are shortened only when all older ones are gone.
CONTEXT_KEEP_RECENT_TURNS = 2
# Token estimate: Latin text ~4 characters a token, CJK ~1 token a character, plus what each message and
# each tool call costs in the chat template.
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
TOOL_CALL_OVERHEAD_TOKENS = 8
# The learnt correction (API count / estimate) is kept within these bounds, so one odd reply cannot
# make the budget absurd, and is learnt only from requests big enough for the ratio to mean something.
# It never goes below 1: the estimate over-counts Chinese and under-counts English, so a factor learnt on
# Chinese turns would let the next big English tool result overflow the window.
TOKEN_FACTOR_MIN = 1.0
TOKEN_FACTOR_MAX = 3.0
TOKEN_FACTOR_MIN_SAMPLE = 500
# How far one lower ratio pulls the factor down (it jumps up to a higher one at once).
TOKEN_FACTOR_DECAY = 0.1
# After a "context too long" answer, requests aim at this share of what was refused (or of the window the
# error names) for the rest of the run: the model may be smaller than CONTEXT_TOKENS assumes.
CONTEXT_SHRINK_AFTER_REJECTION = 0.7

# --- Versions, undo and editing (versions.py, edit/append/move/delete tools) ---
# Every change that replaces or removes text first copies the old file to
# <kb>/.history/<rel_path>.<timestamp>; these limits bound how many copies pile up.
HISTORY_KEEP = 20  # versions kept per note (0 = no count limit); the newest is never pruned
HISTORY_MAX_AGE_DAYS = 0  # versions older than this are pruned (0 = never by age); the newest is kept
UNDO_LOG_NAME = "undo.jsonl"  # inside HISTORY_DIR: one line per change the agent made
UNDO_LOG_KEEP = 200  # changes remembered for /undo; older lines are dropped (their versions stay)
EDIT_CLOSEST_LINES = 3  # lines shown when edit_note's old_text is not found
EDIT_MAX_MATCHES_COUNTED = 20  # edit_note stops counting ambiguous matches here

# --- MCP server (mcp_server.py) ---
# One JSON-RPC message per line; a longer line is skipped with an error, so memory stays bounded.
# Big enough for a note of MAX_NOTE_BYTES sent as write_note content with every character \u-escaped.
MCP_MAX_MESSAGE_BYTES = 32 * 1024 * 1024

# --- Shell tool (issue 6; off unless ALLOW_SHELL=1 or --allow-shell) ---
SHELL_TIMEOUT = 60.0  # seconds a command may run before it and everything it started are killed
SHELL_KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when stopping a command
# Once the command's shell has exited, how long its output may stay open (seconds). A background process
# still holding it open after that is stopped, instead of making the command wait for its timeout.
SHELL_OUTPUT_GRACE = 0.5
SHELL_STDOUT_CHARS = 4000  # the model sees the head and tail of each stream, the middle is cut
SHELL_STDERR_CHARS = 2000

# --- search index (search.py, issue 3) ------------------------------------------------------------
# Where the per-knowledge-base index files live. Unset: $XDG_CACHE_HOME/knowledge-agent, else
# ~/.cache/knowledge-agent. The index never goes inside the notes folder, so a synced vault stays clean.
INDEX_DIR_ENV = "KA_INDEX_DIR"
# "0" turns off Linux inotify; every search then re-checks every note's size and mtime (slower, same results).
SEARCH_WATCH_ENV = "KA_SEARCH_WATCH"
# BM25 column weights: a word in the title (first heading, else file name) or in the path counts for more
# than the same word in the body.
SEARCH_WEIGHT_PATH = 5.0
SEARCH_WEIGHT_TITLE = 10.0
SEARCH_WEIGHT_LEAD = 5.0        # the opening paragraph (first SEARCH_LEAD_CHARS of text after the title)
SEARCH_WEIGHT_BODY = 1.0
SEARCH_LEAD_CHARS = 400
SEARCH_LINE_CHARS = 160         # a shown line is cut to about this many characters around the match
LIST_OUTPUT_CHARS = 6000        # list_notes stops adding lines past this many characters
INDEX_MAX_NOTE_BYTES = 2_000_000  # only the first 2 MB of a huge note are indexed
INDEX_PROGRESS_AFTER_S = 1.0    # an index build running longer than this reports progress on stderr
INDEX_BUSY_TIMEOUT_MS = 5000    # how long to wait for another process holding the index's write lock
INDEX_OPEN_MAX = 4              # indexes (and inotify watchers) kept open per process, least recent closed
INDEX_WAIT_S = 120              # a search waits this long for another process's index build, then searches
INDEX_RETRY_PAUSE_S = 0.05  # pause between tries while another process holds the index
                                # what the index holds (a first build of 90,000 notes takes 10-40 s)
SEARCH_QUERY_ECHO_CHARS = 80    # the query is repeated in the result's first line, cut to this many characters
SEARCH_QUERY_MAX_WORDS = 64     # words (Chinese: 2-character words) of a query searched; the rest is ignored


class ConfigError(Exception):
    """A setting is missing or invalid; the message says what to set and where."""


@dataclass
class Settings:
    api_key: str | None
    base_url: str
    model: str
    kb: Path
    max_rounds: int
    stream: bool
    thinking: str | None  # "enabled" | "disabled" | None (provider default)
    reasoning_effort: str | None
    show_reasoning: bool
    auto_approve: bool
    allow_shell: bool = False
    shell_timeout: float = SHELL_TIMEOUT
    context_tokens: int = CONTEXT_TOKENS  # what one request may carry (issue 5)
    data_dir: Path | None = None  # where sessions.db lives; None: $XDG_DATA_HOME/knowledge-agent


_dotenv: dict[str, str] = {}  # the .env file's values; they never enter os.environ, so commands never see them


def env_value(name: str, fallback: str | None = None) -> str | None:
    """The environment wins over .env for both names, so an exported OPENAI_* beats DEEPSEEK_* in .env."""
    for source in (os.environ, _dotenv):
        for key in (name, fallback):
            value = (source.get(key) or "").strip() if key else ""
            if value:
                return value
    return None


def _flag(name: str, default: bool) -> bool:
    value = env_value(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not valid: use 1 or 0 (in the environment or {ENV_FILE.name}).")


def _positive(name: str, value, default, kind=int):
    """A number above 0 (a whole one for kind=int), or a ConfigError that says what to set."""
    if value is None:
        return default
    try:
        number = kind(str(value).strip())
    except ValueError:
        number = 0
    if not 0 < number < float("inf"):
        unit = "whole number of at least 1" if kind is int else "number above 0"
        raise ConfigError(f"{name} must be a {unit}, not {value!r}.")
    return number


def _choice(name: str, value: str | None, choices: tuple[str, ...]) -> str | None:
    if value is not None and value not in choices:
        raise ConfigError(f"{name}={value!r} is not valid: use one of {', '.join(choices)}.")
    return value


def _knowledge_base(value: str | None) -> Path:
    kb = Path(value).expanduser() if value else PROJECT_DIR / "knowledge_base"
    if kb.exists() and not kb.is_dir():
        raise ConfigError(f"{kb} is a file, not a folder. Point KNOWLEDGE_BASE (or --kb) at your notes folder.")
    if not kb.is_dir():
        raise ConfigError(
            f"Notes folder not found: {kb}. Create it, or point KNOWLEDGE_BASE (or --kb) at your notes."
        )
    if not os.access(kb, os.R_OK | os.X_OK):
        raise ConfigError(f"Notes folder {kb} cannot be read (permission denied). Check its permissions.")
    return kb.resolve()


def load_settings(**overrides) -> Settings:
    """Build Settings from defaults, .env, the environment and non-None keyword overrides (CLI flags)."""
    _dotenv.clear()
    _dotenv.update({k: v for k, v in dotenv_values(ENV_FILE).items() if v is not None})
    given = {key: value for key, value in overrides.items() if value is not None}
    return Settings(
        api_key=given.get("api_key") or env_value("DEEPSEEK_API_KEY", "OPENAI_API_KEY"),
        base_url=given.get("base_url") or env_value("DEEPSEEK_BASE_URL", "OPENAI_BASE_URL") or DEFAULT_BASE_URL,
        model=given.get("model") or env_value("MODEL") or DEFAULT_MODEL,
        kb=_knowledge_base(given.get("kb") or env_value("KNOWLEDGE_BASE")),
        max_rounds=_positive(
            "MAX_TOOL_ROUNDS (or --max-rounds)",
            given.get("max_rounds", env_value("MAX_TOOL_ROUNDS")),
            DEFAULT_MAX_TOOL_ROUNDS,
        ),
        stream=given.get("stream", _flag("STREAM", True)),
        thinking=_choice("THINKING", env_value("THINKING"), ("enabled", "disabled")),
        reasoning_effort=_choice("REASONING_EFFORT", env_value("REASONING_EFFORT"), ("low", "medium", "high", "max")),
        show_reasoning=given.get("show_reasoning", _flag("SHOW_REASONING", True)),
        auto_approve=given.get("auto_approve", _flag("AUTO_APPROVE", False)),
        allow_shell=given.get("allow_shell", _flag("ALLOW_SHELL", False)),
        shell_timeout=_positive("SHELL_TIMEOUT", given.get("shell_timeout", env_value("SHELL_TIMEOUT")),
                                SHELL_TIMEOUT, kind=float),
        context_tokens=_positive(
            "CONTEXT_TOKENS", given.get("context_tokens", env_value("CONTEXT_TOKENS")), CONTEXT_TOKENS
        ),
        data_dir=Path(env_value(DATA_DIR_ENV)).expanduser() if env_value(DATA_DIR_ENV) else None,
    )
