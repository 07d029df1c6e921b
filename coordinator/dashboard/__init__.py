"""The web dashboard: server-rendered pages over the facade (``coordinator.app``), like
the gRPC API a transport that calls only the facade and reads domain values.

``serve_dashboard(app)`` serves it on the coordinator's event loop (``server``);
``build_app`` is the ASGI application (``web``: sign-in, scopes, CSRF; ``views``: the
pages and actions; ``render``: templates and headers; ``sessions``: cookies and CSRF
tokens; ``guard``: Host, Origin and body checks before any work; ``limits``: the sign-in
limit). Templates, styles and the one script are plain files in the package.
"""

from coordinator.dashboard.server import DashboardServer, serve_dashboard
from coordinator.dashboard.web import build_app

__all__ = ["DashboardServer", "build_app", "serve_dashboard"]
