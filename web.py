"""The web UI (`python main.py --web`): a standard-library HTTP server on 127.0.0.1 serving static/ and a small
JSON API over page.App, whose events reach the page as Server-Sent Events.

No web page and no other user may use it: it listens on 127.0.0.1 alone, refuses other Host headers (DNS rebinding)
and other origins' POSTs (CSRF), sends no CORS headers, takes small JSON bodies and runs only its own scripts
(CSP). The browser opens a launch page only this user can read (`ps` shows no token); its token, after "#", is
traded once for a key the page sends in a header, never a cookie (those reach every port of 127.0.0.1). Keyless
connections get HEADER_TIMEOUT and MAX_ANONYMOUS, so a flood cannot shut the page out. It never approves anything
by itself, and offers the shell only with --allow-shell.
"""

import contextlib
import hmac
import html
import json
import math
import os
import secrets
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import model
import tools
from config import Settings
from page import App, HTTPError, no_key

DEFAULT_PORT = 8731
MAX_BODY = 1_000_000  # bytes of a JSON request body (a question with a pasted note fits)
KEEPALIVE = 15.0  # seconds between comments on an idle event stream, so a dropped page is noticed
HEADER_TIMEOUT = 10.0  # seconds a connection has to send its request line and headers (a browser takes less than 1)
MAX_ANONYMOUS = 256  # open connections that have not shown the page's key; past it the oldest is closed
STATIC = Path(__file__).resolve().parent / "static"  # the page's files, beside this file in a clone and installed
PAGES = {"/": "index.html", **{f"/static/{name}": name
                                for name in ("app.js", "app.css", "marked.umd.js", "purify.min.js")}}
TYPES = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
NO_TOKEN = ("Not signed in: open the page knowledge-agent printed when it started, which signs this browser in "
            "once. One already used, or from an earlier start, does not work: start python main.py --web again.")
LAUNCH_PAGE = ('<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={url}">'
               '<title>knowledge-agent</title><p><a href="{url}">Open knowledge-agent</a></p>\n')


