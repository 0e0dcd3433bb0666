"""Benchmark: what the sandbox and the careful runner cost, against plain subprocess.run.

Prints, for the same trivial command in the same run, the median time of shell.run_shell (sandboxed
where the sandbox is available; each command has a warden process) and of subprocess.run(["bash", "-c",
...], capture_output=True), and their ratio; then the same for a command printing a lot, with the peak
memory of each in a fresh Python process (run_shell keeps a head and a tail, subprocess.run keeps
everything); then, in a vault of about 3,000 notes (the knowledge-garden corpus when it is there, else
made up) with 50 private notes spread around (.kaignore names them), what building the Landlock rules costs:
the rules alone, and run_shell with nothing unreadable and with what the bash tool hands it, the notebook's
list (Notebook.unreadable, from its warm index: the walk that finds them is the index's). POSIX only.
Usage: python bench/bench_shell.py [runs, default 50] [megabytes of output, default 200]
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import shell  # noqa: E402
import warden  # noqa: E402
from config import Settings  # noqa: E402
from notebook import Notebook  # noqa: E402

TRIVIAL = "echo hello; wc -l < /etc/hostname"
CORPUS = Path(os.environ.get("KA_CORPUS", Path(ROOT).parent / "shared" / "corpus")) / "knowledge-garden.tar.gz"
PRIVATE = 50  # notes marked private, spread evenly over the vault

CHILD = r"""
import json, resource, subprocess, sys, time
sys.path.insert(0, {root!r})
import shell
mode, command, folder = sys.argv[1:4]
started = time.monotonic()
if mode == "run_shell":
    shell.run_shell(command, folder, timeout=600)
else:
    subprocess.run(["bash", "-c", command], cwd=folder, capture_output=True, timeout=600)
print(json.dumps({{"seconds": time.monotonic() - started,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def median_seconds(run, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def in_fresh_process(mode: str, command: str, folder: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT), mode, command, folder],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def vault(folder: Path) -> list[str]:
    """The notes of a vault of about 3,000 notes unpacked or made in folder, relative to it, sorted."""
    if CORPUS.exists():
        with tarfile.open(CORPUS) as tar:
            tar.extractall(folder, filter="data")
    else:
        for i in range(3000):
            note = folder / f"area{i % 12}" / f"topic{i % 120}" / f"note{i}.md"
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(f"# note {i}\n")
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.md"))


def private_rules(runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        notes = vault(Path(folder))
        private = tuple(notes[i * len(notes) // PRIVATE] for i in range(PRIVATE))
        print(f"3) {len(notes):,} notes ({'knowledge-garden' if CORPUS.exists() else 'made up'}), "
              f"{PRIVATE} of them private, median of {runs} runs")
        if shell.sandbox_problem():
            print("   (no sandbox here: no rules to build)")
            return
        orders = {"network": False, "scratch": folder, "kb": folder, "pythons": [sys.base_prefix, sys.prefix]}
        rules, add = [], warden._allow
        warden._allow = lambda ruleset, fd, access: (rules.append(access), add(ruleset, fd, access))
        try:
            for label, chosen in (("none private", ()), (f"{PRIVATE} private", private)):
                rules.clear()
                seconds = median_seconds(lambda: os.close(warden._ruleset({**orders, "private": chosen})), runs)
                print(f"   rules, {label:12}: {seconds * 1000:7.2f} ms for {len(rules) // runs:,} rules")
        finally:
            warden._allow = add
        (Path(folder) / ".kaignore").write_text("".join("/" + re.sub(r"([][*?\\!#])", r"\\\1", path) + "\n"
                                                        for path in private))
        with tempfile.TemporaryDirectory() as index_dir, \
                Notebook(Settings(None, "", "", Path(folder).resolve(), index_dir=Path(index_dir))) as notebook:
            listed = notebook.unreadable()  # builds the index and starts watching, as the chat's first search does
            plain = median_seconds(lambda: shell.run_shell("true", Path(folder), timeout=30), runs)
            lists = median_seconds(notebook.unreadable, runs)
            hidden = median_seconds(lambda: shell.run_shell("true", Path(folder), timeout=30,
                                                            unreadable=tuple(notebook.unreadable())), runs)
        print(f"   run_shell, nothing unreadable      : {plain * 1000:7.2f} ms")
        print(f"   Notebook.unreadable alone          : {lists * 1000:7.2f} ms ({len(listed)} paths)")
        print(f"   run_shell, the notebook's list     : {hidden * 1000:7.2f} ms")
        print(f"   ratio private/none: {hidden / plain:.2f}x")


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    megabytes = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    print(f"sandbox: {shell.sandbox_problem() or 'Landlock, no capabilities and seccomp, on every command'}")
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "note.md").write_text("# a note\n")
        ours = median_seconds(lambda: shell.run_shell(TRIVIAL, Path(folder), timeout=30), runs)
        base = median_seconds(lambda: subprocess.run(["bash", "-c", TRIVIAL], cwd=folder, capture_output=True),
                              runs)
        print(f"1) `{TRIVIAL}`, median of {runs} runs")
        print(f"   subprocess.run : {base * 1000:7.2f} ms")
        print(f"   run_shell      : {ours * 1000:7.2f} ms")
        print(f"   ratio run_shell/subprocess.run: {ours / base:.2f}x")

        flood = f"head -c {megabytes * 1_000_000} /dev/zero | tr '\\0' a"
        print(f"2) a command printing {megabytes} MB, each in a fresh Python process")
        base = in_fresh_process("subprocess.run", flood, folder)
        ours = in_fresh_process("run_shell", flood, folder)
        print(f"   subprocess.run : peak {base['peak_mb']:8.1f} MB  {base['seconds']:6.2f} s")
        print(f"   run_shell      : peak {ours['peak_mb']:8.1f} MB  {ours['seconds']:6.2f} s")
        print(f"   memory ratio subprocess.run/run_shell: {base['peak_mb'] / ours['peak_mb']:.1f}x")
    private_rules(runs)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"(bench took {time.monotonic() - started:.1f} s)")
