"""The scheduler configuration file: Armada's production defaults, every setting reaching the
scheduler or the submission rules, and each mistake refused with the field that holds it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from streams.scheduler.algorithm.model import AwayNodeType, RateLimit, Taint, WellKnownNodeType
from streams.scheduler.config_file import NO_LIMIT, ConfigFileError, format_duration, load, parse, parse_duration, parse_recorded

EVERYTHING = """
executorTimeout: 90s
missingRunGracePeriod: 2m
orphansInLaterReports: false
scheduling:
  priorityClasses:
    batch: {priority: 100, preemptible: true, maximumResourceFractionPerQueue: {cpu: 0.5},
            maximumResourceFractionPerQueueByPool: {gpu: {cpu: 0.25}},
            awayNodeTypes: [{priority: 50, wellKnownNodeTypeName: gpu-node}]}
    urgent: {priority: 2000, preemptible: false}
  defaultPriorityClassName: batch
  protectedFractionOfFairShare: 0.5
  dominantResourceFairnessResourcesToConsider: [cpu, {name: nvidia.com/gpu, multiplier: 4}]
  indexedResources: [{name: cpu, resolution: 1}, {name: memory, resolution: 1Gi}]
  indexedNodeLabels: [zone]
  indexedTaints: [gpu]
  wellKnownNodeTypes: [{name: gpu-node, taints: [{key: gpu, value: "true"}]}]
  maximumSchedulingRate: 20
  maximumSchedulingBurst: 40
  maximumPerQueueSchedulingRate: 5
  maximumPerQueueSchedulingBurst: 10
  maximumResourceFractionToSchedule: {cpu: 0.8}
  maximumResourceFractionToScheduleByPool: {gpu: {cpu: 0.1}}
  maxQueueLookback: 500
  enablePreferLargeJobOrdering: true
  maxRetries: 1
  executorTimeout: 30s
  maxUnacknowledgedJobsPerExecutor: 7
  pools:
    - name: default
    - name: gpu
      protectedFractionOfFairShare: 2.0
      dominantResourceFairnessResourcesToConsider: [nvidia.com/gpu]
      fairsharePreemptionRateLimit: {maximumRate: 1, maximumBurst: 3}
      disableFairshareScheduling: true
submission:
  allowedPriorityClassNames: {batch: true, urgent: true}
  minTerminationGracePeriod: 2s
  maxTerminationGracePeriod: 10m
  defaultActiveDeadline: 1h
  defaultActiveDeadlineByResourceRequest: {nvidia.com/gpu: 4h}
  maxPodSpecSizeBytes: 1000
  allowHostNamespaces: true
