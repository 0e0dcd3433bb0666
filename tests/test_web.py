"""The web UI through plain HTTP against a real server on 127.0.0.1: its security rules, and its API driving
the real agent (the openai SDK against tests/fake_server.py), with the conversation in the CLI's store."""

import _thread
import html
import itertools
import json
import os
import random
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import pytest

import fake_server
import sessions
import web
from conftest import MAIN, Browser, make_settings, start_web
from page import BUSY, no_key

STOP_TURNS = 100  # Stop presses at random moments: the old asynchronous stop jammed about one in 25


# --- Security ---

def test_it_listens_on_loopback_only_and_refuses_other_host_headers(make_web):
    page = make_web()
    assert page.server.server_address[0] == "127.0.0.1"
    assert page.request("GET", "/api/state")[0] == 200
    page.host = f"localhost:{page.port}"
    assert page.request("GET", "/api/state")[0] == 200
    for host in ("evil.example", f"evil.example:{page.port}", "127.0.0.1", f"127.0.0.1:{page.port + 1}"):
        page.host = host  # DNS rebinding: a hostile name pointed at 127.0.0.1 carries its own Host
        status, _, body = page.request("GET", "/api/state")
        assert status == 403 and b"Host" in body


def test_the_launch_token_is_traded_once_for_the_key_and_only_the_key_opens_the_api(make_web):
    page = make_web()
    assert page.server.token is None  # make_web signed in with it: it is spent
    stranger = Browser(page.server)
    status, _, body = stranger.request("POST", "/api/login", {"token": "x" * 43})
    assert status == 403 and json.loads(body)["error"] == web.NO_TOKEN
    for path in ("/api/state", "/api/events", "/api/note?path=vim.md", "/api/sessions", "/api/search?q=vim"):
        status, _, body = stranger.request("GET", path)
        assert status == 403 and b"Not signed in" in body
    for headers in ({"Authorization": "Bearer guessed"}, {"Authorization": f"Bearer {page.key}x"},
                    {"Authorization": page.key}, {"Authorization": f"Basic {page.key}"},
                    {"Cookie": f"key={page.key}; ka-{page.port}={page.key}"}):
        assert stranger.request("GET", "/api/state", headers=headers)[0] == 403, headers
    assert stranger.request("GET", f"/api/state?key={page.key}")[0] == 403
    # The page's own files are the project's, the same for everyone: a reload or a new tab loads them, and its
    # script brings the key it kept.
    assert stranger.request("GET", "/")[0] == 200 and stranger.request("GET", "/static/app.js")[0] == 200
    assert page.get("/api/state")["items"] == []


ATTACKS = (("GET", "/api/state"), ("GET", "/api/note?path=vim.md"), ("GET", "/api/events"), ("POST", "/api/answer"),
           ("POST", "/api/ask"))


def test_what_the_browser_sends_to_another_port_opens_nothing(make_web, kb):
    """Cookies ignore ports: whatever cookie the page was given, the browser also sends to another user's server
    on another port of 127.0.0.1. Replayed from outside the page, with the right Host and Origin, it opens
    nothing: not the notes, not the events, not a delete waiting for Accept, not the agent."""
    page = make_web()
    for path in ("/", "/static/app.js", "/api/state", "/api/sessions"):  # the page loading, as a browser does
        assert page.request("GET", path)[0] == 200
    stream, review = waiting_review(page, "delete vim.md")
    attacker = Browser(page.server)
    captured = {"Cookie": "; ".join(page.cookies)} if page.cookies else {}
    for method, path in ATTACKS:
        status, _, body = attacker.request(method, path, {"id": review["id"], "accept": True, "text": "hi"},
                                           headers=captured)
        assert status == 403 and b"vim" not in body, (path, body)
    assert page.cookies == []  # none at all: the key lives in the page's script and goes in a header
    page.post("/api/answer", {"id": review["id"], "accept": False})
    assert page.until("answered", stream)["accepted"] is False and (kb / "vim.md").exists()


def launched(address: str) -> tuple[Path, str]:
    """The launch page a file: address names, and the address it sends the browser to."""
    page = Path(url2pathname(urlsplit(address).path))
    return page, html.unescape(re.search(r'url=([^"]+)"', page.read_text(encoding="utf-8"))[1])


def page_at(address: str) -> Browser:
    """The page at the address a launch page opens (http://127.0.0.1:PORT/#token=…), not signed in yet."""
    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/#token=([\w-]{43})", address)
    assert match, address
    return Browser(types.SimpleNamespace(port=int(match[1]), token=match[2]))


