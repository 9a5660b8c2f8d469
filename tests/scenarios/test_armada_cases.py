"""Our own transcriptions of the Armada test cases the shared directory leaves out (tests/scenarios/armada):
the same harnesses, the same comparison, so our scheduler behaves as Armada's tests assert in those too."""

from pathlib import Path

import pytest

from streams.scenarios.runner import differences, load, run

CASES = Path(__file__).resolve().parent / "armada"
FILES = sorted(CASES.glob("*.yaml"))


def test_the_transcribed_cases_are_present():
    assert len(FILES) >= 20


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_case_matches(path):
    doc = load(path)
    assert differences(doc, run(doc)) == []
