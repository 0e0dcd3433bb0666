"""Benchmark of search by meaning (embeddings.py) on the tldr corpus: quality against keyword-only, speed, size.

    python bench/hybrid_bench.py                   # with tests/fake_embedder.py on 127.0.0.1
    python bench/hybrid_bench.py --embed-url http://localhost:11434/v1 --embed-model bge-m3   # a real model
    python bench/hybrid_bench.py --project /tmp/base   # another checkout's search (before figures)

The fake embedder is a bag of concepts (tests/fake_embedder.py): its figures show that the pipeline works
(chunks, vectors, fusion, never worse than keywords), not what a real model achieves; real quality needs a
real model, measured with the second command (Ollama: `ollama pull bge-m3` first; embedding 9,000 notes
takes a while on a CPU, and resumes if stopped).

Query sets, all with the held-out seed of search_bench.py: the keyword set (as search_bench makes it, every
draw counted), paraphrases (2-3 words of an English page's description, each replaced by another word of
its fake-embedder concept group that the page does not contain), and cross-language (the Chinese words of
those groups, run together as a person types them, for English pages that have no Chinese page), and
search_bench's sentence set (questions as people type them). "kw best lower": the questions whose first note by
keywords alone the hybrid ranks lower (it should never).
"""

import argparse
import importlib
import math
import random
import re
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import embeddings  # noqa: E402
import index  # noqa: E402
import search  # noqa: E402
import search_bench as sb  # noqa: E402
from config import Settings  # noqa: E402
from fake_embedder import CONCEPTS, FakeEmbedder  # noqa: E402
from notebook import Notebook  # noqa: E402

EN_MEMBER = re.compile(r"^[a-z]+$")
ZH_MEMBER = re.compile(r"^[\u4e00-\u9fff]+$")


def meaning_queries(kb: Path, per_set: int, seed: int) -> tuple:
    """(paraphrases, cross-language): [(query, target, language, False)] as search_bench.judge takes them."""
    groups = {w: g for g in CONCEPTS for w in g if EN_MEMBER.match(w)}
    rng = random.Random(seed)
    pages = sorted((kb / "en").rglob("*.md"))
    rng.shuffle(pages)
    paraphrases, crossed = [], []
    for path in pages:
        rel = path.relative_to(kb).as_posix()
        text = path.read_text(encoding="utf-8")
        words = set(re.findall(r"[a-z]+", text.lower()))
        found = list(dict.fromkeys(w for w in re.findall(r"[a-z]+", sb.description(text).lower()) if w in groups))
        if len(found) < 2:
            continue
        picked = rng.sample(found, min(len(found), rng.choice((2, 3))))
        others = [[m for m in groups[w] if EN_MEMBER.match(m) and m not in words] for w in picked]
        if len(paraphrases) < per_set and all(others):
            paraphrases.append((" ".join(rng.choice(o) for o in others), rel, "en", False))
        chinese = [[m for m in groups[w] if ZH_MEMBER.match(m)] for w in picked]
        if len(crossed) < per_set and all(chinese) and not (kb / "zh" / rel[3:]).exists():
            crossed.append(("".join(rng.choice(c) for c in chinese), rel, "zh", False))
        if len(paraphrases) == per_set and len(crossed) == per_set:
            break
    return paraphrases, crossed


def fuse_max_min(by_words: list, by_meaning: list, placed: set) -> list:
    """basic-memory's fusion, max + 0.3 min of the two scores, each rank-normalised to (0, 1], in place of
    search._fuse's reciprocal ranks (same hits, another order)."""
    def scores(paths):
        return {p: 1 - i / len(paths) for i, p in enumerate(paths)}
    kw, vec = scores([p for p, _, _ in by_words]), scores([p for p, _, _ in by_meaning if p not in placed])
    fused = {p: max(kw.get(p, 0), vec.get(p, 0)) + 0.3 * min(kw.get(p, 0), vec.get(p, 0)) for p in kw | vec}
    return sorted(RRF(by_words, by_meaning, placed), key=lambda hit: -fused[hit[0]])


