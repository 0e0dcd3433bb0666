"""Benchmark for the link graph on the real corpora: what the link index adds to the real index build, and how
long the move of a vault's most-linked note takes through the real move_note tool.

    python bench/links_bench.py [--corpus-dir /work/shared/corpus]

Unpacks knowledge-garden.tar.gz (an Obsidian vault, 3,176 notes) and tldr-kb.tar.gz (8,960 tldr pages) into a
temporary folder. For each, the search index is built from a cold index file (a new Notebook), once as the app
builds it (with each note's links.rows) and once with links.rows answering nothing, REPEATS times each, medians
compared: ratio = (with links - without) / without, what the link index costs beside the search index; the goal
is at most 1.

Then knowledge-garden's most-linked notes (most inbound links; most linking notes) are each renamed into another
folder through tools.execute_tool("move_note") as `--yes` runs it (links rewritten, every file written, one undo
entry), with the index open in the process (as after a search) and with it only on disk (a new process's first
move), against the 1 s budget. links.resolve_all checks that every link still means what it meant, and /undo
that every byte is back. Last, texts built to make a link scanner backtrack are timed against ordinary text of
the same size.
"""

import argparse
import hashlib
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import links  # noqa: E402
import tools  # noqa: E402
from config import Settings  # noqa: E402
from notebook import Notebook  # noqa: E402

MOVE_BUDGET_S = 1.0
REPEATS = 5  # each timing is the median of this many runs


