"""Benchmark: what the sandbox and the careful runner cost, against plain subprocess.run.

Prints, for the same trivial command in the same run, the median time of shell.run_shell (sandboxed
where Landlock is available) and of subprocess.run(["bash", "-c", ...], capture_output=True), and
their ratio; then the same for a command printing a lot, with the peak memory of each in a fresh
Python process (run_shell keeps a head and a tail, subprocess.run keeps everything). POSIX only.
Usage: python bench/bench_shell.py [runs, default 50] [megabytes of output, default 200]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import shell  # noqa: E402

TRIVIAL = "echo hello; wc -l < /etc/hostname"

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


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    megabytes = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    print(f"sandbox: {shell.sandbox_problem() or 'Landlock, applied to every command'}")
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


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"(bench took {time.monotonic() - started:.1f} s)")
