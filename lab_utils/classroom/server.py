"""The class server: learners' notebooks send to it, the instructor's page watches it live.

Why the standard library (``http.server.ThreadingHTTPServer`` + server-sent events) and not a
framework or a Jupyter server extension: the traffic is tiny (a room of 30-200 learners sends a few
JSON messages a minute; the page needs one stream of updates), so a thread per connection is
plenty and nothing is added to the course's dependencies. A Jupyter server extension would need the
instructor's Jupyter to run and would expose that Jupyter (which runs code) to the room's network;
this server runs no code, binds to 127.0.0.1 unless told otherwise, and runs wherever Python does.

Every request carries the class code (header ``X-Class-Code``, or ``?code=`` for the page and its
event stream, which a browser cannot give headers); the instructor's requests also carry the
instructor token. Bodies are bounded (``messages.MAX_BODY_BYTES``) and each learner's writes are
rate-limited (``limits.RateLimit``). Errors are JSON ``{"error": "..."}`` with a status that says
which kind: 400 bad field, 403 wrong code or token, 409 closed question, 413 too large, 429 too
many.

    POST /api/join       {"pseudonym"}                       a learner joins (or rejoins)
    POST /api/leave      {"pseudonym"}
    POST /api/prediction {"pseudonym", "key", "question", "unit", "choices", "guess", ...}
    POST /api/result     {"pseudonym", "exercise", "passed", "misconception"}
    GET  /instructor     the page          GET /api/state    the room as JSON
    GET  /api/events     server-sent events: the room, again after each change (<= 10 per second)
    POST /api/question   {"key", "action": open | close | reveal | hide, "value"}  (instructor)
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from lab_utils.classroom import messages
from lab_utils.classroom.limits import RateLimit
from lab_utils.classroom.store import ClassStore, Refused

EVENT_GAP_S = 0.1  # an event stream sends at most one update per gap: a burst is coalesced
KEEPALIVE_S = 15.0  # an idle stream gets a comment line this often (proxies close silent ones)
MAX_PAGES = 8  # open instructor pages (each holds a thread)
LEARNER_ROUTES: dict[str, Callable[[dict], dict]] = {
    "/api/join": lambda m: {"pseudonym": messages.pseudonym(m)},
    "/api/leave": lambda m: {"pseudonym": messages.pseudonym(m)},
    "/api/prediction": messages.prediction,
    "/api/result": messages.result,
}


class ClassServer(ThreadingHTTPServer):
    """An HTTP server bound to one ``ClassStore``; ``changed()`` wakes the event streams."""

    daemon_threads = True
    request_queue_size = 256  # the whole room may commit in the same second (socketserver: 5)

    def __init__(
        self,
        store: ClassStore,
        host: str = "127.0.0.1",
        port: int = 8765,
        rate: RateLimit | None = None,
    ):
        super().__init__((host, port), Handler)
        self.store = store
        self.rate = rate or RateLimit()
        self.bad_code = RateLimit(burst=20, per_second=1.0)  # guessing the code, per address
        self.version = 0
        self.stopping = False
        self.pages = 0
        self.cond = threading.Condition()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def changed(self) -> None:
        with self.cond:
            self.version += 1
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: ClassServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # no access log: it would keep every learner's address

    # ------------------------------------------------------------------ answers
    def reply(self, status: int, body: dict | str, ctype: str = "application/json") -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{ctype}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def error(self, status: int, message: str) -> None:
        self.close_connection = True
        self.reply(status, {"error": message})

    # ------------------------------------------------------------------ checks
    def param(self, name: str, header: str) -> str:
        query = parse_qs(urlsplit(self.path).query)
        return self.headers.get(header) or (query.get(name) or [""])[0]

    def has_code(self) -> bool:
        if hmac.compare_digest(
            self.param("code", "X-Class-Code").encode(), self.server.store.code.encode()
        ):
            return True
        if not self.server.bad_code.allow(self.client_address[0]):
            self.error(429, "too many wrong class codes from this address: wait a minute")
        else:
            self.error(403, "wrong class code: use the code the class server printed")
        return False

    def is_instructor(self) -> bool:
        if hmac.compare_digest(
            self.param("token", "X-Instructor-Token").encode(),
            self.server.store.instructor_token.encode(),
        ):
            return True
        self.error(403, "this needs the instructor token (the server printed the page's URL)")
        return False

    def body(self) -> dict | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.error(411, "send a JSON body with a Content-Length")
            return None
        if int(length) > messages.MAX_BODY_BYTES:
            self.error(413, f"body of {length} bytes; at most {messages.MAX_BODY_BYTES}")
            return None
        try:
            msg = json.loads(self.rfile.read(int(length)))
        except (ValueError, UnicodeDecodeError):
            self.error(400, "the body is not valid JSON")
            return None
        if not isinstance(msg, dict):
            self.error(400, "the body must be a JSON object")
            return None
        return msg

    # ------------------------------------------------------------------ routes
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        route = urlsplit(self.path).path
        if route not in LEARNER_ROUTES and route != "/api/question":
            return self.error(404, f"no such endpoint: POST {route}")
        if not self.has_code():
            return
        msg = self.body()
        if msg is None:
            return
        try:
            if route == "/api/question":
                if self.is_instructor():
                    q = messages.question_action(msg)
                    self.server.store.set_question(q["key"], q["action"], q["value"])
                    self.server.changed()
                    self.reply(200, {"ok": True})
                return
            checked = LEARNER_ROUTES[route](msg)
            if not self.server.rate.allow(checked["pseudonym"]):
                return self.error(
                    429,
                    f"too many requests from {checked['pseudonym']!r}: "
                    f"{self.server.rate.describe()}",
                )
            self.learner(route, checked)
        except messages.BadMessage as exc:
            self.error(400, str(exc))
        except Refused as exc:
            self.error(exc.status, str(exc))

    def learner(self, route: str, msg: dict) -> None:
        store = self.server.store
        {
            "/api/join": lambda: store.join(msg["pseudonym"]),
            "/api/leave": lambda: store.leave(msg["pseudonym"]),
            "/api/prediction": lambda: store.add_prediction(msg),
            "/api/result": lambda: store.add_result(msg),
        }[route]()
        self.server.changed()
        self.reply(200, {"ok": True})

    def do_GET(self) -> None:  # noqa: N802
        route = urlsplit(self.path).path
        if route not in ("/instructor", "/api/state", "/api/events"):
            return self.error(404, f"no such page: GET {route}")
        if not (self.has_code() and self.is_instructor()):
            return
        if route == "/instructor":
            page = resources.files("lab_utils.classroom").joinpath("instructor.html")
            return self.reply(200, page.read_text(), "text/html")
        if route == "/api/state":
            return self.reply(200, self.server.store.snapshot())
        self.events()

    def events(self) -> None:
        """Server-sent events: the room now, then again after every change (coalesced)."""
        srv = self.server
        with srv.cond:
            full = srv.pages >= MAX_PAGES
            srv.pages += 0 if full else 1
        if full:
            return self.error(429, f"at most {MAX_PAGES} instructor pages at once")
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            sent = -1
            while True:
                with srv.cond:
                    srv.cond.wait_for(lambda: srv.version != sent or srv.stopping, KEEPALIVE_S)
                    if srv.stopping:
                        return
                    version = srv.version
                if version == sent:
                    self.wfile.write(b": keepalive\n\n")
                else:
                    sent = version
                    data = json.dumps(srv.store.snapshot(), separators=(",", ":"))
                    self.wfile.write(f"event: state\ndata: {data}\n\n".encode())
                self.wfile.flush()
                time.sleep(EVENT_GAP_S)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page was closed
        finally:
            with srv.cond:
                srv.pages -= 1


def serve(db: str, host: str = "127.0.0.1", port: int = 8765, out=print) -> None:
    """Run the class server until Ctrl-C (``python -m lab_utils class serve``)."""
    store = ClassStore(db)
    server = ClassServer(store, host, port)
    url = (
        server.url
        if host not in ("0.0.0.0", "::")
        else f"http://<this machine's address>:{server.server_address[1]}"
    )
    out(f"class server on {server.url}  (database: {store.path})")
    out(f"join code: {store.code}")
    out(
        f"learners:  from lab_utils import classroom; classroom.join({url!r}, {store.code!r}, "
        "'<a pseudonym>')"
    )
    out(
        f"instructor page (keep the token private): "
        f"{url}/instructor?code={store.code}&token={store.instructor_token}",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        out("class server stopped; everything is kept in", store.path)
    finally:
        server.server_close()
        store.close()
