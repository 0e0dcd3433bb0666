"""Links between notes as Obsidian reads them: parse() finds each with its target's exact span, Resolver says which
file it means, plan_move() gives the new texts that keep every link meaning its file once a note moves, and rows(),
outgoing() and backlinks() serve the search index's link table. Pure: no file I/O.

As Obsidian 1.x (* where undocumented, our choice): wikilinks, Markdown links, a whole quoted "[[T]]" property,
canvas nodes[].file; none in code or %%comments%% (* nor indented code: in vaults, list items). Case-insensitive;
`T` is `T` or `T.md`. A wikilink means the exact vault path, else from its note's folder, else the shortest path
ending in "/T" (* ties in code-point order); a Markdown link tries its folder first; a canvas or a leading "/"
means the vault path. A rewrite keeps the link's form, `.md` and %-encoding, and follows newLinkFormat.
"""

import json
import posixpath
import re
from bisect import bisect_right
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import quote, unquote

LINK_FORMATS = ("shortest", "relative", "absolute")  # Obsidian's newLinkFormat settings
ROW_COLUMNS = ("source", "line", "target", "fragment", "form", "embed", "key")  # what rows() gives per link


class Link(NamedTuple):
    start: int  # the whole link is text[start:end]
    end: int
    line: int  # 1-based
    target: str  # the path as written ("" for [[#H]]); still %-encoded in a Markdown link, JSON-decoded in a canvas
    fragment: str  # after the first "#": heading(s), ^block, page=3; "" when none
    alias: str  # shown text or embed size (after "|", or a Markdown link's text); "" when none
    embed: bool
    form: str  # "wiki", "markdown", "property" (front matter) or "canvas"
    path_start: int  # the target is written at text[path_start:path_end]
    path_end: int


class Plan(NamedTuple):
    texts: dict  # path after the move -> its new text, for the files that change (the moved note under its new path)
    counts: dict  # the same paths -> how many links were rewritten there


