"""Every acceptance scenario must match: those in the shared directory beside the repository, and our own
transcriptions of the Armada test cases it leaves out (tests/scenarios/armada), through the same harnesses."""

from pathlib import Path

import pytest

from streams.scenarios.runner import differences, expected_counts, load, run

SCENARIOS = Path(__file__).resolve().parents[2] / ".." / "shared" / "scenarios"
OURS = Path(__file__).resolve().parent / "armada"
FILES = sorted(SCENARIOS.glob("*.yaml"))
OUR_FILES = sorted(OURS.glob("*.yaml"))


def test_the_scenario_directories_are_present():
    assert len(FILES) >= 26
    assert len(OUR_FILES) >= 100


@pytest.mark.parametrize("path", FILES + OUR_FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES + OUR_FILES])
def test_scenario_matches(path):
    doc = load(path)
    assert differences(doc, run(doc)) == []


def test_json_outcome_has_sorted_ids_and_counts_only_where_expected():
    doc = load(SCENARIOS / "20-qs-fairshare-preemption-rate-limit.yaml")
    document = run(doc).to_json(expected_counts(doc))
    (round0,) = document["rounds"]
    assert round0["counts"] == {"new_jobs_scheduled": 5, "running_jobs_preempted": 5}
    assert round0["scheduled"] == sorted(round0["scheduled"])
    plain = load(SCENARIOS / "21-pqs-balancing-three-queues.yaml")
    assert all("counts" not in r for r in run(plain).to_json(expected_counts(plain))["rounds"])
