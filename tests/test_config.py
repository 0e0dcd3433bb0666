"""Settings: precedence of flags, environment and .env, and one-line errors for bad values."""

import os

import pytest

import config
from config import ConfigError, load_settings
from conftest import assert_clean_failure


@pytest.fixture
def env_file(tmp_path, monkeypatch, kb):
    path = tmp_path / ".env"
    monkeypatch.setattr(config, "ENV_FILE", path)
    monkeypatch.setenv("KNOWLEDGE_BASE", str(kb))
    return path


def test_environment_beats_env_file(env_file, monkeypatch):
    env_file.write_text("DEEPSEEK_API_KEY=from-file\nDEEPSEEK_BASE_URL=http://localhost:8000/v1\n")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "from-env")
    settings = load_settings()
    assert (settings.api_key, settings.base_url) == ("from-env", "http://localhost:8000/v1")


def test_an_openai_key_goes_to_openai_only(env_file, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    settings = load_settings()
    assert (settings.api_key, settings.base_url, settings.model) == (
        "sk-openai", "https://api.openai.com/v1", "gpt-5.4-mini")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("MODEL", "qwen3:8b")
    settings = load_settings()
    assert (settings.api_key, settings.base_url, settings.model) == ("sk-openai", "http://localhost:11434/v1", "qwen3:8b")


def test_a_deepseek_endpoint_never_gets_the_openai_key(env_file, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("DEEPSEEK_BASE_URL", "http://localhost:8000/v1")
    settings = load_settings()
    assert (settings.api_key, settings.base_url) == (None, "http://localhost:8000/v1")
    env_file.write_text("DEEPSEEK_API_KEY=sk-deepseek\n")  # the project's own key beats one exported for others
    monkeypatch.delenv("DEEPSEEK_BASE_URL")
    settings = load_settings()
    assert (settings.api_key, settings.base_url, settings.model) == (
        "sk-deepseek", "https://api.deepseek.com", "deepseek-flash")


def test_an_address_in_the_environment_beats_a_cloud_key_in_the_files(env_file, monkeypatch, tmp_path):
    """Found by an outside tester: DEEPSEEK_API_KEY in config.env sent the notes to DeepSeek although the
    environment pointed at a local server."""
    user_file = tmp_path / "config" / "knowledge-agent" / "config.env"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("DEEPSEEK_API_KEY=sk-cloud\nOPENAI_API_KEY=sk-openai-file\n")
    settings = load_settings()  # no address anywhere: the first provider with a key, DeepSeek before OpenAI
    assert (settings.api_key, settings.base_url) == ("sk-cloud", "https://api.deepseek.com")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-exported")  # a key exported for other programs decides nothing
    assert (load_settings().api_key, load_settings().base_url) == ("sk-cloud", "https://api.deepseek.com")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:18765/v1")
    settings = load_settings()  # an address in the environment decides: its provider as a whole, key from the file
    assert (settings.api_key, settings.base_url, settings.model) == (
        "sk-openai-file", "http://127.0.0.1:18765/v1", "gpt-5.4-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    assert load_settings().api_key == "x"
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY")
    env_file.write_text("OPENAI_BASE_URL=http://localhost:11434/v1\n")  # .env beats the config file the same way
    assert load_settings().base_url == "http://localhost:11434/v1"


def test_user_config_file_is_read_last(env_file, monkeypatch, tmp_path):
    user_file = tmp_path / "config" / "knowledge-agent" / "config.env"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("MODEL=from-user-file\nMAX_TOOL_ROUNDS=3\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    env_file.write_text("MODEL=from-env-file\n")
    settings = load_settings()
    assert (settings.model, settings.max_rounds) == ("from-env-file", 3)
    assert config.config_file() == user_file


@pytest.mark.parametrize("url", ["notaurl", "api.deepseek.com", "ftp://x/v1", "http://", "http://[::1/v1"])
def test_a_bad_base_url_is_a_settings_error(env_file, monkeypatch, url):
    monkeypatch.setenv("DEEPSEEK_BASE_URL", url)
    with pytest.raises(ConfigError, match="not an API address"):
        load_settings()
    with pytest.raises(ConfigError, match="--base-url"):
        load_settings(base_url=url)


def test_env_file_fills_what_the_environment_leaves_empty(env_file, monkeypatch):
    env_file.write_text("DEEPSEEK_API_KEY=from-file\nMODEL=deepseek-v4-pro\n")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "")
    settings = load_settings()
    assert (settings.api_key, settings.model) == ("from-file", "deepseek-v4-pro")
    assert "DEEPSEEK_API_KEY" not in os.environ or not os.environ["DEEPSEEK_API_KEY"]  # never exported


def test_flags_beat_everything(env_file, monkeypatch, tmp_path):
    env_file.write_text("MODEL=from-file\nMAX_TOOL_ROUNDS=4\n")
    monkeypatch.setenv("MODEL", "from-env")
    settings = load_settings(model="from-flag", max_rounds="7", stream=False)
    assert (settings.model, settings.max_rounds, settings.stream) == ("from-flag", 7, False)


def test_defaults(env_file):
    settings = load_settings()
    assert (settings.base_url, settings.model, settings.max_rounds, settings.stream) == (
        "https://api.deepseek.com", "deepseek-flash", 10, True)


@pytest.mark.parametrize("name, value, expected", [
    ("MAX_TOOL_ROUNDS", "0", "at least 1"),
    ("STREAM", "maybe", "use 1 or 0"),
    ("REASONING_EFFORT", "extreme", "low, medium, high, max"),
])
def test_bad_values_name_the_setting(env_file, monkeypatch, name, value, expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=expected):
        load_settings()


def test_notes_folder_problems(env_file, tmp_path, monkeypatch):
    (tmp_path / "file.md").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        load_settings(kb=str(tmp_path / "file.md"))
    with pytest.raises(ConfigError, match="not found"):
        load_settings(kb=str(tmp_path / "missing"))
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_settings()


def test_a_base_url_flag_at_a_providers_address_takes_that_providers_key(env_file, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    settings = load_settings(base_url="https://api.openai.com/v1")
    assert (settings.api_key, settings.model) == ("sk-openai", "gpt-5.4-mini")  # never DeepSeek's key to OpenAI
    assert load_settings(base_url="http://localhost:8000/v1").api_key == "sk-deepseek"  # another server: as set


@pytest.mark.parametrize("script", ["main.py", "mcp_server.py"])
def test_a_settings_file_that_is_not_utf8_is_one_line_naming_it(tmp_path, kb, script):
    """A Chinese comment saved as GBK in config.env: exit 2 with the file named, never a traceback."""
    import subprocess
    import sys
    user_file = tmp_path / "config" / "knowledge-agent" / "config.env"
    user_file.parent.mkdir(parents=True)
    user_file.write_bytes("# 我的密钥\nDEEPSEEK_API_KEY=k\n".encode("gbk"))
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, os.path.join(project, script), "--kb", str(kb), "hello"][:4 if
                            script == "mcp_server.py" else 5], capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert_clean_failure(result, 2)
    assert f"{user_file} is not UTF-8 text" in result.stderr


def test_the_mcp_servers_own_settings_never_stop_the_chat(env_file, monkeypatch):
    env_file.write_text("MCP_ALLOW_SHELL=maybe\n")
    assert load_settings().kb is not None  # the chat (and the page) start as if it were not there
    with pytest.raises(ConfigError, match="MCP_ALLOW_SHELL='maybe' is not valid"):
        load_settings(mcp=True)
    env_file.write_text("MCP_ALLOW_SHELL=1\n")
    assert load_settings(mcp=True).mcp_allow_shell and not load_settings().mcp_allow_shell