def unpack(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return next(p for p in dest.iterdir() if p.is_dir()).resolve()


def vault_files(kb: Path) -> dict:
    """Every file but hidden ones (as index.py skips them): path -> text for notes and canvases, None for the rest."""
    files = {}
    for p in sorted(kb.rglob("*")):
        parts = p.relative_to(kb).parts
        if p.is_file() and not any(s.startswith(".") and not s.startswith("..") for s in parts):
            files["/".join(parts)] = p.read_text(encoding="utf-8", errors="replace") if p.suffix in (".md", ".canvas") \
                else None
    return files


def hashes(kb: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in kb.rglob("*")
            if p.is_file() and ".history" not in p.parts}


def median_s(action) -> tuple:
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def build_s(kb: Path, index_dir: Path, store_links: bool) -> float:
    """The time of one whole index build from a cold index file, storing each note's links or none."""
    shutil.rmtree(index_dir, ignore_errors=True)
    rows, links.rows = links.rows, links.rows if store_links else lambda text, path: []
    try:
        start = time.perf_counter()
        with Notebook(Settings(kb=kb, index_dir=index_dir, search_watch=False)) as notebook:
            notebook.with_index(lambda idx: None)
        return time.perf_counter() - start
    finally:
        links.rows = rows


def compare_with_search_index(name: str, kb: Path, work: Path) -> None:
    times = {False: [], True: []}
    for _ in range(REPEATS):  # alternated, so a machine busy for a while slows both alike
        for store_links in times:
            times[store_links].append(build_s(kb, work / "index", store_links))
    with Notebook(Settings(kb=kb, index_dir=work / "index", search_watch=False)) as notebook:
        stored = notebook.with_index(lambda idx: idx.conn.execute("SELECT count(*) FROM links").fetchone()[0])
    without, with_links = statistics.median(times[False]), statistics.median(times[True])
    print(f"{name}: {stored} links stored; index build {without * 1000:.0f} ms without links, "
          f"{with_links * 1000:.0f} ms with (medians of {REPEATS}); link index / search index "
          f"{(with_links - without) / without:.2f} (goal <= 1)")


def move_most_linked(kb: Path, work: Path) -> None:
    files = vault_files(kb)
    resolved = links.resolve_all(files)
    inbound, sources = {}, {}
    for (source, _), target in resolved.items():
        if target and target != source:
            inbound[target] = inbound.get(target, 0) + 1
            sources.setdefault(target, set()).add(source)
    notebook = Notebook(Settings(kb=kb, auto_approve=True, index_dir=work / "move-index"))
    for most in dict.fromkeys((max(inbound, key=inbound.get), max(sources, key=lambda t: len(sources[t])))):
        to_path = f"归档/{most.rsplit('/', 1)[-1][:-3]} 已移动.md"
        rename = {most: to_path}
        expected = {(rename.get(s, s), i): rename.get(t, t) for (s, i), t in resolved.items()}
        opened = lambda: notebook.with_index(lambda idx: None)  # noqa: E731
        text, open_s, kept = timed_moves(notebook, most, to_path, opened, expected)
        _, disk_s, kept_too = timed_moves(notebook, most, to_path, notebook.close, expected)
        declined = Notebook(Settings(kb=kb, index_dir=notebook.settings.index_dir))  # asked, answered no: planned
        _, plan_s = median_s(lambda: tools.execute_tool("move_note", {"from_path": most, "to_path": to_path},
                                                        declined, ask=lambda approval: False))
        print(f"move {most} ({inbound[most]} inbound links from {len(sources[most])} notes) -> {to_path} with "
              f"move_note --yes: {text.splitlines()[-1].split(' so that')[0]}; index open {open_s * 1000:.0f} ms, "
              f"index on disk {disk_s * 1000:.0f} ms (the plan alone {plan_s * 1000:.0f} ms, the rest writing); "
              f"ratio to the {MOVE_BUDGET_S:.0f} s budget {max(open_s, disk_s) / MOVE_BUDGET_S:.2f}; every link "
              f"means what it meant and undo restores every byte: {'yes' if kept and kept_too else 'NO'}")
    notebook.close()


def timed_moves(notebook: Notebook, from_path: str, to_path: str, before, expected: dict) -> tuple:
    """(the tool's last result, the median time of REPEATS moves, each after `before()` and undone, whether every
    link kept its meaning and every undo put every byte back)."""
    old, times, kept, text = hashes(notebook.kb), [], True, ""
    for _ in range(REPEATS):
        before()
        start = time.perf_counter()
        result = tools.execute_tool("move_note", {"from_path": from_path, "to_path": to_path}, notebook)
        times.append(time.perf_counter() - start)
        assert not result.error, result.text
        text = result.text
        kept = kept and links.resolve_all(vault_files(notebook.kb)) == expected
        message, undone = notebook.undo()
        kept = kept and undone and hashes(notebook.kb) == old
    return text, statistics.median(times), kept


def pathological_inputs() -> None:
    """Texts built to make a link scanner backtrack, against ordinary text of the same size (ratio near 1: linear)."""
    size = 200_000
    normal = ("Some text [[link]] and `code` and [md](x.md).\n" * size)[:size]
    _, normal_s = median_s(lambda: links.parse(normal, "n.md"))
    worst = {"[[ x N": "[[" * (size // 2), "[a x N": "[[x]]" + "[a" * (size // 2),
             "JSON [[1,2],...]": "[" + ",".join(f"[{i},{i}]" for i in range(size // 10)) + "]",
             "` runs of rising length": "".join("`" * i + "a" for i in range(1, 630)) + "\n\n[[x]]"}
    ratios = []
    for name, text in worst.items():
        _, seconds = median_s(lambda: links.parse(text[:size], "p.md"))
        ratios.append(f"{name} {seconds / normal_s:.2f}")
    print(f"pathological texts of {size:,} characters, parse time / ordinary text's ({normal_s * 1000:.0f} ms): "
          + ", ".join(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus-dir", type=Path, default=Path("/work/shared/corpus"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        garden = unpack(args.corpus_dir / "knowledge-garden.tar.gz", work / "garden")
        tldr = unpack(args.corpus_dir / "tldr-kb.tar.gz", work / "tldr")
        compare_with_search_index("knowledge-garden", garden, work)
        compare_with_search_index("tldr-kb", tldr, work)
        move_most_linked(garden, work)
    pathological_inputs()


if __name__ == "__main__":
    main()
