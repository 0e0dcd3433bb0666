"""Benchmark, end to end: a long piped session through main.py against the fake server that enforces a
context window, as the "100-turn session with big notes" test does, with the figures printed.

Each turn searches, reads one of ten long notes (English and Chinese, each over the read_note limit) and
answers, so every turn adds ~8,000 characters of tool output. Prints the largest request the server saw
against its window and how many requests it refused, next to the size of the whole conversation (the
baseline: what an untrimmed request would be), and the same run with CONTEXT_TOKENS far above the window
(a model smaller than configured), which costs one refusal before the agent learns the window.

    python bench/long_session_bench.py [--turns 100] [--window 8000] [--budget 7000]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
import fake_server  # noqa: E402
from sessions import SessionStore  # noqa: E402

TOPICS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def make_notes(folder: Path, lines: int) -> None:
    for i, topic in enumerate(TOPICS):
        line = (f"- {topic} fact {{n}}: " + "the quick brown fox jumps over the lazy dog " * 2 if i % 3
                else f"- {topic} 事实 {{n}}：" + "敏捷的棕色狐狸跳过了懒狗，然后回家吃饭。" * 2)
        body = "\n".join(line.format(n=n) for n in range(lines))
        (folder / f"{topic}.md").write_text(f"# {topic} handbook\n\n{body}\n", encoding="utf-8")


def cached_share(measured: list[dict], every: list[dict]) -> tuple[float, float]:
    """Of the `measured` requests (as the server received them: tool schemas, then messages), the share that
    repeats the start of an earlier request (what prompt caching bills cheaply): of all their characters, and
    the mean of each request's own share."""
    seen, cached, size, shares = set(), 0, 0, []
    for request in every:
        texts = [json.dumps(request.get("tools"), ensure_ascii=False)] + [
            json.dumps(m, ensure_ascii=False, sort_keys=True) for m in request["messages"]]
        key, hit, common = 0, True, 0
        for text in texts:
            key = hash((key, text))
            hit = hit and key in seen
            seen.add(key)
            common += len(text) if hit else 0
        if any(request is r for r in measured):
            total = sum(map(len, texts))
            size, cached = size + total, cached + common
            shares.append(common / total)
    return cached / max(size, 1), sum(shares) / max(len(shares), 1)


def run(turns: int, window: int, budget: int, notes: Path, data: Path) -> dict:
    questions = "".join(f"find {TOPICS[i % len(TOPICS)]} notes\n" for i in range(turns))
    with fake_server.FakeLLM(context_limit=window) as fake:
        env = {**os.environ, "DEEPSEEK_API_KEY": "x", "DEEPSEEK_BASE_URL": fake.base_url,
               "KNOWLEDGE_BASE": str(notes), "CONTEXT_TOKENS": str(budget), "KA_DATA_DIR": str(data),
               "PYTHONIOENCODING": "utf-8"}
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(ROOT / "main.py"), "-v"], input=questions, env=env,
                                capture_output=True, text=True, encoding="utf-8")
        seconds = time.perf_counter() - start
        answered = result.stdout.count("According to your note")
        carried = [sum(m["role"] == "user" for m in r["messages"]) for r in fake.requests]
        store = SessionStore(data / "sessions.db")
        whole = store.load_messages(store.latest_session_id())
        store.conn.close()
        return {"answered": answered, "requests": len(fake.requests), "rejected": fake.rejected,
                "cached": cached_share(fake.requests[len(fake.requests) // 2:], fake.requests),
                "largest": fake.max_prompt_tokens, "seconds": seconds,
                "carried": sum(carried) / max(len(carried), 1), "code": result.returncode,
                "whole": fake_server.prompt_tokens({"messages": whole, "tools": fake.requests[-1].get("tools")})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--window", type=int, default=8000, help="the fake server's context window (its tokens)")
    parser.add_argument("--budget", type=int, default=7000, help="CONTEXT_TOKENS for the run")
    parser.add_argument("--note-lines", type=int, default=300, help="lines per note (30: a ~3,000-character read)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        notes = Path(folder) / "notes"
        notes.mkdir()
        make_notes(notes, args.note_lines)
        for label, budget in (("fitted", args.budget), ("too big", 10_000_000)):
            r = run(args.turns, args.window, budget, notes, Path(folder) / label)
            print(f"{label:<8} whole conversation {r['whole']:,} tokens ({r['whole'] / args.window:.0f}x the window)")
            print(f"{label:<8} CONTEXT_TOKENS={budget:<9,} answered {r['answered']}/{args.turns}, "
                  f"{r['requests']} requests, {r['rejected']} refused as too long, largest request "
                  f"{r['largest']:,} of {args.window:,} ({r['largest'] / args.window:.2f}x), "
                  f"{r['carried']:.1f} turns carried on average, {r['seconds']:.1f} s; "
                  f"cached share over the second half {r['cached'][0]:.2f} of all characters, "
                  f"{r['cached'][1]:.2f} per request")


if __name__ == "__main__":
    main()
