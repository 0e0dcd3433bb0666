"""Settings a person can set, read once and passed down as one frozen `Settings` value.

Precedence, lowest to highest: the defaults in `Settings` < `$XDG_CONFIG_HOME/knowledge-agent/config.env` <
`.env` beside main.py < environment variables < command-line flags (`load_settings` keywords). A key goes only
to its own provider's endpoint (PROVIDERS). No other module reads settings from the environment (terminal.py
honours NO_COLOR and XDG_STATE_HOME). A bad value raises `ConfigError`, one line saying what to set; `.env`
values never enter `os.environ`, so the agent's commands never see them. One module's limits live in it.
"""

import ipaddress
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

from dotenv import dotenv_values

VERSION = "0.4.0"  # of knowledge-agent: --version, the chat's banner, the MCP server's serverInfo, the package
PROJECT_DIR = Path(__file__).resolve().parent
ENV_FILE = PROJECT_DIR / ".env"
SAMPLE_NOTES = PROJECT_DIR / "knowledge_base"  # a clone's sample notes; an installed copy has none
YES, NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class ConfigError(Exception):
    """A setting is missing or invalid; the message says what to set and where."""


def _user_folder(variable: str, fallback: str) -> Path:
    return Path(os.environ.get(variable) or Path.home() / fallback) / "knowledge-agent"


# A provider's key never goes to another's endpoint. The provider is the one whose _BASE_URL the strongest source
# sets, else the first with a key anywhere, else DeepSeek (load_settings).
PROVIDERS = {"DEEPSEEK": ("https://api.deepseek.com", "deepseek-flash"),
             "OPENAI": ("https://api.openai.com/v1", "gpt-5.4-mini")}


def _set_by(default, variable: str, choices: tuple[str, ...] = (), factory=None):
    """A field set by `variable`, to one of `choices` when given; `factory` makes its default for each Settings."""
    start = {"default_factory": factory} if factory else {"default": default}
    return field(**start, metadata={"variable": variable, "choices": choices})


@dataclass(frozen=True)
class Settings:
    """Everything a person can set; load_settings reads each field's variables as the field's type."""
    api_key: str | None = _set_by(None, "{provider}_API_KEY")
    base_url: str = _set_by(PROVIDERS["DEEPSEEK"][0], "{provider}_BASE_URL")
    model: str = _set_by(PROVIDERS["DEEPSEEK"][1], "MODEL")
    kb: Path | None = _set_by(None, "KNOWLEDGE_BASE")  # the notes folder; None only if not required
    max_rounds: int = _set_by(10, "MAX_TOOL_ROUNDS")  # model calls per question
    max_output_tokens: int = _set_by(0, "MAX_OUTPUT_TOKENS")  # cap on one reply; 0: model.py's default per server
    temperature: float | None = _set_by(None, "TEMPERATURE")  # None: model.py's default per server
    request_timeout: float = _set_by(120.0, "REQUEST_TIMEOUT")  # seconds of silence from the model server
    stream: bool = _set_by(True, "STREAM")
    thinking: str | None = _set_by(None, "THINKING", choices=("enabled", "disabled"))  # None: the provider's
    reasoning_effort: str | None = _set_by(None, "REASONING_EFFORT", choices=("low", "medium", "high", "max"))
    show_reasoning: bool = _set_by(True, "SHOW_REASONING")
    auto_approve: bool = _set_by(False, "AUTO_APPROVE")
    allow_shell: bool = _set_by(False, "ALLOW_SHELL")
    shell_timeout: float = _set_by(60.0, "SHELL_TIMEOUT")
    shell_network: bool = _set_by(False, "SHELL_NETWORK")  # may sandboxed shell commands open connections
    shell_unsandboxed: bool = _set_by(False, "SHELL_UNSANDBOXED")  # offer the shell where the sandbox cannot be
    # deepseek-flash has a 128k-token window; reasoning and the answer need room too.
    context_tokens: int = _set_by(88_000, "CONTEXT_TOKENS")
    data_dir: Path = _set_by(None, "KA_DATA_DIR", factory=lambda: _user_folder("XDG_DATA_HOME", ".local/share"))
    index_dir: Path = _set_by(None, "KA_INDEX_DIR", factory=lambda: _user_folder("XDG_CACHE_HOME", ".cache"))
    search_watch: bool = _set_by(True, "KA_SEARCH_WATCH")  # Linux inotify says which notes changed; off: compare all
    passages: bool = _set_by(True, "PASSAGES")  # the question goes to the model with what a search for it found
    # Search by meaning, when a model is named; the URL and key fall back to the chat provider's, unless that is
    # DeepSeek, which serves no embeddings (embeddings.embedder_of applies that rule).
    embed_model: str | None = _set_by(None, "EMBED_MODEL")
    embed_base_url: str | None = _set_by(None, "EMBED_BASE_URL")
    embed_api_key: str | None = _set_by(None, "EMBED_API_KEY")
    embed_query_prefix: str | None = _set_by(None, "EMBED_QUERY_PREFIX")  # None: embeddings.py's for the model
    embed_doc_prefix: str | None = _set_by(None, "EMBED_DOC_PREFIX")
    mcp_allow_destructive: bool = _set_by(False, "MCP_ALLOW_DESTRUCTIVE")  # the MCP server's two opt-ins
    mcp_allow_shell: bool = _set_by(False, "MCP_ALLOW_SHELL")


