"""Context budget: which part of a long conversation to send, so every request fits and stays cheap.

Providers bill a request's repeat of an earlier one's prefix at a fraction of the price, so what is sent only grows
at its end but for a rare trim: a request over the budget is cut back in one go to about TRIM_TO of it, at turn
boundaries. Finished turns' tool results are shortened first (the KEEP_RECENT_TURNS before the current one last),
then turns go, oldest first, but for the head (HEAD_SHARE), so a trim never loses the whole cached prefix; what was
cut stays cut. fit_to_budget() replays the conversation to find where the cuts fell, so the same history always
gives the same request. It never changes its input; this module imports nothing of the project.
"""

import json
import math
from itertools import accumulate

# Tokens are estimated without a tokenizer, leaning to over-count: a request a little short costs little,
# a refused one a retry. CJK is ~1 token a character; prose ~4 characters a token, Markdown, code, JSON ~3.
CHARS_PER_TOKEN = 3.5
MESSAGE_OVERHEAD_TOKENS = 4  # what each message costs in the chat template
TOOL_RESULT_OVERHEAD_TOKENS = 30  # and a tool result's marks (model.py fences each one)
TOOL_CALL_OVERHEAD_TOKENS = 8
TRIM_TO = 0.45  # a trim cuts the request back to this share of the budget, so trims are rare
HEAD_SHARE = 0.3  # the first turns kept through every trim, as a stable prefix the provider has cached
KEEP_RECENT_TURNS = 2  # a follow-up ("and what else does it say?") needs the notes read just before
ELIDED_HEAD_CHARS = 300  # what stays of a shortened tool result, for the model to recognise it
INTERRUPTED_RESULT = "not executed: the conversation stopped before this tool ran"
# A tool message's bookkeeping, never sent: what its result showed: {"lines": {note: [line, ...]}, "named":
# [note, ...], "error": true, "unlisted": true (it may hold more note text)}, each key only when it says something.
SHOWN = "shown"


def text_tokens(text) -> int:
    text = str(text or "")
    # CJK takes 3 UTF-8 bytes, accented Latin or Cyrillic 2 (half a wide one); len(encode) is C-fast on megabytes
    wide = (len(text.encode("utf-8", "surrogatepass")) - len(text)) / 2
    return math.ceil(wide + (len(text) - wide) / CHARS_PER_TOKEN)


def content_text(content) -> str:
    """The text of a message's content, whether a string, content parts or None."""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ("" if content is None else str(content))


def message_tokens(message: dict) -> int:
    n = MESSAGE_OVERHEAD_TOKENS + text_tokens(content_text(message.get("content")))
    n += TOOL_RESULT_OVERHEAD_TOKENS if message.get("role") == "tool" else 0
    n += sum(text_tokens(message.get(key)) for key in ("reasoning_content", "name", "tool_call_id"))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        n += TOOL_CALL_OVERHEAD_TOKENS + sum(map(text_tokens, (call.get("id"), fn.get("name"), fn.get("arguments"))))
    return n


def estimate_tokens(messages: list[dict], tools: list | None = None) -> int:
    return sum(map(message_tokens, messages)) + (text_tokens(json.dumps(tools, ensure_ascii=False)) if tools else 0)


