"""What left this machine: which notes' lines went to which endpoint, the tokens, and what they cost.

    report(store, session_id, kb, everything=False) -> str    /sent (this conversation), /sent all (every one about kb)

Everything comes from the session store, as it was recorded when it happened: each API call's row (its endpoint,
model, tokens, cache hits, time, and the last message stored then: sessions.Conversation.add_usage) and the stored
tool results, whose note lines (citations.shown) went out with every later call of their conversation (a request
carries the conversation so far; a trimmed request may have carried less). Each call is priced at its own hour at the
provider's published prices (PRICES), cache hits apart; a provider or model without known prices gets tokens only. A
server on this machine or its network (config.is_local) is named as such: nothing left the machine for it. This module
only reads: it never writes, nor calls a model.
"""

import time
from collections import defaultdict
from decimal import Decimal
from urllib.parse import urlsplit

import citations
from config import is_local
from notes import plural

# USD per 1M tokens, (cache hit, cache miss, output), off-peak and peak, from DeepSeek's own pricing page
# (api-docs.deepseek.com/quick_start/pricing), checked November 2026. Peak hours are PEAK_HOURS_UTC.
PRICES = {
    ("api.deepseek.com", "deepseek-flash"): {"off-peak": (0.003, 0.15, 0.60), "peak": (0.006, 0.30, 1.20)},
    ("api.deepseek.com", "deepseek-v4-pro"): {"off-peak": (0.022, 0.66, 1.98), "peak": (0.044, 1.32, 3.96)},
}
PRICES_SOURCE = "DeepSeek's published prices (api-docs.deepseek.com/quick_start/pricing, November 2026)"
PEAK_HOURS_UTC = ((1, 4), (6, 10))  # 01:00-04:00 and 06:00-10:00
NOTES_LISTED = 30  # notes named under each endpoint; the rest are counted
EARLIER = ("", "")  # the endpoint of calls made before knowledge-agent kept where each one went
ALSO_SENT = "Each request also carried the instructions, your questions, the answers and the tool calls so far."


def is_peak(when: float) -> bool:
    hour = time.gmtime(when).tm_hour
    return any(start <= hour < end for start, end in PEAK_HOURS_UTC)


def price(endpoint: str, model: str, when: float, prompt: int, hits: int, completion: int) -> tuple | None:
    """(cache hits, cache misses, output) in USD of one call at the prices of its hour; None: no prices known."""
    prices = PRICES.get((urlsplit(endpoint).hostname, model))
    if prices is None:
        return None
    hit, miss, output = prices["peak" if is_peak(when) else "off-peak"]
    return hits * hit / 1e6, max(prompt - hits, 0) * miss / 1e6, completion * output / 1e6


def _dollars(amount: float) -> str:
    """$1.25, $0.3936, $0.000046 (two figures of a small amount)."""
    if amount >= 0.01 or not amount:
        return f"${amount:,.2f}" if amount >= 1 or not amount else f"${amount:.4f}"
    return "$" + format(Decimal(f"{amount:.2g}"), "f")


