"""Settings and limits for knowledge-agent.

Minimal stand-in written on the `search` branch: it holds only the names search.py needs. The core's
config.py (Settings, load_settings, ConfigError, ...) replaces it on merge; keep the search block below.
"""

NOTE_SUFFIXES = (".md", ".txt")
HISTORY_DIR = ".history"
MAX_TOOL_OUTPUT = 8000
SEARCH_MAX_HITS = 10
SEARCH_OUTPUT_CHARS = 4000
LIST_MAX_NOTES = 200

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
SEARCH_LINES_PER_HIT = 3        # best-matching lines shown under each hit
SEARCH_LINE_CHARS = 160         # a shown line is cut to about this many characters around the match
LIST_OUTPUT_CHARS = 6000        # list_notes stops adding lines past this many characters
INDEX_MAX_NOTE_BYTES = 2_000_000  # only the first 2 MB of a huge note are indexed
INDEX_PROGRESS_AFTER_S = 1.0    # an index build running longer than this reports progress on stderr
INDEX_BUSY_TIMEOUT_MS = 5000    # how long to wait for another process holding the index's write lock
INDEX_OPEN_MAX = 4              # indexes (and inotify watchers) kept open per process, least recent closed
