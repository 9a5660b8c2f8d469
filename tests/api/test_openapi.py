"""The OpenAPI document names exactly the routes a worker serves, with their methods."""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path

from streams.api.rest.openapi import DOCUMENT
from streams.app import create_control_plane
from streams.config import Settings
from tests.kit.plane import NO_BROKER

_ALTERNATIVES = re.compile(r"\{(\w+):([^}]+)\}")
_METHODS = {"get", "post", "put", "delete", "patch"}


def expand(pattern: str) -> list[str]:
    """`/jobs/{job_id}/{action:cancel|preempt}` -> `/jobs/{job_id}/cancel`, `/jobs/{job_id}/preempt`."""
    parts = _ALTERNATIVES.split(pattern)
    literals, choices = parts[0::3], [alternatives.split("|") for alternatives in parts[2::3]]
    return [
        "".join(itertools.chain.from_iterable(itertools.zip_longest(literals, chosen, fillvalue="")))
        for chosen in itertools.product(*choices)
    ]


def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    async def build() -> set[tuple[str, str]]:
        plane = create_control_plane(Settings(broker=NO_BROKER, store="memory://", data_dir=tmp_path))
        return {
            (method.lower(), path)
            for pattern, view in plane.app.web.views.items()
            for path in expand(pattern)
            for method in view.get_methods()
            if method.lower() in _METHODS
        }

    return asyncio.run(build())


def test_the_document_names_every_route_and_method_the_worker_serves_and_no_other(tmp_path: Path) -> None:
    documented = {(method, path) for path, operations in DOCUMENT["paths"].items() for method in operations if method in _METHODS}
    assert served_routes(tmp_path) == documented


def test_every_documented_path_parameter_is_declared() -> None:
    for path, operations in DOCUMENT["paths"].items():
        named = set(re.findall(r"\{(\w+)\}", path))
        for operation in operations.values():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == named, path
