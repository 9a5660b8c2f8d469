"""`streams.domain.frozen.maker`: what it makes is what the dataclass's own __init__ makes."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field, replace

import pytest

from streams.domain.frozen import maker
from streams.scheduler.algorithm.model import Job, Toleration


@dataclass(frozen=True, slots=True)
class Pair:
    left: int
    right: tuple[int, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)


def test_made_like_the_dataclass_by_name_and_in_the_given_order() -> None:
    job = Job("j1", "q", "pc", {"cpu": 1000}, 1.5, 2.0, {"zone": "a"}, (Toleration("k"),), (), {"g": "1"})
    made = maker(Job)(
        id="j1",
        queue="q",
        priority_class="pc",
        requests={"cpu": 1000},
        submit_time=1.5,
        priority=2.0,
        node_selector={"zone": "a"},
        tolerations=(Toleration("k"),),
        affinity=(),
        annotations={"g": "1"},
    )
    assert type(made) is Job and made == job and repr(made) == repr(job) and hash(made.tolerations) == hash(job.tolerations)
    assert replace(made, queue="r") == replace(job, queue="r")
    with pytest.raises(FrozenInstanceError):
        made.queue = "r"  # type: ignore[misc]
    backwards = maker(Pair, ("extra", "right", "left"))({"a": 1}, (2,), 3)
    assert backwards == Pair(3, (2,), {"a": 1})


def test_every_field_must_be_given() -> None:
    with pytest.raises(TypeError):
        maker(Pair)(1, ())


def test_refuses_what_it_cannot_make_faithfully() -> None:
    @dataclass(frozen=True)
    class Unslotted:
        a: int

    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            assert self.a >= 0

    for cls in (Unslotted, Checked):
        with pytest.raises(TypeError):
            maker(cls)
    with pytest.raises(TypeError):
        maker(Pair, ("left", "right"))