def _typed(name: str, value, kind: type, choices: tuple[str, ...] = ()):
    """A variable's (or a flag's) value as a field of type `kind` takes it."""
    if choices and value not in choices:
        raise ConfigError(f"{name}={value!r} is not valid: use one of {', '.join(choices)}.")
    if kind is bool:  # a command-line flag arrives as True or False
        if str(value).lower() not in YES + NO:
            raise ConfigError(f"{name}={value!r} is not valid: use 1 or 0.")
        return str(value).lower() in YES
    if kind in (int, float, float | None):
        try:
            number = (int if kind is int else float)(str(value).strip())
        except ValueError:
            number = -1
        if kind == float | None:  # a temperature, where 0 is one
            if not 0 <= number <= 2:
                raise ConfigError(f"{name} must be a number from 0 to 2, not {value!r}.")
        elif not 0 < number < float("inf"):
            unit = "whole number of at least 1" if kind is int else "number above 0"
            raise ConfigError(f"{name} must be a {unit}, not {value!r}.")
        return number
    return Path(value).expanduser() if kind is Path else value


def config_file() -> Path:
    """The user's own settings, so that the installed command works from any folder."""
    return _user_folder("XDG_CONFIG_HOME", ".config") / "config.env"


def is_local(base_url: str) -> bool:
    """A server on this machine or its network (llama.cpp, Ollama, LM Studio): often a model on a CPU."""
    host = urlsplit(base_url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or host.endswith((".local", ".lan", ".internal", ".localhost"))
    return address.is_private or address.is_loopback or address.is_link_local


def _host(url: str) -> str:
    """The host (and port) of an http(s) URL; "" for anything else, as a mistyped setting may be."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed "[" of an IPv6 address
        return ""
    return parts.netloc if parts.scheme in ("http", "https") and not any(c.isspace() for c in url) else ""


def _notes_folder(value: str | None, required: bool, sample: bool) -> Path | None:
    """The notes folder, resolved (unset: the sample notes, if `sample`); None if unusable and not required."""
    if not (value or sample):
        raise ConfigError("No notes folder given: pass --kb PATH (or set KNOWLEDGE_BASE).")
    kb = Path(value).expanduser().absolute() if value else SAMPLE_NOTES  # errors name it in full
    if kb.is_dir() and os.access(kb, os.R_OK | os.X_OK):
        return kb.resolve()
    if not required:
        return None
    if kb.exists() and not kb.is_dir():
        raise ConfigError(f"{kb} is a file, not a folder. Point KNOWLEDGE_BASE (or --kb) at your notes folder.")
    if not value:  # e.g. the installed command, which has no sample notes beside it
        raise ConfigError(f"No notes folder set: put KNOWLEDGE_BASE=/path/to/notes in {config_file()}, or pass --kb.")
    if not kb.is_dir():
        raise ConfigError(f"Notes folder not found: {kb}. Create it, or point KNOWLEDGE_BASE (or --kb) at your notes.")
    raise ConfigError(f"Notes folder {kb} cannot be read (permission denied). Check its permissions.")


def _settings_file(path: Path) -> dict:
    try:
        return dotenv_values(path)
    except UnicodeDecodeError:  # e.g. a comment saved in GBK
        raise ConfigError(f"{path} is not UTF-8 text: save it as UTF-8 in your editor.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read {path} ({exc.strerror or exc}).") from None


def load_settings(notes_required: bool = True, sample_notes: bool = True, mcp: bool = False, **overrides) -> Settings:
    """Settings from the sources and the overrides (flags) not None or ""; kb None if unusable and not required.
    The MCP server's mcp_* settings are read only with `mcp`, so a bad one never stops the chat."""
    files = [_settings_file(path) for path in (config_file(), ENV_FILE) if path.is_file()]
    # Each source's variables set to more than spaces; the environment beats .env, which beats the config file.
    sources = [{name: value.strip() for name, value in source.items() if value and value.strip()}
               for source in files + [os.environ]]
    env = {name: value for source in sources for name, value in source.items()}
    given = {key: value for key, value in overrides.items() if value not in (None, "")}
    host = _host(str(given.get("base_url", "")))  # --base-url at a provider's own address takes its key
    # A local server exported in the environment is never overruled by a cloud key in a file, nor a key in a file
    # by a key exported for other programs.
    provider = ([p for p, (url, _) in PROVIDERS.items() if _host(url) == host]
                + [p for source in reversed(sources) for p in PROVIDERS if f"{p}_BASE_URL" in source]
                + [p for p in PROVIDERS if f"{p}_API_KEY" in env] + ["DEEPSEEK"])[0]
    values = dict(zip(("base_url", "model"), PROVIDERS[provider]))
    for setting in [s for s in fields(Settings) if mcp or not s.name.startswith("mcp_")]:
        variable = setting.metadata["variable"].format(provider=provider)
        if setting.name in given:  # a command-line flag, named in an error beside its variable
            name, value = f"{variable} (or --{setting.name.replace('_', '-')})", given[setting.name]
        else:
            name, value = variable, env.get(variable)
        if value is not None:
            values[setting.name] = _typed(name, value, setting.type, setting.metadata["choices"])
    values["kb"] = _notes_folder(values.get("kb"), notes_required, sample_notes)
    if not _host(values["base_url"]):
        name = "--base-url" if "base_url" in given else f"{provider}_BASE_URL"
        raise ConfigError(f"{name}={values['base_url']!r} is not an API address: use a URL such as "
                          "https://api.deepseek.com or http://localhost:11434/v1.")
    return Settings(**values)

