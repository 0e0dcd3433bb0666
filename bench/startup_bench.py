"""Benchmark: how long commands that need no model take to start, against `python -c "import openai"`.

Each command runs as a person runs it (a fresh process, a key set, the sample notes with a warm index), all of
them interleaved, N times; the least CPU time (user + system) of each is divided by the least `import openai`.
It is measured two ways: from the checkout with its __pycache__ (as any run without PYTHONDONTWRITEBYTECODE
leaves it), and without a bytecode cache (a copy of the checkout with no __pycache__, run with
PYTHONDONTWRITEBYTECODE=1, as a read-only checkout or many container images have it), where every module the
command imports is compiled again each run. `import openai` runs both ways with the same variables, but the SDK
is an installed package: its site-packages already hold its .pyc files, as they do for a person; so it costs
the same both ways, and the ratio without a cache shows what compiling our own modules costs. Goals (both
ways): --version and --help at most 0.15 of `import openai`, /search and the MCP server's tools/list at most
0.35. `--root` measures another checkout (e.g. an older commit, unpacked with `git archive`) with the same
Python. The settings, index and conversations live in a temp folder.
Usage: python bench/startup_bench.py [runs, default 10] [--root CHECKOUT]
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GOALS = {"--version": 0.15, "--help": 0.15, "/search decorator": 0.35, "mcp_server.py tools/list": 0.35}
BASELINE = 'python -c "import openai"'
TOOLS_LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", ".venv", "tests", "bench", "static")


def commands(root: Path, notes: str) -> dict[str, tuple[list, bytes]]:
    """Each measured command: its arguments after the Python, and its stdin."""
    main, mcp = str(root / "main.py"), str(root / "mcp_server.py")
    return {
        BASELINE: (["-c", "import openai"], b""),
        'python -c "pass"': (["-c", "pass"], b""),
        "--version": ([main, "--version"], b""),
        "--help": ([main, "--help"], b""),
        "/search decorator": ([main, "/search decorator"], b""),
        "/list": ([main, "/list"], b""),
        "--list-sessions": ([main, "--list-sessions"], b""),
        "mcp_server.py tools/list": ([mcp, "--kb", notes], TOOLS_LIST),
    }


def cpu_seconds(arguments: list, stdin: bytes, env: dict) -> float:
    """User + system CPU time of one run of the command (its threads and children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *arguments], input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def ways(root: Path, copy: Path, env: dict) -> dict[str, tuple[Path, dict]]:
    """The two ways a checkout runs: with its bytecode cache, and a copy with none that writes none."""
    shutil.copytree(root, copy, ignore=NOT_COPIED)
    with_cache = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    return {"with .pyc": (root, with_cache), "without .pyc": (copy, env | {"PYTHONDONTWRITEBYTECODE": "1"})}


def report(way: str, best: dict[str, float]) -> None:
    baseline = best[BASELINE]
    print(f"\n{way}\n{'command':<28} {'CPU ms':>7} {'× import openai':>16}  goal")
    for name, value in best.items():
        goal = f"≤ {GOALS[name]:.2f} {'ok' if value / baseline <= GOALS[name] else 'MISSED'}" if name in GOALS else ""
        print(f"{name:<28} {value * 1000:7.1f} {value / baseline:16.2f}  {goal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=10)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    root = args.root.resolve()
    notes = str(root / "knowledge_base")
    with tempfile.TemporaryDirectory() as home:
        env = {name: value for name, value in os.environ.items() if "API_KEY" not in name and "BASE_URL" not in name}
        env |= {f"XDG_{kind}_HOME": str(Path(home) / kind.lower()) for kind in ("CACHE", "DATA", "CONFIG", "STATE")}
        env |= {"DEEPSEEK_API_KEY": "sk-unused", "KNOWLEDGE_BASE": notes}
        measured = {way: (commands(checkout, notes), way_env)
                    for way, (checkout, way_env) in ways(root, Path(home) / "checkout", env).items()}
        for way_commands, way_env in measured.values():  # warm: the index is built, .pyc files are written
            for arguments, stdin in way_commands.values():
                cpu_seconds(arguments, stdin, way_env)
        best = {way: dict.fromkeys(way_commands, float("inf")) for way, (way_commands, _) in measured.items()}
        for _ in range(args.runs):
            for way, (way_commands, way_env) in measured.items():
                for name, (arguments, stdin) in way_commands.items():
                    best[way][name] = min(best[way][name], cpu_seconds(arguments, stdin, way_env))
    print(f"{root}, Python {sys.version.split()[0]}, least CPU time of {args.runs} runs each, interleaved")
    for way, figures in best.items():
        report(way, figures)


if __name__ == "__main__":
    main()
