"""Benchmark: how long commands that need no model take to start, against `python -c "import openai"`.

Each command runs as a person runs it (a fresh process, a key set, the sample notes with a warm index), all of
them interleaved, N times; the fastest run of each is divided by the fastest `import openai`. Goals: --version
at most 0.25 of it, /search at most 0.40. `--root` measures another checkout (e.g. an older commit, unpacked
with `git archive`) with the same Python. The settings, index and conversations live in a temp folder; the checkout gets its
__pycache__, as any run without PYTHONDONTWRITEBYTECODE does.
Usage: python bench/startup_bench.py [runs, default 10] [--root CHECKOUT]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"--version": 0.25, "/search decorator": 0.40}
TOOLS_LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'


def commands(root: Path) -> dict[str, tuple[list, bytes]]:
    """Each measured command: its arguments after the Python, and its stdin."""
    notes = str(root / "knowledge_base")
    main, mcp = str(root / "main.py"), str(root / "mcp_server.py")
    return {
        'python -c "import openai"': (["-c", "import openai"], b""),
        'python -c "pass"': (["-c", "pass"], b""),
        "--version": ([main, "--version"], b""),
        "/search decorator": ([main, "/search decorator"], b""),
        "/list": ([main, "/list"], b""),
        "--list-sessions": ([main, "--list-sessions"], b""),
        "mcp_server.py tools/list": ([mcp, "--kb", notes], TOOLS_LIST),
    }


def seconds(arguments: list, stdin: bytes, env: dict) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, *arguments], input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=10)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    root = args.root.resolve()
    with tempfile.TemporaryDirectory() as home:
        env = {name: value for name, value in os.environ.items()  # .pyc files written, as a person's Python does
               if "API_KEY" not in name and "BASE_URL" not in name and name != "PYTHONDONTWRITEBYTECODE"}
        env |= {f"XDG_{kind}_HOME": str(Path(home) / kind.lower()) for kind in ("CACHE", "DATA", "CONFIG", "STATE")}
        env |= {"DEEPSEEK_API_KEY": "sk-unused", "KNOWLEDGE_BASE": str(root / "knowledge_base")}
        measured = commands(root)
        for arguments, stdin in measured.values():  # warm: the index is built, .pyc files are written
            seconds(arguments, stdin, env)
        best = {name: float("inf") for name in measured}
        for _ in range(args.runs):
            for name, (arguments, stdin) in measured.items():
                best[name] = min(best[name], seconds(arguments, stdin, env))
    baseline = best['python -c "import openai"']
    print(f"{root}, Python {sys.version.split()[0]}, fastest of {args.runs} runs each, interleaved")
    print(f"{'command':<28} {'ms':>7} {'× import openai':>16}  goal")
    for name, value in best.items():
        goal = f"≤ {GOALS[name]:.2f} {'ok' if value / baseline <= GOALS[name] else 'MISSED'}" if name in GOALS else ""
        print(f"{name:<28} {value * 1000:7.1f} {value / baseline:16.2f}  {goal}")


if __name__ == "__main__":
    main()