class _Endpoint:
    """What went to one endpoint and model: calls, tokens, cost, and the notes' lines."""

    def __init__(self, endpoint: str, model: str):
        self.endpoint, self.model = endpoint, model
        self.calls = self.unreported = self.prompt = self.hits = self.completion = self.peak = 0
        self.cost = [0.0, 0.0, 0.0]  # cache hits, cache misses, output
        self.notes: dict[str, set[int]] = {}
        self.commands = 0  # shell commands whose output went: it may hold note text

    def add(self, when: float, reported: bool, prompt: int, completion: int, hits: int) -> None:
        self.calls += 1
        if not reported:
            self.unreported += 1
            return
        self.prompt, self.completion, self.hits = self.prompt + prompt, self.completion + completion, self.hits + hits
        if cost := price(self.endpoint, self.model, when, prompt, hits, completion):
            self.cost = [a + b for a, b in zip(self.cost, cost)]
            self.peak += is_peak(when)

    def lines(self) -> list[str]:
        local = is_local(self.endpoint)
        if (self.endpoint, self.model) == EARLIER:
            out = ["API calls made before knowledge-agent recorded where each one went:"]
        else:
            out = [f"{urlsplit(self.endpoint).netloc} · {self.model} · {plural(self.calls, 'API call')}"
                   + (": on this machine/network, nothing left the machine" if local else "")]
        tokens = f"  tokens: {self.prompt:,} sent" + (f" ({self.hits:,} cache hits)" if self.hits else "")
        out.append(tokens + f", {self.completion:,} received"
                   + (f" ({plural(self.unreported, 'call')} reported none)" if self.unreported else ""))
        if self.calls and not local:
            out += self._cost()
        if self.notes or self.commands:
            out.append("  notes' text " + ("in the requests:" if local else "sent:"))
            out += [f"    {path}  {citations.ranges(sorted(self.notes[path]))}"
                    for path in sorted(self.notes)[:NOTES_LISTED]]
            out += [f"    … and {len(self.notes) - NOTES_LISTED} more notes"] * (len(self.notes) > NOTES_LISTED)
            out += [f"    and the output of {plural(self.commands, 'shell command')} (it may hold note text)"
                    ] * bool(self.commands)
        return out

    def _cost(self) -> list[str]:
        if (urlsplit(self.endpoint).hostname, self.model) not in PRICES:
            return ["  cost: no published prices known (tokens only)"]
        if self.unreported == self.calls:
            return ["  cost: unknown (the server reported no tokens)"]
        hits, misses, output = self.cost
        peak = f"; {self.peak} of {self.calls - self.unreported} at peak-hour prices" if self.peak else ""
        return [f"  estimated cost: {_dollars(sum(self.cost))} (cache hits {_dollars(hits)}, cache misses "
                f"{_dollars(misses)}, output {_dollars(output)}{peak})", f"  at {PRICES_SOURCE}"]


def report(store, session_id: int | None, kb, everything: bool = False) -> str:
    """/sent: what conversation `session_id` sent where; `everything`: every conversation about the notes `kb`."""
    if not everything and session_id is None:
        return "Nothing has been sent in this conversation yet."
    record = store.sent(None if everything else session_id, kb)
    endpoints: dict[tuple, _Endpoint] = {}
    calls = defaultdict(list)  # conversation -> [(the last message it carried, endpoint and model)] of its calls
    counted = defaultdict(lambda: [0, 0])  # conversation -> the tokens of its recorded calls
    for sid, when, endpoint, model, reported, prompt, completion, hits, last_message in record.calls:
        group = endpoints.setdefault((endpoint, model), _Endpoint(endpoint, model))
        group.add(when, reported, prompt, completion, hits)
        calls[sid].append((last_message or 0, (endpoint, model)))
        counted[sid][0], counted[sid][1] = counted[sid][0] + prompt, counted[sid][1] + completion
    # Tokens a conversation counted beyond its recorded calls: calls made before they were recorded.
    earlier = {sid: (prompt - counted[sid][0], completion - counted[sid][1])
               for sid, (prompt, completion) in record.totals.items()
               if prompt > counted[sid][0] or completion > counted[sid][1]}
    for prompt, completion in earlier.values():
        group = endpoints.setdefault(EARLIER, _Endpoint(*EARLIER))
        group.prompt, group.completion = group.prompt + prompt, group.completion + completion
    for sid, messages in record.messages.items():
        for index, tool, arguments, result in citations.tool_results([message for _, message in messages]):
            row = messages[index][0]
            went = {key for last, key in calls[sid] if last > row} or ({EARLIER} if sid in earlier else set())
            for key in went:
                citations.merge(endpoints[key].notes, citations.shown(tool, arguments, result))
                endpoints[key].commands += tool == "bash"
    what = f"every conversation about {kb} ({len(record.totals)})" if everything else f"conversation {session_id}"
    if not endpoints:
        return f"Nothing has been sent in {what} yet."
    out = [f"What {what} sent, and where:"]
    for key in sorted(endpoints, key=lambda key: key == EARLIER):
        out += endpoints[key].lines()
    totals = [(e.prompt, e.hits, e.completion, sum(e.cost)) for e in endpoints.values()]
    prompt, hits, completion, cost = map(sum, zip(*totals))
    out.append(f"In all: {prompt:,} tokens sent" + (f" ({hits:,} cache hits)" if hits else "")
               + f", {completion:,} received" + (f"; estimated cost {_dollars(cost)}" if cost else "") + ".")
    return "\n".join(out + [ALSO_SENT])
