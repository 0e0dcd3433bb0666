"""The one approval policy: when a tool asks the person first, and what it may write without asking.

A tool describes what it asks as an `Approval`; its `Approver` decides whether anybody is asked, asks through the
UI's `ask` and refuses with a ToolError when the answer is no. This module asks, it never acts on the notes.
"""

import time
from dataclasses import dataclass, field
from typing import Callable

from notes import ToolError

# What one answer may add to the disk (new notes, growth, the versions kept) before a change asks the person
# first, so a hostile note cannot make the model fill the disk; the MCP server has no answers: its bound is hourly.
ANSWER_WRITE_LIMIT = 50_000_000


@dataclass(frozen=True)
class Approval:
    kind: str  # "change": a change to the notes, shown from `change`; "shell": a command, `detail`
    title: str  # one line, e.g. "Move a.md to b.md?"
    detail: str = ""
    change: object = None  # a versions.Change
    skippable: bool = True  # --yes may approve it (never a command that would run without the sandbox)


@dataclass
class Allowance:
    """Bytes the changes of one answer (or, with `window_s`, of a time window) may still add without asking."""
    left: int = field(default_factory=lambda: ANSWER_WRITE_LIMIT)
    window_s: float | None = None
    since: float = field(default_factory=time.monotonic)

    def cost(self, change) -> int:
        """What the change adds to the disk: growth of each note, new notes, and the copy of what it replaces."""
        return sum(max(len(f.new or b"") - len(f.old or b""), 0) + len(f.old or b"") for f in change.files)

    def over(self, change) -> bool:
        if self.window_s and time.monotonic() - self.since > self.window_s:
            self.left, self.since = ANSWER_WRITE_LIMIT, time.monotonic()
        return self.cost(change) > self.left

    def written(self, change) -> str:
        """What this answer would have written with the change, for the question that asks about it: "52 MB"."""
        size = ANSWER_WRITE_LIMIT - self.left + self.cost(change)
        return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"


@dataclass
class Approver:
    """One call's policy: True when a person approved, False when nobody needed asking, or ToolError. Asked:
    a tool that asks, or an approval `always` (past the allowance), unless --yes; with `review` every change."""
    ask: Callable | None  # the UI's: Approval -> True, False, or None when nobody can be asked
    tool_asks: bool = False
    review: bool = False
    auto: bool = False
    allowance: Allowance = field(default_factory=Allowance)

    def __call__(self, approval: Approval, always: bool = False) -> bool:
        if not (self.tool_asks or self.review or always):
            return False
        if approval.skippable and self.auto and not self.review:
            return False
        answer = self.ask(approval) if self.ask else None
        if answer is None and not approval.skippable:  # short: the person reads these on one trace line
            raise ToolError("not done: this needs the person's approval, and nobody can be asked here.")
        if answer is None:
            raise ToolError("not done: nobody can confirm here (one-shot/piped); rerun with --yes or AUTO_APPROVE=1.")
        if not answer:
            raise ToolError("not done: the person declined.", "Do not retry unless they ask again.")
        return True
