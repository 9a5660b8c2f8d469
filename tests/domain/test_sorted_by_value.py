from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from streams.domain.sorted_by_value import SortedByValue

keys = st.tuples(st.sampled_from((0.0, 1.0, 1.5)), st.sampled_from(tuple("abc")))
bounds = st.one_of(st.none(), st.tuples(st.sampled_from((0.0, 1.0, 1.25, 1.5)), st.sampled_from(("", "b", "c", "z"))))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), keys), max_size=40), bounds, bounds, st.booleans())
def test_holds_and_walks_the_keys_a_sorted_list_of_them_does(steps: list[tuple[bool, tuple[float, str]]], low, high, reverse: bool) -> None:
    """Keys added and removed in any order (a removal of a key not held fails as the sorted list's
    does): the same keys, in the same order, within any bounds, and a rebuild from them is equal."""
    held, plain = SortedByValue(), SortedList()
    for add, key in steps:
        if add:
            if key not in plain:
                held.add(key)
                plain.add(key)
        elif key in plain:
            held.remove(key)
            plain.remove(key)
        else:
            try:
                held.remove(key)
            except ValueError:
                pass
            else:
                raise AssertionError(f"{key} removed though not held")
    assert len(held) == len(plain) and list(held) == list(plain)
    walked = list(held.irange(low, high, inclusive=(True, False), reverse=reverse))
    assert walked == list(plain.irange(low, high, inclusive=(True, False), reverse=reverse))
    assert SortedByValue(plain) == held
