"""The HTTP API's bearer-token check and its TLS context (I/O shell: the TLS context reads files).

Everything but ``/health`` needs ``Authorization: Bearer <token>`` once a token is configured,
so a load balancer or liveness probe can still ask whether the view is alive. That covers the
dashboard's page, its files, its data routes and ``/metrics``. A browser cannot set the header
on a page it opens, so ``?token=<token>`` in the query is accepted too: open the dashboard at
``/?token=<token>`` and it sends the token with every request it makes.
"""

from __future__ import annotations

import hmac
import ssl
from pathlib import Path

OPEN_PATHS = frozenset({"/health", "/health/"})


def authorized(
    path: str, header: str | None, token: str | None, query_token: str | None = None
) -> bool:
    """Whether a request may be answered: no token configured, /health, the right bearer, or
    the right ``?token=`` (for the dashboard, which a browser opens without headers)."""
    if token is None or path in OPEN_PATHS:
        return True
    # compare_digest: the time taken says nothing about how much of the token matched.
    if query_token is not None and hmac.compare_digest(query_token.encode(), token.encode()):
        return True
    scheme, _, given = (header or "").partition(" ")
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
