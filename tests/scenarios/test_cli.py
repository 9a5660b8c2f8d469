import json
from pathlib import Path

from streams.client.cli import main

SCENARIOS = Path(__file__).resolve().parents[2] / ".." / "shared" / "scenarios"


def test_run_prints_one_json_object(capsys):
    assert main(["scenario", "run", str(SCENARIOS / "29-pqs-preempt-in-order-of-priority.yaml"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["name"] == "pqs-preempt-in-order-of-priority"
    assert document["rounds"][2] == {"round": 2, "scheduled": ["r2-A-0"], "preempted": ["r1-A-0"], "still_queued": []}


def test_check_reports_a_mismatch_and_fails(tmp_path, capsys):
    text = (SCENARIOS / "29-pqs-preempt-in-order-of-priority.yaml").read_text()
    (tmp_path / "bad.yaml").write_text(text.replace("preempted: [r1-A-0]", "preempted: [r0-A-0]"))
    (tmp_path / "good.yaml").write_text(text)
    assert main(["scenario", "check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS bad.yaml" in out and out.strip().endswith("1/2 scenarios match")
