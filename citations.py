"""Citations in an answer, checked against the notes and against what the model was shown, with no model call.

A citation is `path:line`, `path:start-end`, or a path with a quote beside it ("…", “…”, 「…」, on its line). A note
never shown fails before anything is said of its length or words, so a private note's content is never told. What
reached the model is what each tool result says it showed (context.SHOWN), never read from its words. Notes are read
only through `read` (reading.note_text); this module never writes, sends or shows anything.
"""

import re
from collections import namedtuple
from typing import Callable, NamedTuple

import reading
from context import SHOWN, content_text
from notes import Shown, ToolError, plural

Reader = Callable[[str], tuple[str, str]]  # a path as the model wrote it -> (the note's name, its text)

NEVER_SHOWN = "its text never reached the model in this conversation"
NOT_THERE = "the quoted text is not there"
QUOTE_NOT_SHOWN = "the quoted text never reached the model"
UNREAD = "No note was read for this answer, yet it speaks of your notes."
READ_BEFORE = " It may rest on what was read earlier in this conversation."
# "Your notes" in the words of an answer that speaks of them (English and Chinese); a small model speaks as the
# person too ("according to my notes", 根据我的笔记).
ABOUT_THE_NOTES = re.compile(r"\b(?:your|my) (?:own )?(?:notes?|knowledge base|vault)\b"
                             r"|\baccording to (?:the|your|my) (?:notes?|tool results?|search results?)\b"
                             r"|\bthe notes? (?:says?|said|mentions?)\b|[你您我]的(?:笔记|知识库)"
                             r"|笔记(?:里|中|上|显示|提到)|根据(?:我的|您提供的|提供的)?(?:笔记|工具结果|搜索结果)", re.I)
QUOTE_CHARS = 500  # a quoted passage longer than this is not looked for

_PATH = r"[\w\-./+#]*[\w\-+#]\.(?:md|txt)"  # C++.md, C#.md
_BEFORE = r"(?<![\w\-./~\\])"
_LINES = r"(?:[:：]L?(?P<start>\d+)(?:[-–]L?(?P<end>\d+))?)?"
_AFTER = r"(?!\w|\.\w|[:：\-–]L?\d)"
_SUFFIX = re.compile(r"\.(?:md|txt)")
_QUOTE = re.compile('|'.join(rf"{a}([^{b}\n]{{1,{QUOTE_CHARS}}}){b}" for a, b in ('""', "“”", "「」", "『』")))
_FENCE = re.compile(r"^ {0,3}(```|~~~).*?(?:^ {0,3}\1[^\n]*$|\Z)", re.M | re.S)
_LINK_TARGET = re.compile(r"\]\([^)\n]*\)")
_CJK = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_HEAD = re.compile(f"^[{_CJK}]+(?=[A-Za-z0-9_])")  # 见python.md, not 三体.md nor 读书/三体.md
_EMPHASIS = re.compile(r"[\s*_`]+")
_ELLIPSIS = re.compile(r"…|\.\.\.")
_GREP = re.compile(r"^(?:\./)?([^\s:][^:\n]*?\.(?:md|txt))[:-](\d+)[:-]", re.M)  # a shell's `path:line:`


class Check(NamedTuple):
    text: str  # the citation as the answer wrote it: "python.md:5-7"
    path: str  # the note, as the answer named it
    start: int | None  # the lines cited (None: a path with a quote beside it)
    end: int | None
    problem: str  # "" when it holds
    nth: int  # this citation's text is the nth (from 0) of its kind in the answer's prose: the page marks that one


class Report(NamedTuple):
    checks: list  # of Check, in the answer's order
    unread: str = ""  # one line when the answer speaks of the notes but no note was read for it, else ""

    def failed(self) -> list[str]:
        """One line per citation that does not hold ("python.md:99 — the note has 11 lines"), each once."""
        return list(dict.fromkeys(f"{check.text} — {check.problem}" for check in self.checks if check.problem))

    def event(self) -> dict:  # for the page
        return {"type": "citations", "unread": self.unread, "checks": [
            {"text": c.text, "path": c.path, "line": c.start, "end": c.end or c.start, "problem": c.problem,
             "nth": c.nth} for c in self.checks]}


NOTHING = Report([])


def reader(notebook) -> Reader:
    """Reading a note as the tools do (reading.note_text); a bare name no note has at the top is the one note of
    that name elsewhere, if there is one (a small model names the note it wrote without its folder)."""
    def read(path: str) -> tuple[str, str]:
        try:
            return reading.note_text(notebook, path, "")
        except ToolError as exc:
            if exc.kind != "missing" or "/" in path:
                raise
            query = "SELECT path FROM notes WHERE substr(path, -?) = ? AND NOT private LIMIT 2"
            found = notebook.with_index(lambda idx: idx.conn.execute(query, (len(path) + 1, "/" + path)).fetchall())
            if len(found) != 1:
                raise
            return reading.note_text(notebook, found[0][0], "")
    return read


