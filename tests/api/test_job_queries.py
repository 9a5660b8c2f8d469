"""Query parameters of GET /api/v1/jobs become a `JobQuery`, or a 400 that says what is wrong."""

from __future__ import annotations

import pytest

from streams.api.errors import ApiError
from streams.api.job_queries import parse_query
from streams.domain.job_index import JobQuery, encode_cursor, sort_key


def test_repeated_and_comma_separated_values_are_one_list_and_defaults_fill_the_rest() -> None:
    query = parse_query({"queue": ["a,b", "c"], "state": ["QUEUED", "running"], "label": ["team=x", "tier=gold"], "limit": ["5"]})
    assert query == JobQuery(
        queues=("a", "b", "c"),
        states=("queued", "running"),
        labels=(("team", "x"), ("tier", "gold")),
        limit=5,
        sort="submitted",
        descending=True,
    )


def test_a_cursor_continues_after_its_key() -> None:
    key = sort_key(1_700_000_000_000, "J1")
    assert parse_query({"cursor": [encode_cursor(key)], "order": ["asc"]}).after == key


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"colour": ["red"]}, "unknown parameter"),
        ({"order": ["sideways"]}, "order must be"),
        ({"label": ["team"]}, "must be key=value"),
        ({"submitted_from": ["yesterday"]}, "must be an integer"),
        ({"state": ["sleeping"]}, "unknown state"),
        ({"node": ["n1,n2"]}, "takes one value"),
        ({"cursor": ["nonsense"]}, "cursor"),
        ({"limit": ["100000"]}, "limit"),
        ({"sort": ["name"]}, "cannot sort"),
    ],
)
def test_a_malformed_query_is_refused_with_its_reason(params: dict[str, list[str]], message: str) -> None:
    with pytest.raises(ApiError, match=message) as refused:
        parse_query(params)
    assert refused.value.status == 400
