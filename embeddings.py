"""Find notes by meaning: notes cut into chunks, their embeddings in the search index file, vector search.

Opt-in: nothing here runs unless EMBED_MODEL is set. Chunks start at headings; each content hash is embedded once
through the openai SDK (OpenAI, Ollama, LM Studio, vLLM) and stored beside the keyword index as int8 plus its sign
bits for a fast prefilter. An embedder that is down, slow or refusing costs a search one line, never its keyword
results. This file never writes to the notes.
"""

import array
import collections
import hashlib
import heapq
import itertools
import math
import operator
import struct
import sys
import time
from dataclasses import dataclass, field

import index
from db import notice

EMBED_CHUNK_CHARS = 1000  # a chunk ends at a heading, or near this size at a blank line
EMBED_MAX_CHUNKS = 100  # per note: the first ~100 KB of a huge note are searched by meaning
EMBED_BATCH = 32  # chunks per embeddings request
EMBED_QUERY_TIMEOUT_S = 3.0  # each embeddings call of a search (the query, each catch-up batch); then keywords
EMBED_INDEX_TIMEOUT_S = 120.0  # one batch while indexing (a local model may be loading)
EMBED_INDEX_RETRIES = 2  # the SDK's own retries of a batch while indexing; a search never retries
EMBED_SEARCH_BUDGET_S = 2.0  # a search embeds changed chunks this long at most; later searches go on
EMBED_RETRY_AFTER_S = 60.0  # after a failure, searches skip the embedder this long (answering at once)
EMBED_SKETCH_BITS = 255  # the first sign bits of every vector, compared with the query's first (a distance: a byte)
EMBED_SKETCH_KEEP = 1000  # closest by those, then compared on all sign bits
EMBED_RESCORE = 100  # closest by all sign bits, rescored exactly from the int8 vectors
EMBED_NOTES = 30  # notes ranked by meaning, fused with as many ranked by keywords
# A note is close in meaning when its cosine is past this share of the way from the typical one (the median of the
# EMBED_RESCORE closest) to the best: where "unrelated" lies differs by model (e5: ~0.75, OpenAI's: ~0.2).
EMBED_ABOVE_TYPICAL = 0.5
EMBED_MIN_COSINE = 0.1  # and above this: a query unlike every note (an unknown word) brings none
# What model families expect before a query and a passage (EMBED_QUERY_PREFIX / EMBED_DOC_PREFIX set them by
# hand): the first family whose name the model's contains.
EMBED_PREFIXES = [("bge-m3", "", ""), ("e5", "query: ", "passage: "),
                  ("nomic-embed", "search_query: ", "search_document: "),
                  ("bge-", "Represent this sentence for searching relevant passages: ", "")]
EMBED_PREFIXES_ZH = ("为这个句子生成表示以用于检索相关文章：", "")  # bge-*-zh models
DEEPSEEK_HOST = "deepseek.com"  # its API has no embeddings endpoint (404)

_SKETCH = (1 << EMBED_SKETCH_BITS) - 1
_AT_MOST = [b"\x01" * (cut + 1) + bytes(255 - cut) for cut in range(256)]  # translate tables: 1 where d <= cut
_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS chunk_notes(path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER)",
    "CREATE TABLE IF NOT EXISTS chunks(path TEXT, seq INTEGER, line INTEGER, hash BLOB, text TEXT, "
    "PRIMARY KEY(path, seq))",
    "CREATE INDEX IF NOT EXISTS chunks_hash ON chunks(hash)",
    "CREATE TABLE IF NOT EXISTS vectors(id INTEGER PRIMARY KEY, hash BLOB UNIQUE NOT NULL, signs BLOB, vec BLOB)",
]
# counts a change of the vectors, so every process's cached sign bits reload
_CHANGED = "INSERT INTO meta VALUES ('vectors', '1') ON CONFLICT(key) DO UPDATE SET value = value + 1"
_MISSING = ("SELECT hash, min(text) FROM chunks WHERE hash NOT IN (SELECT hash FROM vectors) "
            "GROUP BY hash ORDER BY min(path), min(seq)")  # (hash, text) of chunks without a vector


