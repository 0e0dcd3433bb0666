"""The page's side of the agent: `App`, the state behind the page web.py serves, runs each question in a worker
thread; run_agent's UI hooks become events, and `approve` waits for the page's Accept or Reject. Stop makes the
next hook raise KeyboardInterrupt, so the history is kept as after Ctrl+C. Conversations live in the CLI's session
store (`--continue` picks up a page's, and back). It never approves anything by itself.
"""

import re
import sys
import threading
from bisect import bisect_left

import agent
import model
import citations
import db
import diffs
import frontmatter
import links
import reading
import search
import sent
import sessions
import tools
from approval import Approval
from config import Settings
from context import SHOWN, content_text
from notebook import Notebook
from notes import ToolError, is_note_path
from terminal import compact

STOP_WAIT = 5.0  # seconds Ctrl+C on the server gives a running answer to stop before leaving
PAGE_NOTE_MAX_CHARS = 200_000  # of a note shown: a browser lays out a megabyte of Markdown for minutes
BUSY = "The agent is answering: wait for it, or press Stop."
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")  # two UTF-16 code units each: JavaScript counts those


class HTTPError(Exception):
    """A request refused: (status, the message the page shows)."""


def no_key() -> str:
    return f"Chat is off: no API key. {model.key_hint()}, then start again. Meanwhile search and notes work."


def history_items(history: list[dict], checked: dict[int, citations.Report]) -> list[dict]:
    """A saved conversation as the events that showed it, so the page draws both alike (`checked`: its citations)."""
    items, names = [], {}
    for index, message in enumerate(history):
        role, text = message.get("role"), content_text(message.get("content"))
        if role == "user":
            items.append({"type": "user", "text": text})
        elif role == "assistant":
            if message.get("reasoning_content"):
                items.append({"type": "reasoning", "text": message["reasoning_content"]})
            if text:
                items.append({"type": "text", "text": text})
            if index in checked:
                items.append(checked[index].event())
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                name = names[call.get("id")] = function.get("name", "")
                items.append({"type": "tool_call", "name": name, "arguments": compact(function.get("arguments"), 1)})
        elif role == "tool":
            items.append({"type": "tool_result", "name": names.get(message.get("tool_call_id"), ""),
                          "text": text, "error": bool((message.get(SHOWN) or {}).get("error"))})
    return items


def note_links(notebook: Notebook, name: str, text: str) -> dict:
    """A note's links as the page draws them (spans in UTF-16 code units, the note each opens), and backlinks."""
    try:
        paths, rows, _ = search.link_rows(notebook, links.link_keys(name))
    except ToolError:  # the index failed, and its notice said so: the note opens without its links
        return {"links": [], "backlinks": []}
    resolver, astral = links.Resolver(paths), [m.start() for m in _ASTRAL.finditer(text)]
    drawn, end = [], 0
    for link in links.parse(text, name):
        wiki = link.form != "markdown"
        start, stop = (link.start, link.end) if wiki else (link.path_start, link.path_end)
        if start < end or (link.embed and not wiki):  # inside a link drawn already; an image stays an image
            continue
        to = resolver.resolve(link.target, name, link.form)
        shown = link.target + "#" * bool(link.fragment) + link.fragment
        drawn.append({"start": start + bisect_left(astral, start), "end": stop + bisect_left(astral, stop),
                      "label": (link.alias if link.alias and not link.embed else shown) if wiki else None,
                      "to": to if to and is_note_path(to) else None, "found": to is not None, "embed": link.embed})
        end = stop
    backlinks = [place.rsplit(":", 1) for place in dict.fromkeys(links.backlinks(name, rows, resolver))]
    return {"links": drawn, "backlinks": [{"path": path, "line": int(line)} for path, line in backlinks]}