"""


def problems(raw: object) -> list[str]:
    with pytest.raises(ConfigFileError) as caught:
        parse(raw, "test.yaml")
    return caught.value.problems


def test_no_file_is_armadas_production_defaults() -> None:
    configuration = load(None)
    cycle, policy = configuration.cycle, configuration.policy
    scheduling = cycle.scheduling
    assert {name: (pc.priority, pc.preemptible) for name, pc in scheduling.priority_classes.items()} == {
        "armada-default": (1000, False),
        "armada-preemptible": (1000, True),
    }
    assert scheduling.priority_classes["armada-default"].maximum_resource_fraction_per_queue == {"cpu": 1.0, "memory": 1.0}
    assert scheduling.scheduling_rate == RateLimit(100.0, 1000)
    assert scheduling.per_queue_scheduling_rate == RateLimit(50.0, 1000)
    assert scheduling.maximum_resource_fraction_to_schedule == {"cpu": 1.0, "memory": 1.0}
    assert (scheduling.max_queue_lookback, scheduling.protected_fraction_of_fair_share) == (100_000, 1.0)
    assert scheduling.enable_prefer_large_job_ordering is False
    assert scheduling.dominant_resource_fairness_resources == ("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage")
    assert [name for name, _ in scheduling.indexed_resources] == ["nvidia.com/gpu", "cpu", "memory", "ephemeral-storage"]
    assert dict(scheduling.indexed_resources)["cpu"] == 100  # 100m, in milli-units
    # maxRetries 3: a fourth run may start; executors stale after 10 minutes, leases expired after an hour
    assert (cycle.max_attempts, cycle.stale_executor_ms, cycle.executor_timeout_ms) == (4, 600_000, 3_600_000)
    assert cycle.max_unacknowledged_runs == 2500
    assert cycle.orphans_in_later_reports is True
    assert policy.priority_classes == {"armada-default", "armada-preemptible"} and policy.default_priority_class == "armada-default"
    assert (policy.min_termination_grace_period_s, policy.max_termination_grace_period_s) == (1, 300)
    assert (policy.default_active_deadline_s, dict(policy.active_deadline_by_resource)) == (72 * 3600, {"nvidia.com/gpu": 336 * 3600})
    assert policy.max_pod_spec_bytes == 65535 and policy.allow_host_namespaces is False
    assert cycle.config_hash == configuration.hash and len(configuration.hash) == 16
    assert load("") == configuration == parse({}) == parse(None)


def test_every_setting_reaches_the_scheduler_and_the_submission_rules() -> None:
    configuration = parse(yaml.safe_load(EVERYTHING))
    cycle = configuration.cycle
    (home, gpu) = cycle.for_pool("default"), cycle.for_pool("gpu")
    assert cycle.for_pool("elsewhere") == cycle.scheduling  # a pool not named takes the global settings
    batch = home.priority_classes["batch"]
    assert (batch.priority, batch.preemptible, batch.away_node_types) == (100, True, (AwayNodeType(50, "gpu-node"),))
    assert batch.maximum_resource_fraction_per_queue == {"cpu": 0.5}
    assert gpu.priority_classes["batch"].maximum_resource_fraction_per_queue == {"cpu": 0.25}
    assert home.priority_classes["urgent"].priority == 2000
    assert home.well_known_node_types == {"gpu-node": WellKnownNodeType("gpu-node", (Taint("gpu", "true", "NoSchedule"),))}
    assert home.dominant_resource_fairness_resources == ("cpu", "nvidia.com/gpu")
    assert home.dominant_resource_fairness_multipliers == {"nvidia.com/gpu": 4.0}
    assert home.indexed_resources == (("cpu", 1000), ("memory", 2**30 * 1000))
    assert home.indexed_node_labels == ("zone",)
    assert (home.scheduling_rate, home.per_queue_scheduling_rate) == (RateLimit(20.0, 40), RateLimit(5.0, 10))
    assert home.maximum_resource_fraction_to_schedule == {"cpu": 0.8}
    assert gpu.maximum_resource_fraction_to_schedule == {"cpu": 0.1}
    assert (home.max_queue_lookback, home.enable_prefer_large_job_ordering) == (500, True)
    assert (home.protected_fraction_of_fair_share, gpu.protected_fraction_of_fair_share) == (0.5, 2.0)
    assert gpu.dominant_resource_fairness_resources == ("nvidia.com/gpu",)
    assert (home.fairshare_preemption_rate, gpu.fairshare_preemption_rate) == (None, RateLimit(1.0, 3))
    assert (home.enable_fairshare_preemption, gpu.enable_fairshare_preemption) == (True, False)
    assert (cycle.max_attempts, cycle.stale_executor_ms, cycle.executor_timeout_ms, cycle.missing_run_grace_ms) == (
        2,
        30_000,
        90_000,
        120_000,
    )
    assert cycle.orphans_in_later_reports is False
    assert cycle.max_unacknowledged_runs == 7
    policy = configuration.policy
    assert (policy.priority_classes, policy.default_priority_class) == ({"batch", "urgent"}, "batch")
    assert (policy.min_termination_grace_period_s, policy.max_termination_grace_period_s) == (2, 600)
    assert (policy.default_active_deadline_s, dict(policy.active_deadline_by_resource)) == (3600, {"nvidia.com/gpu": 4 * 3600})
    assert policy.max_pod_spec_bytes == 1000 and policy.allow_host_namespaces is True


def test_the_resolved_document_names_every_setting_and_reads_back_to_the_same_hash() -> None:
    configuration = parse(yaml.safe_load(EVERYTHING))
    assert configuration.resolved["scheduling"]["maximumSchedulingRate"] == 20.0
    assert configuration.resolved["submission"]["maxTerminationGracePeriod"] == "10m"
    again = parse(yaml.safe_load(configuration.to_yaml()))
    assert again.hash == configuration.hash and again.cycle == configuration.cycle
    defaults = parse({}).resolved
    assert set(defaults["scheduling"]) == set(configuration.resolved["scheduling"]), "defaults are shown, not only what was given"
    assert "hash " + configuration.hash in configuration.describe("test.yaml")


def test_a_recorded_configuration_without_a_later_setting_decides_as_the_releases_before_it() -> None:
    recorded = {name: value for name, value in parse({}).resolved.items() if name != "orphansInLaterReports"}
    assert parse_recorded(recorded, "the feed").cycle.orphans_in_later_reports is False
    assert parse_recorded(parse({}).resolved, "the feed") == parse({})
    assert parse({}).cycle.orphans_in_later_reports is True
    scheduling = {name: value for name, value in parse({}).resolved["scheduling"].items() if name != "maxUnacknowledgedJobsPerExecutor"}
    before_the_limit = parse_recorded({**parse({}).resolved, "scheduling": scheduling}, "the feed")
    assert before_the_limit.cycle.max_unacknowledged_runs == NO_LIMIT and parse({}).cycle.max_unacknowledged_runs == 2500


def test_the_hash_changes_with_any_setting_and_not_with_spelling() -> None:
    base = parse({}).hash
    assert parse({"scheduling": {"maxRetries": 4}}).hash != base
    assert parse({"executorTimeout": "60m"}).hash == parse({"executorTimeout": "1h"}).hash == base


def test_each_mistake_is_named_by_its_field_all_at_once() -> None:
    found = problems(
        {
            "scheduling": {
                "maximumSchedulingRat": 5,
                "maximumPerQueueSchedulingBurst": 0,
                "protectedFractionOfFairShare": -1,
                "executorTimeout": 10,
                "maxUnacknowledgedJobsPerExecutor": -1,
                "priorityClasses": {"x": {"priority": "high"}},
            },
            "submission": {"maxPodSpecSizeBytes": "big"},
        }
    )
    assert "scheduling.maximumSchedulingRat: unknown setting (did you mean maximumSchedulingRate?)" in found
    assert "scheduling.maximumPerQueueSchedulingBurst: must be at least 1, got 0" in found
    assert "scheduling.protectedFractionOfFairShare: must be at least 0, got -1" in found
    assert "scheduling.executorTimeout: expected a duration such as 30s, 10m or 1h30m, got 10" in found
    assert "scheduling.maxUnacknowledgedJobsPerExecutor: must be at least 0, got -1" in found
    assert "scheduling.priorityClasses.x.priority: expected a whole number, got 'high'" in found
    assert "submission.maxPodSpecSizeBytes: expected a whole number, got 'big'" in found


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"scheduling": {"defaultPriorityClassName": "gold"}},
            "scheduling.defaultPriorityClassName: 'gold' is not one of the priority classes",
        ),
        ({"submission": {"allowedPriorityClassNames": {"gold": True}}}, "submission.allowedPriorityClassNames.gold: jobs could name class"),
        ({"submission": {"allowedPriorityClassNames": {"armada-default": False}}}, "submission.allowedPriorityClassNames: no priority"),
        (
            {"submission": {"defaultPriorityClassName": "armada-preemptible", "allowedPriorityClassNames": {"armada-default": True}}},
            "not an",
        ),
        ({"submission": {"minTerminationGracePeriod": "10s", "maxTerminationGracePeriod": "5s"}}, "submission: the termination grace"),
        ({"submission": {"minTerminationGracePeriod": "1500ms"}}, "submission.minTerminationGracePeriod: must be a whole number"),
        (
            {"scheduling": {"priorityClasses": {"p": {"priority": 1, "awayNodeTypes": [{"priority": 0, "wellKnownNodeTypeName": "gpu"}]}}}},
            "awayNodeTypes[0].wellKnownNodeTypeName: 'gpu' is not",
        ),
        (
            {"scheduling": {"wellKnownNodeTypes": [{"name": "a"}, {"name": "a"}]}},
            "scheduling.wellKnownNodeTypes[1].name: node type 'a' is defined twice",
        ),
        (
            {"scheduling": {"wellKnownNodeTypes": [{"name": "a", "taints": [{"key": "k", "effect": "Never"}]}]}},
            "taints[0].effect: expected one of",
        ),
        ({"scheduling": {"pools": [{"name": "a"}, {"name": "a"}]}}, "scheduling.pools[1].name: pool 'a' is listed twice"),
        ({"scheduling": {"pools": [{"protectedFractionOfFairShare": 1}]}}, "scheduling.pools[0].name: is required"),
        ({"scheduling": {"maximumResourceFractionToSchedule": {"cpu": -0.5}}}, "resource cpu: expected a fraction >= 0"),
        (
            {"scheduling": {"indexedResources": [{"name": "cpu", "resolution": "lots"}]}},
            "indexedResources[0].resolution: expected a Kubernetes",
        ),
        (
            {"scheduling": {"dominantResourceFairnessResourcesToConsider": [{"name": "gpu", "multiplier": 0}]}},
            "[0].multiplier: must be greater than 0",
        ),
        ({"scheduling": []}, "scheduling: expected a mapping of settings, got a list"),
        ([1, 2], "(top level): expected a mapping of settings"),
    ],
)
def test_rules_between_settings_are_checked(raw: object, expected: str) -> None:
    assert any(expected in problem for problem in problems(raw)), problems(raw)


def test_a_priority_class_with_away_node_types_must_be_preemptible() -> None:
    raw = {
        "scheduling": {
            "wellKnownNodeTypes": [{"name": "gpu", "taints": [{"key": "gpu", "value": "true"}]}],
            "priorityClasses": {
                "armada-default": {"priority": 1, "awayNodeTypes": [{"priority": 0, "wellKnownNodeTypeName": "gpu"}]},
                "armada-preemptible": {"priority": 1, "preemptible": True},
            },
        }
    }
    assert problems(raw) == [
        "scheduling.priorityClasses.armada-default.awayNodeTypes[0]: a priority class with away node types must be preemptible"
    ]


def test_a_file_that_cannot_be_read_or_parsed_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="missing.yaml: cannot read the file"):
        load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("scheduling: [unclosed\n")
    with pytest.raises(ConfigFileError, match="broken.yaml: not valid YAML"):
        load(broken)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load(empty).hash == parse({}).hash


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("250ms", 0.25), ("72h", 259200.0)])
def test_durations_read_as_go_writes_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "10", "m", "10 m", "1h-5m", "5d", 10])
def test_what_is_not_a_duration(text: object) -> None:
    assert parse_duration(text) is None


def test_the_example_file_under_ops_is_the_defaults() -> None:
    example = Path(__file__).resolve().parents[2] / "ops" / "scheduler.yaml"
    assert load(example).hash == load(None).hash
