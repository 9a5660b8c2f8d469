"""Known scheduler defects, pinned as strict expected failures until they are fixed.

Found by hypothesis in test_properties::test_no_node_is_over_capacity (it fails there only when
the random search reaches such a case); reproduced identically on commit 93b3fa9, i.e. before
the performance work, so it is behaviour, not a regression.
"""

import pytest

from streams.scheduling.cycle import schedule
from streams.scheduling.model import RunningJob
from tests.scheduling.builders import config, cycle, job, node


@pytest.mark.xfail(strict=True, reason="second pass puts a low-priority evicted job back before a higher-priority "
                                        "one of the same queue, which then fits only above the low job's level")
def test_second_pass_does_not_overcommit_a_node():
    # A 4-cpu node holds f0 (low, 1 cpu, priority 0) and f12 (high, 3 cpu). Queue A submits
    # two mid jobs; urgency places them, the oversubscription pass evicts f0, s3 and s4, and
    # the second pass re-binds f0 (its queue's running jobs come first) and then s3: 5 cpus.
    n0 = node("n0", cpu=4, mem=64)
    f0, f12 = job("f0", "A", t=0), job("f12", "B", cpu=3, pc="high", t=12)
    queued = [job(f"s{i}", "A", t=100 + i) for i in range(3)] + [job(f"s{i}", "A", pc="mid", t=100 + i) for i in (3, 4)]
    running = [RunningJob(f0, "n0", 0), RunningJob(f12, "n0", 2)]
    inputs = cycle(["A", "B", "C"], [n0], queued, running, now=1.0)
    result = schedule(inputs, config(protected_fraction_of_fair_share=0.0, enable_prefer_large_job_ordering=True))
    gone = {p.job_id for p in result.preempted}
    requests = {j.id: j.requests["cpu"] for j in [f0, f12, *queued]}
    used = sum(requests[r.job.id] for r in running if r.job.id not in gone) + sum(requests[s.job_id] for s in result.scheduled)
    assert used <= 4000
