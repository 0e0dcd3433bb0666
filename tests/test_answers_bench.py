"""The answer bench (bench/answers.py) run against the fake server with a scripted model: a right answer is
scored right, a wrong one wrong, requests and tokens are the server's; a write is checked on disk."""

import importlib.util
import json
from pathlib import Path

import fake_server

ROOT = Path(__file__).resolve().parent.parent
EGGS = "How many eggs do I need for the tomato and egg stir-fry?"
QUIT = "how do I quit vim without saving"
RIGHT = "Beat 3 eggs with a pinch of salt (recipes.md:4)."
WRONG = "Type :wq to quit without saving (vim.md:17)."  # the note says :q!, and vim.md was never read
QUESTIONS = [
    {"id": "eggs", "set": "sample", "lang": "en", "kind": "fact", "question": EGGS,
     "expect": [["3 egg", "three egg"]], "sources": ["recipes.md:4"]},
    {"id": "quit", "set": "sample", "lang": "en", "kind": "fact", "question": QUIT,
     "expect": [[":q!"]], "sources": ["vim.md:17"]},
]


def load_bench():
    spec = importlib.util.spec_from_file_location("answers_bench", ROOT / "bench" / "answers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scripted_model(request: dict) -> dict:
    """Reads recipes.md, then answers: right about eggs, wrong about vim."""
    messages = request["messages"]
    if messages[-1]["role"] == "user":
        return {"tool_calls": [{"name": "read_note", "arguments": json.dumps({"file_path": "recipes.md"})}]}
    question = next(m["content"] for m in messages if m["role"] == "user")
    return {"content": {EGGS: RIGHT, QUIT: WRONG}[question]}


def test_the_bench_scores_answers_and_counts_what_the_server_counted(tmp_path, capsys):
    bench = load_bench()
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps({"questions": QUESTIONS}), encoding="utf-8")
    raw = tmp_path / "raw.jsonl"
    with fake_server.FakeLLM(responder=scripted_model) as fake:
        results = bench.bench(bench.parse(["--base-url", fake.base_url, "--questions", str(questions),
                                           "--raw", str(raw)]))
    by_id = {result["id"]: result for result in results}
    eggs, quit_ = by_id["eggs"], by_id["quit"]

    assert (eggs["correct"], eggs["citations_valid"], eggs["not_shown"]) == (True, True, 0)
    assert (quit_["correct"], quit_["citations_valid"], quit_["not_shown"]) == (False, False, 1)
    assert not any(result["no_tool_call"] for result in results)

    # Two requests per question, and the tokens the fake server reported for them, in the order they came.
    assert [result["requests"] for result in results] == [2, 2]
    sent = [fake_server.prompt_tokens(request) for request in fake.requests]
    assert [result["prompt_tokens"] for result in results] == [sent[0] + sent[1], sent[2] + sent[3]]
    assert eggs["completion_tokens"] == 1 + len(RIGHT) // 4 + 1  # the call (no text), then the answer

    printed = capsys.readouterr().out
    assert "correct: 1/2" in printed
    assert "cites a line it was not shown: 1 answers (1 citations)" in printed
    assert f"prompt tokens: {sum(sent):,}" in printed
    assert [json.loads(line)["id"] for line in raw.read_text(encoding="utf-8").splitlines()] == ["eggs", "quit"]
    again = bench.rescore(bench.parse(["--rescore", str(raw), "--questions", str(questions)]))
    assert [(r["correct"], r["shown_source"]) for r in again] == [(True, True), (False, False)]


def test_a_question_the_notes_do_not_answer_is_right_only_when_the_answer_says_so():
    bench = load_bench()
    question = {"id": "tomatoes", "kind": "not_covered", "expect": []}
    record = {"tool_calls": [], "exchanges": [], "checks": []}
    said = [("Your notes don't say how often to water tomatoes.", True), ("笔记里没有提到浇水。", True),
            ("我没有找到相关的笔记。", True), ("Water them every two days.", False), ("每两天浇一次水。", False)]
    assert [bench.score(question, {**record, "answer": answer})["correct"] for answer, _ in said] == \
        [right for _, right in said]


def test_a_write_is_right_when_the_note_holds_the_text_and_no_other_note_changed():
    bench = load_bench()
    question = {"id": "shop", "kind": "write", "expect": [], "writes": {"note": "shopping.md",
                                                                       "contains": [["eggs"], ["milk"]]}}
    record = {"tool_calls": [{"name": "write_note"}], "exchanges": [], "checks": [], "answer": "Done.",
              "changed": [], "created": ["lists/shopping.md"], "removed": [],
              "written": {"lists/shopping.md": "# Shopping\n\n- eggs\n- milk\n"}}
    assert bench.score(question, record)["correct"]
    assert not bench.score(question, {**record, "written": {"lists/shopping.md": "# Shopping\n\n- eggs\n"}})["correct"]
    clobbered = {**record, "changed": ["recipes.md"], "written": {**record["written"], "recipes.md": "gone"}}
    assert not bench.score(question, clobbered)["correct"]
    assert not bench.score(question, {**record, "removed": ["vim.md"]})["correct"]
