"""The web dashboard: static pages every service serves at /ui/, reading the same keyed /v1 API as any client.

The pages hold no data and need no key to load; every figure they show comes from the API with the key the user
logs in with (kept in the tab's sessionStorage, sent as the Authorization header, never in a URL). So the
dashboard is no second source of truth and adds no route that could leak a tenant's data.
"""

from __future__ import annotations

from pathlib import Path

from starlette.datastructures import MutableHeaders
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).parent / "static"
MOUNT_PATH = "/ui"

# The pages render text written by tenants and agents (problem sources, kernels, model output). They never parse
# it as HTML; the policy makes sure nothing else could run either: scripts and connections to this origin only,
# no inline code, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A redeployed service serves new pages at once; the files are small.
    "Cache-Control": "no-cache",
}


class _WithHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


def dashboard_app() -> ASGIApp:
    """The static pages (index.html at the mount's root), with the security headers."""
    return _WithHeaders(StaticFiles(directory=STATIC_DIR, html=True))
