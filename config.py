"""Settings and limits for knowledge-agent. (Minimal version on the `sessions` branch: the core's
config.py on main holds everything else; the block below is meant to be appended to it as is.)"""

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
# aims at 88k (env KA_CONTEXT_TOKENS).
CONTEXT_TOKENS = 88_000
# When an old tool result is shortened, this many characters stay in front of "[… elided, N chars]".
ELIDED_TOOL_HEAD_CHARS = 300
# Token estimate: Latin text ~4 characters a token, CJK ~1 token a character, plus what each message and
# each tool call costs in the chat template.
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
TOOL_CALL_OVERHEAD_TOKENS = 8
# The learnt correction (API count / estimate) is kept within these bounds, so one odd reply cannot
# make the budget absurd, and is learnt only from requests big enough for the ratio to mean something.
TOKEN_FACTOR_MIN = 0.5
TOKEN_FACTOR_MAX = 3.0
TOKEN_FACTOR_MIN_SAMPLE = 500