@dataclass
class Vectors:
    """What this process knows of one notes folder's vectors (its Notebook's)."""
    clients: dict = field(default_factory=dict)  # (embedder, timeout, retries) -> its openai client
    failed: dict = field(default_factory=dict)  # embedder -> (monotonic time, message) of its last failure
    cache: tuple | None = None  # (vectors change count, ids, sign bits, their sketches): reloaded on change
    complete: bool = False  # every chunk had its vector when last looked (no chunk changed since)
    touched: set = field(default_factory=set)  # notes the index saw change since sync_chunks last looked
    chunked: bool = False  # sync_chunks has compared every note's chunks since the index opened


class EmbedError(Exception):
    """The embeddings endpoint failed; the message is one line for the person."""


Embedder = collections.namedtuple("Embedder", "model base_url api_key query_prefix doc_prefix",
                                  defaults=("", ""))


def embedder_of(settings) -> Embedder | None:
    """The embedder the settings name, or None when EMBED_MODEL is unset; EmbedError if it cannot work."""
    if not settings.embed_model:
        return None
    base_url = settings.embed_base_url or settings.base_url
    if not settings.embed_base_url and DEEPSEEK_HOST in base_url:
        raise EmbedError("EMBED_MODEL is set but DeepSeek serves no embeddings: set EMBED_BASE_URL too "
                         "(e.g. http://localhost:11434/v1 for Ollama)")
    key = settings.embed_api_key or (settings.api_key if not settings.embed_base_url else None)
    query, doc = prefixes(settings.embed_model)
    query = query if settings.embed_query_prefix is None else settings.embed_query_prefix
    doc = doc if settings.embed_doc_prefix is None else settings.embed_doc_prefix
    return Embedder(settings.embed_model, base_url.rstrip("/"), key or "none", query, doc)  # any key for local ones


def prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) the model's family expects, or ("", "")."""
    name = model.lower()
    if name.startswith("bge-") and "-zh" in name and not name.startswith("bge-m3"):
        return EMBED_PREFIXES_ZH
    return next(((q, d) for family, q, d in EMBED_PREFIXES if family in name), ("", ""))


def embed_texts(vectors: Vectors, embedder: Embedder, texts: list, timeout: float, retries: int) -> list:
    """One unit vector per text, in order; EmbedError with one line on any failure."""
    from openai import OpenAI, OpenAIError  # only when embeddings are on: keyword search never loads it
    key = (embedder, timeout, retries)
    if key not in vectors.clients:
        vectors.clients[key] = OpenAI(base_url=embedder.base_url, api_key=embedder.api_key, timeout=timeout,
                                      max_retries=retries)
    try:
        reply = vectors.clients[key].embeddings.create(model=embedder.model, input=texts)
        found = [list(item.embedding) for item in sorted(reply.data, key=lambda d: d.index)]
        if len(found) != len(texts) or any(len(v) != len(found[0]) or not v for v in found):
            raise ValueError(f"{len(found)} vectors for {len(texts)} texts")
    except OpenAIError as exc:
        detail = " ".join(str(exc).split())[:160].rstrip(".") or type(exc).__name__
        raise EmbedError(f"the embeddings endpoint {embedder.base_url} failed ({detail})") from None
    except (TypeError, ValueError, AttributeError) as exc:  # a reply of another shape
        raise EmbedError(f"the embeddings endpoint {embedder.base_url} gave an unusable reply ({exc})") from None
    return [_unit(v) for v in found]


def _unit(vector: list) -> list:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


# --- Chunks and their vectors in the index file ---

