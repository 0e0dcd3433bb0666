"""What an Obsidian-style vault says beyond plain Markdown: tags, sections, excluded files, drawings, sync-conflict
copies, daily notes and the owner's settings (a note's properties: frontmatter.py).

Pure functions over texts and paths; line numbers are 1-based as read_note counts them (a leading BOM ignored). It
reads only `.obsidian/*.json`, through notes.read_bytes (a missing or malformed one counts as unset), never writes,
and never fails on what a note holds: only find_section and append_to_section raise, ValueError, for the model.
"""

import contextlib
import functools
import json
import re
from datetime import date, datetime, time
from pathlib import Path, PurePosixPath

import notes
from frontmatter import front_matter, lines_of

OBSIDIAN_DIR = ".obsidian"
APP_SETTINGS = f"{OBSIDIAN_DIR}/app.json"  # Excluded files and the vault's style live here
DAILY_SETTINGS = f"{OBSIDIAN_DIR}/daily-notes.json"
SETTINGS_MAX_BYTES = 1_000_000  # a vault's settings file larger than this is not read
HEADINGS_LISTED = 40  # an unknown heading's message lists this many of the note's headings
OUTLINE_MAX_HEADINGS = 80  # an outline longer than this leaves out its deepest levels, then is cut
DAILY_FORMAT = "YYYY-MM-DD"  # Obsidian's defaults for daily notes and core Templates
TEMPLATE_TIME_FORMAT = "HH:mm"


# --- Tags ---
_TAG_BODY = r"[\w/-]*[^\W\d][\w/-]*"  # letters (CJK too), digits, _ - /; at least one letter or _
_TAG = re.compile(r"#(?<!\S#)(" + _TAG_BODY + ")")  # after a space or at the start; '#' first: a fast scan
_QUERY_TAG = re.compile(r"(?<!\S)(?:tag:#?|#)(" + _TAG_BODY + r")(?!\S)")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
_FENCE = re.compile(r"[ \t>]*(`{3,}|~{3,})")


def _outside_code(lines: list, first: int = 0):
    """(index, line) of the lines from `first` on that are neither in a fenced code block nor one of its fences."""
    fence = None
    for i, line in enumerate(lines[first:], first):
        opening = _FENCE.match(line) if "`" in line or "~" in line else None
        if fence:
            if opening and opening[1][0] == fence[0] and len(opening[1]) >= len(fence) \
                    and not line[opening.end():].strip():
                fence = None
        elif opening and not (opening[1][0] == "`" and "`" in line[opening.end():]):  # else inline code
            fence = opening[1]
        else:
            yield i, line


def tags_of(text: str, parsed: tuple | None = None) -> set:
    """The note's tags without '#': its `tags` property and inline #tags outside code (parsed: front_matter)."""
    properties, body_start, _ = parsed or front_matter(text)
    found = set(properties.get("tags", []))
    if _TAG.search(text):  # most notes have none: only then look for code, line by line
        for _, line in _outside_code(lines_of(text), body_start - 1):
            if "#" in line:
                found.update(tag.rstrip("/") for tag in _TAG.findall(_CODE_SPAN.sub(" ", line)))
    return found


def query_tags(query: str) -> tuple:
    """(the tags a search asks for as `#tag`, `tag:tag` or `tag:#tag`, the rest of the query)."""
    tags = [tag.rstrip("/") for tag in _QUERY_TAG.findall(query)]
    return tags, " ".join(_QUERY_TAG.sub(" ", query).split())


