"""Settings and limits for knowledge-agent (minimal stand-in on the `shell` branch; the lead's config.py wins).

Every limit is a named constant here; the shell block below is the only part this branch owns.
"""
import os

HISTORY_DIR = ".history"


def _env_float(name: str, default: float) -> float:
    """A number from the environment, or the default when unset or unreadable."""
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


# --- shell tool (issue 6) -------------------------------------------------------------------------
# How long one command may run before it and everything it started are killed (env SHELL_TIMEOUT).
SHELL_TIMEOUT = _env_float("SHELL_TIMEOUT", 60.0)
# After SIGTERM, how long processes get to exit before SIGKILL.
SHELL_KILL_GRACE = 2.0
# How much of each stream the model sees; the head and the tail are kept, the middle is cut.
SHELL_STDOUT_CHARS = 4000
SHELL_STDERR_CHARS = 2000
# --- end shell tool --------------------------------------------------------------------------------
