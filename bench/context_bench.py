"""Benchmark: does a long session with big tool outputs stay inside the context budget, and what does
trimming cost?

Simulates a 200-turn conversation (default) the way the agent builds it: each turn is a question, one to
four rounds of tool calls whose results are real notes from the tldr corpus (English and Chinese, cut at
MAX_TOOL_OUTPUT characters, as the tools do) and an answer. Before every request fit_to_budget() chooses
what to send. Prints the largest request (estimated tokens and bytes) against the budget, next to the
untrimmed history it came from (the baseline), and the trimming time per request next to the time the
SDK needs anyway to serialise the request to JSON.

    python bench/context_bench.py [--turns 200] [--budget TOKENS] [--corpus PATH]
"""

import argparse
import json
import random
import statistics
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import config  # noqa: E402
from context import estimate_tokens, fit_to_budget, request_bytes  # noqa: E402

CORPUS = Path("/work/shared/corpus/tldr-kb.tar.gz")
MAX_TOOL_OUTPUT = getattr(config, "MAX_TOOL_OUTPUT", 8000)


def load_notes(corpus: Path) -> tuple[list[str], list[str]]:
    english, chinese = [], []
    with tarfile.open(corpus) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(".md"):
                text = tar.extractfile(member).read().decode("utf-8", "replace")
                (chinese if "/zh/" in member.name else english).append(text)
    return english, chinese


def tool_output(rng: random.Random, notes: list[str]) -> str:
    """Several notes joined until the tool's output cap, like a search or a read of a long note."""
    parts, size = [], 0
    while size < MAX_TOOL_OUTPUT:
        note = rng.choice(notes)
        parts.append(note)
        size += len(note)
    return "\n---\n".join(parts)[:MAX_TOOL_OUTPUT]


def simulate(turns: int, budget: int, english: list[str], chinese: list[str]) -> dict:
    rng = random.Random(5)
    history = [{"role": "system", "content": "You are a notes assistant. " * 40}]
    largest_tokens = largest_bytes = 0
    fit_ms, dump_ms = [], []
    requests = 0
    last_sent: list[dict] = []

    def send():
        nonlocal largest_tokens, largest_bytes, requests, last_sent
        start = time.perf_counter()
        sent = last_sent = fit_to_budget(history, budget)
        fit_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        json.dumps({"messages": sent}, ensure_ascii=False)
        dump_ms.append((time.perf_counter() - start) * 1000)
        largest_tokens = max(largest_tokens, estimate_tokens(sent))
        largest_bytes = max(largest_bytes, request_bytes(sent))
        requests += 1

    for i in range(turns):
        notes = chinese if i % 4 == 3 else english
        history.append({"role": "user", "content": f"Question {i}: what do my notes say about this?"})
        send()
        for r in range(rng.randint(1, 4)):
            calls = [{"id": f"call_{i}_{r}_{k}", "type": "function",
                      "function": {"name": "read_note", "arguments": json.dumps({"path": f"n{i}{r}{k}.md"})}}
                     for k in range(rng.randint(1, 2))]
            history.append({"role": "assistant", "content": "", "reasoning_content": "Let me look. " * 20,
                            "tool_calls": calls})
            for call in calls:
                history.append({"role": "tool", "tool_call_id": call["id"],
                                "content": tool_output(rng, notes)})
            send()
        history.append({"role": "assistant", "content": "Here is what I found. " * 40,
                        "reasoning_content": "Summarising. " * 30})
    return {"requests": requests, "largest_tokens": largest_tokens, "largest_bytes": largest_bytes,
            "history_tokens": estimate_tokens(history), "history_bytes": request_bytes(history),
            "messages": len(history), "fit_ms": fit_ms, "dump_ms": dump_ms,
            "last_turns": sum(m["role"] == "user" for m in last_sent),
            "last_elided": sum("[… elided, " in str(m.get("content")) for m in last_sent),
            "last_tools": sum(m["role"] == "tool" for m in last_sent)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--budget", type=int, default=config.CONTEXT_TOKENS)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"Corpus not found: {args.corpus} (pass --corpus PATH to tldr-kb.tar.gz)")
    english, chinese = load_notes(args.corpus)
    r = simulate(args.turns, args.budget, english, chinese)
    fit, dump = r["fit_ms"], r["dump_ms"]
    p95 = sorted(fit)[int(len(fit) * 0.95)]
    print(f"{args.turns} turns, {r['requests']} requests, {r['messages']} messages stored, "
          f"budget {args.budget:,} tokens")
    print(f"untrimmed history at the end : {r['history_tokens']:>9,} tokens  {r['history_bytes']:>11,} bytes"
          f"  ({r['history_tokens'] / args.budget:.1f}x the budget)")
    print(f"largest request sent         : {r['largest_tokens']:>9,} tokens  {r['largest_bytes']:>11,} bytes"
          f"  ({r['largest_tokens'] / args.budget:.2f}x the budget)")
    print(f"last request carries         : {r['last_turns']} of {args.turns} turns; "
          f"{r['last_elided']} of its {r['last_tools']} tool results shortened")
    print(f"trimming per request (ms)    : mean {statistics.mean(fit):.2f}  p95 {p95:.2f}  max {max(fit):.2f}")
    print(f"JSON encoding of the request : mean {statistics.mean(dump):.2f} ms "
          f"(trimming costs {statistics.mean(fit) / statistics.mean(dump):.1f}x what the SDK spends anyway)")
    if r["largest_tokens"] > args.budget:
        sys.exit("OVER BUDGET")


if __name__ == "__main__":
    main()
