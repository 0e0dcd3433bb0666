"""A note's front matter (its properties between two '---' lines) read as Obsidian reads it, without a YAML library.

    front_matter(text) -> (properties, the line the body starts on, its lines as written)
    front_matter_problem(text), front_matter_broken(old, new)   why Obsidian could not read it (None: it can)

Pure functions over a note's text: line numbers are 1-based as read_note counts them (str.splitlines, a leading BOM
ignored); CRLF notes work as they are. It never fails on what a note holds: a shape of YAML it does not know is kept
as text, and every pattern here is linear on any line.
"""

import re

SHOWN_LINE_CHARS = 60  # a front matter line quoted in a refusal is cut to this length
# Obsidian's list properties: their pre-1.9 singular names, and what splits one written as a single string
_LISTS = {"tags": ("tag", r"[,\s]+"), "aliases": ("alias", r",")}
_CLOSING = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.M)
_COLON = re.compile(r":(?=[ \t]|$)")  # ends a property's name
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


def lines_of(text: str) -> list:
    return text.removeprefix("\ufeff").splitlines()


def _fenced(text: str):
    """(closed, the lines after line 1's '---' to the closing '---' or '...', or to the end), else None."""
    first, _, rest = text.removeprefix("\ufeff").partition("\n")
    if first.rstrip() != "---":
        return None
    end = _CLOSING.search(rest)
    return (True, rest[:end.start()].splitlines()) if end else (False, rest.splitlines())


def front_matter(text: str) -> tuple:
    """(properties, the line the body starts on, the front matter's lines as written). Values are strings (numbers
    and dates as written), None when empty, lists for `[a, b]` and `- a` items; `tags` and `aliases` (and the old
    `tag`, `alias`) become lists of strings. No front matter, or one never closed: ({}, 1, [])."""
    fenced = _fenced(text)
    if not fenced or not fenced[0]:
        return {}, 1, []
    return _normalised(_properties(fenced[1])), len(fenced[1]) + 3, fenced[1]


def opening_properties(text: str) -> dict:
    """The properties of the block line 1's '---' opens, for privacy.py to fail safe on; one never closed is read
    to the text's end, each line alone (an indented one too: no closing line says where the block ends)."""
    fenced = _fenced(text)
    return _properties(fenced[1] if fenced[0] else [line.lstrip() for line in fenced[1]]) if fenced else {}


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
    if not more:  # most values: spare the list, a tenth of an index build's front matter time
        return value.strip()
    return " ".join([value.strip()] + [s for s in (line.strip() for line in more) if s and not s.startswith("#")])


def _properties(lines: list) -> dict:
    properties, key = {}, None
    for _, line, more in _entries(lines):
        if line[0] == "-" and (item := _ITEM.match(line)):  # `key:` then `- a` lines at the key's own indent
            if key is not None and (properties[key] is None or isinstance(properties[key], list)):
                properties[key] = (properties[key] or []) + [_value(_joined(item[1] or "", more))]
            continue
        key, value = _property(line) or (None, None)
        if key is not None:
            properties[key] = _read_value(value, more)
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
    if value.startswith(("|", ">")) and (block := _BLOCK_SCALAR.match(value)):
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
        if len(line) - len(line.lstrip()) == indent and (item := _ITEM.match(line[indent:])):
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
    if raw.startswith("[") and not raw.startswith("[[") and (items := _flow_list(raw)) is not None:
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
    for plural, (singular, separator) in _LISTS.items():
        names = [name for name in properties if name.casefold() in (plural, singular)]
        if not names:
            continue
        found = []
        for value in [properties.pop(name) for name in names]:
            if isinstance(value, str) or plural == "tags":  # a tag holds no comma nor space; an alias may
                value = [piece for item in _as_list(value) for piece in re.split(separator, item)]
            found += _as_list(value)
        found = [item.strip().lstrip("#") if plural == "tags" else item.strip() for item in found]
        properties[plural] = list(dict.fromkeys(item for item in found if item))
    return properties


def _as_list(value) -> list:
    return [item for item in (value if isinstance(value, list) else [value]) if isinstance(item, str)]


def front_matter_problem(text: str) -> str | None:
    """Why Obsidian could not read the front matter, in one line naming the line, or None. Accepts what vaults hold
    (`key: value`, `- item`s, indented, blank and comment lines); refuses what YAML refuses that edits easily make."""
    fenced = _fenced(text)
    if fenced is None:
        return None
    closed, lines = fenced
    if not closed:
        return ("the front matter opened by '---' on line 1 has no closing '---' line, so none of the note's "
                "properties could be read")
    seen, list_allowed = {}, False
    for i, line, more in _entries(lines):
        shown = line.strip()
        shown = shown if len(shown) <= SHOWN_LINE_CHARS else shown[:SHOWN_LINE_CHARS - 1] + "…"
        where = f"line {i + 2} ({shown!r})"
        if line[0] == "-" and (item := _ITEM.match(line)):
            if not list_allowed:
                return (f"{where} is a list item under a property that has a value on its own line; write the "
                        "property as 'name:' alone with '- item' lines below it")
            if problem := _value_problem(_joined(item[1] or "", more)):
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
        if value and not _BLOCK_SCALAR.match(value) and (problem := _value_problem(_joined(value, more))):
            return f"{where}: {problem}"
    return None


def front_matter_broken(old_text: str, new_text: str) -> str | None:
    """front_matter_problem of the result (unless the note had one already: the change may be fixing it), or the whole
    front matter pushed off line 1 by text put before it (taking it out is allowed)."""
    if problem := front_matter_problem(new_text):
        return None if front_matter_problem(old_text) else problem
    old_start = front_matter(old_text)[1]
    block = "\n".join(lines_of(old_text)[:old_start - 1])  # the old front matter with its fences, as whole lines
    if old_start > 1 and front_matter(new_text)[1] == 1 \
            and f"\n{block}\n" in "\n" + new_text.replace("\r\n", "\n") + "\n":
        return ("the front matter would no longer start on line 1, so Obsidian would read none of its properties; "
                "keep '---' as the note's first line and put new text after the closing '---'")
    return None


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
    if _COLON.search(_COMMENT.split(value, 1)[0].rstrip()):
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
            return None if _ends_cleanly(value[at + 1:]) else "text follows its closing bracket; quote the whole value"
        before = char if not char.isspace() else before
        at += 1
    return f"its '{value[0]}' is never closed"
