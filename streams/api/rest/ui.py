"""The web UI: `GET /` is its page and `GET /ui/{name}` its script and style sheet, files of `streams/ui/`.

Plain HTML and JavaScript over the REST API, so there is no build step and nothing is fetched
from elsewhere at run time. The files are open (they hold no data); every call the page makes
carries the user's token, as any API client's would.
"""

from __future__ import annotations

from importlib import resources

import faust
from faust import web

from streams.api.errors import ApiError
from streams.api.rest.http import answers_errors

_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def ui_file(name: str) -> tuple[bytes, str]:
    """A file of the UI and its content type; 404 for any other name."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in _TYPES:
        raise ApiError(404, f"no UI file {name!r}")
    path = resources.files("streams.ui").joinpath(name)
    if not path.is_file():
        raise ApiError(404, f"no UI file {name!r}")
    return path.read_bytes(), _TYPES[suffix]


def register(app: faust.App) -> None:
    @app.page("/")
    class Index(web.View):
        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            body, content_type = ui_file("index.html")
            return self.bytes(body, content_type=content_type, headers={"Cache-Control": "no-cache"})

    @app.page("/ui/{name}")
    class UiFile(web.View):
        @answers_errors
        async def get(self, request: web.Request, name: str) -> web.Response:
            body, content_type = ui_file(name)
            return self.bytes(body, content_type=content_type, headers={"Cache-Control": "no-cache"})