def chunks_of(title: str, text: str) -> list:
    """(first line number, text to embed) of each chunk; a short tail joins the chunk before it."""
    chunks, size = [], 0  # [first line number, lines, starts at a heading]
    for number, line in enumerate(text.splitlines(), 1):
        for at in range(0, max(len(line), 1), EMBED_CHUNK_CHARS):
            piece = line[at:at + EMBED_CHUNK_CHARS]
            heading = bool(index.HEADING.match(piece))
            full = size + len(piece) > EMBED_CHUNK_CHARS or (size > EMBED_CHUNK_CHARS * 0.6 and not piece.strip())
            if not chunks or heading or full:
                chunks.append((number, [], heading))
                size = 0
            chunks[-1][1].append(piece)
            size += len(piece) + 1
    for at in range(len(chunks) - 1, 0, -1):  # a tail with no heading of its own says too little alone
        if not chunks[at][2] and sum(len(l) + 1 for l in chunks[at][1]) < EMBED_CHUNK_CHARS // 4:
            chunks[at - 1][1].extend(chunks.pop(at)[1])
    kept = [(line, "\n".join(body).strip()) for line, body, _ in chunks if "".join(body).strip()][:EMBED_MAX_CHUNKS]
    return [(line, body if body.startswith(("# ", title)) else f"{title}\n\n{body}") for line, body in kept]


def sync_chunks(idx: index.Index, vectors: Vectors, embedder: Embedder) -> None:
    """Make the chunk and vector tables (another model's vectors dropped); chunk again the notes changed since."""
    conn = idx.conn
    model = f"{embedder.model}\n{embedder.doc_prefix}"  # another passage prefix: other chunk texts, other vectors
    if (used := conn.execute("SELECT value FROM meta WHERE key='embed_model'").fetchone()) != (model,):
        vectors.complete = False
        with index.writing(conn):
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("DELETE FROM vectors")
            if used and used[0].partition("\n")[2] != embedder.doc_prefix:
                conn.execute("DELETE FROM chunk_notes")  # every note chunked again, with the new prefix
                vectors.chunked = False
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", (model,))
            conn.execute(_CHANGED)
    paths = sorted(vectors.touched) if vectors.chunked else [p for (p,) in conn.execute(
        "SELECT n.path FROM notes n LEFT JOIN chunk_notes c USING(path) WHERE NOT n.private AND (c.path IS NULL "
        "OR c.size IS NOT n.size OR c.mtime_ns IS NOT n.mtime_ns) "
        "UNION SELECT path FROM chunk_notes WHERE path NOT IN (SELECT path FROM notes WHERE NOT private)")]
    vectors.complete = vectors.complete and not paths
    vectors.touched.clear()
    vectors.chunked = True
    for first in range(0, len(paths), index.INDEX_BATCH):
        batch = paths[first:first + index.INDEX_BATCH]
        marks = ",".join("?" * len(batch))
        rows, notes = [], []
        for path, title, size, mtime_ns in conn.execute(
                f"SELECT path, title, size, mtime_ns FROM notes WHERE path IN ({marks}) AND NOT private",
                batch).fetchall():  # a private note is never embedded: its chunks, if it had some, go
            text = index.read_text(idx.kb, path)
            if text is not None:
                notes.append((path, size, mtime_ns))
                for seq, (line, body) in enumerate(chunks_of(title, index.indexed_text(path, text))):
                    body = embedder.doc_prefix + body  # in the hash: another prefix means other vectors
                    rows.append((path, seq, line, hashlib.blake2b(body.encode(), digest_size=16).digest(), body))
        with index.writing(conn):
            old = {h for (h,) in conn.execute(f"SELECT hash FROM chunks WHERE path IN ({marks})", batch)}
            conn.execute(f"DELETE FROM chunks WHERE path IN ({marks})", batch)
            conn.execute(f"DELETE FROM chunk_notes WHERE path IN ({marks})", batch)
            conn.executemany("INSERT INTO chunks VALUES (?,?,?,?,?)", rows)
            conn.executemany("INSERT INTO chunk_notes VALUES (?,?,?)", notes)
            gone = [(h, h) for h in old - {r[3] for r in rows}]  # vectors no note holds any more
            conn.executemany("DELETE FROM vectors WHERE hash=? AND NOT EXISTS (SELECT 1 FROM chunks WHERE hash=?)",
                             gone)
            if gone:
                conn.execute(_CHANGED)


