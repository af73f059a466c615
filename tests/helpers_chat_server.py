"""A stand-in OpenAI-compatible chat server on 127.0.0.1, for the LLM-customer tests.

No hosted model can be reached here, so tests start this one: each test module supplies `answer`,
which maps a request body (and how many requests came before) to an HTTP status and a JSON reply.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[dict[str, Any], int], tuple[int, Any]]


def completion(content: Any) -> dict[str, Any]:
    """A chat-completions reply whose one choice says `content`."""
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


@contextmanager
def chat_server(answer: Answer) -> Iterator[ThreadingHTTPServer]:
    """A running server; `.requests` holds (path, headers, body) of every POST, `.base` its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with server.lock:
                server.requests.append((self.path, dict(self.headers), body))
                count = len(server.requests)
            status, reply = answer(body, count)
            payload = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False  # a handler still sleeping must not hold up the teardown
    server.requests, server.lock = [], threading.Lock()
    server.base = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
