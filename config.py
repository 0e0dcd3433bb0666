"""Settings for knowledge-agent (minimal stand-in on the `editing` branch; main's config.py replaces it).

Only the constants versions.py needs live here until the branch merges main.
"""

NOTE_SUFFIXES = (".md", ".txt")
HISTORY_DIR = ".history"  # versions of changed notes, inside the knowledge base, hidden from the tools

# --- Versions and undo (versions.py) ---
# Every change that replaces or removes text first copies the old file to
# <kb>/.history/<rel_path>.<timestamp>; these limits bound how many copies pile up.
HISTORY_KEEP = 20  # versions kept per note (0 = no count limit); the newest is never pruned
HISTORY_MAX_AGE_DAYS = 0  # versions older than this are pruned (0 = never by age); the newest is kept
UNDO_LOG_NAME = "undo.jsonl"  # inside HISTORY_DIR: one line per change the agent made
UNDO_LOG_KEEP = 200  # changes remembered for /undo; older lines are dropped (their versions stay)