def embed_missing(idx: index.Index, vectors: Vectors, embedder: Embedder, budget_s: float, timeout: float,
                  retries: int, progress: bool = False) -> int:
    """Embed chunks without vectors a batch at a time, each kept as it arrives, for budget_s; how many are left."""
    started = time.monotonic()
    todo = idx.conn.execute(_MISSING).fetchall()
    done = 0
    while done < len(todo) and time.monotonic() - started < budget_s:
        batch = todo[done:done + EMBED_BATCH]
        embedded = embed_texts(vectors, embedder, [text for _, text in batch], timeout, retries)
        with index.writing(idx.conn):
            idx.conn.executemany("INSERT OR REPLACE INTO vectors(hash, signs, vec) VALUES (?,?,?)",
                                 [(h, *pack(v)) for (h, _), v in zip(batch, embedded)])
            idx.conn.execute(_CHANGED)
        done += len(batch)
        if progress and (done == len(todo) or done % (EMBED_BATCH * 10) < EMBED_BATCH):
            print(f"\r  embedded {done} of {len(todo)} chunks", end="\n" if done == len(todo) else "",
                  file=sys.stderr, flush=True)
    return len(todo) - done


def pack(vector: list) -> tuple:
    """(sign bits, int8 vector with its scale): 1,024 dimensions take 128 + 4 + 1,024 bytes."""
    peak = max(abs(x) for x in vector) or 1.0
    quantized = array.array("b", [round(x / peak * 127) for x in vector]).tobytes()
    return _signs(vector).to_bytes((len(vector) + 7) // 8, "little"), struct.pack("<f", peak / 127) + quantized


def _signs(vector: list) -> int:
    return int("".join("1" if x > 0 else "0" for x in reversed(vector)), 2)


# --- Vector search ---

def nearest(conn, vectors: Vectors, query: list, limit: int) -> list:
    """(vector id, cosine) of the `limit` vectors closest to the unit vector `query`, best first."""
    version = conn.execute("SELECT value FROM meta WHERE key='vectors'").fetchone()
    if vectors.cache is None or vectors.cache[0] != version:
        rows = conn.execute("SELECT id, signs FROM vectors").fetchall()
        signs = [int.from_bytes(r[1], "little") for r in rows]
        vectors.cache = (version, [r[0] for r in rows], signs, [s & _SKETCH for s in signs])
    _, ids, signs, sketches = vectors.cache
    bits = _signs(query)
    rough = bytes(map(int.bit_count, map((bits & _SKETCH).__xor__, sketches)))  # C loops: ~10 ms per 100k
    # the distance of the EMBED_SKETCH_KEEP-th closest, from counts of each distance: C loops, not a sort
    at_most = itertools.accumulate(rough.count(d) for d in range(256))
    cut = next((d for d, count in enumerate(at_most) if count > EMBED_SKETCH_KEEP), 255)
    kept = list(itertools.compress(range(len(rough)), rough.translate(_AT_MOST[cut])))
    closest = [ids[i] for i in heapq.nsmallest(EMBED_RESCORE, kept, key=lambda i: (bits ^ signs[i]).bit_count())]
    scored = []
    for vid, blob in conn.execute(f"SELECT id, vec FROM vectors WHERE id IN ({','.join('?' * len(closest))})", closest):
        if len(blob) - 4 == len(query):  # a vector of another size (a changed model) cannot compare
            scale = struct.unpack_from("<f", blob)[0]
            scored.append((scale * sum(map(operator.mul, query, array.array("b", blob[4:]))), vid))
    return [(vid, score) for score, vid in sorted(scored, reverse=True)[:limit]]


def notes_by_meaning(idx: index.Index, vectors: Vectors, query_vector: list, lo: str, hi: str) -> list:
    """(path, title, first line of its best chunk) of the EMBED_NOTES notes closest to the query, best first."""
    closest = nearest(idx.conn, vectors, query_vector, EMBED_RESCORE)
    if not closest:
        return []
    best = {}
    top, typical = closest[0][1], closest[len(closest) // 2][1]
    floor = max(EMBED_MIN_COSINE, typical + EMBED_ABOVE_TYPICAL * (top - typical))
    for vid, score in closest:
        if score < floor or len(best) >= EMBED_NOTES:
            break
        for hit in idx.conn.execute("SELECT c.path, n.title, c.line FROM chunks c JOIN vectors v ON v.hash = c.hash "
                                    "JOIN notes n ON n.path = c.path WHERE v.id = ? AND c.path >= ? AND c.path < ? "
                                    "AND NOT n.private", (vid, lo, hi)):
            best.setdefault(hit[0], hit)  # `closest` is best first: a note's first chunk here is its best
    return list(best.values())


# --- Searching, and the whole index on request ---

def query_vector(idx: index.Index, vectors: Vectors, embedder: Embedder, query: str) -> tuple:
    """(the query's unit vector or None, a one-line notice or ""); chunks changed since embedded meanwhile."""
    failed = vectors.failed.get(embedder)
    if failed and time.monotonic() - failed[0] < EMBED_RETRY_AFTER_S:
        return None, failed[1]
    try:
        sync_chunks(idx, vectors, embedder)
        vector = embed_texts(vectors, embedder, [embedder.query_prefix + query], EMBED_QUERY_TIMEOUT_S, 0)[0]
        left = 0
        if not vectors.complete:  # looking for chunks without vectors reads every chunk: not on each search
            left = embed_missing(idx, vectors, embedder, EMBED_SEARCH_BUDGET_S, EMBED_QUERY_TIMEOUT_S, 0)
            vectors.complete = not left
    except EmbedError as exc:
        vectors.failed[embedder] = (time.monotonic(), f"(Keyword results only: {exc}.)")  # the result's first line
        return None, vectors.failed[embedder][1]
    vectors.failed.pop(embedder, None)
    return vector, (f"({left} chunks are not embedded yet, so notes holding them are found by keywords "
                    "only; `python main.py --reindex` embeds them all.)" if left else "")


def reindex(notebook) -> int:
    """`python main.py --reindex` on a new Notebook (its first search compares every note with the index): the
    keyword index, then every missing vector; 0 done, 1 resumable, 2 unusable."""
    try:
        embedder = embedder_of(notebook.settings)
    except EmbedError as exc:
        notice(f"{exc}.")
        return 2
    started = time.monotonic()

    def build(idx):
        count = idx.conn.execute("SELECT count(*) FROM notes").fetchone()[0]
        notice(f"keyword index: {count} notes up to date ({time.monotonic() - started:.1f} s).")
        if embedder is None:
            return 0
        sync_chunks(idx, notebook.vectors, embedder)
        total = idx.conn.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]
        todo = len(idx.conn.execute(_MISSING).fetchall())
        notice(f"vectors ({embedder.model}): {total - todo} of {total} chunks embedded; embedding {todo}…")
        try:
            embed_missing(idx, notebook.vectors, embedder, math.inf, EMBED_INDEX_TIMEOUT_S, EMBED_INDEX_RETRIES,
                          progress=True)
        except EmbedError as exc:
            left = len(idx.conn.execute(_MISSING).fetchall())
            print(file=sys.stderr)  # end the progress line
            notice(f"stopped: {exc}. {total - left} of {total} chunks are embedded and kept; run "
                   "`python main.py --reindex` again to embed the rest.")
            return 1
        notice(f"vectors: all {total} chunks embedded ({time.monotonic() - started:.1f} s).")
        return 0
    return notebook.with_index(build)