def shell_shown(command: str, output: str) -> Shown:
    """A shell command's output as a tool result: the note lines it printed as `path:line:` (grep -n) and the note
    paths in it or in the command. It may hold more note text than those lines."""
    lines: dict[str, set[int]] = {}
    for match in _GREP.finditer(output):
        lines.setdefault(match[1], set()).add(int(match[2]))
    named = {match[0].removeprefix("./") for match in re.finditer(_BEFORE + _PATH, f"{command}\n{output}")}
    return Shown(output, lines, named | set(lines), unlisted=True)


class Seen:
    """What tool results (and a question's passages) showed the model, added up as they come: each note's lines, the
    notes named; `upto`: of the history seen_before adds up, the messages added."""

    def __init__(self):
        self.lines: dict[str, set[int]] = {}
        self.named: set[str] = set()
        self.longest, self.results, self.upto = 0, 0, 0  # the longest name's characters; tool results added

    def add(self, messages: list[dict]) -> "Seen":
        for message in (m for m in messages if m.get("role") == "tool" or SHOWN in m):  # a question's passages too
            shown = message.get(SHOWN) or {}
            for path, numbers in (shown.get("lines") or {}).items():
                self.lines.setdefault(path, set()).update(numbers)
            named = [*(shown.get("lines") or ()), *(shown.get("named") or ())]
            self.named.update(named)
            self.longest, self.results = max([self.longest, *map(len, named)]), self.results + 1
        return self

    def names_in(self, text: str) -> set[str]:
        """The names a tool named that occur in the text (each ends at a ".md" or ".txt" of it)."""
        return {text[start:end] for end in (m.end() for m in _SUFFIX.finditer(text))
                for start in range(max(0, end - self.longest), end) if text[start:end] in self.named}


def seen_before(history: list[dict], upto: int) -> Seen:
    """What the tool results of history[:upto] showed the model. A history that can keep it (one with `seen`, as
    sessions.History) keeps it, so the next call adds only the messages since."""
    kept = getattr(history, "seen", None)
    seen = kept if kept and kept.upto <= upto else Seen()
    seen.add(history[seen.upto:upto]).upto = upto
    if hasattr(history, "seen"):
        history.seen = seen
    return seen


# A note path in the answer: where it is, the note, and the lines cited after it (None: none).
_Mention = namedtuple("_Mention", "start end path first last")


