"""Context budget: which part of a long conversation to send so that every request fits the model's window.

The stored conversation is never changed. Before each request the agent calls fit_to_budget(history,
budget), which returns the list to SEND:
  1. if it already fits, the history as it is;
  2. else old tool results (from turns before the current one) are shortened, oldest first, to a head and
     a "[… elided, N chars]" marker;
  3. else the oldest whole turns are dropped (a turn = a user message and everything up to the next one,
     so an assistant message with tool_calls always goes together with its tool results);
     steps 2 and 3 first spare the CONTEXT_KEEP_RECENT_TURNS turns just before the current one, then
     treat them the same way if that was not enough;
  4. if the current turn alone is still too big, its own tool results are shortened, oldest first.
The system prompt and the current turn always stay, and the result is always history the API accepts:
it starts (after the system prompt) with a user message, every tool_call id is answered, no tool message
is an orphan.

Token counts are estimated without a tokenizer: CJK text costs about one token a character, Latin text
about four characters a token, plus a fixed cost per message and per tool call. The estimate is corrected
by a factor learnt from the `usage.prompt_tokens` the API reports (see Calibration).
"""

import json
import math
from dataclasses import dataclass

import config

INTERRUPTED_RESULT = "not executed: the conversation stopped before this tool ran"


# -- estimating --------------------------------------------------------------------------------------------
def text_tokens(text) -> int:
    """Estimated tokens of one string: ~1 per CJK character, ~1 per CHARS_PER_TOKEN other characters."""
    if not text:
        return 0
    if not isinstance(text, str):
        text = str(text)
    chars = len(text)
    if text.isascii():
        return -(-chars // config.CHARS_PER_TOKEN)
    # UTF-8 length is computed in C, so this stays fast on megabytes: CJK characters take 3 bytes (2 extra
    # each), accented Latin, Cyrillic or Greek 2 (counted as half a wide character, which suits them).
    wide = (len(text.encode("utf-8", "surrogatepass")) - chars) / 2
    return math.ceil(wide + (chars - wide) / config.CHARS_PER_TOKEN)


def content_text(content) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ("" if content is None else str(content))


def message_tokens(message: dict) -> int:
    """Estimated tokens one message costs in a request."""
    n = config.MESSAGE_OVERHEAD_TOKENS
    n += text_tokens(content_text(message.get("content")))
    for key in ("reasoning_content", "name", "tool_call_id"):
        n += text_tokens(message.get(key))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        n += (config.TOOL_CALL_OVERHEAD_TOKENS + text_tokens(call.get("id"))
              + text_tokens(function.get("name")) + text_tokens(function.get("arguments")))
    return n


def estimate_tokens(messages: list[dict], tools: list | None = None) -> int:
    """Estimated prompt tokens of a request carrying these messages (and these tool schemas)."""
    total = sum(message_tokens(m) for m in messages)
    if tools:
        total += text_tokens(json.dumps(tools, ensure_ascii=False))
    return total


def request_bytes(messages: list[dict], tools: list | None = None) -> int:
    """Size of the JSON body the SDK would send for these messages (for benchmarks and diagnostics)."""
    return len(json.dumps({"messages": messages, "tools": tools or []}, ensure_ascii=False).encode())


@dataclass
class Calibration:
    """Learns how far estimate_tokens() is from the API's own count, and scales estimates by it.

    The ratio differs between English and Chinese text (the estimate under-counts one and over-counts
    the other), so the factor follows the worst recent ratio: it rises at once to a higher one and sinks
    only slowly (FACTOR_DECAY) after lower ones; over-trimming a little is cheap, a rejected request is
    not. Tiny requests teach nothing: their fixed template overhead swamps the ratio.
    """
    factor: float = 1.0
    samples: int = 0
    ceiling: int | None = None  # learnt from "context too long" answers: the server takes less than this

    def budget(self, configured: int) -> int:
        """The budget to fit to: the configured one, unless the server has shown it takes less."""
        return min(configured, self.ceiling) if self.ceiling else configured

    def rejected(self, sent_tokens: int, window: int | None = None) -> None:
        """The server refused a request of about sent_tokens (corrected) as too long for its window.

        The window is smaller than what was sent (and than `window`, when the error names it), so later
        requests aim well below both, leaving the rest for the answer.
        """
        limit = min(sent_tokens, window or sent_tokens)
        self.ceiling = min(self.ceiling or limit, int(limit * config.CONTEXT_SHRINK_AFTER_REJECTION))

    def observe(self, estimated_tokens: int, prompt_tokens: int | None) -> None:
        if not prompt_tokens or estimated_tokens < config.TOKEN_FACTOR_MIN_SAMPLE:
            return
        ratio = min(max(prompt_tokens / estimated_tokens, config.TOKEN_FACTOR_MIN),
                    config.TOKEN_FACTOR_MAX)
        if self.samples == 0 or ratio > self.factor:
            self.factor = ratio
        else:
            self.factor += (ratio - self.factor) * config.TOKEN_FACTOR_DECAY
        self.samples += 1


# -- keeping the history valid -------------------------------------------------------------------------
def repair_history(messages: list[dict]) -> list[dict]:
    """A copy of the history the API will accept, changing as little as possible.

    Leading system messages stay; anything before the first user message after them goes; every tool
    call without a result gets a short "not executed" one (the process may have been killed between the
    call and its result); tool messages that answer no pending call are dropped; a question followed
    directly by another one (its answer never came) is left out. Messages are not copied
    unless changed, and the input is never modified.
    """
    out: list[dict] = []
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        out.append(messages[i])
        i += 1
    while i < len(messages) and messages[i].get("role") != "user":
        i += 1
    pending: list[str] = []  # tool_call ids of the last assistant message still waiting for a result

    def answer_pending():
        for call_id in pending:
            out.append({"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_RESULT})
        pending.clear()

    for message in messages[i:]:
        role = message.get("role")
        if role == "user" and out and out[-1].get("role") == "user" and not pending:
            # A question whose answer never came (the request failed, or the process was killed): the
            # agent drops such a turn whole, and some APIs reject two user messages in a row.
            out.pop()
        if role == "tool":
            if message.get("tool_call_id") in pending:
                pending.remove(message["tool_call_id"])
                out.append(message)
            continue
        answer_pending()
        if role == "assistant" and "tool_calls" in message and not message["tool_calls"]:
            message = {k: v for k, v in message.items() if k != "tool_calls"}
        out.append(message)
        if role == "assistant":
            pending.extend(call.get("id") for call in message.get("tool_calls") or ())
    answer_pending()
    return out


def split_turns(messages: list[dict]) -> tuple[list[dict], list[list[dict]]]:
    """(leading system messages, turns); each turn starts with a user message. Expects repaired history."""
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        i += 1
    system, turns = messages[:i], []
    for message in messages[i:]:
        if message.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return system, turns


# -- trimming ------------------------------------------------------------------------------------------------
def elide(message: dict, head_chars: int = config.ELIDED_TOOL_HEAD_CHARS) -> dict:
    """A copy of a tool message whose content keeps only its head and says how much was cut."""
    text = content_text(message.get("content"))
    cut = len(text) - head_chars
    return {**message, "content": f"{text[:head_chars]}\n[… elided, {cut} chars]"}


def _worth_eliding(message: dict, head_chars: int) -> bool:
    # Below twice the head, the marker would save too little to be worth losing the text.
    return (message.get("role") == "tool"
            and len(content_text(message.get("content"))) > 2 * head_chars + 40)


def _drop_settled_reasoning(turn: list[dict]) -> list[dict]:
    """Reasoning of a finished answer (assistant message without tool calls) in an earlier turn.

    The API ignores it, so it is dead weight; reasoning of messages WITH tool calls must be sent back in
    every later request (DeepSeek answers 400 otherwise), so that is kept, even when empty.
    """
    return [{k: v for k, v in m.items() if k != "reasoning_content"}
            if m.get("role") == "assistant" and not m.get("tool_calls") and "reasoning_content" in m
            else m for m in turn]


def fit_to_budget(messages: list[dict], budget_tokens: int, factor: float = 1.0,
                  fixed_tokens: int = 0) -> list[dict]:
    """The messages to send so the request stays within budget_tokens (see the module docstring).

    factor scales the raw estimate (Calibration.factor); fixed_tokens is what the request costs besides
    the messages (the tool schemas). Returns a new list; changed messages are new dicts.
    """
    system, turns = split_turns(repair_history(messages))
    if not turns:
        return system
    turns = [_drop_settled_reasoning(t) for t in turns[:-1]] + [turns[-1]]
    limit = budget_tokens / max(factor, 1e-6) - fixed_tokens  # the factor corrects the fixed part too
    sizes = [[message_tokens(m) for m in turn] for turn in turns]
    total = sum(message_tokens(m) for m in system) + sum(map(sum, sizes))
    head = config.ELIDED_TOOL_HEAD_CHARS

    def shorten(turn_index: int, stop_before: int | None = None) -> bool:
        """Elide the turn's tool results oldest first; True once the request fits."""
        nonlocal total
        turn, turn_sizes = turns[turn_index], sizes[turn_index]
        for j, message in enumerate(turn[:stop_before]):
            if total <= limit:
                return True
            if _worth_eliding(message, head):
                turn[j] = elide(message, head)
                new_size = message_tokens(turn[j])
                total += new_size - turn_sizes[j]
                turn_sizes[j] = new_size
        return total <= limit

    def drop_oldest(keep: int) -> None:
        nonlocal total
        while total > limit and len(turns) > 1 + keep:
            total -= sum(sizes.pop(0))
            turns.pop(0)

    # The last few turns before the current one keep their tool results whole for as long as possible:
    # a follow-up ("and what does it say about X?") usually needs the note read just before.
    keep = min(config.CONTEXT_KEEP_RECENT_TURNS, len(turns) - 1)
    for recent_too in (False, True):
        for t in range(len(turns) - 1 - (0 if recent_too else keep)):
            if shorten(t):
                break
        drop_oldest(0 if recent_too else keep)
    if total > limit:
        # The current turn alone is too big: shorten its tool results, the latest round last.
        current = turns[-1]
        last_call = max((j for j, m in enumerate(current) if m.get("tool_calls")), default=len(current))
        shorten(-1, last_call) or shorten(-1)
    return system + [m for turn in turns for m in turn]
