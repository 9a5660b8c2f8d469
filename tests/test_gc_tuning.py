import gc
from collections.abc import Iterator

import pytest

from streams.gc_tuning import THRESHOLDS, tune_for_long_lived_state


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_tuning_freezes_start_up_objects_and_keeps_collecting(restored_gc: None) -> None:
    tune_for_long_lived_state()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == THRESHOLDS
    assert gc.isenabled()


def test_cycles_made_after_tuning_are_still_reclaimed(restored_gc: None) -> None:
    tune_for_long_lived_state()

    class Node:
        other: object

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