def _number(text: str, status: int, message: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HTTPError(status, message) from None


class Server(ThreadingHTTPServer):
    """The server on 127.0.0.1:port (0: any free); a connection has no thread until it speaks, and may be cut
    until its request shows the page's key."""
    daemon_threads = True
    request_queue_size = 4096  # connections waiting for accept: under a flood, the page's waits among them

    def __init__(self, settings: Settings, port: int):
        self.app = App(settings, model.make_client(settings) if settings.api_key else None)
        self.lock = threading.Lock()  # guards the token and the anonymous connections
        self.anonymous: dict[socket.socket, float] = {}  # in accept order: when its request is due (inf: it came)
        self.quiet = selectors.DefaultSelector()  # the listening socket, and connections that have not spoken yet
        self.stopping, self.stopped = threading.Event(), threading.Event()
        super().__init__(("127.0.0.1", port), Handler)
        self.port = self.server_address[1]
        self.token = secrets.token_urlsafe(32)  # one-time, in the launch page: the page's script trades it for the key
        self.key = secrets.token_urlsafe(32)  # the page's, in its Authorization header: never a cookie
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self.origins = {f"http://{host}" for host in self.hosts}
        self.url = f"http://127.0.0.1:{self.port}/#token={self.token}"  # after "#": never sent to a server

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self.quiet.register(self.socket, selectors.EVENT_READ)
        try:
            while not self.stopping.is_set():
                for key, _ in self.quiet.select(poll_interval):
                    if key.fileobj is self.socket:
                        self._handle_request_noblock()  # accept, then process_request
                    else:
                        self._spoke(key.fileobj, key.data)
                self.service_actions()
        finally:
            self.quiet.unregister(self.socket)
            self.stopped.set()

    def shutdown(self) -> None:
        self.stopping.set()
        self.stopped.wait()

    def process_request(self, request, client_address) -> None:
        with self.lock:
            self.anonymous[request] = time.monotonic() + HEADER_TIMEOUT
            self.quiet.register(request, selectors.EVENT_READ, client_address)
            if len(self.anonymous) > MAX_ANONYMOUS:  # the oldest that has not spoken, else the oldest
                quiet = (connection for connection in self.anonymous if connection in self.quiet.get_map())
                self._cut(next(quiet, next(iter(self.anonymous))))

    def _spoke(self, connection: socket.socket, client_address) -> None:
        """A quiet connection sent something (a thread reads its request) or closed."""
        with self.lock:
            if connection not in self.anonymous:  # cut since the select
                return
            try:
                said = connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                said = b""
            if not said:
                return self._cut(connection)
            self.quiet.unregister(connection)
        super().process_request(connection, client_address)  # ThreadingMixIn's: a thread for it

    def service_actions(self) -> None:  # serve_forever calls it after each event, and at least every poll_interval
        now = time.monotonic()
        with self.lock:
            for connection in [connection for connection, due in self.anonymous.items() if due < now]:
                self._cut(connection)

    def _cut(self, connection: socket.socket) -> None:
        """Close an anonymous connection (lock held): at once if quiet, else by ending its thread's socket."""
        del self.anonymous[connection]
        try:
            self.quiet.unregister(connection)
        except KeyError:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        else:
            connection.close()

    def request_came(self, connection: socket.socket, signed_in: bool) -> None:
        """Its request is in: no longer timed; signed in (the page's key), no longer anonymous, never cut."""
        with self.lock:
            if signed_in:
                self.anonymous.pop(connection, None)
            elif connection in self.anonymous:
                self.anonymous[connection] = math.inf

    def shutdown_request(self, request) -> None:  # its thread is done with it
        with self.lock:
            self.anonymous.pop(request, None)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self.lock:
            for connection in list(self.anonymous):
                self._cut(connection)
        self.quiet.close()

    def sign_in(self, token: str) -> str:
        with self.lock:
            if not (self.token and hmac.compare_digest(token.encode(), self.token.encode())):
                raise HTTPError(403, NO_TOKEN)
            self.token = None
            return self.key

    def handle_error(self, request, client_address) -> None:
        pass  # what a request can get wrong is answered in Handler._serve; the rest is a page going away


class Handler(BaseHTTPRequestHandler):
    server: Server
    timeout = 60  # seconds a socket may stall (a body shorter than its Content-Length); events pass every 15 s

    def log_message(self, format, *args) -> None:
        pass  # a line per request would bury what matters

    def _serve(self) -> None:
        self.server.request_came(self.request, self._signed_in())
        try:
            if self.headers.get("Host") not in self.server.hosts:
                raise HTTPError(403, "Wrong Host header: open the address knowledge-agent printed.")
            if self.command not in ("GET", "POST"):  # a CORS preflight among them: no CORS headers, ever
                raise HTTPError(405, "Method not allowed.")
            return (self._get if self.command == "GET" else self._post)()
        except HTTPError as exc:
            status, message = exc.args
        except (ConnectionError, TimeoutError):
            return  # the page went away
        except Exception as exc:  # a bug answers this request with one line, and the server goes on
            print(f"knowledge-agent: web request failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            status, message = 500, f"Internal error: {type(exc).__name__}: {exc}"
        if self.path.startswith("/api/"):
            return self._send(status, json.dumps({"error": message}).encode(), "application/json")
        self._send(status, f"knowledge-agent: {message}\n".encode(), "text/plain; charset=utf-8")  # a person reads it

    do_GET = do_POST = do_OPTIONS = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_TRACE = _serve

    def _send(self, status: int, body: bytes | None, kind: str) -> None:
        """Every response: the status, HEADERS, then the body (None: an event stream follows)."""
        self.send_response(status)
        length = {} if body is None else {"Content-Length": str(len(body))}
        for name, value in {**HEADERS, "Content-Type": kind, **length}.items():
            self.send_header(name, value)
        self.end_headers()
        if body is not None and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value) -> None:
        self._send(200, json.dumps(value, ensure_ascii=False).encode(), "application/json; charset=utf-8")

    def _signed_in(self) -> bool:
        scheme, _, key = (self.headers.get("Authorization") or "").partition(" ")
        return scheme == "Bearer" and hmac.compare_digest(key.encode(), self.server.key.encode())

    def _get(self) -> None:
        url = urlsplit(self.path)
        if name := PAGES.get(url.path):  # the page's own files, the same for everyone: its script signs in
            return self._send(200, (STATIC / name).read_bytes(), TYPES[name.rpartition(".")[2]] + "; charset=utf-8")
        if url.path == "/favicon.ico":  # asked for by every browser; there is none
            return self._send(204, b"", "text/plain")
        if not self._signed_in():
            raise HTTPError(403, NO_TOKEN)
        app, query = self.server.app, {key: values[0] for key, values in parse_qs(url.query).items()}
        if url.path == "/api/events":
            return self._events(query.get("after") or "0")
        routes = {"/api/state": app.state, "/api/sessions": app.sessions,
                  "/api/note": lambda: app.note(query.get("path", "")),
                  "/api/sent": lambda: app.sent(query.get("all") == "1"),
                  "/api/search": lambda: tools.execute_tool("search_notes", {"query": query.get("q", "")},
                                                            app.notebook)._asdict()}
        if url.path not in routes:
            raise HTTPError(404, "No such page.")
        self._json(routes[url.path]())

    def _events(self, after: str) -> None:
        """Server-Sent Events: every event after number `after`, then each as it happens, until the page goes."""
        app = self.server.app
        seq = min(_number(after, 400, "The event number (after=) must be a whole number."),
                  app.seq)  # a number from before a restart means nothing now
        self._send(200, None, "text/event-stream; charset=utf-8")
        while True:
            with app.lock:
                app.lock.wait_for(lambda: app.seq > seq, KEEPALIVE)
                batch = [(n, event) for n, event in app.events if n > seq]
            lines = "".join(f"data: {json.dumps(event, ensure_ascii=False)}\n\n" for _, event in batch)
            self.wfile.write((lines or ": keepalive\n\n").encode())
            self.wfile.flush()
            seq = batch[-1][0] if batch else seq

    def _body(self) -> dict:
        """The request's JSON object: small, and JSON (which a plain form cannot send)."""
        if (self.headers.get("Content-Type") or "").split(";")[0].strip().lower() != "application/json":
            raise HTTPError(415, "Send JSON (Content-Type: application/json).")
        length = _number(self.headers.get("Content-Length") or "", 411, "Content-Length is required.")
        if not 0 <= length <= MAX_BODY:
            raise HTTPError(413, f"The request is larger than {MAX_BODY} bytes.")
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
        except ValueError:  # UnicodeDecodeError is one
            raise HTTPError(400, "The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise HTTPError(400, "The request body must be a JSON object.")
        return body

    def _post(self) -> None:
        if self.headers.get("Origin") not in self.server.origins:
            raise HTTPError(403, "Refused: this request did not come from the knowledge-agent page.")
        if self.path == "/api/login":
            return self._json({"key": self.server.sign_in(str(self._body().get("token", "")))})
        if not self._signed_in():
            raise HTTPError(403, NO_TOKEN)
        body, app = self._body(), self.server.app
        routes = {"/api/ask": lambda: app.start(str(body.get("text", ""))),
                  "/api/answer": lambda: app.answer(body.get("id"), body.get("accept")),
                  "/api/stop": app.stop, "/api/new": app.open, "/api/undo": app.undo,
                  "/api/resume": lambda: app.open(body.get("id", "none"))}
        if self.path not in routes:
            raise HTTPError(404, "No such action.")
        self._json({"ok": True, "result": routes[self.path]()})


@contextlib.contextmanager
def launch_page(url: str):
    """A page sending the browser to `url`, for this user alone (0600 in a 0700 folder), removed on leaving."""
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    folder = Path(tempfile.mkdtemp(prefix="knowledge-agent-", dir=runtime if os.path.isdir(runtime) else None))
    try:
        page = folder / "open.html"
        with open(os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as file:
            file.write(LAUNCH_PAGE.format(url=html.escape(url)))
        yield page
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def serve(settings: Settings, port: int | None = None, open_browser: bool = True) -> int:
    """Serve the page until Ctrl+C, SIGTERM or SIGHUP, printing the launch page to open (and its address, to paste)."""
    port = DEFAULT_PORT if port is None else port
    try:
        server = Server(settings, port)
    except (OSError, OverflowError) as exc:  # in use, or not a port number at all
        print(f"error: cannot listen on 127.0.0.1:{port} ({getattr(exc, 'strerror', None) or exc}); "
              "choose another with --port N.", file=sys.stderr)
        return 2
    with launch_page(server.url) as page:
        print(f"knowledge-agent web UI for {settings.kb} (model {settings.model}"
              + (", shell on: you accept each command" if settings.allow_shell else "")
              + "). Open this page, which signs your browser in once; Ctrl+C stops:", file=sys.stderr)
        print(page.as_uri(), flush=True)
        print("knowledge-agent: or paste this one-time address into the browser's address bar (not into a "
              f"command, where other users see it): {server.url}", file=sys.stderr)
        if not settings.api_key:
            print(f"knowledge-agent: {no_key()}", file=sys.stderr)
        if settings.auto_approve:
            print("knowledge-agent: --yes / AUTO_APPROVE is ignored here: the page asks about every change.",
                  file=sys.stderr)
        if open_browser:
            threading.Thread(target=webbrowser.open, args=(page.as_uri(),), daemon=True).start()
        # `kill` and a closed terminal too remove the launch page
        stops = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("\nStopping…", file=sys.stderr)
        finally:
            for sig, handler in stops.items():
                signal.signal(sig, handler)
            server.app.close()
            server.server_close()
    return 0
