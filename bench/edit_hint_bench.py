"""Benchmark: how long edit_note takes to say "old_text was not found" and show the closest lines.

The hint must come back within about a second on any note. Each case runs in its own process with a time
limit, so a slow algorithm shows as "> LIMIT s" instead of hanging the run. Cases: notes of 10,000 and
40,000 lines, and one 2.6 MB line, each with old_text that is nowhere in the note (a typo'd sentence).

    python bench/edit_hint_bench.py [--limit 60]
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "10,000 lines": "''.join(f'Line {i}: some text about topic {i} and more words here.\\n' for i in range(10_000))",
    "40,000 lines": "''.join(f'Line {i}: some text about topic {i} and more words here.\\n' for i in range(40_000))",
    "one 2.6 MB line": "' '.join(f'Line {i}: some text about topic {i} and more words here.' for i in range(45_000))",
}
WANTED = "Line 5000: some txet about tpoic 5000 and more wrods here."


def time_case(expression: str, limit: float) -> str:
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); import changing; text = {expression}; "
            f"start = time.perf_counter(); hint, _ = changing.closest_lines(text, {WANTED!r}); "
            "print(f'{time.perf_counter() - start:.3f} s, {len(text):,} chars, hint: {hint.splitlines()[0][:40]}')")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return f"> {limit:.0f} s (stopped)"
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, default=60)
    args = parser.parse_args()
    started = time.perf_counter()
    for name, expression in CASES.items():
        print(f"{name:<18} {time_case(expression, args.limit)}")
    print(f"(whole run {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
