"""Benchmark: how much of each request repeats an earlier one (what prompt caching bills cheaply), before
and after the cache-friendly context.py, in one run.

Scenario: a conversation of --turns turns (60), each a question, a search_notes call, a read_note of a
~3,000-character note, and an answer, with a budget of --budget tokens (8,000). Before every request (after
the question and after each tool result) fit_to_budget() chooses what to send. Per request, the cached
share is the length of the longest common prefix with ANY earlier request, counted on the JSON of the
messages message by message, over the request's length. BEFORE is context.py as of commit a237132,
loaded from git into a temporary folder (with that commit's config.py, which it imports).

    python bench/context_bench.py [--turns 60] [--budget 8000]
"""

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import context  # noqa: E402

OLD_COMMIT = "a237132"
SYSTEM = {"role": "system", "content": "You are knowledge-agent, an assistant for the person's own notes. "
          "Answer from what the notes say; search first, then read the relevant hits. " * 6}
WORDS = ("git rebase branch commit vim buffer python venv decorator meeting budget release search index "
         "note folder shell script backup server deploy docker image cache token prompt").split()


def load_old_context(folder: Path):
    """context.py of OLD_COMMIT as a module, importing the config.py of the same commit."""
    for name in ("context.py", "config.py"):
        blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:{name}"],
                              capture_output=True, check=True).stdout
        (folder / name).write_bytes(blob)
    saved_config = sys.modules.pop("config", None)
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("old_context", folder / "context.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("config", None)
        if saved_config:
            sys.modules["config"] = saved_config
    return module


def note(rng: random.Random, i: int, chars: int = 3000) -> str:
    lines = [f"# Note {i}: {rng.choice(WORDS)} {rng.choice(WORDS)}", ""]
    while sum(map(len, lines)) < chars:
        lines.append(f"- {' '.join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))}.")
    return "\n".join(lines)[:chars]


def call(turn: int, name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": "", "reasoning_content": f"I should use {name}. " * 5,
            "tool_calls": [{"id": f"call_{turn}_{name}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def conversation(turns: int):
    """Yields the stored history at each moment a request goes out."""
    rng, history = random.Random(7), [SYSTEM]
    for i in range(turns):
        history.append({"role": "user", "content": f"Question {i}: what do my notes say about {rng.choice(WORDS)}?"})
        yield history
        history.append(call(i, "search_notes", {"query": rng.choice(WORDS)}))
        hits = "\n".join(f"notes/n{rng.randint(0, 999)}.md:{rng.randint(1, 80)}: {note(rng, i, 90)}" for _ in range(5))
        history.append({"role": "tool", "tool_call_id": f"call_{i}_search_notes", "content": hits})
        yield history
        history.append(call(i, "read_note", {"path": f"notes/n{i}.md"}))
        history.append({"role": "tool", "tool_call_id": f"call_{i}_read_note", "content": note(rng, i)})
        yield history
        history.append({"role": "assistant", "content": f"According to notes/n{i}.md: " + note(rng, i, 400),
                        "reasoning_content": "The note answers it. " * 10})


def valid(messages: list[dict]) -> bool:
    """Every tool call answered right after it, no orphan result, a user message first after the system."""
    pending, body = [], [m for m in messages if m["role"] != "system"]
    for m in body:
        if m["role"] == "tool":
            if m["tool_call_id"] not in pending:
                return False
            pending.remove(m["tool_call_id"])
        elif pending:
            return False
        else:
            pending = [c["id"] for c in m.get("tool_calls") or ()]
    return not pending and bool(body) and body[0]["role"] == "user"


def agent_tools() -> list[dict]:
    """The tool schemas the agent sends with every request (the note tools, shell off)."""
    import tools
    from config import Settings
    return tools.tool_schemas(Settings(None, "", "", ROOT))


def run(module, turns: int, budget: int, schemas: list | None = None) -> dict:
    """With `schemas`, requests are counted as the agent sends them: the tool schemas first (every chat
    template renders them before the messages), then the messages, fitted to the budget less the schemas."""
    seen: set[int] = set()  # hashes of every message-list prefix sent so far
    fixed = [json.dumps(schemas, ensure_ascii=False)] if schemas else []
    budget -= module.estimate_tokens([], schemas) if schemas else 0
    shares, sent, cached, over, invalid, fit_ms, dump_ms = [], 0, 0, 0, 0, [], []
    for history in conversation(turns):
        start = time.perf_counter()
        request = module.fit_to_budget(history, budget)
        fit_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        texts = fixed + [json.dumps(m, ensure_ascii=False) for m in request]
        dump_ms.append((time.perf_counter() - start) * 1000)
        key, hit, size, common = 0, True, 0, 0
        for text in texts:
            key = hash((key, text))
            size += len(text)
            hit = hit and key in seen
            common += len(text) if hit else 0
            seen.add(key)
        shares.append(common / size)
        sent, cached = sent + size, cached + common
        over += module.estimate_tokens(request) > budget
        invalid += not valid(request)
    half = shares[len(shares) // 2:]
    return {"requests": len(shares), "mean": sum(shares) / len(shares), "second_half": sum(half) / len(half),
            "weighted": cached / sent, "sent": sent, "over": over, "invalid": invalid,
            "fit_ms": sum(fit_ms) / len(fit_ms), "fit_max": max(fit_ms), "dump_ms": sum(dump_ms) / len(dump_ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--budget", type=int, default=8000)
    parser.add_argument("--as-sent", action="store_true",
                        help="count the tool schemas too, and take them off the budget, as the agent does")
    args = parser.parse_args()
    schemas = agent_tools() if args.as_sent else None
    with tempfile.TemporaryDirectory() as folder:
        old = load_old_context(Path(folder))
    before, after = run(old, args.turns, args.budget, schemas), run(context, args.turns, args.budget, schemas)
    how = "tool schemas + messages, as sent" if schemas else "messages only"
    print(f"{args.turns} turns, {after['requests']} requests, budget {args.budget:,} tokens ({how})")
    rows = [("cached share, mean per request", "mean", "{:.2f}"),
            ("cached share, second half", "second_half", "{:.2f}"),
            ("cached share of all chars sent", "weighted", "{:.2f}"),
            ("characters sent in total", "sent", "{:,}"),
            ("requests over budget", "over", "{}"), ("requests invalid", "invalid", "{}"),
            ("fit_to_budget per request, ms", "fit_ms", "{:.2f}"), ("  slowest, ms", "fit_max", "{:.2f}"),
            ("JSON encoding per request, ms", "dump_ms", "{:.2f}")]
    print(f"{'':<34}{'before':>12}{'after':>12}{'after/before':>14}")
    for label, key, form in rows:
        ratio = f"{after[key] / before[key]:.2f}" if before[key] else "-"
        print(f"{label:<34}{form.format(before[key]):>12}{form.format(after[key]):>12}{ratio:>14}")
    if after["over"] or after["invalid"]:
        sys.exit("FAILED: a request over budget or invalid")


if __name__ == "__main__":
    main()
