"""The node page's tests serve it through the web layer's real server, with that layer's
fixtures: `pki` (a CA with server and client certificates) and `serve` (a `WebServer` in a
thread, stopped after the test)."""

from tests.web.conftest import pki, serve

__all__ = ["pki", "serve"]
