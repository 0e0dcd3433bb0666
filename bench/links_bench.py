"""Benchmark for links.py on the real corpora: what a link index costs beside the search index, and how long
planning the move of a vault's most-linked note takes.

    python bench/links_bench.py [--corpus-dir /work/shared/corpus]

Unpacks knowledge-garden.tar.gz (an Obsidian vault, 3,176 notes) and tldr-kb.tar.gz (8,960 tldr pages) into a
temporary folder. For each, the baseline is the search index built from a cold index file
(index.with_index(kb, tmpdir, False, ...)), which reads every note. The link index is links.rows() of every
note plus the resolution of every row against a Resolver of all the vault's paths, on texts already read (the
search index reads them anyway: the link rows are made from the same text). Ratio = link index / search index;
the goal is at most 1.

Then knowledge-garden's most-linked note (most inbound links) is renamed into another folder: links.plan_move
with every text of the vault (the worst case) and with only the texts move_keys() asks for (what the app can
do with the stored rows), against the 1 s budget; resolve_all checks that every link still means what it meant.
Last, texts built to make a link scanner backtrack are timed against ordinary text of the same size.
"""

import argparse
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import index  # noqa: E402
import links  # noqa: E402

MOVE_BUDGET_S = 1.0
REPEATS = 3  # the link timings take the median of this many runs


def unpack(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return next(p for p in dest.iterdir() if p.is_dir())


def vault_files(kb: Path) -> dict:
    """Every file but hidden ones (as index.py skips them): path -> text for notes and canvases, None for the rest."""
    files = {}
    for p in sorted(kb.rglob("*")):
        parts = p.relative_to(kb).parts
        if p.is_file() and not any(s.startswith(".") and not s.startswith("..") for s in parts):
            files["/".join(parts)] = p.read_text(encoding="utf-8", errors="replace") if p.suffix in (".md", ".canvas") \
                else None
    return files


def median_s(action) -> tuple:
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def link_index(files: dict) -> list:
    """Rows of every note, each resolved: what building and then reading the whole link index costs."""
    resolver = links.Resolver(files)
    stored = [row for path, text in files.items() if text is not None for row in links.rows(text, path)]
    return [resolver.resolve(target, source, form) for source, _, target, _, form, _, _ in stored]


def compare_with_search_index(name: str, kb: Path, work: Path) -> dict:
    files = vault_files(kb)
    index.close_index()
    start = time.perf_counter()
    index.with_index(kb.resolve(), work / f"index-{name}", False, lambda idx: None)
    search_s = time.perf_counter() - start
    index.close_index()
    resolved, links_s = median_s(lambda: link_index(files))
    notes = sum(1 for p in files if p.endswith(".md"))
    print(f"{name}: {notes} notes, {len(resolved)} links ({sum(r is not None for r in resolved)} resolved); "
          f"search index {search_s * 1000:.0f} ms, link index {links_s * 1000:.0f} ms, "
          f"ratio {links_s / search_s:.2f} (goal <= 1)")
    return files


def move_most_linked(files: dict) -> None:
    resolved = links.resolve_all(files)
    inbound, sources = {}, {}
    for (source, _), target in resolved.items():
        if target and target != source:
            inbound[target] = inbound.get(target, 0) + 1
            sources.setdefault(target, set()).add(source)
    for most in (max(inbound, key=inbound.get), max(sources, key=lambda t: len(sources[t]))):
        to_path = f"归档/{most.rsplit('/', 1)[-1][:-3]} 已移动.md"
        plan, full_s = median_s(lambda: links.plan_move(files, files, most, to_path))
        keys = links.move_keys(most, to_path)
        stored = [row for path, text in files.items() if text is not None for row in links.rows(text, path)]
        needed = {row[0] for row in stored if row[6] in keys} | {most} | {p for p in files if p.endswith(".canvas")}
        subset, subset_s = median_s(lambda: links.plan_move(files, {p: files[p] for p in needed}, most, to_path))
        after = {(to_path if p == most else p): t for p, t in files.items()}
        after.update(plan.texts)
        rename = {most: to_path}
        expected = {(rename.get(s, s), i): rename.get(t, t) for (s, i), t in resolved.items()}
        kept = links.resolve_all(after) == expected and subset == plan
        print(f"move {most} ({inbound[most]} inbound links from {len(sources[most])} notes) -> {to_path}: "
              f"{sum(plan.counts.values())} links rewritten in {len(plan.texts)} files; plan {full_s * 1000:.0f} ms "
              f"from every text, {subset_s * 1000:.1f} ms from the {len(needed)} texts move_keys asks for; "
              f"ratio to the {MOVE_BUDGET_S:.0f} s budget {full_s / MOVE_BUDGET_S:.2f}; "
              f"every link means what it meant: {'yes' if kept else 'NO'}")


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
        files = compare_with_search_index("knowledge-garden", garden, work)
        compare_with_search_index("tldr-kb", tldr, work)
        move_most_linked(files)
    pathological_inputs()


if __name__ == "__main__":
    main()
