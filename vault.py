"""What an Obsidian-style vault says beyond plain Markdown: properties, tags and sections.

Pure functions over a note's text, for index.py, search.py, tools.py and the page. Line numbers are 1-based and
counted as read_note counts them (str.splitlines, a leading BOM ignored); CRLF notes work as they are. It never
writes anything, and never fails on what a note holds: a shape of YAML it does not know is kept as text. Only
find_section and append_to_section raise, ValueError, with a message for the model.
"""

import re

HEADINGS_LISTED = 40  # an unknown heading's message lists this many of the note's headings
OUTLINE_MAX_HEADINGS = 80  # an outline longer than this leaves out its deepest levels, then is cut
SHOWN_LINE_CHARS = 60  # a front matter line quoted in a refusal is cut to this length


def _lines(text: str) -> list:
    return (text[1:] if text.startswith("\ufeff") else text).splitlines()


# --- Front matter: the YAML people write in vaults, without a YAML library ---
_CLOSING = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.M)
_COLON = re.compile(r":(?=[ \t]|$)")  # ends a property's name (every pattern here is linear on any line)
_NOT_KEY_START = "#'\"[]{},&*!|>%@`?"  # YAML indicators: a line starting so is no plain `name: value`
_ITEM = re.compile(r"-(?:[ \t](.*))?$")
_BLOCK_SCALAR = re.compile(r"([|>])([+-]?)[1-9]?[+-]?[ \t]*(?:#.*)?$")
_QUOTED = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^']|'')*'""", re.S)
_COMMENT = re.compile(r"[ \t]#")
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "/": "/", " ": " "}
_FLOW = re.compile(r"\[(.*)\](?:[ \t]+#.*)?")
_FLOW_PIECE = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^,"']+|.""")  # a quoted string, text, or one mark
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_LISTS = (("tags", "tag"), ("aliases", "alias"))  # Obsidian's list properties, and their pre-1.9 singular names
_LIST_SEPARATORS = {"tags": r"[,\s]+", "aliases": r","}


def _fenced(text: str):
    """(closed, the lines between the fences) when line 1 is '---', else None; `closed`: a '---' or '...' ends them."""
    text = text[1:] if text.startswith("\ufeff") else text
    first, _, rest = text.partition("\n")
    if first.rstrip() != "---":
        return None
    end = _CLOSING.search(rest)
    return (True, rest[:end.start()].splitlines()) if end else (False, [])


def front_matter(text: str) -> tuple:
    """(properties, the line the body starts on, the front matter's lines as written). Values are strings (numbers
    and dates as written), None when empty, lists for `[a, b]` and `- a` items; `tags` and `aliases` (and the old
    `tag`, `alias`) become lists of strings. No front matter, or one never closed: ({}, 1, [])."""
    fenced = _fenced(text)
    if not fenced or not fenced[0]:
        return {}, 1, []
    return _normalised(_properties(fenced[1])), len(fenced[1]) + 3, fenced[1]


def _body_start(text: str) -> int:
    """The line after the front matter's closing fence; 1 without a (closed) front matter."""
    fenced = _fenced(text)
    return len(fenced[1]) + 3 if fenced and fenced[0] else 1


def _entries(lines: list) -> list:
    """(index, line, the indented and blank lines after it) for each top-level line that is not a comment."""
    entries = []
    for i, line in enumerate(lines):
        if line[:1] in (" ", "\t") or not line.strip():
            if entries:
                entries[-1][2].append(line)
        elif not line.startswith("#"):
            entries.append((i, line, []))
    return entries


def _joined(value: str, more: list) -> str:
    """A value and its indented continuation lines as YAML folds them: one line, single spaces."""
    if not more:
        return value.strip()
    return " ".join([value.strip()] + [s for s in (line.strip() for line in more) if s and not s.startswith("#")])


def _properties(lines: list) -> dict:
    properties, key = {}, None
    for _, line, more in _entries(lines):
        item = _ITEM.match(line) if line[0] == "-" else None
        if item:  # `key:` then `- a` lines at the key's own indent
            if key is not None and (properties[key] is None or isinstance(properties[key], list)):
                properties[key] = (properties[key] or []) + [_value(_joined(item[1] or "", more))]
            continue
        found = _property(line)
        key = found[0] if found else None
        if found:
            properties[key] = _read_value(found[1], more)
    return properties


