"""Answer a search of the notes: the query (as query.py makes it FTS5 phrases) ranked in tiers, best lines, bounded.

search_notes and list_notes are the agent's tools, link_rows what links.py resolves links from. Ranking: a note
titled (or named) exactly the query, then one with it as an alias, then every word, then any word (a sentence's
content words), each tier by BM25 with path, title and lead above body. `tag:NAME` (`#NAME`) keeps the notes
tagged NAME or a tag nested in it, `after`/`before` the notes of those days; alone, they list them. A sync-conflict
copy is never a hit while its note exists: the note's hit names it. This file never writes to the index (index.py
keeps it) nor to the notes; what the model can fix raises ToolError.
"""

import json
import re
from collections import Counter
from pathlib import Path

import embeddings
import frontmatter
import vault
from context import text_tokens
from index import CJK_RUN, DATE_PROPERTIES, HEADING, Index, cjk_words, day_written, indexed_text, read_text, title_key
from notes import Shown, ToolError, plural, rel, safe_folder
from query import SEARCH_WORD_PARTS, fts_phrase, parse_query, word_or_forms

SEARCH_MAX_HITS = 10
SEARCH_LINES_PER_HIT = 3
SEARCH_OUTPUT_CHARS = 4000
SEARCH_LINE_CHARS = 160  # a shown line is cut to about this many characters around the match
SEARCH_OUTSIDE_NOTES = 3  # a search in a folder or days where no note has every word shows first the best of all
SEARCH_QUERY_ECHO_CHARS = 80  # the query is repeated in the answer's first line, cut to this length
SEARCH_QUERY_MAX_CHARS = 2_000  # of a query read at all: a megabyte of one word must not hold the search for seconds
SEARCH_WEIGHTS = (3.0, 10.0, 6.0, 1.0)  # BM25 weights of path, title, lead, body (bench/search_bench.py)
SEARCH_COUNTED_WORDS = 12  # a note with more of a query's words ranks first: this many are counted (each costs)
SEARCH_RRF_K = 60  # reciprocal rank fusion: a note's score is the sum of 1 / (K + its rank) in each list
PASSAGE_NOTES = 3  # notes whose best lines go with a question, before the model is first asked
PASSAGE_AROUND = 2  # lines kept before and after each of a passage's best lines
LIST_MAX_NOTES = 200
LIST_OUTPUT_CHARS = 6000
DATED_BY = {"name": "from its name", "modified": "modified"} | {key: f"{key} property" for key in DATE_PROPERTIES}


def _folder(kb: Path, folder: str | None, done: str, person: bool = False) -> tuple:
    """(SQL bounds of the note paths in the folder, what the result must say first). A folder that does not exist
    (a small model invents one) means all the notes, said so; a person is told it does not exist."""
    try:
        path = kb if folder is None or folder.strip() in ("", "/") else safe_folder(kb, folder)
        if path == kb:
            return "", "\U0010ffff", ""
        if path.is_dir():
            return rel(kb, path) + "/", rel(kb, path) + "0", ""  # "0" follows "/": the paths inside sort between
    except ValueError:  # a name the system cannot encode
        pass
    if person:
        raise ToolError(f"there is no folder '{folder}' in the notes.", "", "no_folder")
    named = json.dumps(folder, ensure_ascii=False)
    return "", "\U0010ffff", f"(There is no folder {named} in the notes, so all of them {done}.)\n"


def _days(after: str | None, before: str | None) -> tuple:
    """The notes' days asked for, (first, last) as ISO text, either None for no bound; () for any day."""
    days = []
    for name, value in (("after", after), ("before", before)):
        if (day := day_written(value)) is None and (value or "").strip():
            raise ToolError(f"{name} must be a date written YYYY-MM-DD, like 2026-11-01; {value.strip()!r} is not one.")
        days.append(day)
    if None not in days and days[0] > days[1]:
        raise ToolError(f"after ({days[0]}) is later than before ({days[1]}): no day is in that range.",
                        "Both ends are included: pass the earlier day as after.")
    return tuple(days) if any(days) else ()


