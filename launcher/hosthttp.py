"""HTTP for fleet's own calls to engines and routers: :class:`DirectHttp` from the control node,
:class:`HostHttp` from a host over its open SSH transport (for addresses only the hosts reach).

Contract: ``request`` answers ``(status, body)``, status 0 when nothing answered (body: the
reason); it never raises for an HTTP status.  Used by the router API (``rolling/router_api.py``)
and the PD canary (``deploy/crossing.py``), so it sits on the transport layer.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Protocol

from launcher import hostscripts
from launcher.execute.transport import Transport
from launcher.remote import sh


class Http(Protocol):
    def request(self, method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, str]:
        """``(status, body)``; status 0 when nothing answered (body: the reason)."""
        ...


class DirectHttp:
    """HTTP from the control node itself."""

    def request(self, method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return int(r.status), r.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode(errors="replace")
        except (OSError, ValueError) as err:
            return 0, str(getattr(err, "reason", err))


_REQUEST = hostscripts.text("http-request.sh")


class HostHttp:
    """HTTP sent from a host (``curl`` or ``python3`` there) over its open SSH transport: for
    addresses only the hosts reach (data-plane IPs).  One thread at a time per transport."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def request(self, method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, str]:
        payload = json.dumps(body) if body is not None else ""
        result = self.transport.run(sh(_REQUEST, method, url, payload, str(int(max(1, timeout)))), timeout=timeout + 30)
        out = result.stdout_text
        if not result.ok:
            return 0, (result.stderr_text or out).strip()
        text, _, code = out.rpartition("\n")
        try:
            return int(code.strip()), text
        except ValueError:
            return 0, out.strip()
