"""The operator's dashboard, served at ``/ui`` by ``dormant serve`` (and alone by ``dormant ui``).

Server-rendered pages (:mod:`.pages`, Jinja2 templates with every value escaped), one
stylesheet and one small script of the package's own (``static/``: no CDN, no build
step), under a strict Content-Security-Policy. :mod:`.auth` logs viewers in (the
operator token sees every tenant, a tenant's API key its own) with a signed session
cookie and CSRF tokens; :mod:`.samples` keeps the overview's last hour in a fixed
ring; :mod:`.data` reads threads, timelines and failed calls in bounded pages;
:mod:`.blobs` streams a thread's images and files to its timeline.

May import: the runtime, the store protocol, the server's shared state, the root's
vocabulary; never the CLI.
"""

from __future__ import annotations

from .auth import Sessions, Viewer
from .samples import Sample, Sampler

__all__ = ["Sample", "Sampler", "Sessions", "Viewer"]