def _property(line: str):
    """(name, value as written) of a top-level `name: value` line, or None if it is not one."""
    if line[0] in ("'", '"'):  # a quoted name may hold ': '
        quoted = _QUOTED.match(line)
        rest = line[quoted.end():].lstrip(" \t") if quoted else ""
        return (_value(quoted.group()), rest[1:].strip()) if _COLON.match(rest) else None
    end = _COLON.search(line) if line[0] not in _NOT_KEY_START else None
    return (line[:end.start()].rstrip(), line[end.end():].strip()) if end else None


def _read_value(value: str, more: list):
    block = _BLOCK_SCALAR.match(value) if value.startswith(("|", ">")) else None
    if block:
        return _block_scalar(block[1], block[2], more)
    if value:
        return _value(_joined(value, more))
    lines = [line for line in more if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return None
    indent = len(lines[0]) - len(lines[0].lstrip())
    if not _ITEM.match(lines[0][indent:]):  # a nested mapping or another shape: kept as text
        return "\n".join(line[indent:] if not line[:indent].strip() else line.strip() for line in lines)
    items = []
    for line in lines:
        item = _ITEM.match(line[indent:]) if len(line) - len(line.lstrip()) == indent else None
        if item:
            items.append([item[1] or ""])
        else:
            items[-1].append(line.strip())
    return [_value(" ".join(parts)) for parts in items]


def _block_scalar(style: str, chomp: str, more: list) -> str:
    """A `key: |` (lines kept) or `key: >` (lines folded) value; `|-` and `>-` drop the final newline."""
    lines = list(more)
    while lines and not lines[-1].strip():
        lines.pop()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    text = "\n".join(line[indent:] for line in lines)
    if style == ">":
        text = "\n".join(" ".join(paragraph.split("\n")) for paragraph in text.split("\n\n"))
    return text if chomp == "-" or not text else text + "\n"


def _value(raw: str):
    """One value as written on a line: quoted, a `[a, b]` list, or plain (a trailing ` # comment` dropped)."""
    raw = raw.strip()
    if raw[:1] in ("'", '"'):
        quoted = _QUOTED.match(raw)
        if not quoted or not _ends_cleanly(raw[quoted.end():]):
            return raw
        inner = quoted.group()[1:-1]
        if raw[0] == "'":
            return inner.replace("''", "'")
        return _ESCAPE.sub(lambda m: chr(int(m[1][1:], 16)) if len(m[1]) > 1 else _ESCAPES.get(m[1], m[0]), inner)
    if raw.startswith("[") and not raw.startswith("[["):
        items = _flow_list(raw)
        if items is not None:
            return items
    plain = _COMMENT.split(raw, 1)[0].rstrip() if "#" in raw else raw
    return None if plain in _NULLS else plain


def _ends_cleanly(rest: str) -> bool:
    """Nothing, or only a comment, follows a closed quote or bracket."""
    return not rest.strip() or bool(re.match(r"[ \t]+#", rest))


def _flow_list(raw: str):
    """The items of `[a, "b, c", d]`, or None for a shape not read here (nested lists, maps)."""
    whole = _FLOW.fullmatch(raw)
    if not whole:
        return None
    items, item = [], ""
    for piece in _FLOW_PIECE.findall(whole[1]) + [","]:
        if piece == ",":
            items.append(item.strip())
            item = ""
        elif piece[0] not in "\"'" and any(mark in piece for mark in "[]{}"):
            return None
        else:
            item += piece
    return [_value(item) for item in items if item]


def _normalised(properties: dict) -> dict:
    """tags and aliases (any case, or the old singular names) as lists of strings, whatever form they were written
    in: tags split at commas and spaces and without a leading '#', aliases split at commas when one string."""
    for plural, singular in _LISTS:
        names = [name for name in properties if name.casefold() in (plural, singular)]
        if not names:
            continue
        found = []
        for value in [properties.pop(name) for name in names]:
            if isinstance(value, str) or plural == "tags":  # a tag holds no comma nor space; an alias may
                value = [piece for item in _as_list(value) for piece in re.split(_LIST_SEPARATORS[plural], item)]
            found += _as_list(value)
        found = [item.strip().lstrip("#") if plural == "tags" else item.strip() for item in found]
        properties[plural] = list(dict.fromkeys(item for item in found if item))
    return properties


def _as_list(value) -> list:
    return [item for item in (value if isinstance(value, list) else [value]) if isinstance(item, str)]


def front_matter_problem(text: str) -> str | None:
    """Why Obsidian could not read this note's front matter as written, in one line naming the line; None if it
    can, or if line 1 is not '---'. Accepts what vaults hold: `key: value`, `- item` under `key:`, indented
    continuations, blank and comment lines; refuses what YAML refuses that an edit easily makes."""
    fenced = _fenced(text)
    if fenced is None:
        return None
    closed, lines = fenced
    if not closed:
        return ("the front matter opened by '---' on line 1 has no closing '---' line, so none of the note's "
                "properties could be read")
    seen, list_allowed = {}, False
    for i, line, more in _entries(lines):
        where = f"line {i + 2} ({_shown(line)})"
        item = _ITEM.match(line) if line[0] == "-" else None
        if item:
            if not list_allowed:
                return (f"{where} is a list item under a property that has a value on its own line; write the "
                        "property as 'name:' alone with '- item' lines below it")
            problem = _value_problem(_joined(item[1] or "", more))
            if problem:
                return f"{where}: {problem}"
            continue
        found = _property(line)
        if not found:
            hint = "put a space after its ':'" if re.search(r":\S", line) else "a property is written 'name: value'"
            return f"{where} is not 'name: value', a '- ' list item or an indented line; {hint}"
        key, value = found
        if key in seen:
            return f"{where} repeats the property '{key}' of line {seen[key]}; each property may appear only once"
        seen[key], list_allowed = i + 2, not value
        problem = None if not value or _BLOCK_SCALAR.match(value) else _value_problem(_joined(value, more))
        if problem:
            return f"{where}: {problem}"
    return None


def front_matter_broken(old_text: str, new_text: str) -> str | None:
    """What a change would break in the note's front matter, in one line, or None: front_matter_problem of the result
    (unless the note had one already: then the change may be fixing it), or the whole front matter pushed off line 1
    by text put before it (taking it out is allowed)."""
    problem = front_matter_problem(new_text)
    if problem:
        return None if front_matter_problem(old_text) else problem
    old_start = _body_start(old_text)
    block = "\n".join(_lines(old_text)[:old_start - 1])  # the old front matter with its fences, as whole lines
    if old_start > 1 and _body_start(new_text) == 1 and f"\n{block}\n" in "\n" + new_text.replace("\r\n", "\n") + "\n":
        return ("the front matter would no longer start on line 1, so Obsidian would read none of its properties; "
                "keep '---' as the note's first line and put new text after the closing '---'")
    return None


def _shown(line: str) -> str:
    line = line.strip()
    return repr(line if len(line) <= SHOWN_LINE_CHARS else line[:SHOWN_LINE_CHARS - 1] + "…")


def _value_problem(value: str) -> str | None:
    if value[:1] in ("'", '"'):
        quoted = _QUOTED.match(value)
        if not quoted:
            return "its quote is never closed"
        return None if _ends_cleanly(value[quoted.end():]) else "text follows the closing quote; quote the whole value"
    if value[:1] in ("[", "{"):
        return _bracket_problem(value)
    if value[:1] in ("@", "`", "*"):
        return f"a value starting with '{value[0]}' must be in quotes"
    plain = _COMMENT.split(value, 1)[0].rstrip()
    if re.search(r":(?:[ \t]|$)", plain):
        return "a value holding ': ' (or ending in ':') must be in quotes, like title: \"Re: plans\""
    return None


def _bracket_problem(value: str) -> str | None:
    """`[a, "b"]`, `[[link]]`, `{a: 1}` must close, with only a comment after them."""
    depth, at, before = 0, 0, ""
    while at < len(value):
        char = value[at]
        if char in ("'", '"') and before in ("[", "{", ",", ":"):  # a quote opening an item, not `it's`
            quoted = _QUOTED.match(value, at)
            if not quoted:
                return "a quote in it is never closed"
            at, before = quoted.end(), char
            continue
        depth += (char in "[{") - (char in "]}")
        if depth == 0:
            rest = value[at + 1:]
            return None if _ends_cleanly(rest) else "text follows its closing bracket; quote the whole value"
        before = char if not char.isspace() else before
        at += 1
    return f"its '{value[0]}' is never closed"


# --- Tags ---
_TAG_BODY = r"[\w/-]*[^\W\d][\w/-]*"  # letters (CJK too), digits, _ - /; at least one letter or _
_TAG = re.compile(r"#(?<!\S#)(" + _TAG_BODY + ")")  # after a space or at the start; '#' first: a fast scan
_QUERY_TAG = re.compile(r"(?<!\S)(?:tag:#?|#)(" + _TAG_BODY + r")(?!\S)")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
_FENCE = re.compile(r"[ \t>]*(`{3,}|~{3,})")


def _outside_code(lines: list, first: int = 0):
    """(index, line) of the lines from `first` on that are neither in a fenced code block nor one of its fences."""
    fence = None
    for i in range(first, len(lines)):
        line = lines[i]
        opening = _FENCE.match(line) if "`" in line or "~" in line else None
        if fence:
            if opening and opening[1][0] == fence[0] and len(opening[1]) >= len(fence) \
                    and not line[opening.end():].strip():
                fence = None
        elif opening and not (opening[1][0] == "`" and "`" in line[opening.end():]):  # else inline code
            fence = opening[1]
        else:
            yield i, line


def tags_of(text: str) -> set:
    """The note's tags as written, without '#': its `tags` property and its inline #tags (not in code, links,
    URLs or headings' '#' marks). Obsidian compares tags without case: see tag_matches."""
    properties, body_start, _ = front_matter(text)
    found = set(properties.get("tags", []))
    if _TAG.search(text):  # most notes have none: only then look for code, line by line
        for _, line in _outside_code(_lines(text), body_start - 1):
            if "#" in line:
                found.update(tag.rstrip("/") for tag in _TAG.findall(_CODE_SPAN.sub(" ", line)))
    return found


def tag_matches(query_tag: str, tag: str) -> bool:
    """True if a search for `query_tag` finds `tag`: the same tag or one nested in it (devops: devops/ci), any case."""
    wanted, tag = query_tag.strip().lstrip("#").rstrip("/").casefold(), tag.lstrip("#").casefold()
    return bool(wanted) and (tag == wanted or tag.startswith(wanted + "/"))


def query_tags(query: str) -> tuple:
    """(the tags a search asks for as `#tag`, `tag:tag` or `tag:#tag`, the rest of the query)."""
    tags = [tag.rstrip("/") for tag in _QUERY_TAG.findall(query)]
    return tags, " ".join(_QUERY_TAG.sub(" ", query).split())


# --- Sections: a heading and the lines under it ---
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t](.*))?$")
_MARKS = [(re.compile(r"!?\[\[[^\]|]*\|([^\]]*)\]\]"), r"\1"), (re.compile(r"!?\[\[([^\]]*)\]\]"), r"\1"),
          (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"), (re.compile(r"<[^>]*>|[`*_~=]+"), "")]


def headings(text: str) -> list:
    """(line, level, title) of each ATX heading (`## Title`) outside front matter and code. Setext headings (a line
    underlined with === or ---) are not read: in vaults such a `---` is far more often a rule under a paragraph."""
    lines = _lines(text)
    found = []
    for i, line in _outside_code(lines, _body_start(text) - 1):
        heading = _ATX.match(line) if line.lstrip(" ")[:1] == "#" else None
        if heading:
            found.append((i + 1, len(heading[1]), _without_closing((heading[2] or "").strip())))
    return found


def _without_closing(title: str) -> str:
    """A heading's title without its optional closing '#'s (`## Title ##`); `C#` keeps its '#'."""
    bare = title.rstrip("#")
    return bare.rstrip() if bare != title and (not bare or bare[-1] in " \t") else title


def _plain(title: str) -> str:
    """A heading as compared: without Markdown marks (links show their shown text), case or repeated spaces."""
    for pattern, replacement in _MARKS:
        title = pattern.sub(replacement, title)
    return " ".join(title.casefold().split())


def _paths(found: list) -> list:
    """Each heading's titles from its outermost parent heading down to itself."""
    paths, stack = [], []
    for _, level, title in found:
        stack = [(lvl, t) for lvl, t in stack if lvl < level] + [(level, title)]
        paths.append([t for _, t in stack])
    return paths


def find_section(text: str, wanted: str) -> tuple:
    """(heading line, last line) of the section under the heading `wanted`, to the next heading of the same or a
    higher level. `wanted` is compared without case or Markdown marks; 'Parent > Child' picks among repeated names.
    An unknown or ambiguous heading raises ValueError naming the note's headings."""
    found = headings(text)
    paths = _paths(found)
    name = re.sub(r"^#+\s*", "", (wanted or "").strip())
    key = _plain(name)
    if not key:
        raise ValueError("name the heading of the section, e.g. 'Install' or 'Setup > Linux'.")
    chosen = [i for i, (_, _, title) in enumerate(found) if _plain(title) == key]
    if not chosen and ">" in name:
        parts = [_plain(part) for part in name.split(">")]
        chosen = [i for i, path in enumerate(paths) if _plain(path[-1]) == parts[-1] and _within(path[:-1], parts[:-1])]
    if len(chosen) != 1:
        raise ValueError(_no_section(name, found, paths, chosen))
    line, level, _ = found[chosen[0]]
    after = [other for other, other_level, _ in found[chosen[0] + 1:] if other_level <= level]
    return line, after[0] - 1 if after else len(_lines(text))


def _within(ancestors: list, parts: list) -> bool:
    """The parts name some of these ancestor headings, outermost first."""
    names = iter(_plain(title) for title in ancestors)
    return all(part in names for part in parts)


def _no_section(name: str, found: list, paths: list, chosen: list) -> str:
    if not found:
        return f"the note has no headings, so there is no section '{name}'; read it by line numbers instead."
    if chosen:
        shown = [f"{' > '.join(paths[i])} (line {found[i][0]})" for i in chosen]
        return (f"{len(chosen)} headings match '{name}': {'; '.join(shown)}. Name one as 'Parent > Child', "
                "or read it by line numbers.")
    titles = [_plain(title) for _, _, title in found]
    shown = [f"{' > '.join(path) if titles.count(titles[i]) > 1 else path[-1]} (line {found[i][0]})"
             for i, path in enumerate(paths)]
    more = f"; and {len(shown) - HEADINGS_LISTED} more" if len(shown) > HEADINGS_LISTED else ""
    return f"no heading '{name}' in the note. Its headings: {'; '.join(shown[:HEADINGS_LISTED])}{more}."


def outline(text: str) -> str:
    """The note's headings with their line numbers, indented by level: a map for reading a long note by section.
    Past OUTLINE_MAX_HEADINGS the deepest levels are left out, then the list is cut. "" without headings."""
    found = headings(text)
    levels = sorted({level for _, level, _ in found})
    shown = found
    while len(shown) > OUTLINE_MAX_HEADINGS and len(levels) > 1:
        levels.pop()
        shown = [h for h in found if h[1] in levels]
    lines = [f"{'  ' * levels.index(level)}{title} (line {line})"
             for line, level, title in shown[:OUTLINE_MAX_HEADINGS]]
    if len(shown) < len(found) or len(shown) > OUTLINE_MAX_HEADINGS:
        lines.append(f"… {len(found) - len(lines)} more headings not shown")
    return "\n".join(lines)


def append_to_section(text: str, wanted: str, content: str) -> str:
    """The text with `content` added at the end of the section under `wanted` (find_section's rules): after its last
    line that is not blank, so the blank lines before the next heading stay there. The rest is kept byte for byte."""
    start, end = find_section(text, wanted)
    lines = (text[1:] if text.startswith("\ufeff") else text).splitlines(keepends=True)
    last = end
    while last > start and not lines[last - 1].strip():
        last -= 1
    newline = "\r\n" if lines[start - 1].endswith("\r\n") else "\n"
    added = [line + newline for line in content.replace("\r\n", "\n").rstrip("\n").split("\n")]
    if lines[last - 1] == lines[last - 1].rstrip("\r\n"):  # the note's last line, without a newline: keep it so
        lines[last - 1] += newline
        added[-1] = added[-1][:-len(newline)]
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    return bom + "".join(lines[:last] + added + lines[last:])
