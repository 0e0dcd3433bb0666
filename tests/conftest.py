import sys
from pathlib import Path

# Tests import the top-level modules (config, sessions, context) straight from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