class App(agent.UI):
    """The state behind the page, and run_agent's UI: each hook an event. Stop's KeyboardInterrupt is raised by a
    hook, never thrown in, so no lock leaks and no save is cut short."""
    reviews_changes = True

    def __init__(self, settings: Settings, model: model.Model | None):
        self.settings, self.model, self.notebook = settings, model, Notebook(settings)
        self.lock = threading.Condition(threading.RLock())  # guards everything below
        self.seq, self.events = 0, []  # numbered events of the turn in progress (or the last one)
        self.worker: threading.Thread | None = None
        self.pending: dict | None = None  # the question the worker waits on: its id and answer
        self.stopping = False
        db.show_notices(self.warn)  # every module's notices: on the terminal, and in the page
        self.conversation = sessions.Conversation(sessions.SessionStore(settings.data_dir / "sessions.db"),
                                                  settings.kb)

    def warn(self, line: str) -> None:
        print(f"knowledge-agent: {line}", file=sys.stderr, flush=True)
        self.emit({"type": "notice", "text": line})

    def emit(self, event: dict) -> None:
        with self.lock:
            self.seq += 1
            self.events.append((self.seq, event))
            self.lock.notify_all()

    def state(self) -> dict:
        with self.lock:
            busy = self.worker is not None
            history = self.conversation.history[:self.conversation.turn_start if busy else None]
            checked = citations.checked_answers(history, citations.reader(self.notebook))  # as the notes are now
            return {"session": self.conversation.session_id, "items": history_items(history, checked), "busy": busy,
                    "events": [event for _, event in self.events] if busy else [], "seq": self.seq,
                    "model": self.settings.model, "kb": str(self.settings.kb), "chat": self.model is not None,
                    "shell": self.settings.allow_shell}

    # --- A question and its answer, in the worker ---

    def start(self, question: str) -> None:
        question = question.strip()
        if not question:
            raise HTTPError(400, "The question is empty.")
        if self.model is None:
            raise HTTPError(409, no_key())
        with self.lock:
            self.idle()
            self.events, self.stopping = [], False
            asked = self.conversation.begin_turn(question)  # with what Undo restored, if the model is yet to hear it
            self.worker = threading.Thread(target=self._turn, args=(asked,), daemon=True)
            self.emit({"type": "user", "text": question})
            self.worker.start()

    def _turn(self, question: str) -> None:
        status, message = "ok", ""
        try:
            agent.run_agent(question, self.conversation.history, self.settings, self.model, self, self.notebook)
        except KeyboardInterrupt:
            status, message = "stopped", "Stopped. What was done so far is kept; ask again to go on."
        except model.AgentError as exc:
            status, message = "error", str(exc)
        except Exception as exc:  # a bug must end this answer, not the server
            status, message = "error", f"Unexpected error: {type(exc).__name__}: {exc}"
        finally:
            self.conversation.end_turn()
            with self.lock:
                self.worker, self.pending = None, None
                self.emit({"type": "done", "status": status, "message": message,
                           "session": self.conversation.session_id})

    def _show(self, event: dict) -> None:  # shown, then stopped: the page shows all the history keeps
        self.emit(event)
        if self.stopping:
            raise KeyboardInterrupt

    def text(self, text: str) -> None:
        self._show({"type": "text", "text": text})

    def reasoning(self, text: str) -> None:
        self._show({"type": "reasoning", "text": text})

    def notice(self, text: str) -> None:
        self._show({"type": "notice", "text": text})

    def tool_call(self, name: str, arguments: str) -> None:
        if self.stopping:  # before its card: it will not run
            raise KeyboardInterrupt
        self._show({"type": "tool_call", "name": name, "arguments": compact(arguments, 1)})

    def tool_result(self, name: str, result: tools.Result) -> None:
        self._show({"type": "tool_result", "name": name, "text": result.text, "error": result.error})

    def citations(self, report: citations.Report) -> None:
        if report.checks or report.unread:  # as a reloaded page draws it (citations.checked_answers)
            self.emit(report.event())  # the answer is whole: Stop has nothing left to stop

    def approve(self, approval: Approval) -> bool:
        """Wait for the page's Accept or Reject; Stop answers by raising KeyboardInterrupt, as Ctrl+C would."""
        event = {"type": "confirm", "kind": approval.kind, "title": approval.title, "detail": approval.detail,
                 "diffs": diffs.diffs(approval.change) if approval.change else []}
        with self.lock:
            if self.stopping:
                raise KeyboardInterrupt
            pending = self.pending = {"id": self.seq + 1, "answer": None}
            self.emit({**event, "id": pending["id"]})
            self.lock.wait_for(lambda: pending["answer"] is not None or self.stopping)
            self.pending = None
            if pending["answer"] is None:
                raise KeyboardInterrupt
            self.emit({"type": "answered", "id": pending["id"], "accepted": pending["answer"]})
            return pending["answer"]

    # --- What the page does ---

    def answer(self, ask_id, accepted) -> None:
        with self.lock:
            if self.pending is None or self.pending["id"] != ask_id or not isinstance(accepted, bool):
                raise HTTPError(409, "That question is no longer waiting for an answer.")
            self.pending["answer"] = accepted
            self.lock.notify_all()

    def stop(self) -> bool:
        """Cancel the answer like Ctrl+C, at its next hook; True if there was one to stop."""
        with self.lock:
            if self.worker is None or self.stopping:
                return False
            self.stopping = True
            self.lock.notify_all()
            return True

    def idle(self) -> None:
        if self.worker is not None:
            raise HTTPError(409, BUSY)

    def open(self, session_id=None) -> None:
        """Switch to conversation `session_id`, or to a new one; every open page redraws."""
        with self.lock:
            self.idle()
            info = self.conversation.store.session_info(session_id) if isinstance(session_id, int) else None
            if session_id is None:
                self.conversation.start_new()
            elif info is None:
                raise HTTPError(404, f"No conversation {session_id}.")
            elif info.kb != str(self.settings.kb):  # the list shows only this folder's: so does resume
                raise HTTPError(409, f"Conversation {session_id} belongs to another notes folder ({info.kb}): "
                                     "start knowledge-agent there (--kb) to continue it.")
            else:
                self.conversation.resume(session_id)
            self.emit({"type": "reset"})

    def sessions(self) -> list[dict]:
        with self.lock:
            listed = self.conversation.store.list_sessions(self.settings.kb)
        return [{"id": s.id, "started": s.started, "title": s.title or "(no question)", "messages": s.messages,
                 "current": s.id == self.conversation.session_id} for s in listed]

    def sent(self, everything: bool) -> dict:
        """/sent: what this conversation (`everything`: every one about these notes) sent, and where."""
        with self.lock:
            store, session = self.conversation.store, self.conversation.session_id
            return {"text": sent.report(store, session, self.settings.kb, everything)}

    def note(self, path: str) -> dict:
        try:
            name, text = reading.note_text(self.notebook, path, "")
            if len(text) > PAGE_NOTE_MAX_CHARS:
                text = text[:PAGE_NOTE_MAX_CHARS] + f"\n\n[… only the first {PAGE_NOTE_MAX_CHARS:,} characters are " \
                    "shown here; /read in the chat or your editor shows the rest]"
            properties, body_line, _ = frontmatter.front_matter(text)  # shown as a table, the body after it
            head = "".join(text.splitlines(keepends=True)[:body_line - 1])
            return {"path": name, "text": text, "properties": list(properties.items()),
                    "body_start": len(head) + len(_ASTRAL.findall(head)),  # in UTF-16 code units, as the page counts
                    **note_links(self.notebook, name, text)}
        except (ToolError, OSError) as exc:  # the message, not the advice to the model about its tools
            reason = getattr(exc, "strerror", None) or getattr(exc, "message", None) or str(exc)
            raise HTTPError(404, f"Cannot open that note: {reason.rstrip('.')}.") from None

    def undo(self) -> str:
        with self.lock:
            self.idle()
            message, undone = self.notebook.undo()
            if undone:
                self.conversation.undone(message)
            self.emit({"type": "notice", "text": message})
            return message

    def close(self) -> None:
        """Stop a running answer and wait a little for it, so no change is left half-asked; close the notebook."""
        worker = self.worker
        if worker is not None and self.stop():
            worker.join(STOP_WAIT)
        self.notebook.close()
