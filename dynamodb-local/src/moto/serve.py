"""Serves moto's DynamoDB and DynamoDB Streams on 127.0.0.1 for the lease-failover harness.

Run by the dynamodb-local crate with the cached venv's python (`python -c <this file>`):
binds 127.0.0.1:PORT (0 = any free port), prints the bound port on stdout's first line, then
serves until killed. Stock `moto_server` runs each request on its own thread with no lock
around UpdateItem's read-check-write, so two conditional writes racing for one item can both
succeed (measured: 24 of 200 rounds of 16 racing acquires granted the lease twice). A lease
table must be linearizable, so here every request runs under one lock; the body is read before
the lock is taken, so a slow client (a throttled link) holds up nobody but itself.
MOTO_SERVE_UNLOCKED=1 drops the lock: only the test that shows why it is there sets it.
"""

import io
import logging
import os
import sys
import threading

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


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    # One line per request on stderr would cost more than the request.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
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
