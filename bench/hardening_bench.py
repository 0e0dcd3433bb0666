"""Stalls that held the notes lock: the change summary and review diff of a repetitive note, and tool arguments
streamed in small pieces. Each is timed here and, in the same run, on another checkout (--base, e.g. a clone of
the code before), and printed as a ratio.

    python bench/hardening_bench.py [--base /tmp/base] [--kb-bytes 62000]

Goal: every change of a note up to the size limit summarised in well under a second; arguments assembled in
linear time (2.8 MB in 12-character pieces took 170 s when each piece copied the whole string again).
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = """
import sys, time
sys.path.insert(0, sys.argv[1])
import diffs
import versions
size = int(sys.argv[2])
lines = size // 16  # a repetitive note (a checklist, a log): few distinct lines, most shared by old and new
old = "".join(f"- [ ] item {i % 3}\\n" for i in range(lines))
new = "".join(f"- [ ] item {(i + i // 7) % 3}\\n" for i in range(lines))
started = time.perf_counter()
diffs.change_summary("todo.md", old, new)
summary = time.perf_counter() - started
started = time.perf_counter()
diffs.diff_text(old, new)
print(summary, time.perf_counter() - started)
"""
TIMEOUT_S = 300


def timed(root: Path, size: int) -> tuple[float, float]:
    try:
        out = subprocess.run([sys.executable, "-c", SUMMARY, str(root), str(size)], capture_output=True, text=True,
                             timeout=TIMEOUT_S).stdout.split()
        return float(out[0]), float(out[1])
    except (subprocess.TimeoutExpired, IndexError, ValueError):
        return float("inf"), float("inf")


def arguments(total: int, piece: int = 12) -> tuple[float, float]:
    """(this project's assembly, a string grown piece by piece in a dict as before) for `total` characters."""
    sys.path.insert(0, str(ROOT))
    import agent
    import model

    class Part:  # the little a stream chunk carries: one piece of one call's arguments
        def __init__(self, text):
            function = type("F", (), {"name": None, "arguments": text})
            delta = type("D", (), {"content": None, "tool_calls": [type("C", (), {"index": 0, "id": None,
                                                                                  "function": function})],
                                   "reasoning_content": None, "model_extra": {}})
            self.choices, self.usage = [type("Ch", (), {"delta": delta, "finish_reason": None})], None

    parts = [Part("x" * piece) for _ in range(total // piece)]
    reply = model.Reply()
    started = time.perf_counter()
    reply.receive(parts, True, agent.UI())
    assert len(reply.arguments()[0]) == len(parts) * piece
    ours = time.perf_counter() - started
    call, started = {"arguments": ""}, time.perf_counter()
    for part in parts[:len(parts) // 10]:  # a tenth: the whole would take minutes; it grows as the square
        call["arguments"] += part.choices[0].delta.tool_calls[0].function.arguments
    return ours, (time.perf_counter() - started) * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="another checkout to compare with (e.g. the code before)")
    parser.add_argument("--kb-bytes", type=int, default=62_000, help="size of the repetitive note")
    args = parser.parse_args()
    summary, diff = timed(ROOT, args.kb_bytes)
    print(f"repetitive note of {args.kb_bytes:,} bytes, overwritten: summary {summary:.3f} s, review diff {diff:.3f} s")
    if args.base:
        base_summary, base_diff = timed(args.base, args.kb_bytes)
        print(f"  base ({args.base}): summary {base_summary:.3f} s, diff {base_diff:.3f} s (gave up after "
              f"{TIMEOUT_S} s: inf); ratio summary {summary / base_summary:.4f}, diff {diff / base_diff:.4f}")
    ours, grown = arguments(2_800_000)
    print(f"2.8 MB of arguments in 12-character pieces: {ours:.2f} s assembled; growing one string: ~{grown:.0f} s "
          f"(extrapolated x100 from a tenth); ratio {ours / grown:.4f}")


if __name__ == "__main__":
    main()
