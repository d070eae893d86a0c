"""Serves moto's DynamoDB and DynamoDB Streams on 127.0.0.1 for the lease-failover harness.

Run by the dynamodb-local crate with the cached venv's python (`python -c <this file>`):
binds 127.0.0.1:PORT (0 = any free port), prints the bound port on stdout's first line, then
serves until killed. Stock `moto_server` runs each request on its own thread with no lock
around UpdateItem's read-check-write, so two conditional writes racing for one item can both
succeed (measured: 24 of 200 rounds of 16 racing acquires granted the lease twice). A lease
table must be linearizable, so here every request runs under one lock; the body is read before
the lock is taken, so a slow client (a throttled link) holds up nobody but itself.
MOTO_SERVE_UNLOCKED=1 drops the lock: only the test that shows why it is there sets it.
MOTO_SERVE_RACE_WINDOW_MS=N holds every conditional write N ms between its check passing and
its write, so racing writes overlap every time instead of now and then: the tests set it to make
the race deterministic (unlocked, it must double a grant in the first round; locked, never).
"""

import io
import logging
import os
import sys
import threading
import time

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


class Serialized:
    """WSGI middleware: one request at a time through the wrapped app."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length > 0 else b""
        environ["wsgi.input"] = io.BytesIO(body)
        with self.lock:
            return list(self.app(environ, start_response))


def widen_race_window(seconds):
    """Sleeps `seconds` after each condition expression that passes, before the write."""
    import moto.dynamodb.models as models

    original = models.create_condition_expression_parser

    class Held:
        def __init__(self, op):
            self.op = op

        def expr(self, item):
            passed = self.op.expr(item)
            if passed:
                time.sleep(seconds)
            return passed

    class Parser:
        def __init__(self, parser):
            self.parser = parser

        def parse(self):
            return Held(self.parser.parse())

    models.create_condition_expression_parser = lambda *a, **k: Parser(original(*a, **k))


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    # One line per request on stderr would cost more than the request.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    window_ms = int(os.environ.get("MOTO_SERVE_RACE_WINDOW_MS") or 0)
    if window_ms > 0:
        widen_race_window(window_ms / 1000)
    app = DomainDispatcherApplication(create_backend_app)
    if os.environ.get("MOTO_SERVE_UNLOCKED") != "1":
        app = Serialized(app)
    server = make_server(
        "127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler
    )
    sys.stdout.write(f"{server.server_port}\n")
    sys.stdout.flush()
    # Nothing else goes to stdout: the parent stops reading it after the first line.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    server.serve_forever()


if __name__ == "__main__":
    main()
