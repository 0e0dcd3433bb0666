"""Benchmark for shell.run_shell against the obvious baseline, subprocess.run(capture_output, timeout).

Prints, for the same commands in the same run:
- peak memory (RSS) while a command prints a lot: run_shell keeps a head and a tail, the baseline
  keeps everything;
- how long a timed-out command with a background child takes to come back, and whether the child
  survives: subprocess.run kills only the shell, then waits for the child to close the pipe.

Each measurement runs in a fresh Python process so peak memory is not shared. POSIX only.
Usage: python bench/bench_shell.py [megabytes of output, default 300]
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, resource, subprocess, sys, time
sys.path.insert(0, {root!r})
import shell
mode, command, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
started = time.monotonic()
if mode == "run_shell":
    result = shell.run_shell(command, ".", timeout=timeout)
else:
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=timeout)
        result = done.stdout[-200:].decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        result = "timeout"
elapsed = time.monotonic() - started
print(json.dumps({{"seconds": elapsed, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def measure(mode: str, command: str, timeout: float) -> dict:
    code = CHILD.format(root=ROOT)
    out = subprocess.run([sys.executable, "-c", code, mode, command, str(timeout)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def alive(pid: int) -> bool:
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
    return bool(state.strip()) and not state.strip().startswith("Z")


def main():
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    flood = f"head -c {megabytes * 1_000_000} /dev/zero | tr '\\0' a"
    print(f"1) a command printing {megabytes} MB")
    base = measure("subprocess.run", flood, 600)
    ours = measure("run_shell", flood, 600)
    print(f"   subprocess.run : peak {base['peak_mb']:8.1f} MB  {base['seconds']:6.2f} s")
    print(f"   run_shell      : peak {ours['peak_mb']:8.1f} MB  {ours['seconds']:6.2f} s")
    print(f"   memory ratio baseline/run_shell: {base['peak_mb'] / ours['peak_mb']:.1f}x")

    print("2) timeout 0.5 s on `sleep 5 & sleep 5` (a background child holds the output pipe)")
    for mode in ("subprocess.run", "run_shell"):
        marker = f"/tmp/bench_shell_{os.getpid()}_{mode}"
        command = f"sleep 5 & echo $! > {marker}; sleep 5"
        result = measure(mode, command, 0.5)
        with open(marker) as f:
            child = int(f.read())
        os.remove(marker)
        print(f"   {mode:15}: back after {result['seconds']:5.2f} s, background child "
              f"{'STILL RUNNING' if alive(child) else 'gone'}")
        if alive(child):
            os.kill(child, 15)  # tidy up after the baseline


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"(bench took {time.monotonic() - started:.1f} s)")
