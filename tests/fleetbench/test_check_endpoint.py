"""``fleet bench``'s endpoint check against a real HTTP server on loopback: a health URL that
fails once and then answers passes (a second GET, one pause); one that fails twice is the
one-line refusal; a closed port says unreachable."""

from __future__ import annotations

import http.server
import socket
import threading
from typing import Iterator

import pytest

from launcher.bench.run import check_endpoint
from launcher.deploy.status import REPROBE_AFTER_S
from launcher.errors import NotServingError


class Health(http.server.BaseHTTPRequestHandler):
    codes: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        assert self.path == "/health"
        self.send_response(self.codes.pop(0))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[int]]]:
    codes: list[int] = []
    handler = type("H", (Health,), {"codes": codes})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", codes
    srv.shutdown()
    srv.server_close()


def test_a_health_url_failing_once_passes_on_the_second_get(server: tuple[str, list[int]]) -> None:
    url, codes = server
    codes += [503, 200]
    slept: list[float] = []
    check_endpoint(url, slept.append)
    assert (codes, slept) == ([], [REPROBE_AFTER_S])


def test_a_health_url_failing_twice_is_refused(server: tuple[str, list[int]]) -> None:
    url, codes = server
    codes += [503, 503]
    with pytest.raises(NotServingError) as err:
        check_endpoint(url, lambda s: None)
    assert str(err.value) == f"{url}/health answered HTTP 503; nothing sent"
    assert codes == []


def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(NotServingError) as err:
            check_endpoint(url, lambda s: None)
    assert str(err.value) == f"{url}: unreachable from this host ([Errno 111] Connection refused); nothing sent"