RRF = search._fuse


def kw_best_lower(words, hybrid, queries) -> int:
    """How many queries' first note by keywords alone the hybrid ranks lower."""
    lower = 0
    for query, *_ in queries:
        best = sb.ranked_paths(words(query))[:1]
        lower += bool(best) and sb.ranked_paths(hybrid(query))[:1] != best
    return lower


def timed(run, queries) -> float:
    times = []
    for query, *_ in queries:
        started = time.perf_counter()
        run(query)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def build(notebook: Notebook, embedder) -> tuple:
    """The keyword index and every vector; (seconds, chunks)."""
    started = time.perf_counter()

    def everything(idx):
        embeddings.sync_chunks(idx, notebook.vectors, embedder)
        embeddings.embed_missing(idx, notebook.vectors, embedder, float("inf"), embeddings.EMBED_INDEX_TIMEOUT_S, 2,
                                 progress=True)
        return idx.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    chunks = notebook.with_index(everything)
    print(file=sys.stderr)
    return time.perf_counter() - started, chunks


def vector_speed(conn, chunks: int, scale: int, dims: int) -> tuple:
    """(cold load, warm p50) of embeddings.nearest over `scale` times the chunks, random vectors."""
    rng = random.Random(1)
    path = Path(conn.execute("PRAGMA database_list").fetchone()[2] + f".x{scale}")
    big = sqlite3.connect(path, isolation_level=None)
    big.executescript("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('vectors', '1');"
                      "CREATE TABLE vectors(id INTEGER PRIMARY KEY, hash BLOB UNIQUE, signs BLOB, vec BLOB)")
    big.execute("BEGIN")
    scale_bytes = struct.pack("<f", 1 / 127 / math.sqrt(dims / 3))
    big.executemany("INSERT INTO vectors(hash, signs, vec) VALUES (?,?,?)",  # random: the timing is the same
                    ((i.to_bytes(8, "little"), rng.randbytes(dims // 8), scale_bytes + rng.randbytes(dims))
                     for i in range(chunks * scale)))
    big.execute("COMMIT")
    queries = [embeddings._unit([rng.gauss(0, 1) for _ in range(dims)]) for _ in range(21)]
    started, vectors = time.perf_counter(), embeddings.Vectors()
    embeddings.nearest(big, vectors, queries[0], embeddings.EMBED_RESCORE)
    cold = time.perf_counter() - started
    warm = []
    for q in queries[1:]:
        started = time.perf_counter()
        embeddings.nearest(big, vectors, q, embeddings.EMBED_RESCORE)
        warm.append(time.perf_counter() - started)
    big.close()
    path.unlink()
    return cold, statistics.median(warm), chunks * scale


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=sb.DEFAULT_CORPUS)
    parser.add_argument("--embed-url", help="a real /v1/embeddings endpoint (default: the fake, on 127.0.0.1)")
    parser.add_argument("--embed-model", default="fake")
    parser.add_argument("--queries", type=int, default=200, help="queries per language and set")
    parser.add_argument("--seed", type=int, default=sb.HELD_OUT_SEED)
    parser.add_argument("--project", type=Path, help="measure the search of this checkout instead (e.g. /tmp/base)")
    args = parser.parse_args()
    if args.project:
        global embeddings, index, search, RRF
        sb.use_project(args.project)
        embeddings, index, search = (importlib.import_module(name) for name in ("embeddings", "index", "search"))
        RRF = search._fuse
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-bench-"))
    index_dir = tmp / "index"
    fake = None if args.embed_url else FakeEmbedder().__enter__()
    try:
        kb = sb.unpack(args.corpus, tmp / "1x").resolve()
        embedder = embeddings.Embedder(args.embed_model, args.embed_url or fake.base_url, "none")
        index.warn = lambda message: print(f"  ({message})", file=sys.stderr)
        keyword_set, titles = sb.make_queries(kb, args.queries, args.seed), sb.title_queries(kb, 200, args.seed)
        paraphrases, crossed = meaning_queries(kb, args.queries, args.seed)
        sentences = sb.sentence_queries(kb, 300, 150, args.seed)
        notebook = Notebook(Settings(kb=kb, index_dir=index_dir))
        build_s, chunks = build(notebook, embedder)
        words = lambda q: search.search_notes(notebook, q)  # noqa: E731
        hybrid = lambda q: search.search_notes(notebook, q, embedder=embedder)  # noqa: E731
        print(f"corpus {args.corpus.name}: {sum(1 for _ in kb.rglob('*.md'))} notes, {chunks} distinct chunks "
              f"embedded in {sb.ms(build_s)} by {args.embed_model} at {embedder.base_url}"
              + (" (the FAKE embedder: pipeline figures, not a real model's quality)" if fake else ""))
        print("\nquery set (seed %d) | method | R@5 en | R@5 zh | MRR@10 | title R@1 | kw best lower | warm p50"
              % args.seed)
        print("--- | --- | --- | --- | --- | --- | --- | ---")
        for name, queries in (("keyword (every draw)", keyword_set), ("sentences", sentences),
                              ("paraphrase (en)", paraphrases), ("cross-language (zh question, en note)", crossed)):
            for method, run in (("keywords only", words), ("hybrid, RRF", hybrid), ("hybrid, max+0.3min", hybrid)):
                search._fuse = fuse_max_min if "max" in method else RRF
                r = sb.judge(run, queries, titles if name.startswith("keyword") else [], False)
                en = f"{r['en']:.3f}" if any(q[2] == "en" for q in queries) else "-"
                zh = f"{r['zh']:.3f}" if any(q[2] == "zh" for q in queries) else "-"
                title = f"{r['title']:.3f}" if name.startswith("keyword") else "-"
                lower = "-" if run is words else kw_best_lower(words, run, queries)
                print(f"{name}, {len(queries)} | {method} | {en} | {zh} | {r['mrr']:.3f} | {title} | {lower} | "
                      f"{sb.ms(timed(run, queries[:100]))}", flush=True)
        search._fuse = RRF
        print("\ne.g. paraphrases " + ", ".join(repr(q) for q, *_ in paraphrases[:3]) + "; cross-language "
              + ", ".join(repr(q) for q, *_ in crossed[:3]))
        report_sizes_and_edit(notebook, embedder, fake)
    finally:
        if fake:
            fake.__exit__(None, None, None)
        shutil.rmtree(tmp, ignore_errors=True)


def report_sizes_and_edit(notebook: Notebook, embedder, fake):
    kb, conn = notebook.kb, notebook.with_index(lambda idx: idx.conn)
    per_chunk, dims = conn.execute("SELECT avg(length(signs) + length(vec)), max(length(vec)) - 4 "
                                   "FROM vectors").fetchone()
    print(f"vector bytes per chunk: {per_chunk:.0f} at {dims} dimensions (int8 + scale + sign bits)")
    chunks = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    cold, warm, n = vector_speed(conn, chunks, 10, dims)
    print(f"query-side vector search (sign-bit prefilter, {embeddings.EMBED_RESCORE} rescored) over {n} vectors "
          f"(10x the corpus's chunks, i.e. 89,600 notes): warm p50 {sb.ms(warm)}, first search {sb.ms(cold)} "
          "(loads the sign bits); the embedding call itself aside")
    if fake:
        note = sorted(kb.rglob("*.md"))[100]
        before, parts = len(fake.inputs()), len(embeddings.chunks_of("", note.read_text(encoding="utf-8")))
        with open(note, "a", encoding="utf-8") as f:
            f.write("\n- One more example:\n\n`zqx --new`\n")
        search.search_notes(notebook, "new example", embedder=embedder)
        sent = len(fake.inputs()) - before - 1  # the query itself aside
        print(f"re-embedding after one outside edit of a {parts}-chunk note: {sent} chunk(s) sent")


if __name__ == "__main__":
    main()
