"""Benchmark: the CPU time of a cold index build (the first search of a notes folder with no index yet).

    python bench/build_bench.py                          # this checkout, both corpora, 1x and 10x, 5 runs
    python bench/build_bench.py 7 --root /tmp/old --root . --scales 1 --corpus /tmp/corpus/kb

Each build runs in a fresh process, as a person's first search does: the checkout's search.search_notes on a
folder whose index file does not exist, timed with time.process_time around that call alone (imports excluded).
Every checkout (--root, repeatable: an older commit checked out with `git worktree add`) builds every corpus
at every scale in turn, N times, interleaved, so a busy machine slows them all alike; it prints the least and
the median. A corpus is a folder of notes or a .tar.gz of one (default: the tldr pages and the knowledge-garden
vault from KA_CORPUS, else ../shared/corpus beside the project); 10x is ten copies of it in c0/ … c9/.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = Path(os.environ.get("KA_CORPUS", ROOT.parent / "shared" / "corpus"))
DEFAULT_CORPORA = [CORPUS_DIR / "tldr-kb.tar.gz", CORPUS_DIR / "knowledge-garden.tar.gz"]
# Run in the checkout measured; before Dec 1 search_notes found its index folder in XDG_CACHE_HOME itself, and
# since the Notebook it takes the notes folder's handle.
DRIVER = """
import inspect, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import search
kb, index_dir = Path(sys.argv[2]), Path(sys.argv[3])
parameters = inspect.signature(search.search_notes).parameters
if "notebook" in parameters:
    from config import Settings
    from notebook import Notebook
    notebook = Notebook(Settings(None, "", "", kb, index_dir=index_dir))
    first = lambda: search.search_notes(notebook, "warm up")
else:
    first = (lambda: search.search_notes(kb, index_dir, "warm up")) if "index_dir" in parameters else (
        lambda: search.search_notes(kb, "warm up"))
started = time.process_time()
first()
print(time.process_time() - started)
"""


def notes_folder(corpus: Path, into: Path) -> Path:
    """The corpus as a folder: itself, or its archive unpacked into `into` (the one folder it holds)."""
    if corpus.is_dir():
        return corpus
    with tarfile.open(corpus) as tar:
        tar.extractall(into, filter="data")
    unpacked = [path for path in into.iterdir() if path.is_dir()]
    return unpacked[0] if len(unpacked) == 1 else into


def scaled(kb: Path, scale: int, into: Path) -> Path:
    if scale == 1:
        return kb
    for copy in range(scale):
        shutil.copytree(kb, into / f"c{copy}", symlinks=True)
    return into


def build_seconds(root: Path, kb: Path, index_dir: Path) -> float:
    """The CPU seconds of one cold build of `kb` by the checkout at `root`."""
    shutil.rmtree(index_dir, ignore_errors=True)
    index_dir.mkdir()
    env = os.environ | {"XDG_CACHE_HOME": str(index_dir), "KA_INDEX_DIR": str(index_dir)}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(root), str(kb), str(index_dir)], env=env, cwd=root,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=5)
    parser.add_argument("--root", type=Path, action="append", help="a checkout to measure (default: this one)")
    parser.add_argument("--corpus", type=Path, action="append", help="a notes folder or a .tar.gz of one")
    parser.add_argument("--scales", default="1,10", help="copies of each corpus, e.g. 1,10")
    args = parser.parse_args()
    roots = [root.resolve() for root in args.root or [ROOT]]
    corpora, scales = args.corpus or DEFAULT_CORPORA, [int(scale) for scale in args.scales.split(",")]
    with tempfile.TemporaryDirectory(prefix="build-bench-") as tmp:
        folders = {corpus: notes_folder(corpus, Path(tmp, f"corpus{n}")) for n, corpus in enumerate(corpora)}
        cases = [(corpus, scale, scaled(folders[corpus], scale, Path(tmp, f"corpus{n}-{scale}x")))
                 for n, corpus in enumerate(corpora) for scale in scales]
        seconds = {(corpus, scale, root): [] for corpus, scale, _ in cases for root in roots}
        for _ in range(args.runs):
            for corpus, scale, kb in cases:
                for root in roots:
                    seconds[corpus, scale, root].append(build_seconds(root, kb, Path(tmp, "index")))
    print(f"cold index build, CPU seconds, {args.runs} runs each, interleaved; Python {sys.version.split()[0]}")
    print(f"{'corpus':<26} {'scale':>5}  {'least':>6} {'median':>6}  checkout")
    for (corpus, scale, root), values in seconds.items():
        print(f"{corpus.name:<26} {scale:>4}x  {min(values):6.2f} {statistics.median(values):6.2f}  {root}")


if __name__ == "__main__":
    main()
