"""Settings a person can set, read once and passed down as one frozen `Settings` value.

Precedence, lowest to highest: defaults here < a `.env` file beside main.py < environment variables
< command-line flags (keyword overrides to `load_settings`). main.py and mcp_server.py call
`load_settings` (and run_agent, when given no settings, for `python -c` use); no other module reads the
environment or `.env`. A bad value raises `ConfigError` with one
line saying what to set; `.env` values never enter `os.environ`, so commands the agent runs never see them.
Limits that only one module uses live at the top of that module, not here.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

from dotenv import dotenv_values

PROJECT_DIR = Path(__file__).resolve().parent
ENV_FILE = PROJECT_DIR / ".env"
DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODEL = "deepseek-flash"


class ConfigError(Exception):
    """A setting is missing or invalid; the message says what to set and where."""


def _user_folder(variable: str, fallback: str) -> Path:
    return Path(os.environ.get(variable) or Path.home() / fallback) / "knowledge-agent"


@dataclass(frozen=True)
class Settings:
    api_key: str | None
    base_url: str
    model: str
    kb: Path
    max_rounds: int = 10  # model calls per question
    stream: bool = True
    thinking: str | None = None  # "enabled" | "disabled" | None (the provider's default)
    reasoning_effort: str | None = None
    show_reasoning: bool = True
    auto_approve: bool = False
    allow_shell: bool = False
    shell_timeout: float = 60.0
    shell_network: bool = False  # may sandboxed shell commands open network connections
    # deepseek-flash has a 128k-token window; reasoning and the answer need room too.
    context_tokens: int = 88_000
    data_dir: Path = field(default_factory=lambda: _user_folder("XDG_DATA_HOME", ".local/share"))
    index_dir: Path = field(default_factory=lambda: _user_folder("XDG_CACHE_HOME", ".cache"))
    search_watch: bool = True  # Linux inotify tells search which notes changed; off: compare every note


def _reader(dotenv: dict):
    def value(*names: str) -> str | None:
        """The first non-empty value: the environment for every name first, then .env."""
        for source in (os.environ, dotenv):
            for name in names:
                text = (source.get(name) or "").strip()
                if text:
                    return text
        return None
    return value


def _flag(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not valid: use 1 or 0 (in the environment or {ENV_FILE.name}).")


def _positive(name: str, value, default, kind=int):
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


def notes_folder(value: str | None) -> Path:
    kb = Path(value).expanduser() if value else PROJECT_DIR / "knowledge_base"
    if kb.exists() and not kb.is_dir():
        raise ConfigError(f"{kb} is a file, not a folder. Point KNOWLEDGE_BASE (or --kb) at your notes folder.")
    if not kb.is_dir():
        raise ConfigError(f"Notes folder not found: {kb}. Create it, or point KNOWLEDGE_BASE (or --kb) at your notes.")
    if not os.access(kb, os.R_OK | os.X_OK):
        raise ConfigError(f"Notes folder {kb} cannot be read (permission denied). Check its permissions.")
    return kb.resolve()


def _notes_or_none(value: str | None, required: bool) -> Path | None:
    try:
        return notes_folder(value)
    except ConfigError:
        if required:
            raise
        return None


def load_settings(notes_required: bool = True, **overrides) -> Settings:
    """Settings from defaults, .env, the environment and the non-None keyword overrides (CLI flags).
    With notes_required False a missing or unreadable notes folder is no error (kb is then None)."""
    env = _reader({k: v for k, v in dotenv_values(ENV_FILE).items() if v is not None})
    given = {key: value for key, value in overrides.items() if value is not None}

    def flag(name: str, key: str, default: bool) -> bool:
        return given[key] if key in given else _flag(name, env(name), default)

    folders = {key: Path(env(name)).expanduser()
               for key, name in (("data_dir", "KA_DATA_DIR"), ("index_dir", "KA_INDEX_DIR")) if env(name)}
    return Settings(
        api_key=given.get("api_key") or env("DEEPSEEK_API_KEY", "OPENAI_API_KEY"),
        base_url=given.get("base_url") or env("DEEPSEEK_BASE_URL", "OPENAI_BASE_URL") or DEFAULT_BASE_URL,
        model=given.get("model") or env("MODEL") or DEFAULT_MODEL,
        kb=_notes_or_none(given.get("kb") or env("KNOWLEDGE_BASE"), notes_required),
        max_rounds=_positive("MAX_TOOL_ROUNDS (or --max-rounds)", given.get("max_rounds", env("MAX_TOOL_ROUNDS")), 10),
        stream=flag("STREAM", "stream", True),
        thinking=_choice("THINKING", env("THINKING"), ("enabled", "disabled")),
        reasoning_effort=_choice("REASONING_EFFORT", env("REASONING_EFFORT"), ("low", "medium", "high", "max")),
        show_reasoning=flag("SHOW_REASONING", "show_reasoning", True),
        auto_approve=flag("AUTO_APPROVE", "auto_approve", False),
        allow_shell=flag("ALLOW_SHELL", "allow_shell", False),
        shell_timeout=_positive("SHELL_TIMEOUT", given.get("shell_timeout", env("SHELL_TIMEOUT")), 60.0, float),
        shell_network=flag("SHELL_NETWORK", "shell_network", False),
        context_tokens=_positive("CONTEXT_TOKENS", given.get("context_tokens", env("CONTEXT_TOKENS")), 88_000),
        search_watch=flag("KA_SEARCH_WATCH", "search_watch", True),
        **folders,
    )


def mcp_flags(allow_destructive: bool, allow_shell: bool) -> tuple[bool, bool]:
    """The MCP server's two opt-ins: a flag, else MCP_ALLOW_DESTRUCTIVE / MCP_ALLOW_SHELL."""
    env = _reader({k: v for k, v in dotenv_values(ENV_FILE).items() if v is not None})
    return (allow_destructive or _flag("MCP_ALLOW_DESTRUCTIVE", env("MCP_ALLOW_DESTRUCTIVE"), False),
            allow_shell or _flag("MCP_ALLOW_SHELL", env("MCP_ALLOW_SHELL"), False))
