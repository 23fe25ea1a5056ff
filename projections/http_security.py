"""The HTTP API's bearer-token check and its TLS context (I/O shell: the TLS context reads files).

Everything but ``/health`` needs ``Authorization: Bearer <token>`` once a token is configured,
so a load balancer or liveness probe can still ask whether the view is alive.
"""

from __future__ import annotations

import hmac
import ssl
from pathlib import Path

OPEN_PATHS = frozenset({"/health", "/health/"})


def authorized(path: str, header: str | None, token: str | None) -> bool:
    """Whether a request may be answered: no token configured, /health, or the right bearer."""
    if token is None or path in OPEN_PATHS:
        return True
    scheme, _, given = (header or "").partition(" ")
    # compare_digest: the time taken says nothing about how much of the token matched.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


def server_tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The HTTPS context when a certificate is configured (None: plain HTTP)."""
    if cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
