"""Hypothesis strategies for records of Flotilla's schemas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st


def values(schema: Any, named: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Valid values of ``schema``: records with their defaulted fields sometimes left out."""
    if isinstance(schema, str) and schema in named:
        schema = named[schema]
    kind = schema if isinstance(schema, str) else ("union" if isinstance(schema, list) else schema["type"])
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "double": st.floats(allow_nan=False),
        "string": st.text(max_size=8),
        "bytes": st.binary(max_size=8),
    }
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return st.lists(values(schema["items"], named, depth + 1), max_size=0 if depth > 4 else 2)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), values(schema["values"], named, depth + 1), max_size=0 if depth > 4 else 2)
    if kind == "union":
        branches = [named.get(b, b) if isinstance(b, str) else b for b in schema]
        several = sum(1 for b in branches if isinstance(b, dict) and b.get("type") == "record") > 1
        options = []
        for branch in branches:
            strategy = values(branch, named, depth + 1)
            if several and isinstance(branch, dict) and branch.get("type") == "record":
                strategy = strategy.map(named_branch(branch["name"]))
            options.append(strategy)
        return st.one_of(options)
    assert kind == "record", kind
    required = {f["name"]: values(f["type"], named, depth + 1) for f in schema["fields"] if "default" not in f}
    optional = {f["name"]: values(f["type"], named, depth + 1) for f in schema["fields"] if "default" in f}
    return st.fixed_dictionaries(required, optional=optional)


def named_branch(full_name: str) -> Callable[[Any], tuple[str, Any]]:
    """A value of a union of several records as the codec takes it: (full name, record)."""

    def tag(record: Any) -> tuple[str, Any]:
        return full_name, record

    return tag