def repair_history(messages: list[dict]) -> list[dict]:
    """A copy the API accepts, changed as little as possible: before the first question only system messages
    stay; a call left without a result gets a "not executed" one; orphan results and unanswered questions go."""
    i = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    out = [m for m in messages[:i] if m.get("role") == "system"]
    pending: list[str] = []  # tool_call ids of the last assistant message still waiting for a result
    for message in messages[i:] + [None]:  # None: the end, where unanswered calls are answered too
        role = message and message.get("role")
        if role == "tool":
            if message.get("tool_call_id") in pending:
                pending.remove(message["tool_call_id"])
                out.append(message)
            continue
        out += [{"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_RESULT, SHOWN: {}}
                for call_id in pending]
        pending = []
        if message is None:
            return out
        if role == "user" and out and out[-1].get("role") == "user":
            out.pop()  # an unanswered question (the agent drops its turn): some APIs reject two in a row
        if role == "assistant" and "tool_calls" in message and not message["tool_calls"]:
            message = {k: v for k, v in message.items() if k != "tool_calls"}
        out.append(message)
        if role == "assistant":
            pending = [call.get("id") for call in message.get("tool_calls") or ()]


def elide(message: dict) -> dict:
    """A tool result cut to its head and how much was cut (unless too short to be worth it); others as they are."""
    text = content_text(message.get("content"))
    if message.get("role") != "tool" or len(text) <= 2 * ELIDED_HEAD_CHARS + 40:
        return message
    return {**message, "content": f"{text[:ELIDED_HEAD_CHARS]}\n[… elided, {len(text) - ELIDED_HEAD_CHARS} chars]"}


def _sizes(turn: list[dict]) -> tuple[list[int], int, int]:
    """Tokens of the turn in its requests (after the question and each round of results), whole, shortened."""
    points, whole, short = [], 0, 0
    for i, message in enumerate(turn):
        n, role = message_tokens(message), message.get("role")
        whole, short = whole + n, short + (message_tokens(elide(message)) if role == "tool" else n)
        if role == "user" or role == "tool" and (i + 1 == len(turn) or turn[i + 1].get("role") != "tool"):
            points.append(whole)
    return points, whole, short


def _cut(sizes: list[tuple[list[int], int, int]], fixed: int, budget: int) -> tuple[int, int, int, int]:
    """Replays every request so far, trimming where one would go over: (turns of the head kept, first turn sent after
    it, first turn sent whole, tokens of the turns before the present one as now sent)."""
    head, start, elided, kept = None, 0, 0, 0  # kept: tokens of the head and the turns from `start` on, as sent
    for current, (points, whole, _) in enumerate(sizes):
        for size in points + [whole] * (current == len(sizes) - 1):
            if fixed + kept + size <= budget:
                continue
            room = int(budget * TRIM_TO) - fixed - size
            for keep in (KEEP_RECENT_TURNS, 0):
                while elided < current - keep:  # shorten the tool results of finished turns
                    kept, elided = kept - sizes[elided][1] + sizes[elided][2], elided + 1
                if head is None and kept > room:  # the first drop fixes the head, for good
                    # the first turns, shortened, that fit in the head's share (running totals only grow)
                    used = accumulate(short for _, _, short in sizes[:elided])
                    head = start = sum(tokens <= int(budget * HEAD_SHARE) for tokens in used)
                while start < elided and kept > room:  # drop the oldest turns after the head
                    kept, start = kept - sizes[start][2], start + 1
                if kept <= room:
                    break
        kept += whole if current < len(sizes) - 1 else 0
    return head or 0, start, elided, kept


def fit_to_budget(messages: list[dict], budget_tokens: int) -> list[dict]:
    """The messages to send so the request stays within budget_tokens (see the module docstring)."""
    system, turns = [], []
    for message in repair_history(messages):  # system messages, then turns that each start with a question
        if message.get("role") == "user":
            turns.append([])
        if message.get("role") == "assistant" and not message.get("tool_calls") and "reasoning_content" in message:
            # ignored by the API; an answer is first sent after its turn has ended, so no prefix changes
            message = {k: v for k, v in message.items() if k != "reasoning_content"}
        (turns[-1] if turns else system).append(message)
    fixed = sum(map(message_tokens, system))
    head, start, elided, kept = _cut([_sizes(turn) for turn in turns], fixed, budget_tokens)
    sent = [t for t in range(len(turns) - 1) if t < head or t >= start]
    earlier = [elide(m) if t < elided else m for t in sent for m in turns[t]]
    current = list(turns[-1]) if turns else []
    for j, message in enumerate(current):  # if it is too big even alone: shorten its results, oldest first
        if fixed + kept + sum(map(message_tokens, current)) <= budget_tokens:
            break
        current[j] = elide(message)
    return system + earlier + current
