"""The job-state fold reads part of each spec it creates a job with (`streams.tables.jobs.read_sequence`):
what it writes (job states, specs, job-index rows, feed records, lease commands carrying the spec) is byte
for byte what a fold of the same events read whole writes, and readers of the store get the whole spec."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.codec import Partial, decode, encode
from streams.agents.job_state import encoded_command, fold_batch, sent
from streams.domain.gangs import FAIL_FAST
from streams.domain.job_index import row_of
from streams.scheduler import feed
from streams.scheduler.fold import apply_sequence
from streams.tables.jobs import CYCLES_SKIPPED, SPEC_TYPE, SPECS_SHARED, JobStore, read_sequence
from tests.agents.test_job_state import message, sequence
from tests.kit.jobs import Events
from tests.kit.stores import dict_jobs, settle
from tests.schemas.strategies import values

NAMED = codec.schema("job_submitted")["__named_schemas"]
QUANTITIES = st.sampled_from(["1", "250m", "2", "0.5", "1Gi", "512Mi", "3G", "100", "1500m"])
RESOURCES = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"])
TEXT = st.text(max_size=6)
GANG_KEYS = ["armadaproject.io/gangId", "armadaproject.io/gangCardinality", "armadaproject.io/gangNodeUniformityLabel", FAIL_FAST]


def of(name: str) -> st.SearchStrategy[Any]:
    """Schema-valid values of the named type (a field's type, for a union)."""
    return values(NAMED[name], NAMED)


def field_type(record: str, field: str) -> Any:
    return next(each["type"] for each in NAMED[record]["fields"] if each["name"] == field)


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    """A container whose quantities parse (the scheduling view reads them), the rest anything its type allows."""
    container = draw(of("flotilla.Container"))
    requests, limits = draw(st.dictionaries(RESOURCES, QUANTITIES)), draw(st.dictionaries(RESOURCES, QUANTITIES))
    resources = {"requests": requests, "limits": limits}
    return {**container, "resources": resources}


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """Specs as varied as their schema allows in everything the fold reads and everything it does not."""
    spec = draw(of(SPEC_TYPE))
    pod = draw(of("flotilla.PodSpec"))
    gang = draw(st.dictionaries(st.sampled_from(GANG_KEYS), st.sampled_from(["g-1", "2", "zone", "true", "false"])))
    pod = {
        **pod,
        "containers": draw(st.lists(containers(), min_size=1, max_size=3)),
        "init_containers": draw(st.lists(containers(), max_size=2)),
        "tolerations": draw(st.lists(of("flotilla.Toleration"), max_size=2)),
        "affinity": draw(values(field_type("flotilla.PodSpec", "affinity"), NAMED)),
        "termination_grace_period_seconds": draw(st.none() | st.integers(0, 600)),
    }
    annotations = {**draw(st.dictionaries(TEXT, TEXT, max_size=2)), **gang}
    priority = draw(st.floats(min_value=0, max_value=1e6, allow_nan=False))
    return {**spec, "priority": priority, "annotations": annotations, "pod_spec": pod}


def whole(value: bytes) -> dict[str, Any]:
    """An `events` message read as the fold read it before it read specs in part."""
    return decode("event_sequence", value, keep=SPEC_TYPE, skip=CYCLES_SKIPPED, shared=SPECS_SHARED)


def written(read: Any, messages: list[bytes]) -> list[Any]:
    """Everything a fold of ``messages`` (each read with ``read``) writes and sends, encoded as the agent does."""
    jobs, out = dict_jobs(), []
    for offset, value in enumerate(messages):
        folded = apply_sequence(jobs, read(value), random.Random(offset), 0)
        out += [
            feed.encode_changes(feed.latest_changes(folded.changes)),
            [encoded_command(command) for command in folded.commands],
            [row_of(job).encode() for _, _, job in jobs.pending()],
            [feed.spec_fields(job["spec"]) for _, _, job in jobs.pending()],
            jobs.new_specs(),
            jobs.encoded(),
        ]
        jobs.mark_written()
    return out


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(drawn=st.lists(specs(), min_size=1, max_size=4), leased=st.lists(st.booleans(), min_size=4, max_size=4))
def test_a_fold_of_specs_read_in_part_writes_what_a_fold_of_whole_specs_writes(drawn: list[dict[str, Any]], leased: list[bool]) -> None:
    submitted, leases = [], []
    for number, spec in enumerate(drawn):
        events = Events(f"job-{number}")
        submitted.append(events.submitted(spec))
        if leased[number]:
            leases.append(events.leased(f"run-{number}"))
    # jobs submitted then leased in one message, and in the next one (read back from the store)
    messages = [encode("event_sequence", sequence(*submitted, *leases[:1])), encode("event_sequence", sequence(*leases[1:]))]
    assert written(read_sequence, messages) == written(whole, messages)
    first = read_sequence(messages[0])["events"][0]["payload"][1]
    assert type(first) is Partial and first.encoding == codec.encode_body("job_submitted", drawn[0])


def test_the_agent_folds_specs_read_in_part_and_readers_get_them_whole() -> None:
    jobs = dict_jobs()
    events = Events("job-1")
    spec = decode("job_submitted", encode("job_submitted", events.submitted()[1]["payload"]))
    value = encode("event_sequence", sequence(events.submitted(spec), events.leased("run-1")))
    (part,) = fold_batch(jobs, [message(0, 0, value)])
    (command,) = part.commands
    assert type(command["spec"]) is Partial and decode("executor_command", encoded_command(command))["spec"] == spec
    assert sent(part)[1] == [(b"cluster-1", encoded_command({**command, "spec": spec}))]
    settle(jobs)
    folded = jobs.latest("job-1")  # a leased job is kept decoded, as the fold left it
    assert folded is not None and type(folded["spec"]) is Partial
    read = jobs.get("job-1")
    assert read is not None and read["spec"] == spec and type(read["spec"]) is not Partial
    assert {key: value for key, value in read.items() if key != "spec"} == {key: value for key, value in folded.items() if key != "spec"}
    assert jobs.spec_raw("job-1") == encode("job_submitted", spec)


def test_a_store_with_jobs_of_whole_specs_gives_them_as_they_are() -> None:
    jobs: JobStore = dict_jobs()
    events = Events("job-2")
    jobs_value = encode("event_sequence", sequence(events.submitted(), events.leased("run-1")))
    apply_sequence(jobs, whole(jobs_value), random.Random(0))
    settle(jobs)
    folded = jobs.latest("job-2")
    assert folded is not None and jobs.get("job-2") is folded  # nothing read in part: nothing read again