# --- Finding links ---
# closed by "---" or "...", as frontmatter.py reads it
_FRONT_MATTER = re.compile(r"\ufeff?---[ \t]*\r?\n(?:.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_INSIDE_LINK = r"((?:[^\[\]\n]|\[(?!\[)|\](?!\]))*)"  # holds no [[ nor ]]: [[a [[b]] is the link [[b]]
_PROPERTY_LINK = re.compile(r"""(["'])\[\[""" + _INSIDE_LINK + r"\]\]\1")  # a quoted value that is one whole link
# Where code or a comment starts: a fence line (also inside quotes and list items), a backtick run, or %%.
_CODE_OR_COMMENT = re.compile(r"^[ \t>]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?(`{3,}(?=[^`\n]*$)|~{3,})|(`+)|%%", re.M)
_CODE_MARK = re.compile("[`~%]")  # one of these is on the line where any of those matches starts, and ends
_BLANK_LINE = re.compile(r"\n[ \t\r]*\n")  # an inline code span never crosses one
_TICKS = re.compile("`+")
# "[" or "![", not after a backslash; each way starts with its own character, for the regex engine to skip to.
_OPENING = r"(?:!(?<!\\!)\[|\[(?<!\\\[))"
_WIKILINK = re.compile(_OPENING + r"\[" + _INSIDE_LINK + r"\]\]")  # a single "]" does not end the target
_MARKDOWN_LINK = re.compile(
    _OPENING + r"((?:[^\[\]\n\\]|\\.|\[(?:[^\[\]\n\\]|\\.)*\])*)\]"  # [text], brackets nested one level
    r"\([ \t]*(?:<([^<>\n]*)>|((?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))+))"  # (<target> or (target
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*\)")  # an optional "title", then )
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:|//")  # external in a Markdown link; inside [[ ]] still a note link
_CANVAS_FILE = re.compile(r'"file"\s*:\s*"((?:[^"\\]|\\.)*)"')


def parse(text: str, path: str) -> list[Link]:
    """Every link of a note (.md) or canvas (.canvas) at `path`, in text order; other files hold none."""
    finder = {"canvas": _canvas_links, "md": _note_links}.get(path.lower().rsplit(".", 1)[-1], lambda text: [])
    links, line, counted = [], 1, 0
    for fields in sorted(finder(text)):
        line += text.count("\n", counted, fields[0])
        counted = fields[0]
        links.append(Link(fields[0], fields[1], line, *fields[2:]))
    return links


def _note_links(text: str) -> list[tuple]:
    front = _FRONT_MATTER.match(text)
    body = front.end() if front else 0
    found = [_wikilink(m.start(2) - 2, m.end(2) + 2, m.start(2), m.group(2), False, "property")
             for m in _PROPERTY_LINK.finditer(text, 0, body)]
    if text.find("[[", body) < 0 and text.find("](", body) < 0:
        return found  # no link can start here: spare the search for code and comments
    hidden = _hidden_spans(text, body)
    wikis = []
    for m in _WIKILINK.finditer(text, body):
        if m.group(1).strip() and _clear(hidden, *m.span()):
            wikis.append(m.span())
            found.append(_wikilink(*m.span(), m.start(1), m.group(1), m[0][0] == "!", "wiki"))
    for outer in _MARKDOWN_LINK.finditer(text, body):  # and those in its text: [![image](a.png)](note.md) holds two
        for m in [outer, *_MARKDOWN_LINK.finditer(text, outer.start(1), outer.end(1))]:
            group = 2 if m.group(2) is not None else 3
            written, at = m.group(group), m.start(group)
            if not written or _SCHEME.match(written) or not (_clear(hidden, *m.span()) and _clear(wikis, *m.span())):
                continue
            target, _, fragment = written.partition("#")
            found.append((m.start(), m.end(), target, fragment, m.group(1), m[0][0] == "!", "markdown",
                          at, at + len(target)))
    return found


def _wikilink(start: int, end: int, at: int, content: str, embed: bool, form: str) -> tuple:
    head, bar, alias = content.partition("|")
    if bar and head.endswith("\\"):  # [[T\|shown]], the escape a table cell needs
        head = head[:-1]
    target, _, fragment = head.partition("#")
    return (start, end, target, fragment, alias, embed, form, at, at + len(target))


def _hidden_spans(text: str, pos: int) -> list[tuple]:
    """(start, end) of the code and comments from pos on, in order: what they hold is text, not links."""
    spans, paragraph_end, runs = [], -1, {}
    while m := _code_or_comment(text, pos):
        fence, ticks = m.group(1), m.group(2)
        if fence:
            close = _closing_fence(fence[0], len(fence)).search(text, m.end())
            end = close.end() if close else len(text)  # an unclosed fence runs to the end
        elif ticks:
            if paragraph_end < m.end():  # a new paragraph: where its backtick runs of each length start
                blank = _BLANK_LINE.search(text, m.end())
                paragraph_end, runs = blank.start() if blank else len(text), {}
                for run in _TICKS.finditer(text, m.start(), paragraph_end):
                    runs.setdefault(run.end() - run.start(), []).append(run.start())
            closes = runs[len(ticks)]
            after = bisect_right(closes, m.start())
            if after == len(closes):  # unmatched backticks are plain text
                pos = m.end()
                continue
            end = closes[after] + len(ticks)
        else:
            close = text.find("%%", m.end())
            end = close + 2 if close >= 0 else len(text)
        spans.append((m.start(), end))
        pos = end
    return spans


def _code_or_comment(text: str, pos: int):
    """_CODE_OR_COMMENT.search(text, pos), tried only on lines holding a ` ~ or % (5x faster than the regex)."""
    while mark := _CODE_MARK.search(text, pos):
        line_end = text.find("\n", mark.end())
        line_end = len(text) if line_end < 0 else line_end
        if found := _CODE_OR_COMMENT.search(text, max(pos, text.rfind("\n", 0, mark.start()) + 1), line_end):
            return found
        pos = line_end
    return None


@lru_cache(maxsize=None)
def _closing_fence(char: str, length: int) -> re.Pattern:
    return re.compile(r"^[ \t>]*" + re.escape(char) + "{%d,}[ \t\r]*$" % length, re.M)


def _clear(spans: list, start: int, end: int) -> bool:
    """No span of the ordered, disjoint spans overlaps text[start:end]."""
    i = bisect_right(spans, (start, float("inf"))) - 1
    return not (i >= 0 and spans[i][1] > start) and (i + 1 >= len(spans) or spans[i + 1][0] >= end)


def _canvas_links(text: str) -> list[tuple]:
    found = []
    for m in _CANVAS_FILE.finditer(text):
        try:
            target = json.loads(f'"{m.group(1)}"')
        except ValueError:
            continue
        found.append((m.start(1) - 1, m.end(1) + 1, target, "", "", False, "canvas", m.start(1), m.end(1)))
    return found


# --- Resolving links ---
class Resolver:
    """Which file a link means among the vault's files (notes, canvases, attachments; paths from the vault root)."""

    def __init__(self, paths):
        self.by_name = {}  # lower-case file name -> [(lower-case path, path)], shortest first, then alphabetical
        for path in sorted(paths, key=lambda p: (len(p), p)):
            self.by_name.setdefault(path.rsplit("/", 1)[-1].lower(), []).append((path.lower(), path))

    def resolve(self, target: str, source: str, form: str = "wiki") -> str | None:
        """The path a link written in `source` means, or None when no file matches."""
        target = (unquote(target) if form == "markdown" else target).strip()
        if not target:
            return source
        name = target.rsplit("/", 1)[-1].lower()
        candidates = self.by_name.get(name, []) + self.by_name.get(name + ".md", [])
        if not candidates:
            return None
        want = target.lower()
        if want.startswith("/") or form == "canvas":
            return _exact(candidates, want.lstrip("/"))
        beside = _join(source, want)
        for path in ((beside, want) if form == "markdown" else (want, beside)):
            if path and (found := _exact(candidates, path)):
                return found
        return min((path for lower, path in candidates if lower.endswith(("/" + want, "/" + want + ".md"))),
                   key=lambda path: (len(path), path), default=None)


def _exact(candidates: list, want: str) -> str | None:
    return next((path for wanted in (want, want + ".md") for lower, path in candidates if lower == wanted), None)


def _join(source: str, target: str) -> str | None:
    """target read from the folder of the note at source, as a vault path; None if it leaves the vault."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
    return None if joined == ".." or joined.startswith("../") else joined


def resolve_all(files: dict) -> dict:
    """{(path, index in parse order): the path it means or None} for every link; files: path -> text or None."""
    resolver = Resolver(files)
    return {(path, i): resolver.resolve(link.target, path, link.form)
            for path, text in files.items() if text is not None
            for i, link in enumerate(parse(text, path))}


# --- The link index kept beside the search index ---
def _name_key(name: str) -> str:
    return name.rsplit("/", 1)[-1].strip().lower().removesuffix(".md")


def link_keys(path: str) -> set:
    """The keys (rows()'s last column) of the links that may mean the file at path: query the rows by these."""
    key = _name_key(path)
    return {key, key.removesuffix(".md")}  # [[x.md]] can mean x.md.md


def rows(text: str, path: str) -> list[tuple]:
    """What to store for the note at path: one tuple per link, the fields of ROW_COLUMNS."""
    return [(path, link.line, link.target, link.fragment, link.form, link.embed,
             _name_key(unquote(link.target) if link.form == "markdown" else link.target))
            for link in parse(text, path)]


def outgoing(note_rows, resolver: Resolver) -> list[tuple]:
    """(line, target as written, fragment, the path it means or None) for each stored row of one note."""
    return [(line, target, fragment, resolver.resolve(target, source, form))
            for source, line, target, fragment, form, _embed, _key in note_rows]


def backlinks(path: str, candidate_rows, resolver: Resolver) -> list[str]:
    """"source:line" of each link elsewhere that means path, from the rows whose key is in link_keys(path)."""
    return [f"{source}:{line}" for source, line, target, _fragment, form, _embed, _key in candidate_rows
            if source != path and resolver.resolve(target, source, form) == path]


# --- Moving a note ---
def move_keys(from_path: str, to_path: str) -> set:
    """The keys of the only links a move can change: the caller must pass plan_move the texts of their notes."""
    return link_keys(from_path) | link_keys(to_path)


def plan_move(paths, texts: dict, from_path: str, to_path: str, link_format: str = "shortest") -> Plan:
    """The new texts that keep every resolved link meaning its file once from_path is at to_path. paths: the
    vault's files before; texts: at least the moved file's and those with a key in move_keys(). Else ValueError."""
    link_format = link_format if link_format in LINK_FORMATS else "shortest"  # as Obsidian reads an odd setting
    paths = set(paths)
    if from_path not in paths:
        raise ValueError(f"{from_path} is not in the vault.")
    if to_path in paths and to_path != from_path:
        raise ValueError(f"{to_path} already exists.")
    if from_path.lower().endswith((".md", ".canvas")) and from_path not in texts:
        raise ValueError(f"the text of {from_path} is needed: its own links may have to change.")
    # A relative link of the moved note to no file keeps leading where it did, as one to a file does: else a move
    # would tell the model which of its guessed names are notes kept from it.
    before = Resolver(paths)
    paths |= {joined for link in parse(texts.get(from_path) or "", from_path) if link.form == "markdown"
              and before.resolve(link.target, from_path, link.form) is None
              and (joined := _join(from_path, unquote(link.target).strip()))}
    before, after = Resolver(paths), Resolver(paths - {from_path} | {to_path})
    new_texts, counts = {}, {}
    for path, text in texts.items():
        source = to_path if path == from_path else path
        edits = []
        for link in parse(text, path) if text is not None else ():
            meant = before.resolve(link.target, path, link.form)
            if meant is None:
                continue
            beside = link.form == "markdown" and _beside(link.target, path, meant)
            meant = to_path if meant == from_path else meant
            if after.resolve(link.target, source, link.form) != meant or \
                    beside and not _beside(link.target, source, meant):  # a relative link must stay one
                edits.append((link, _rewritten(text, link, meant, source, beside, after, link_format)))
        if edits:
            new_texts[source], counts[source] = _apply(text, edits), len(edits)
    return Plan(new_texts, counts)


def _beside(target: str, source: str, meant: str) -> bool:
    """The Markdown link means `meant` from its note's folder: it stays relative, for other Markdown viewers."""
    joined = _join(source, unquote(target).strip().lower())
    return joined is not None and meant.lower() in (joined, joined + ".md")


def _apply(text: str, edits: list) -> str:
    pieces, at = [], 0
    for link, written in sorted(edits):
        pieces += [text[at:link.path_start], written]
        at = link.path_end
    return "".join(pieces + [text[at:]])


def _rewritten(text: str, link: Link, meant: str, source: str, beside: bool, resolver: Resolver,
               link_format: str) -> str:
    """The new target text of a link, written as the link was, that means `meant` from `source` after the move."""
    for written in _spellings(text, link, meant, source, beside, link_format):
        if _writable(written, link.form) and resolver.resolve(written, source, link.form) == meant:
            return written
    raise ValueError(f"the link to {meant} in {source} (line {link.line}) cannot be written so that it still "
                     "leads there; choose a name without # | [ ] ^.")


def _spellings(text: str, link: Link, meant: str, source: str, beside: bool, link_format: str) -> list:
    """Ways to write the link's new target, best first: the first that resolves to `meant` is taken."""
    if link.form == "canvas":
        return [json.dumps(meant, ensure_ascii=False)[1:-1]]
    target = (unquote(link.target) if link.form == "markdown" else link.target).strip()
    full = meant if target.lower().endswith(".md") or not meant.lower().endswith(".md") else meant[:-3]
    name, relative = full.rsplit("/", 1)[-1], _relative(full, source)
    if link.form == "markdown":
        ways = [relative, "./" + relative] if beside else [] if "/" in target else [name]
        angle = text[link.path_start - 1] == "<"
        return [_encoded(way, link.target, angle) for way in ways + [full, "/" + full]]
    return {"shortest": [name], "relative": [relative, "./" + relative], "absolute": []}[link_format] + \
        [full, "/" + full]


def _relative(path: str, source: str) -> str:
    """path as written from the folder of the note at source: a/b.md from a/c/x.md is ../b.md."""
    here, there = source.split("/")[:-1], path.split("/")
    common = len(posixpath.commonprefix([here, there[:-1]]))
    return "/".join([".."] * (len(here) - common) + there[common:])


def _writable(written: str, form: str) -> bool:
    """A target this form can hold: `b]` cannot ([[b]]] is the link [[b]] and a ']')."""
    if form in ("wiki", "property"):
        return not any(c in written for c in "|#\n") and "[[" not in written and "]]" not in written + "]" \
            and not (form == "property" and any(q in written for q in "\"'"))
    return "\n" not in written


_ENCODED_NON_ASCII = re.compile("%[89a-fA-F][0-9a-fA-F]")
_PRINTABLE_ASCII = "".join(chr(c) for c in range(33, 127))


def _encoded(path: str, like: str, angle: bool) -> str:
    """path %-encoded as the Markdown link target `like` is (non-ASCII, and spaces in <...>, only if it does)."""
    unsafe = {"%": "%25", "#": "%23"}
    if angle:
        unsafe.update({"<": "%3C", ">": "%3E"} | ({" ": "%20"} if "%20" in like else {}))
    else:
        unsafe.update({" ": "%20", "(": "%28", ")": "%29"})
    written = "".join(unsafe.get(c, c) for c in path)
    return quote(written, safe=_PRINTABLE_ASCII) if _ENCODED_NON_ASCII.search(like) else written
