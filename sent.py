"""What left this machine (/sent): which notes' lines went to which endpoint, the tokens, and what they cost.

Everything comes from the session store as recorded when it happened: each API call's row and what each stored tool
result showed (context.SHOWN), which went out with every later call of its conversation. A result that may hold more
note text (a shell's output), or saved before what it showed was kept, is counted apart. Each call is priced at its
own hour (PRICES). This module only reads: it never writes, nor calls a model.
"""

import time
from collections import defaultdict
from decimal import Decimal
from urllib.parse import urlsplit

import citations
from config import is_local
from notes import plural
from replies import Usage

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
    def __init__(self, endpoint: str, model: str):
        self.endpoint, self.model, self.usage, self.peak = endpoint, model, Usage(), 0
        self.cost = [0.0, 0.0, 0.0]  # cache hits, cache misses, output
        self.notes: dict[str, set[int]] = {}
        self.unlisted = 0  # tool results that went whose note text is not known line by line

    def add(self, when: float, usage: Usage) -> None:
        self.usage += usage
        if not usage.unreported and (cost := price(self.endpoint, self.model, when, usage.prompt, usage.hits,
                                                   usage.completion)):
            self.cost = [a + b for a, b in zip(self.cost, cost)]
            self.peak += is_peak(when)

    def carried(self, shown: dict | None) -> None:
        """A tool result the requests carried, by what it showed (None: not known, saved before it was kept)."""
        for path, numbers in (shown or {}).get("lines", {}).items():
            self.notes.setdefault(path, set()).update(numbers)
        self.unlisted += shown is None or bool(shown.get("unlisted"))

    def lines(self) -> list[str]:
        local, usage = is_local(self.endpoint), self.usage
        out = [f"{urlsplit(self.endpoint).netloc} · {self.model} · {plural(usage.calls, 'API call')}"
               + (": on this machine/network, nothing left the machine" if local else "")
               if (self.endpoint, self.model) != EARLIER else
               "API calls made before knowledge-agent recorded where each one went:"]
        tokens = f"  tokens: {usage.prompt:,} sent" + (f" ({usage.hits:,} cache hits)" if usage.hits else "")
        out.append(tokens + f", {usage.completion:,} received"
                   + (f" ({plural(usage.unreported, 'call')} reported none)" if usage.unreported else ""))
        if usage.calls and not local:
            out += self._cost()
        if self.notes or self.unlisted:
            out.append("  notes' text " + ("in the requests:" if local else "sent:"))
            out += [f"    {path}  {citations.ranges(sorted(self.notes[path]))}"
                    for path in sorted(self.notes)[:NOTES_LISTED]]
            out += [f"    … and {len(self.notes) - NOTES_LISTED} more notes"] * (len(self.notes) > NOTES_LISTED)
            out += [f"    and {plural(self.unlisted, 'tool result')} that may hold note text not listed by line (a "
                    "shell command's output, or one saved by an older version)"] * bool(self.unlisted)
        return out

    def _cost(self) -> list[str]:
        if (urlsplit(self.endpoint).hostname, self.model) not in PRICES:
            return ["  cost: no published prices known (tokens only)"]
        if self.usage.unreported == self.usage.calls:
            return ["  cost: unknown (the server reported no tokens)"]
        hits, misses, output = self.cost
        peak = f"; {self.peak} of {self.usage.calls - self.usage.unreported} at peak-hour prices" if self.peak else ""
        return [f"  estimated cost: {_dollars(sum(self.cost))} (cache hits {_dollars(hits)}, cache misses "
                f"{_dollars(misses)}, output {_dollars(output)}{peak})", f"  at {PRICES_SOURCE}"]


def report(store, session_id: int | None, kb, everything: bool = False) -> str:
    """/sent: what conversation `session_id` sent where; /sent all (`everything`): every conversation about `kb`."""
    if not everything and session_id is None:
        return "Nothing has been sent in this conversation yet."
    record = store.sent(None if everything else session_id, kb)
    endpoints: dict[tuple, _Endpoint] = {}
    calls = defaultdict(list)  # conversation -> [(the last message it carried, endpoint and model)] of its calls
    counted = defaultdict(Usage)  # conversation -> what its recorded calls counted
    for sid, when, endpoint, model, reported, prompt, completion, hits, last_message in record.calls:
        usage = Usage(prompt, completion, hits, 1, not reported)
        endpoints.setdefault((endpoint, model), _Endpoint(endpoint, model)).add(when, usage)
        calls[sid].append((last_message or 0, (endpoint, model)))
        counted[sid] += usage
    # Tokens a conversation counted beyond its recorded calls: calls made before they were recorded.
    earlier = {sid: Usage(prompt - counted[sid].prompt, completion - counted[sid].completion)
               for sid, (prompt, completion) in record.totals.items()
               if prompt > counted[sid].prompt or completion > counted[sid].completion}
    for usage in earlier.values():
        endpoints.setdefault(EARLIER, _Endpoint(*EARLIER)).usage += usage
    for sid, results in record.shown.items():
        for row, shown in results:
            for key in {key for last, key in calls[sid] if last > row} or ({EARLIER} if sid in earlier else set()):
                endpoints[key].carried(shown)
    what = f"every conversation about {kb} ({len(record.totals)})" if everything else f"conversation {session_id}"
    if not endpoints:
        return f"Nothing has been sent in {what} yet."
    out = [f"What {what} sent, and where:"]
    for key in sorted(endpoints, key=lambda key: key == EARLIER):
        out += endpoints[key].lines()
    usage = sum((e.usage for e in endpoints.values()), Usage())
    cost = sum(sum(e.cost) for e in endpoints.values())
    out.append(f"In all: {usage.prompt:,} tokens sent" + (f" ({usage.hits:,} cache hits)" if usage.hits else "")
               + f", {usage.completion:,} received" + (f"; estimated cost {_dollars(cost)}" if cost else "") + ".")
    return "\n".join(out + [ALSO_SENT])