def test_the_browser_is_given_a_private_launch_page_not_the_token(kb, tmp_path, monkeypatch, capsys):
    """`ps` shows the browser's arguments to every user: it gets the path of a page that only this user can read
    (0600 in a 0700 folder, in XDG_RUNTIME_DIR), whose token signs in once; the page is gone at exit."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    seen = {}

    def browser(address):
        try:
            seen["argument"] = address
            page, seen["opens"] = launched(address)
            seen["page"], seen["modes"] = page, (page.stat().st_mode & 0o777, page.parent.stat().st_mode & 0o777)
            page = page_at(seen["opens"])
            seen["sign-ins"] = [page.request("POST", "/api/login", {"token": page.server.token})[0] for _ in range(2)]
        finally:
            _thread.interrupt_main()  # Ctrl+C
    monkeypatch.setattr(web.webbrowser, "open", browser)
    assert web.serve(make_settings(kb, data_dir=tmp_path / "data"), 0) == 0
    printed = capsys.readouterr()
    assert seen["argument"].startswith(f"file://{runtime}/") and "token" not in seen["argument"]
    assert printed.out == seen["argument"] + "\n"  # what to open, to copy or to script: no secret either
    assert seen["page"].parent.parent == runtime and seen["modes"] == (0o600, 0o700)
    assert seen["sign-ins"] == [200, 403]  # once
    assert "paste this one-time address into the browser's address bar (not into a command" in printed.err
    assert seen["opens"] in printed.err  # for a browser that cannot open files (a snap's): the terminal is private
    assert not seen["page"].parent.exists()


def test_state_changing_requests_need_the_pages_own_origin(make_web, kb):
    page = make_web()
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{page.port + 1}", f"https://127.0.0.1:{page.port}"):
        page.origin = origin
        status, _, body = page.request("POST", "/api/undo")
        assert status == 403 and b"did not come from" in body
    status, _, _ = page.request("POST", "/api/undo", headers={"Origin": None})  # no Origin at all
    assert status == 403
    page.origin = f"http://localhost:{page.port}"
    assert page.post("/api/undo")["result"].startswith("Nothing to undo")


def test_bodies_are_small_json_objects_only(make_web):
    page = make_web()
    form = {"Content-Type": "application/x-www-form-urlencoded"}  # what a plain cross-site form can send
    assert page.request("POST", "/api/ask", raw=b"text=hi", headers=form)[0] == 415
    assert page.request("POST", "/api/ask", raw=b"{not json")[0] == 400
    assert page.request("POST", "/api/ask", raw=b"[1, 2]")[0] == 400
    # refused on its Content-Length, before a byte of it is read (so none is sent here)
    assert page.request("POST", "/api/ask", raw=b"", headers={"Content-Length": str(web.MAX_BODY + 1)})[0] == 413
    assert page.get("/api/state")["items"] == []  # nothing was asked


def test_no_cors_headers_and_the_csp_on_every_answer(make_web):
    page = make_web()
    answers = [page.request("OPTIONS", "/api/ask", headers={"Origin": "http://evil.example",
                                                            "Access-Control-Request-Method": "POST"}),
               page.request("GET", "/"), page.request("GET", "/api/state"), page.request("GET", "/nope"),
               Browser(page.server).request("GET", "/api/state"),
               page.request("POST", "/api/new", headers={"Origin": "http://evil.example"})]
    assert [status for status, _, _ in answers] == [405, 200, 200, 404, 403, 403]
    for _, headers, _ in answers:
        assert not [name for name in headers if name.lower().startswith("access-control-")]
        assert headers["Content-Security-Policy"].startswith("default-src 'self'")
        assert headers["X-Content-Type-Options"] == "nosniff"


def test_every_other_method_is_refused_with_the_same_headers_and_host_check(make_web):
    page = make_web()
    for method in ("PUT", "DELETE", "PATCH", "TRACE", "HEAD"):
        status, headers, body = page.request(method, "/api/state")
        assert status == 405 and headers["Content-Security-Policy"] == web.CSP, method
        assert body == (b"" if method == "HEAD" else b'{"error": "Method not allowed."}')
    page.host = "evil.example"
    status, headers, _ = page.request("PUT", "/api/state")
    assert status == 403 and headers["X-Frame-Options"] == "DENY"


def test_a_bad_event_number_is_a_clear_400(make_web, capfd):
    page = make_web()
    status, _, body = page.request("GET", "/api/events?after=abc")
    assert status == 400 and "must be a whole number" in json.loads(body)["error"]
    assert "web request failed" not in capfd.readouterr().err


def test_a_request_sent_a_byte_at_a_time_or_never_is_cut_off_after_the_header_timeout(make_web, monkeypatch):
    monkeypatch.setattr(web, "HEADER_TIMEOUT", 0.5)
    page = make_web()
    idle = socket.create_connection(("127.0.0.1", page.port), timeout=5)
    slow = socket.create_connection(("127.0.0.1", page.port), timeout=0.05)  # the wait for its end paces the bytes
    head = itertools.chain(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\nX-Slow: ".encode(),
                           itertools.repeat(ord("x")))
    started = time.monotonic()
    with slow:
        while time.monotonic() - started < web.HEADER_TIMEOUT + 3:
            try:
                slow.send(bytes([next(head)]))
                if slow.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except ConnectionError:
                break
        else:
            pytest.fail("a request sent a byte at a time held its connection past the header timeout")
    assert web.HEADER_TIMEOUT <= time.monotonic() - started < web.HEADER_TIMEOUT + 2
    with idle:
        assert idle.recv(1) == b""  # closed by then too
    assert page.get("/api/state")["items"] == []


FLOOD = 2000  # idle connections: today's server, a thread and a file each without bound, stops near 1,020
FLOOD_PACE = 0.0005  # seconds between two: a steady flood (a burst would overflow the kernel's queue and wait there)


def flood(port: int, count: int) -> list[socket.socket]:
    """Open `count` connections that send nothing, one every FLOOD_PACE seconds: those the server let in."""
    connections = []
    with selectors.DefaultSelector() as connecting:
        for _ in range(count):
            connections.append(socket.socket())
            connections[-1].setblocking(False)
            connections[-1].connect_ex(("127.0.0.1", port))
            connecting.register(connections[-1], selectors.EVENT_WRITE)
            time.sleep(FLOOD_PACE)
        deadline = time.monotonic() + 2
        while connecting.get_map() and time.monotonic() < deadline:  # the last ones' handshakes
            for key, _ in connecting.select(deadline - time.monotonic()):
                connecting.unregister(key.fileobj)
        for key in list(connecting.get_map().values()):
            connections.remove(key.fileobj)
            key.fileobj.close()
    return connections


def test_a_flood_of_idle_connections_does_not_shut_the_page_out(kb, tmp_path, fake_llm):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 200:
        pytest.skip(f"this test opens {FLOOD} connections; the open-file limit is {hard}")
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(limit[0], FLOOD + 200), hard))
    env = {**os.environ, "KA_DATA_DIR": str(tmp_path / "data"), "DEEPSEEK_BASE_URL": fake_llm.base_url,
           "DEEPSEEK_API_KEY": "x", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    desktop = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # the usual limit of open files
    proc = subprocess.Popen([sys.executable, str(MAIN), "--web", "--port", "0", "--no-browser",
                             "--kb", str(kb)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=desktop)
    idle = []
    try:
        page = page_at(launched(proc.stdout.readline())[1]).sign_in()
        stream = page.events(page.get("/api/state")["seq"])  # the open page's stream, through the flood
        idle = flood(page.port, FLOOD)
        for path in web.PAGES:
            assert page.request("GET", path)[0] == 200
        page.post("/api/ask", {"text": "find my vim notes"})
        assert page.until("done", stream)["status"] == "ok"
        assert page.get("/api/state")["items"][0] == {"type": "user", "text": "find my vim notes"}
        assert len(idle) == FLOOD  # all of them were let in
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limit)
        for connection in idle:
            connection.close()
        proc.kill()
        proc.communicate()


# --- The agent through the API ---

def test_a_question_streams_its_answer_and_tool_calls_and_is_saved_for_the_cli(make_web, kb, tmp_path, fake_llm):
    page = make_web()
    seen = []
    done = page.until("done", page.ask("find my vim notes"), seen)
    assert done["status"] == "ok"
    kinds = [event["type"] for event in seen]
    assert kinds[:5] == ["user", "tool_call", "tool_result", "tool_call", "tool_result"]
    assert [e["name"] for e in seen if e["type"] == "tool_call"] == ["search_notes", "read_note"]
    answer = "".join(event["text"] for event in seen if event["type"] == "text")
    assert kinds.count("text") > 1 and answer.startswith("According to your note: # Vim")
    state = page.get("/api/state")
    # reloaded, the page draws the same from the saved history, the streamed pieces as one text
    joined = [kind for i, kind in enumerate(kinds[:-1]) if not (kind == "text" and kinds[i - 1] == "text")]
    assert [item["type"] for item in state["items"]] == joined and not state["busy"]

    # The page's conversation goes on in the terminal: python main.py --continue sees the question.
    env = {**os.environ, "KA_DATA_DIR": str(tmp_path / "data"), "DEEPSEEK_BASE_URL": fake_llm.base_url,
           "DEEPSEEK_API_KEY": "x", "KNOWLEDGE_BASE": str(kb), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cli = subprocess.run([sys.executable, str(MAIN), "--continue", "summarise it in one line"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "find my vim notes" in json.dumps(fake_llm.requests[-1]["messages"], ensure_ascii=False)
    assert cli.stdout.startswith("In one line: According to your note")

    # And back: the page lists it for these notes and resumes it with the terminal's turn.
    listed = page.get("/api/sessions")
    assert [(s["id"], s["title"]) for s in listed] == [(state["session"], "find my vim notes")]
    page.post("/api/new")
    assert page.get("/api/state")["items"] == []
    page.post("/api/resume", {"id": state["session"]})
    items = page.get("/api/state")["items"]
    assert [i["text"] for i in items if i["type"] == "user"] == ["find my vim notes", "summarise it in one line"]
    assert page.post("/api/resume", {"id": 999}, expect=404)["error"] == "No conversation 999."

    # A conversation about another notes folder is not listed here, and does not open here either.
    (tmp_path / "other-notes").mkdir()
    elsewhere = make_web(tmp_path / "other-notes")
    assert elsewhere.get("/api/sessions") == []
    error = elsewhere.post("/api/resume", {"id": state["session"]}, expect=409)["error"]
    assert error.startswith(f"Conversation {state['session']} belongs to another notes folder ({kb})")


def waiting_review(page: Browser, question: str):
    stream = page.ask(question)
    return stream, page.until("confirm", stream)


def shown_diff(review: dict) -> str:
    """Every diff a review shows, one after another."""
    return "\n".join(diff for _, diff in review["diffs"])


def test_an_edit_is_shown_as_a_diff_and_written_only_on_accept(make_web, kb):
    page = make_web(auto_approve=True)  # even so: the page never approves by itself
    before = (kb / "python.md").read_text(encoding="utf-8")
    stream, review = waiting_review(page, "in python.md replace Use venv for projects. with Use uv for projects.")
    assert review["kind"] == "change" and review["title"] == "Make this change to python.md?"
    assert review["diffs"][0][0] == "python.md"
    assert "-Use venv for projects.\n+Use uv for projects." in shown_diff(review)
    assert (kb / "python.md").read_text(encoding="utf-8") == before
    assert page.get("/api/state")["events"][-1]["type"] == "confirm"  # a reloaded page shows it again
    page.post("/api/answer", {"id": review["id"], "accept": True})
    result = page.until("tool_result", stream)
    assert result["text"].startswith("~ python.md  +1 \u22121") and not result["error"]
    assert page.until("done", stream)["status"] == "ok"
    assert (kb / "python.md").read_text(encoding="utf-8") == before.replace("Use venv", "Use uv")

    assert "Undid the edit of python.md" in page.post("/api/undo")["result"]
    assert (kb / "python.md").read_text(encoding="utf-8") == before
    page.until("done", page.ask("find my vim notes"))
    questions = [i["text"] for i in page.get("/api/state")["items"] if i["type"] == "user"]
    assert questions[-1].startswith("[I ran /undo: Undid the edit of python.md") and questions[-1].endswith("vim notes")


def test_a_rejected_change_is_not_written_and_the_model_is_told(make_web, kb, fake_llm):
    page = make_web()
    stream, review = waiting_review(page, "append to vim.md: - `u` undoes")
    assert shown_diff(review).endswith("+- `u` undoes")
    page.post("/api/answer", {"id": review["id"], "accept": False})
    assert page.until("answered", stream)["accepted"] is False
    result = page.until("tool_result", stream)
    assert result["error"] and "declined" in result["text"]
    page.until("done", stream)
    assert "undoes" not in (kb / "vim.md").read_text(encoding="utf-8")
    assert "the person declined" in fake_llm.requests[-1]["messages"][-1]["content"]
    assert page.post("/api/answer", {"id": review["id"], "accept": True}, expect=409)["error"].startswith("That question")


def test_a_note_changed_during_review_is_not_overwritten(make_web, kb):
    page = make_web()
    stream, review = waiting_review(page, "in vim.md replace `dd` deletes a line. with `dd` cuts a line.")
    with open(kb / "vim.md", "a", encoding="utf-8") as note:  # the person edits it meanwhile
        note.write("`yy` copies a line.\n")
    page.post("/api/answer", {"id": review["id"], "accept": True})
    result = page.until("tool_result", stream)
    assert result["error"] and "changed while the person was reviewing" in result["text"]
    text = (kb / "vim.md").read_text(encoding="utf-8")
    assert "`dd` deletes a line." in text and "`yy` copies a line." in text


def test_a_delete_shows_the_whole_note_going_and_stop_cancels_like_ctrl_c(make_web, kb, tmp_path):
    page = make_web()
    stream, review = waiting_review(page, "delete vim.md")
    assert review["title"].startswith("Delete vim.md?") and "-# Vim" in shown_diff(review)
    assert page.post("/api/new", expect=409)["error"] == BUSY
    assert page.post("/api/stop")["result"] is True
    done = page.until("done", stream)
    assert done["status"] == "stopped" and (kb / "vim.md").exists()
    saved = sessions.SessionStore(tmp_path / "data" / "sessions.db").load_messages(done["session"])
    assert [m["role"] for m in saved] == ["user", "assistant", "tool"]  # the call is answered, as after Ctrl+C
    assert saved[2]["content"].startswith("stopped: the user pressed Ctrl+C")
    assert page.post("/api/stop")["result"] is False  # nothing left to stop


def test_stop_while_the_answer_streams_keeps_what_was_shown(make_web, fake_llm, monkeypatch):
    monkeypatch.setattr(fake_server, "PACE", 0.01)  # the fake model writes slowly, so Stop comes midway
    fake_llm.replies.append({"content": "word " * 400})
    page = make_web()
    stream = page.ask("tell me a long story")
    page.until("text", stream)
    page.post("/api/stop")
    done = page.until("done", stream)
    assert done["status"] == "stopped" and "Stopped" in done["message"]
    last = page.get("/api/state")["items"][-1]
    assert last["type"] == "text" and last["text"].endswith("[cut off before the end]")
    assert len(last["text"]) < len("word " * 400)


def test_the_shell_is_off_unless_allowed_and_then_every_command_is_asked(make_web):
    page = make_web()
    stream = page.ask("run: ls")
    result = page.until("tool_result", stream)
    assert result["error"] and "shell tool is disabled" in result["text"]
    page.until("done", stream)
    page = make_web(allow_shell=True, auto_approve=True)
    assert page.get("/api/state")["shell"] is True
    stream, review = waiting_review(page, "run: ls")
    assert review["kind"] == "shell" and review["detail"].strip() == "ls"
    page.post("/api/answer", {"id": review["id"], "accept": False})
    assert "declined" in page.until("tool_result", stream)["text"]


def test_api_faults_and_a_missing_key_are_one_readable_line(make_web, fake_llm):
    fake_llm.replies.append({"status": 401, "message": "bad key"})
    page = make_web()
    done = page.until("done", page.ask("hello"))
    assert done["status"] == "error" and done["message"].startswith("The API rejected the key (401)")
    page = make_web(api_key=None)
    assert page.get("/api/state")["chat"] is False
    assert page.post("/api/ask", {"text": "hello"}, expect=409)["error"] == no_key()
    assert page.post("/api/ask", {"text": "  "}, expect=400)["error"] == "The question is empty."


def test_search_and_notes_work_from_the_page_beside_the_agent(make_web, kb):
    page = make_web()
    page.until("done", page.ask("find my python notes"))  # the agent searched in its worker thread
    found = page.get("/api/search?q=" + "dd%20deletes")
    assert not found["error"] and "vim.md — Vim" in found["text"]
    assert page.get("/api/search?q=")["error"]
    note = page.get("/api/note?path=work/meeting.md")
    assert (note["path"], note["text"]) == ("work/meeting.md", "# Meeting\n\nDecided: ship search in December.\n")
    assert (note["links"], note["backlinks"], note["properties"], note["body_start"]) == ([], [], [], 0)
    (kb.parent / "secret.md").write_text("TOP-SECRET", encoding="utf-8")
    for path in ("../secret.md", "/etc/passwd", ".history/undo.jsonl", "nope.md"):
        status, _, body = page.request("GET", f"/api/note?path={path}")
        assert status == 404 and b"Cannot open that note" in body and b"TOP-SECRET" not in body
        assert not re.search(rb"search_notes|list_notes|read_note|file_path", body)  # worded for a person


def test_a_huge_note_is_shown_in_part_and_says_so(make_web, kb):
    """A red team opened a 50 MB note on the page: the tab froze for minutes."""
    (kb / "big.md").write_text("# Big\n\n" + "word " * 1_000_000, encoding="utf-8")
    note = make_web().get("/api/note?path=big.md")
    assert len(note["text"]) < 201_000 and note["text"].endswith(
        "[… only the first 200,000 characters are shown here; /read in the chat or your editor shows the rest]")


def test_a_note_comes_with_its_links_resolved_as_obsidian_does_and_its_backlinks(make_web, kb):
    text = "🍀 [[meeting|the meeting]] `[[vim]]` ![[vim#Top]] [py](python.md#x) [[gone]] ![i](pic.png) [[pic.png]]\n"
    (kb / "work" / "links.md").write_text(text, encoding="utf-8")
    (kb / "work" / "pic.png").write_bytes(b"GIF89a")
    (kb / "python.md").write_text("see [[links]]\n", encoding="utf-8")
    note = make_web().get("/api/note?path=work/links.md")
    units = text.encode("utf-16-le")  # the page slices the text as JavaScript does, in UTF-16 code units
    assert [(units[2 * link["start"]:2 * link["end"]].decode("utf-16-le"), link["label"], link["to"], link["found"],
             link["embed"]) for link in note["links"]] == [
        ("[[meeting|the meeting]]", "the meeting", "work/meeting.md", True, False),
        ("![[vim#Top]]", "vim#Top", "vim.md", True, True), ("python.md", None, "python.md", True, False),
        ("[[gone]]", "gone", None, False, False), ("[[pic.png]]", "pic.png", None, True, False)]
    assert note["backlinks"] == [{"path": "python.md", "line": 1}]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_main_web_prints_the_launch_page_and_stops_cleanly_removing_it(kb, tmp_path, fake_llm, stop):
    env = {**os.environ, "KA_DATA_DIR": str(tmp_path / "data"), "DEEPSEEK_BASE_URL": fake_llm.base_url,
           "DEEPSEEK_API_KEY": "x", "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_RUNTIME_DIR": ""}
    proc = subprocess.Popen([sys.executable, str(MAIN), "--web", "--port", "0", "--no-browser",
                             "--kb", str(kb), "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        page, address = launched(proc.stdout.readline())
        assert page.parent.parent == Path(tempfile.gettempdir()) and page.parent.stat().st_mode & 0o777 == 0o700
        page_at(address).sign_in()
        proc.send_signal(stop)  # Ctrl+C, or `kill`
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err
    assert "ignored here: the page asks about every change" in err and "Stopping" in err
    assert not page.parent.exists()


def test_a_port_in_use_is_one_line(kb, tmp_path, capsys):
    taken = start_web(make_settings(kb, data_dir=tmp_path / "data"))
    try:
        assert web.serve(make_settings(kb, data_dir=tmp_path / "data"), taken.port, open_browser=False) == 2
    finally:
        taken.shutdown()
        taken.server_close()
    assert capsys.readouterr().err.startswith(f"error: cannot listen on 127.0.0.1:{taken.port} (")


def test_stop_at_any_moment_never_jams_the_server_and_keeps_the_history_valid(make_web, monkeypatch):
    monkeypatch.setattr(fake_server, "PIECE", 2)  # many small pieces: many moments for Stop to land in
    page, rng = make_web(), random.Random(14)
    for turn in range(1, STOP_TURNS + 1):
        stream = page.ask("find my vim notes")  # search, read, answer: streaming and tool steps
        for _ in range(rng.randrange(12)):  # Stop after a random number of events (0: right after asking)
            if next(stream)["type"] == "done":
                break
        else:
            page.post("/api/stop")
        page.until("done", stream)
        assert not page.get("/api/state")["busy"]  # a leaked lock hangs here: the socket's timeout fails it
        if turn % 10 == 0:  # each conversation answers every call, then a new one keeps requests small
            history = page.server.app.conversation.history
            asked = [call["id"] for message in history for call in message.get("tool_calls") or []]
            assert sorted(m["tool_call_id"] for m in history if m["role"] == "tool") == sorted(asked)
            saved = page.server.app.conversation.store.load_messages(page.get("/api/state")["session"])
            assert saved == json.loads(json.dumps(history))  # what --continue would load is what was kept
            page.post("/api/new")