def _prose(answer: str) -> str:
    """The answer as the page shows its words: code blocks and link targets blanked (same length, same lines)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m[0])  # noqa: E731
    return _LINK_TARGET.sub(lambda m: "]" + blank(m)[1:], _FENCE.sub(blank, answer))


def _mentions(prose: str, seen: tuple[Seen, ...], exists: Callable[[str], bool]) -> list[_Mention]:
    """Every note path in the prose, with the lines cited after it. Paths a tool named are found whole, spaces and
    all; a run of Chinese glued before a path ("见python.md") is not part of it unless such a note exists."""
    named = sorted(set().union(*(s.names_in(prose) for s in seen)), key=len, reverse=True)  # the longest first
    names = "".join(re.escape(path) + "|" for path in named)
    found = []
    for match in re.finditer(_BEFORE + "(?P<path>" + names + _PATH + ")" + _LINES + _AFTER, prose):
        path, start = match["path"], match.start()
        head = _CJK_HEAD.match(path)
        if head and not any(path in s.named for s in seen) and not exists(path):
            path, start = path[head.end():], start + head.end()
        first = int(match["start"]) if match["start"] else None
        last = int(match["end"]) if match["end"] else first
        found.append(_Mention(start, match.end(), path.removeprefix("./"), first, last))
    return found


def _quotes_beside(prose: str, mentions: list[_Mention]) -> dict[int, list[str]]:
    """Each quoted passage given to the nearest path on its line of the answer: {mention's index: [quotes]}."""
    beside: dict[int, list[str]] = {}
    for quote in _QUOTE.finditer(prose):
        inside = next(filter(None, quote.groups())).strip()
        if any(m.start <= quote.start() and quote.end() <= m.end or prose[m.start:m.end] == inside for m in mentions):
            continue  # part of a note's name (写作（「渐进写作」）.md), or a name in quotes ("读书清单.md")
        line_start, line_end = prose.rfind("\n", 0, quote.start()) + 1, prose.find("\n", quote.end())
        on_line = [i for i, m in enumerate(mentions) if line_start <= m.start and (line_end < 0 or m.end <= line_end)]
        if on_line:
            distance = lambda i: max(mentions[i].start - quote.end(), quote.start() - mentions[i].end)  # noqa: E731
            beside.setdefault(min(on_line, key=distance), []).append(next(filter(None, quote.groups())))
    return beside


def _squeezed(text: str) -> str:
    return _EMPHASIS.sub("", text).casefold()


def _holds(text: str, quote: str) -> bool:
    """The quote occurs in the text, ignoring case, whitespace and emphasis; "…" stands for text left out."""
    at, text = 0, _squeezed(text)
    for piece in filter(None, map(_squeezed, _ELLIPSIS.split(quote))):
        at = text.find(piece, at)
        if at < 0:
            return False
        at += len(piece)
    return True


def ranges(numbers: list[int]) -> str:
    """[3, 4, 5, 9] -> "lines 3-5, 9"; [7] -> "line 7"."""
    spans = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ("lines " if len(numbers) > 1 else "line ") + ", ".join(f"{a}-{b}" if a < b else str(a) for a, b in spans)


def _problem(mention: _Mention, quotes: list[str], lines_of: Callable[[str], set], note) -> str:
    """Why the citation does not hold ("" when it does); `note`: (name, lines), or what reading it raised."""
    if isinstance(note, ToolError):
        return {"missing": "no such note", "folder": "a folder, not a note"}.get(note.kind, NEVER_SHOWN)
    if isinstance(note, OSError):
        return f"it could not be read ({note.strerror or note})"
    name, lines = note
    shown_lines = lines_of(name) or lines_of(mention.path)
    if not shown_lines:  # before anything about the note's length or words: a note the model could not read
        return NEVER_SHOWN
    if mention.first is None:
        seen_text = "\n".join(lines[n - 1] for n in sorted(shown_lines) if n <= len(lines))
        bad = next((q for q in quotes if not _holds(seen_text, q)), None)
        return "" if bad is None else QUOTE_NOT_SHOWN if _holds("\n".join(lines), bad) else NOT_THERE
    first, last = mention.first, mention.last
    if first < 1:
        return "lines are numbered from 1"
    if last < first:
        return f"{first}-{last} is not a range of lines"
    if last > len(lines):
        return f"the note has {plural(len(lines), 'line')}"
    if unseen := [n for n in range(first, last + 1) if n not in shown_lines]:
        return f"{ranges(unseen)} never reached the model"
    cited = "\n".join(lines[first - 1:last])
    return "" if all(_holds(cited, quote) for quote in quotes) else NOT_THERE


def check(answer: str, history: list[dict], turn_start: int, read: Reader) -> Report:
    """The answer's citations checked against the notes and against what the tool results of `history` (the
    conversation up to the answer; its turn begins at `turn_start`) showed the model."""
    return _check(answer, seen_before(history, turn_start), Seen().add(history[turn_start:]), read)


def _check(answer: str, earlier: Seen, now: Seen, read: Reader) -> Report:
    """`earlier`: what the turns before the answer's showed the model, `now`: what its own turn did."""
    if not answer.strip():
        return NOTHING
    notes: dict = {}

    def note(path: str):
        if path not in notes:
            try:
                name, text = read(path)
                notes[path] = (name, text.splitlines())
            except (ToolError, OSError) as exc:
                notes[path] = exc
        return notes[path]

    def exists(path: str) -> bool:
        return not isinstance(note(path), Exception)

    def lines_of(path: str) -> set[int]:
        return earlier.lines.get(path, set()) | now.lines.get(path, set())

    prose = _prose(answer)
    mentions = _mentions(prose, (earlier, now), exists)
    quotes = _quotes_beside(prose, mentions)
    checks, counted = [], {}
    for index, mention in enumerate(mentions):
        text = prose[mention.start:mention.end]
        nth = counted[text] = counted.get(text, -1) + 1
        if mention.first is None and index not in quotes:
            continue  # a path named, not cited
        problem = _problem(mention, quotes.get(index, []), lines_of, note(mention.path))
        checks.append(Check(text, mention.path, mention.first, mention.last, problem, nth))
    about = (checks or any(exists(m.path) and not {m.path, note(m.path)[0]} & now.named for m in mentions)
             or (not now.results and (mentions or ABOUT_THE_NOTES.search(prose))))
    unread = UNREAD + READ_BEFORE * bool(earlier.lines) if about and not now.lines else ""
    return Report(checks, unread)


def checked_answers(history: list[dict], read: Reader) -> dict[int, Report]:
    """Each turn's answer (the last assistant message with text and no tool call before the next question) checked
    as it was when given: {its index in history: its report}, for a page drawing a saved conversation."""
    reports, turn_start, answer, earlier = {}, 0, None, Seen()  # each turn's results added once, not per answer
    for index, message in enumerate(history + [{"role": "user"}]):
        if message.get("role") == "user":
            if answer is not None:
                reports[answer] = _check(content_text(history[answer].get("content")), earlier,
                                         Seen().add(history[turn_start:answer]), read)
            earlier.add(history[turn_start:index])
            turn_start, answer = index, None
        elif message.get("role") == "assistant" and not message.get("tool_calls") and message.get("content"):
            answer = index
    return {index: report for index, report in reports.items() if report.checks or report.unread}