def _period(days: tuple) -> str:
    """The days asked for, as the answer's first line says them: " dated 2026-11-01 to 2026-11-30"; "" for any."""
    first, last = days or ("", "")
    ends = f"{first} to {last}" if first and last else f"{first} or later" if first else f"{last} or earlier"
    return f" dated {ends}" if days else ""


# --- Searching ---
_MATCHING = "FROM fts JOIN notes n ON n.id = fts.rowid WHERE fts MATCH ? AND {where}"
# Tiers: titled or named as the query, then with it as an alias, every chunk as a phrase, every word; then bm25.
_RANK_SQL = f"""SELECT n.id, n.path, n.title, n.id IN (SELECT rowid FROM fts WHERE fts MATCH ?) AS every,
n.id IN (SELECT rowid FROM fts WHERE fts MATCH ?) AS exact
{_MATCHING} AND n.id NOT IN ({{shown}}){{among}}
ORDER BY (n.title_key = ? OR n.stem_key = ?) DESC, instr(n.alias_keys, ?) > 0 DESC, exact DESC, every DESC,
{{more_words}}bm25(fts, {', '.join(map(str, SEARCH_WEIGHTS))}) LIMIT ?"""
_NOT_A_COPY = "(n.conflict_of IS NULL OR NOT EXISTS (SELECT 1 FROM notes o WHERE o.path = n.conflict_of))"
_TAGGED = " AND (instr(n.tags, ?) OR instr(n.tags, ?))"  # the tag itself, or one nested in it
_HAS = "(n.id IN (SELECT rowid FROM fts WHERE fts MATCH ?))"  # 1 for a note with that word, else 0
_AMONG = " AND n.id IN (SELECT rowid FROM fts WHERE fts MATCH ?)"  # spares the others' bm25 and sorting