# --- Sections: a heading and the lines under it ---
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t](.*))?$")
_MARKS = [(re.compile(r"!?\[\[[^\]|]*\|([^\]]*)\]\]"), r"\1"), (re.compile(r"!?\[\[([^\]]*)\]\]"), r"\1"),
          (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"), (re.compile(r"<[^>]*>|[`*_~=]+"), "")]


def headings(text: str) -> list:
    """(line, level, title) of each ATX heading outside front matter and code (a Setext `---` is a rule here)."""
    return [(i + 1, len(heading[1]), _without_closing((heading[2] or "").strip()))
            for i, line in _outside_code(lines_of(text), front_matter(text)[1] - 1)
            if line.lstrip(" ")[:1] == "#" and (heading := _ATX.match(line))]


def _without_closing(title: str) -> str:
    """A heading's title without its optional closing '#'s (`## Title ##`); `C#` keeps its '#'."""
    bare = title.rstrip("#")
    return bare.rstrip() if bare != title and (not bare or bare[-1] in " \t") else title


def _plain(title: str) -> str:
    """A heading as compared: without Markdown marks (links show their shown text), case or repeated spaces."""
    for pattern, replacement in _MARKS:
        title = pattern.sub(replacement, title)
    return " ".join(title.casefold().split())


def find_section(text: str, wanted: str) -> tuple:
    """(heading line, last line) of the section under `wanted` (compared as _plain; 'Parent > Child' or
    'Parent#Child' picks among repeats). An unknown or ambiguous heading raises ValueError naming the headings."""
    found, paths, stack = headings(text), [], []
    for _, level, title in found:  # each heading's titles from its outermost parent down to itself
        stack = [(lvl, t) for lvl, t in stack if lvl < level] + [(level, title)]
        paths.append([t for _, t in stack])
    name = re.sub(r"^#+\s*", "", (wanted or "").strip())
    key = _plain(name)
    if not key:
        raise ValueError("name the heading of the section, e.g. 'Install' or 'Setup > Linux'.")
    chosen = [i for i, (_, _, title) in enumerate(found) if _plain(title) == key]
    separator = ">" if ">" in name else "#"  # Obsidian's links write Setup#Install
    if not chosen and separator in name:
        parts = [_plain(part) for part in name.split(separator)]
        chosen = [i for i, path in enumerate(paths) if _plain(path[-1]) == parts[-1] and _within(path[:-1], parts[:-1])]
    if len(chosen) != 1:
        raise ValueError(_no_section(name, found, paths, chosen))
    line, level, _ = found[chosen[0]]
    after = [other for other, other_level, _ in found[chosen[0] + 1:] if other_level <= level]
    return line, after[0] - 1 if after else len(lines_of(text))


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


def outline(text: str) -> list[tuple[int | None, str]]:
    """(line, heading indented by level with its line number) for each heading; past OUTLINE_MAX_HEADINGS the
    deepest levels go, then the list is cut, and a last entry of no line says how many are not shown."""
    found = headings(text)
    levels = sorted({level for _, level, _ in found})
    shown = found
    while len(shown) > OUTLINE_MAX_HEADINGS and len(levels) > 1:
        levels.pop()
        shown = [h for h in found if h[1] in levels]
    lines = [(line, f"{'  ' * levels.index(level)}{title} (line {line})")
             for line, level, title in shown[:OUTLINE_MAX_HEADINGS]]
    if len(shown) < len(found) or len(shown) > OUTLINE_MAX_HEADINGS:
        lines.append((None, f"… {len(found) - len(lines)} more headings not shown"))
    return lines


def append_to_section(text: str, wanted: str, content: str) -> str:
    """The text with `content` after the last non-blank line of find_section's section, the rest byte for byte."""
    start, end = find_section(text, wanted)
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    last = end
    while last > start and not lines[last - 1].strip():
        last -= 1
    newline = "\r\n" if lines[start - 1].endswith("\r\n") else "\n"
    added = [line + newline for line in content.replace("\r\n", "\n").rstrip("\n").split("\n")]
    if lines[last - 1] == lines[last - 1].rstrip("\r\n"):  # the note's last line, without a newline: keep it so
        lines[last - 1] += newline
        added[-1] = added[-1][:-len(newline)]
    return ("\ufeff" if text.startswith("\ufeff") else "") + "".join(lines[:last] + added + lines[last:])


# --- Files the owner excluded, drawings, and sync-conflict copies ---
def _settings(kb: Path, name: str) -> dict:
    """A `.obsidian/*.json` settings file as a dict; {} if missing, unreadable, a link, or not a JSON object."""
    try:
        value = json.loads(notes.read_bytes(Path(kb), name, SETTINGS_MAX_BYTES).decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError, notes.ToolError):
        return {}
    return value if isinstance(value, dict) else {}


def ignore_filters(kb: Path) -> list:
    """Obsidian's Excluded files: path prefixes, and '/regex/' ones compiled (a bad one is left out)."""
    filters = []
    raw = _settings(kb, APP_SETTINGS).get("userIgnoreFilters")
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, str) and len(item) > 2 and item.startswith("/") and item.endswith("/"):
            with contextlib.suppress(re.error):
                filters.append(re.compile(item[1:-1]))
        elif isinstance(item, str) and item.strip():
            filters.append(item)
    return filters


def is_excluded(rel_path: str, filters: list) -> bool:
    """True if the owner excluded this note (a path relative to the vault, with '/'), as Obsidian decides it."""
    return any(f.search(rel_path) if isinstance(f, re.Pattern) else rel_path.startswith(f) for f in filters)


_DRAWING_END = re.compile(r"(?:%%|#+ Drawing|```(?:compressed-)?json)[ \t]*$")
_DRAWING_NOTICE = "==⚠"  # the plugin's "Switch to EXCALIDRAW VIEW" line
_ELEMENT_ID = re.compile(r" \^[A-Za-z0-9-]+$")


def is_drawing(rel_path: str, text: str) -> bool:
    """An Excalidraw drawing: named *.excalidraw.md, or any note with the plugin's `excalidraw-plugin` property."""
    return rel_path.lower().endswith(".excalidraw.md") or ("excalidraw-plugin" in text  # most notes: no need to parse
                                                           and "excalidraw-plugin" in front_matter(text)[0])


def excalidraw_text(text: str) -> str:
    """A drawing's words for the index, line numbers kept: the note before its drawing data, less plugin marks."""
    kept = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if _DRAWING_END.match(body.strip()):
            break
        kept.append(("" if body.startswith(_DRAWING_NOTICE) else _ELEMENT_ID.sub("", body)) + line[len(body):])
    return "".join(kept)


_CONFLICT_NAMES = [re.compile(r"(?P<name>.+)" + mark + r"(?P<ext>\.[^.]+)?") for mark in (
    r"\.sync-conflict-\d{8}-\d{6}-[A-Z0-9]{7}",  # Syncthing
    r" \(Conflicted copy \S.* \d{12}\)",  # Obsidian Sync
    r" \(conflicted copy (?:\S.* )?\d{4}-\d{2}-\d{2} \d{6}\)",  # Nextcloud
    r" \(\S.*['’]s conflicted copy \d{4}-\d{2}-\d{2}(?: \(\d+\)| \d+)?\)",  # Dropbox
    r"_conflict-\d{8}-\d{6}",  # ownCloud and Nextcloud before 3.x
    r" \(SFConflict (?:\S+ )?\d{4}(?:-\d\d){5}\)",  # Seafile
)]


def conflict_of(rel_path: str) -> str | None:
    """The path of the note a sync-conflict copy (of _CONFLICT_NAMES' tools) was made from; None for any other."""
    if "conflict" not in rel_path.lower():  # in every pattern: most paths need no parsing (the index asks for each)
        return None
    path = PurePosixPath(rel_path)
    found = next(filter(None, (pattern.fullmatch(path.name) for pattern in _CONFLICT_NAMES)), None)
    return str(path.with_name(found["name"] + (found["ext"] or ""))) if found else None


# iCloud's `name 2.md`, Google Drive's `name (1).md`, OneDrive's `name-HOST.md`: ordinary names, so private only
_COPY_TAIL = re.compile(r"(?<=[^/])(?: [2-9]| [1-9]\d+| \([1-9]\d*\)|-(?=[A-Z0-9-]*[A-Z])[A-Z0-9][A-Z0-9-]{1,14})"
                        r"(?P<ext>\.[^./]+)\Z")


def copy_of(rel_path: str) -> str | None:
    """conflict_of's note, or the one a name of _COPY_TAIL's form may be a copy of (for privacy only)."""
    found = _COPY_TAIL.search(rel_path)
    return conflict_of(rel_path) or (rel_path[:found.start()] + found["ext"] if found else None)


# --- Daily notes and templates ---
_MOMENT = re.compile(r"\[[^\]]*\]|YYYY|YY|Q|MMMM|MMM|MM|M|Do|DDDD|DDD|DD|D|dddd|ddd|dd|d|E|HH|H|hh|h|mm|m|ss|s"
                     r"|A|a|WW|W|GGGG|GG")
_MONTHS = "January February March April May June July August September October November December".split()
_DAYS = "Sunday Monday Tuesday Wednesday Thursday Friday Saturday".split()
_TEMPLATE_FIELD = re.compile(r"{{\s*(date|time|title)\s*(?::([^}]*))?}}", re.I)


def daily_note_settings(kb: Path) -> dict:
    """The Daily notes settings: folder, format (moment.js), template (a path without .md); Obsidian's defaults."""
    raw = _settings(kb, DAILY_SETTINGS)
    text = {key: raw[key].strip() for key in ("folder", "format", "template") if isinstance(raw.get(key), str)}
    return {"folder": text.get("folder", "").strip("/"), "format": text.get("format") or DAILY_FORMAT,
            "template": text.get("template", "")}


def moment_format(fmt: str, when) -> str:
    """A date or datetime written with moment.js tokens, in English as Obsidian's default locale; [text] kept."""
    when = when if isinstance(when, datetime) else datetime.combine(when, time())
    iso_year, iso_week, _ = when.isocalendar()
    day, weekday, hour12 = when.day, (when.weekday() + 1) % 7, when.hour % 12 or 12
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    values = {"YYYY": f"{when.year:04d}", "YY": f"{when.year % 100:02d}", "Q": str((when.month - 1) // 3 + 1),
              "MMMM": _MONTHS[when.month - 1], "MMM": _MONTHS[when.month - 1][:3], "MM": f"{when.month:02d}",
              "M": str(when.month), "Do": f"{day}{suffix}", "DDDD": f"{when.timetuple().tm_yday:03d}",
              "DDD": str(when.timetuple().tm_yday), "DD": f"{day:02d}", "D": str(day), "dddd": _DAYS[weekday],
              "ddd": _DAYS[weekday][:3], "dd": _DAYS[weekday][:2], "d": str(weekday), "E": str(when.isoweekday()),
              "HH": f"{when.hour:02d}", "H": str(when.hour), "hh": f"{hour12:02d}", "h": str(hour12),
              "mm": f"{when.minute:02d}", "m": str(when.minute), "ss": f"{when.second:02d}", "s": str(when.second),
              "A": "AM" if when.hour < 12 else "PM", "a": "am" if when.hour < 12 else "pm",
              "WW": f"{iso_week:02d}", "W": str(iso_week), "GGGG": f"{iso_year:04d}", "GG": f"{iso_year % 100:02d}"}
    return _MOMENT.sub(lambda m: m[0][1:-1] if m[0][0] == "[" else values[m[0]], fmt)


@functools.lru_cache(maxsize=8)
def _name_pattern(fmt: str) -> re.Pattern | None:
    """A regex finding a date written in a moment.js format inside a name (Y, M, D, or the month's name as N); None
    for a format that does not write a year, a month and a day."""
    pieces = {"YYYY": r"(?P<Y>\d{4})", "MM": r"(?P<M>\d{2})", "M": r"(?P<M>\d{1,2})", "DD": r"(?P<D>\d{2})",
              "D": r"(?P<D>\d{1,2})", "Do": r"(?P<D>\d{1,2})(?:st|nd|rd|th)",
              "MMMM": "(?P<N>" + "|".join(_MONTHS) + ")", "MMM": "(?P<N>" + "|".join(m[:3] for m in _MONTHS) + ")",
              "dddd": "(?:" + "|".join(_DAYS) + ")", "ddd": "(?:" + "|".join(d[:3] for d in _DAYS) + ")"}
    seen, parts, at = set(), [], 0
    for token in _MOMENT.finditer(fmt):
        parts.append(re.escape(fmt[at:token.start()]))
        piece = token[0][1:-1] if token[0][0] == "[" else pieces.get(token[0], r"\w+?")
        group = re.match(r"\(\?P<(\w)>", piece)
        parts.append(re.escape(piece) if token[0][0] == "[" else piece.replace(f"?P<{group[1]}>", "?:")
                     if group and group[1] in seen else piece)
        seen |= {group[1]} if group else set()
        at = token.end()
    pattern = re.compile(r"(?<!\w)" + "".join(parts) + re.escape(fmt[at:]) + r"(?!\d)", re.I)
    return pattern if {"Y", "D"} <= set(pattern.groupindex) and {"M", "N"} & set(pattern.groupindex) else None


def named_date(rel_path: str, fmt: str = DAILY_FORMAT):
    """The day a note's name holds in the daily-note format (a format with folders: in its path), or None."""
    pattern = _name_pattern(fmt)
    stem = rel_path.rsplit(".", 1)[0]
    found = pattern and pattern.search(stem if "/" in fmt else stem.rsplit("/", 1)[-1])
    if not found:
        return None
    month = found.groupdict().get("M")
    month = int(month) if month else 1 + [m.lower()[:len(found["N"])] for m in _MONTHS].index(found["N"].lower())
    try:
        return date(int(found["Y"]), month, int(found["D"]))
    except ValueError:  # 2026-02-31
        return None


def daily_note_path(settings: dict, day) -> str:
    """The daily note of that day, relative to the vault: folder/format(day).md (the format may make subfolders)."""
    name = moment_format(settings.get("format") or DAILY_FORMAT, day).strip("/")
    folder = (settings.get("folder") or "").strip("/")
    return f"{folder}/{name}.md" if folder else f"{name}.md"


def fill_template(template_text: str, title: str, now, date_format: str = DAILY_FORMAT) -> str:
    """A core Templates template with {{title}}, {{date[:FORMAT]}} and {{time[:FORMAT]}} filled in."""
    def field(match):
        name, fmt = match[1].lower(), (match[2] or "").strip()
        default = date_format if name == "date" else TEMPLATE_TIME_FORMAT
        return title if name == "title" else moment_format(fmt or default, now)
    return _TEMPLATE_FIELD.sub(field, template_text)


# --- The vault's own style, for the system prompt ---
_STYLE_KEYS = {"useMarkdownLinks": bool, "newLinkFormat": str, "newFileLocation": str, "newFileFolderPath": str,
               "attachmentFolderPath": str}
_LINK_FORMS = {"shortest": "by the shortest name that is unique", "relative": "by paths relative to the linking note",
               "absolute": "by full paths from the vault's top folder"}


def vault_style(kb: Path) -> dict:
    app = _settings(kb, APP_SETTINGS)
    return {key: app[key] for key, kind in _STYLE_KEYS.items() if isinstance(app.get(key), kind)}


def style_prompt(kb: Path) -> str:
    """One sentence for the system prompt on how this vault links and files notes; "" when it sets none of it."""
    style = vault_style(kb)
    if not style:
        return ""
    links = "Markdown links like [Note](Note.md)" if style.get("useMarkdownLinks") else "[[wikilinks]] like [[Note]]"
    form = _LINK_FORMS.get(style.get("newLinkFormat", ""))
    parts = [f"links notes with {links}" + (f", {form}" if form else "")]
    folder = style.get("newFileFolderPath", "").strip("/")
    if where := {"root": "the top folder", "current": "the folder of the note they come from",
                 "folder": f"{folder}/" if folder else "the top folder"}.get(style.get("newFileLocation")):
        parts.append(f"new notes go in {where}")
    if (attachments := style.get("attachmentFolderPath")) is not None:
        sub = attachments.strip().removeprefix("./").strip("/")
        if attachments.strip().startswith("./"):
            parts.append(f"attachments go in {sub}/ beside their note" if sub else "attachments go beside their note")
        else:
            parts.append(f"attachments go in {sub}/" if sub else "attachments go in the top folder")
    return "This vault " + "; ".join(parts) + "."


@functools.lru_cache(maxsize=16)
def vault_prompt(kb: Path, today) -> str:
    """The system prompt's lines about this vault's style and today's daily note, "" for none. Cached per vault and
    day: servers cache a prompt's unchanged start, so it stays the same all day even if a setting changes."""
    lines = [f"- {style}" for style in [style_prompt(kb)] if style]
    if _settings(kb, DAILY_SETTINGS):
        daily = daily_note_settings(kb)
        template = f", starting from its template {daily['template']}" if daily["template"] else ""
        lines.append(f"- Today's daily note is {daily_note_path(daily, today)}. To add to it (\"add X to today's "
                     f"log\"), append_note to that path: if it does not exist yet it is created{template}.")
    return "\n".join(lines)
