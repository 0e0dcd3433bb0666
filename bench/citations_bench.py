"""Benchmark: what checking an answer's citations costs as the conversation grows, the 1st answer against the
100th, in one run through run_agent (a scripted model, no server) with the conversation kept as main.py and the
page keep it (sessions.Conversation). Each turn searches, reads one of ten long notes (each over the read_note
limit) and answers citing it, as the 100-turn session test does. The figure is the CPU time of citations.check for
each answer (this thread's), the median over --repeat runs; the goal is a 100th answer that costs what the 1st does.

    python bench/citations_bench.py [--turns 100] [--repeat 3] [--project PATH]

--project runs another checkout's code, for the figure before (python bench/citations_bench.py --project /tmp/base).
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPICS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
NOTE_LINES = 300


def make_notes(folder: Path) -> None:
    for i, topic in enumerate(TOPICS):
        line = (f"- {topic} fact {{n}}: " + "the quick brown fox jumps over the lazy dog " * 2 if i % 3
                else f"- {topic} 事实 {{n}}：" + "敏捷的棕色狐狸跳过了懒狗，然后回家吃饭。" * 2)
        body = "\n".join(line.format(n=n) for n in range(NOTE_LINES))
        (folder / f"{topic}.md").write_text(f"# {topic} handbook\n\n{body}\n", encoding="utf-8")


def turn(n: int) -> list[dict]:
    """The model's replies in turn n: search, read a note, answer with three citations (one of a note not read)."""
    topic, other = TOPICS[n % len(TOPICS)], TOPICS[(n + 1) % len(TOPICS)]

    def call(name: str, **arguments) -> dict:
        return {"content": None, "tool_calls": [{"id": f"call_{n}_{name}", "type": "function",
                                                 "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    return [call("search_notes", query=f"{topic} fact"), call("read_note", file_path=f"{topic}.md"),
            {"content": f"According to your note ({topic}.md:3), {topic}.md:5-7 says so; {other}.md:2 too."}]


class Scripted:
    """Stands in for openai.OpenAI: the queued replies, each a whole completion."""

    def __init__(self, completion):
        self.chat = self.completions = self
        self.completion, self.replies = completion, []

    def create(self, **params):
        message = self.replies.pop(0)
        return self.completion.model_validate({
            "id": "bench", "object": "chat.completion", "created": 0, "model": params["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}]})


def run(turns: int, work: Path) -> list[int]:
    """Nanoseconds of CPU citations.check took for each answer of one conversation of `turns` questions."""
    import agent
    import citations
    import sessions
    from config import Settings
    from openai.types.chat import ChatCompletion

    kb = work / "notes"
    kb.mkdir()
    make_notes(kb)
    settings = Settings(api_key="bench", base_url="http://127.0.0.1:9/v1", model="bench", kb=kb, stream=False,
                        data_dir=work / "data", index_dir=work / "index", search_watch=False)
    conversation = sessions.Conversation(sessions.SessionStore(work / "data" / "sessions.db"), kb)
    costs, check = [], citations.check

    def timed(*args):
        start = time.thread_time_ns()
        report = check(*args)
        costs.append(time.thread_time_ns() - start)
        return report

    client = Scripted(ChatCompletion)
    citations.check = timed  # run_agent calls it through the module
    try:
        for n in range(turns):
            client.replies = turn(n)
            question = conversation.begin_turn(f"what do my notes say about {TOPICS[n % len(TOPICS)]}?")
            answer = agent.run_agent(question, conversation.history, settings, client, agent.UI())
            conversation.end_turn()
            assert answer.citations.checks and answer.citations.checks[0].problem == "", answer.citations
    finally:
        citations.check = check
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--project", type=Path, default=ROOT, help="the checkout whose code runs (default: this one)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.project.resolve()))
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="ka-citations-bench-") as work:
            runs.append(run(args.turns, Path(work)))
    per_answer = [statistics.median(costs) / 1e6 for costs in zip(*runs)]  # ms, each answer's median
    first, last = per_answer[0], per_answer[-1]
    print(f"citations.check, CPU ms (median of {args.repeat} runs), code at {args.project.resolve()}")
    print(f"  answer 1: {first:.3f}   answer {args.turns}: {last:.3f}   ratio {last / first:.2f}")
    tenth = max(1, args.turns // 10)
    print(f"  first {tenth} answers: {statistics.median(per_answer[:tenth]):.3f} median   "
          f"last {tenth}: {statistics.median(per_answer[-tenth:]):.3f} median   "
          f"all {args.turns}: {sum(per_answer):.1f} in all")


if __name__ == "__main__":
    main()