def search_notes(notebook, query: str, folder: str | None = None, embedder: embeddings.Embedder | None = None,
                 after: str | None = None, before: str | None = None) -> Shown:
    """Best notes for `query` with their best lines, bounded; with an embedder also the notes closest in meaning.
    `after`, `before`: only the notes of those days (both included)."""
    query = (query or "")[:SEARCH_QUERY_MAX_CHARS].encode("utf-8", "replace").decode("utf-8")  # lone surrogates: "?"
    tags, rest = vault.query_tags(query)
    parsed, days = parse_query(rest), _days(after, before)
    if not parsed[-1] and not tags and not days:
        raise ToolError("the search query has no words to look for. Give one or more keywords, or a date range.")
    lo, hi, said = _folder(notebook.kb, folder, "were searched")
    def found_in(scope, leave_out=None, room=SEARCH_OUTPUT_CHARS):  # (the result's text in room, its text in any)
        def found(idx):
            text_in, every = _search(idx, notebook.vectors, query, rest, parsed, tags, scope, embedder, leave_out)
            return text_in(idx, room), every, text_in
        return notebook.with_index(found)

    found, every, scope_in = found_in((lo, hi, days))
    if (lo or days) and parsed[-1] and not every:  # a small model's made-up folder or days hide the note it needs
        some = bool(found.lines)  # then the best few of the other notes come first, and the scope's after them
        wide, _, _ = found_in(("", "\U0010ffff", ()), *((tuple(found.lines), SEARCH_OUTPUT_CHARS // 3) if some else ()))
        if some and wide.lines:
            head = f"Beyond the notes{_where(lo, days)}, which follow: "
            found = notebook.with_index(lambda idx: scope_in(idx, SEARCH_OUTPUT_CHARS - len(head + wide) - 2))
            found = Shown(f"{head}{wide}\n\n{found}", wide.lines | found.lines, wide.named + found.named)
        elif wide.lines:
            found = Shown(f"No note{_where(lo, days)} has the words of {_quoted(query)}; in all the notes: {wide}",
                          wide.lines, wide.named)
    return Shown(said + found, found.lines, found.named)


def _where(lo: str, days: tuple) -> str:
    """Where a search looked, as its result says it: " in folder/", " dated A to B"."""
    return (f" in {lo}" if lo else "") + _period(days)


def _scope(lo: str, hi: str, tags: list, days: tuple = ()) -> tuple:
    """SQL condition on `notes n`, and its parameters: in the folder, of the days, with every tag, not a copy."""
    keys, (of_days, day_args) = [tag.casefold() for tag in tags], _of_days(days)
    return ("n.path >= ? AND n.path < ? AND NOT n.private AND " + _NOT_A_COPY + _TAGGED * len(keys) + of_days,
            (lo, hi, *(key for tag in keys for key in (f"\n{tag}\n", f"\n{tag}/")), *day_args))


def _of_days(days: tuple) -> tuple:
    """The SQL condition on `notes n` for the days asked for (" AND …", "" for any day), and its parameters."""
    ends = [(op, day) for op, day in zip((">=", "<="), days) if day]
    return "".join(f" AND n.day {op} ?" for op, _ in ends), tuple(day for _, day in ends)


def _search(idx: Index, vectors, query: str, rest: str, parsed: tuple, tags: list, scope: tuple, embedder,
            leave_out: tuple | None = None) -> tuple:
    """(the result as text in a given room: text_in(idx, room) -> Shown, how many notes have every word). `rest`:
    the query without its tags, `parsed` from it; `scope`: the folder's bounds and the days asked for; `leave_out`:
    notes shown already, for the best SEARCH_OUTSIDE_NOTES of the others, by words alone."""
    (terms, near, words), (lo, hi, days) = parsed, scope
    where, args, few = *_scope(lo, hi, tags, days), leave_out is not None
    if few:
        where, args = where + f" AND n.path NOT IN ({','.join('?' * len(leave_out))})", args + leave_out
    where_text = _where(lo, days)
    if not words:  # tags or days alone
        return lambda idx, room: _newest(idx, where, args, tags, where_text, query, room), 0
    vector, notice = embeddings.query_vector(idx, vectors, embedder, query) \
        if embedder and not tags and not few else (None, "")
    depth = embeddings.EMBED_NOTES if vector else SEARCH_OUTSIDE_NOTES if few else SEARCH_MAX_HITS
    qkey, hits = title_key(rest.replace('"', " ")), []
    rank_sql, matching = _RANK_SQL.replace("{where}", where), _MATCHING.format(where=where)

    def add(match, every_only=False):  # the best notes for match that are not hits yet, while there is room
        shown, coord = [h[0] for h in hits], [] if every_only else counted
        sql = rank_sql.format(shown=",".join("?" * len(shown)), among=_AMONG if every_only else "",  # NOT IN () ok
                              more_words=f"({' + '.join([_HAS] * len(coord))}) DESC, " if coord else "")
        hits.extend(idx.conn.execute(sql, (every_word, as_phrases, match, *args, *shown, *[every_word] * every_only,
                                           qkey, qkey, f"\n{qkey}\n", *coord, depth - len(hits))))

    def count(match):  # all notes: every FTS row is one, and skipping the join is ~5x faster on 30k matches
        if lo or tags or days or few or idx.conn.execute(
                "SELECT 1 FROM notes WHERE conflict_of IS NOT NULL LIMIT 1").fetchone():
            return idx.conn.execute(f"SELECT count(*) {matching}", (match, *args)).fetchone()[0]
        return idx.conn.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (match,)).fetchone()[0]

    as_phrases, each_word, ranked, wide = _matches(idx, terms, near)
    every_word, counted = " AND ".join(each_word.values()), _counted(each_word)
    total = count(every_word)
    add(ranked, every_only=total >= depth)  # the notes with every word fill the list, and rank first
    if len(hits) < depth and wide != ranked:  # a word's rarer forms fill the room left
        add(wide)
    every = next((at for at, hit in enumerate(hits) if not hit[3]), len(hits))
    some_only = count(wide) - total if every < depth else 0
    hits = [(path, title, None) for _id, path, title, _, _ in hits]
    if vector:
        by_meaning = embeddings.notes_by_meaning(idx, vectors, vector, lo, hi)
        inside = {path for path, in idx.conn.execute(  # notes_by_meaning knows no days, nor copies
            f"SELECT path FROM notes n WHERE {where} AND path IN ({','.join('?' * len(by_meaning))})",
            (*args, *(hit[0] for hit in by_meaning)))}
        hits = _fuse(hits, [hit for hit in by_meaning if hit[0] in inside], kept=max(every, 1))
    patterns = _line_patterns(words) + _tag_patterns(tags)

    def text_in(idx: Index, room: int) -> Shown:
        if days and not hits:  # a period's few notes help more than none: "decided" finds no "Decisions"
            text = _newest(idx, where, args, tags, where_text, "", room)
            text = Shown(f"No note{where_text} has the words of {_quoted(query)}. " + text, text.lines, text.named)
        else:
            text = _format_hits(idx, patterns, hits[:SEARCH_MAX_HITS], total, some_only, where_text, query,
                                room=room, tail=not few)
        return Shown(f"{notice}\n{text}", text.lines, text.named) if notice else text
    return text_in, total


def _newest(idx: Index, where: str, args: tuple, tags: list, where_text: str, query: str, room: int) -> Shown:
    """The notes a search may find, newest first (a query of tags or days alone)."""
    total = idx.conn.execute(f"SELECT count(*) FROM notes n WHERE {where}", args).fetchone()[0]
    hits = idx.conn.execute(f"SELECT path, title, NULL FROM notes n WHERE {where} "
                            "ORDER BY day DESC, mtime_ns DESC, path LIMIT ?", (*args, SEARCH_MAX_HITS)).fetchall()
    return _format_hits(idx, _tag_patterns(tags), hits, total, 0, where_text, query, "newest first", room)


def _matches(idx: Index, terms: list, near: list) -> tuple:
    """FTS5 queries: (every chunk as a phrase, each word: its FTS5, any word as ranked, any word in any form). A
    word's other form ranks only where it is as common as the word typed (bm25 would put a rare form's notes first)."""
    def notes_with(phrase):
        return idx.conn.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (phrase,)).fetchone()[0]

    def common(phrase, forms):
        typed = notes_with(phrase) if forms else 0
        return [f for f in forms if not typed or notes_with(fts_phrase([f])) >= typed]

    def chunk(phrase, words, forms_of):
        each = [word_or_forms(word, forms_of(word, forms)) for word, forms in words]
        if len(each) > SEARCH_WORD_PARTS:  # a run of words: each of them counts, the whole as one more
            return " OR ".join(each + [phrase])
        return each[0] if len(each) == 1 else f"({phrase} OR ({' OR '.join(each)}) NOT {phrase})"
    ranked = [chunk(phrase, words, common) for phrase, words in terms]
    wide = [chunk(phrase, words, lambda _, forms: forms) for phrase, words in terms]
    every = {word: word_or_forms(word, forms) for _, words in terms for word, forms in words}  # word: its FTS5
    return (" AND ".join(dict.fromkeys(phrase for phrase, _ in terms)), every,
            " OR ".join(ranked + near), " OR ".join(wide + near))


def _counted(every: dict) -> list:
    """The words (FTS5, with their other forms) whose count ranks the notes with some of them: the first
    SEARCH_COUNTED_WORDS of two letters or more, not Chinese (2-character words overlap: a long note holds many)."""
    words = [fts for word, fts in every.items() if len(word.strip('"*')) > 1 and not CJK_RUN.search(word)]
    return words[:SEARCH_COUNTED_WORDS] if len(words) > 1 else []


def _copies(names: list) -> str:
    return f"{len(names)} sync-conflict cop{'y' if len(names) == 1 else 'ies'}"


def _named(names: list) -> str:
    """Names joined with commas, as many as fit about one shown line, then "…"."""
    shown = []
    for name in names:
        if shown and sum(len(n) + 2 for n in shown) + len(name) > SEARCH_LINE_CHARS:
            return ", ".join(shown) + ", …"
        shown.append(name)
    return ", ".join(shown)


def _fuse(hits: list, by_meaning: list, kept: int) -> list:
    """(path, title, line) of the notes found by words, the first `kept` in their places (those with every word, and
    at least the keyword best), then the others and those close in meaning, fused by reciprocal rank."""
    placed, by_words, score = {path for path, _, _ in hits[:kept]}, hits[kept:], {}
    for ranked in (by_words, [hit for hit in by_meaning if hit[0] not in placed]):
        for rank, (path, _, _) in enumerate(ranked, 1):
            score[path] = score.get(path, 0.0) + 1 / (SEARCH_RRF_K + rank)
    hit_of = {hit[0]: hit for hit in by_meaning} | {hit[0]: hit for hit in by_words}  # by words: no line shown
    return hits[:kept] + sorted((hit_of[path] for path in score), key=lambda hit: -score[hit[0]])


def _format_hits(idx: Index, patterns: list, hits, total_all: int, some_only: int, where: str, query: str,
                 order: str = "best first", room: int = SEARCH_OUTPUT_CHARS, tail: bool = True) -> Shown:
    """One block per hit, "path — title (day)" then "  line-number: text" lines and its sync-conflict copies."""
    matched, by_meaning = total_all + some_only, sum(line is not None for _, _, line in hits)
    notes = plural(matched, "note")
    if not hits:
        return Shown(f"No notes{where} match {_quoted(query)}. Try fewer or different words." if query.strip() else
                     f"No notes{where}.")
    if total_all:
        head = f"{notes}{where}" + f" {'matches' if matched == 1 else 'match'} {_quoted(query)}" * bool(query.strip())
        head += f" ({total_all} with every word)" if some_only else ""
    elif matched:
        head = (f"No note{where} has every word of {_quoted(query)}; {notes} "
                f"{'has' if matched == 1 else 'have'} some of them")
    else:
        head = f"No note{where} has the words of {_quoted(query)}; notes close in meaning"
    head += f" ({by_meaning} shown for their meaning only)" if by_meaning and matched else ""
    paths, copies = [path for path, _, _ in hits], {}  # copies: note -> the names of its sync-conflict copies
    marks = ",".join("?" * len(paths))
    for original, path in idx.conn.execute(f"SELECT conflict_of, path FROM notes WHERE conflict_of IN ({marks}) "
                                           "AND NOT private ORDER BY path", paths):
        copies.setdefault(original, []).append(path.rsplit("/", 1)[-1])
    dates = {path: f"{day}, {DATED_BY[by]}" for path, day, by in idx.conn.execute(
        f"SELECT path, day, dated_by FROM notes WHERE path IN ({marks})", paths)}
    blocks, used, shown = [], len(head) + 80, {}  # room for the head and the closing "more" line
    for path, title, line in hits:
        lines = _best_lines(idx.kb, path, patterns, line)
        block = f"{path} — {title} ({dates[path]})" + "".join(f"\n  {n}: {text}" for n, text in lines)
        if path in copies:
            block += f"\n  {path.rsplit('/', 1)[-1]} has {_copies(copies[path])}: {_named(copies[path])}; " \
                     "compare and merge, then delete the copies"
        if used + len(block) + 2 > room:
            if blocks:
                break
            block = block[:max(0, room - used - 2)]
        shown[path] = [n for n, text in lines if f"\n  {n}: {text}" in block]  # all, unless the block was cut
        blocks.append(block)
        used += len(block) + 2
    more = matched - sum(line is None for _, _, line in hits[:len(blocks)])
    more = [f"({more} more matched; add words or a folder to narrow the search.)"] if more > 0 and tail else []
    return Shown("\n\n".join([f"{head}, {order}:", *blocks, *more]), shown, shown)


def _quoted(query: str) -> str:
    """The query as echoed in the answer's first line: on one line, and cut if it is long."""
    query = " ".join(query.split())
    if len(query) > SEARCH_QUERY_ECHO_CHARS:
        query = query[:SEARCH_QUERY_ECHO_CHARS].rstrip() + "…"
    return f"'{query}'" if '"' in query else f'"{query}"'


def _tag_patterns(tags: list) -> list:
    """Patterns marking where a note has the tag (or one nested in it): `#tag`, or in its `tags` property."""
    return [re.compile(r"(?:(?<!\S)#|^\s*-\s*#?|^tags?:.*?(?<![\w/#]))" + re.escape(tag) + r"(?![\w-])", re.I)
            for tag in tags]


def _line_patterns(words: list) -> list:
    """Patterns marking the lines to show; a line holding a whole Chinese run also holds its 2-char words."""
    patterns = set()
    for word in set(words):
        for run in CJK_RUN.findall(word):
            patterns.update(re.escape(u) for u in {run, *cjk_words(run, "none").split()})
        for piece in filter(None, CJK_RUN.split(word)):  # match the start: plurals count
            core = piece[:-1] if len(piece) > 4 and piece.endswith("s") else piece  # archives -> archive
            patterns.add(r"(?<![^\W_])(?i:" + re.escape(core) + ")")
    return [re.compile(p) for p in patterns]


def _best_lines(kb: Path, path: str, patterns: list, chunk_line: int | None = None) -> list:
    """(line number, clipped line) of the lines matching most patterns, in note order; else the body's first."""
    text = indexed_text(path, read_text(kb, path) or "")
    lines = text.splitlines()
    patterns = patterns if chunk_line is None else []  # found by meaning: the chunk's opening lines
    found = [(n, line, {p: m for p in patterns if (m := p.search(line))}) for n, line in enumerate(lines, 1)
             if line.strip()]
    lines_with = Counter(p for _, _, ms in found for p in ms)  # a word on every line of the note tells little
    scored = [(-round(sum(1 / lines_with[p] for p in ms), 9), n, line, min(m.start() for m in ms.values()))
              for n, line, ms in found if ms]
    if not scored:  # matched by path, title, meaning or word form only: show the opening line(s) for context
        start = (chunk_line or frontmatter.front_matter(text)[1]) - 1
        scored = [(0, n, line, 0) for n, line in enumerate(lines[start:start + 50], start + 1)
                  if line.strip() and not HEADING.match(line)][:1 if patterns else SEARCH_LINES_PER_HIT]
    best = sorted(sorted(scored)[:SEARCH_LINES_PER_HIT], key=lambda s: s[1])
    return [(number, _clip(line.rstrip(), start)) for _, number, line, start in best]


def _clip(line: str, start: int) -> str:
    """About SEARCH_LINE_CHARS of the line around `start`, with … where it was cut."""
    begin = max(0, min(start - SEARCH_LINE_CHARS // 4, len(line) - SEARCH_LINE_CHARS))
    piece = line[begin:begin + SEARCH_LINE_CHARS].strip()
    return ("…" if begin else "") + piece + ("…" if begin + SEARCH_LINE_CHARS < len(line) else "")


# --- The question's passages, before the model is asked ---
def passages(notebook, question: str, room_tokens: int, embedder: embeddings.Embedder | None = None) -> Shown | None:
    """The first PASSAGE_NOTES notes a search for the question finds, to send with it, numbered as search hits are,
    in `room_tokens`: best note first, each whole if it fits, else its best lines with PASSAGE_AROUND around each,
    else those alone, always leaving room for the best lines of the notes after it."""
    try:
        found = search_notes(notebook, question, None, embedder)
    except ToolError:
        return None
    ways = {}  # per note, its blocks from the least to the most: (line numbers, text)
    for path, best in list(found.lines.items())[:PASSAGE_NOTES]:
        text = indexed_text(path, read_text(notebook.kb, path) or "")
        lines, body = text.splitlines(), frontmatter.front_matter(text)[1]  # its properties cost room, say little
        best = sorted({max(b, body) for b in best})  # a best line in the front matter (its title): the first line
        near = {n for b in best for n in range(max(b - PASSAGE_AROUND, body), min(b + PASSAGE_AROUND, len(lines)) + 1)}
        for numbers in (best, sorted(near), range(body, len(lines) + 1)):
            numbers = [n for n in numbers if 0 < n <= len(lines) and lines[n - 1].strip()]
            block = path + "".join(f"\n  {n}: {_clip(lines[n - 1].rstrip(), 0)}" for n in numbers)
            ways.setdefault(path, []).append((numbers, block))
    chosen: dict[str, tuple] = {}
    for rank, (path, blocks) in enumerate(ways.items()):
        reserved = sum(text_tokens(later[0][1]) for later in list(ways.values())[rank + 1:])  # their best lines
        for way in reversed(blocks):  # the whole note, else around its best lines, else those alone
            if text_tokens("\n\n".join([block for _, block in chosen.values()] + [way[1]])) + reserved <= room_tokens:
                chosen[path] = way
                break
    shown = {path: numbers for path, (numbers, _) in chosen.items()}
    return Shown("\n\n".join(block for _, block in chosen.values()), shown, shown) if chosen else None


# --- Listing ---
def list_notes(notebook, folder: str | None = None, person=False, after: str | None = None,
               before: str | None = None) -> Shown:
    """How many notes there are (per subfolder) and the newest ones first, capped and bounded, only those of the
    days from `after` to `before` if given; `person`: for the person's /list, not the model."""
    lo, hi, said = _folder(notebook.kb, folder, "are listed", person)
    days = _days(after, before)
    found = notebook.with_index(lambda idx: _listing(idx, lo, hi, days, person))
    return Shown(said + found, found.lines, found.named)


def _listing(idx: Index, lo: str, hi: str, days: tuple, person: bool) -> Shown:
    where = (f"in {lo}" if lo else "in the knowledge base") + _period(days)
    of_days, day_args = _of_days(days)
    inside, args = f"path >= ? AND path < ?{of_days}", (lo, hi, *day_args)
    unnamed = sum(lo <= path < hi for path in idx.unnamed)  # paths that are not UTF-8 sort below hi too
    unlisted = [f"{unnamed} note file(s) not listed: their names are not UTF-8; rename them to see them here."
                ] if unnamed else []
    private = idx.conn.execute(f"SELECT count(*) FROM notes n WHERE {inside} AND private", args)
    unlisted += [f"{n} private note{'s' * (n > 1)} not listed (.kaignore or private: true)." if person else
                 f"{n} private note(s) not listed (the person keeps them from the model)."
                 for n in private.fetchone() if n]
    rows = idx.conn.execute("SELECT path, title, day, dated_by, conflict_of FROM notes n "
                            f"WHERE {inside} AND NOT private ORDER BY day DESC, mtime_ns DESC, path", args).fetchall()
    names, total = [p[len(lo):] for p, *_ in rows], len(rows)
    if not total:
        return Shown("\n".join([f"No notes {where}.", *unlisted]))
    folders = sorted(Counter(p.split("/", 1)[0] for p in names if "/" in p).items())
    tail = ["Folders: " + ", ".join(f"{name}/ ({count})" for name, count in folders)] if folders else []
    if copies := [path for path, *_, original in rows if original]:  # so the person can resolve them
        unlisted.append(f"{_copies(copies)} (marked above if shown): {_named(copies)}; compare each with its "
                        "note, merge what differs, then delete the copy.")
    tail += unlisted
    out = [f"{total} note(s) {where}, newest first:"]
    used = len(out[0]) + sum(len(line) + 1 for line in tail) + 100
    for path, title, day, dated_by, original in rows[:LIST_MAX_NOTES]:
        line = f"{path} — {title}  ({day}, {DATED_BY[dated_by]})"
        line += f"  [sync-conflict copy of {original.rsplit('/', 1)[-1]}]" if original else ""
        if used + len(line) + 1 > LIST_OUTPUT_CHARS:
            break
        out.append(line)
        used += len(line) + 1
    listed = [path for path, *_ in rows[:len(out) - 1]]
    if total > len(listed):
        narrow = "give one of the folders below" if folders else "search_notes finds the others by their words"
        out.append(f"… {total - len(listed)} more not shown; {narrow}.")
    return Shown("\n".join(out + tail), named=listed)


# --- Links ---
def link_rows(notebook, keys: set, source: str | None = None) -> tuple:
    """(every file of the notes folder, the link rows (links.ROW_COLUMNS) of the note at `source` and of those
    whose key is in `keys`, by source and line, the private notes): what links.py resolves links with."""

    def rows(idx: Index) -> tuple:
        found = idx.conn.execute(f"SELECT * FROM links WHERE source = ? OR key IN ({','.join('?' * len(keys))}) "
                                 "ORDER BY source, line, rowid", (source, *keys)).fetchall()
        notes = idx.conn.execute("SELECT path, private FROM notes").fetchall()
        return {path for path, _ in notes} | idx.others, found, {path for path, private in notes if private}
    return notebook.with_index(rows)
