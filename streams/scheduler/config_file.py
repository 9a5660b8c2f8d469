"""The scheduler configuration file: YAML shaped like Armada's, checked, resolved and hashed.

Armada splits its settings between the scheduler's configuration (priority classes, fairness,
rate and round limits, node indexing, pools, timeouts) and the server's (which classes a job may
name, grace period and deadline bounds, pod spec size); Flotilla reads both from one file with
the same names, under ``scheduling:`` and ``submission:``, plus the top-level ``executorTimeout``
(leases of an executor silent this long expire). ``submission.allowHostNamespaces`` is Flotilla's
own (Armada passes host namespaces through; here they are refused unless allowed). Every setting not given takes Armada's
production default, so an empty file (or none) runs Flotilla as Armada's default deployment.

A setting that is wrong is refused with its dotted path and the reason, all problems at once, so
a configuration is fixed in one round. The resolved configuration (every setting with the value
in force) is what the worker prints at start-up and the API serves; its hash goes into every
cycle record, so a replay knows which configuration decided a cycle.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from streams.domain.quantity import QuantityError, to_milli
from streams.domain.validation import SubmitPolicy
from streams.scheduler.algorithm.model import AwayNodeType, PriorityClass, RateLimit, SchedulingConfig, Taint, WellKnownNodeType
from streams.scheduler.config import CycleConfig

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")


class ConfigFileError(ValueError):
    """A configuration that cannot be used; the message lists every problem, each with its field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{source}: " + ("; ".join(problems) if len(problems) == 1 else "\n  " + "\n  ".join(problems)))


@dataclass(frozen=True)
class SchedulerConfiguration:
    """What the control plane runs with: the cycle's settings, the submission rules, and the
    resolved document they came from (Armada's names, every setting present) with its hash."""

    cycle: CycleConfig
    policy: SubmitPolicy
    resolved: dict[str, Any]
    hash: str

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.resolved, sort_keys=False, default_flow_style=False)

    def describe(self, path: str) -> str:
        """The configuration in force, every setting resolved, for the start-up output."""
        source = path or "no file given: Armada's production defaults"
        body = "".join(f"  {line}\n" for line in self.to_yaml().splitlines())
        return f"scheduler configuration ({source}; hash {self.hash}):\n{body}"


def load(path: str | Path | None) -> SchedulerConfiguration:
    """The configuration in ``path``; Armada's production defaults when ``path`` is empty or None."""
    if not path:
        return parse({}, "default scheduler configuration")
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(source, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigFileError(source, [f"not valid YAML: {exc}"]) from exc
    return parse({} if raw is None else raw, source)


# Settings added after configurations were first recorded on the feed, with the value that decides as
# the releases before them did: a resolved configuration that lacks one was written by such a release.
ADDED_SINCE_RECORDED = {"orphansInLaterReports": False}
# The same under ``scheduling:``. Releases before maxUnacknowledgedJobsPerExecutor counted no unacknowledged runs.
NO_LIMIT = 2**63 - 1
ADDED_TO_SCHEDULING_SINCE_RECORDED = {"maxUnacknowledgedJobsPerExecutor": NO_LIMIT}


def parse_recorded(resolved: dict[str, Any], source: str) -> SchedulerConfiguration:
    """The configuration a resolved document recorded on the feed decided with, whichever release wrote it."""
    scheduling = {**ADDED_TO_SCHEDULING_SINCE_RECORDED, **(resolved.get("scheduling") or {})}
    return parse({**ADDED_SINCE_RECORDED, **resolved, "scheduling": scheduling}, source)


def parse(raw: Any, source: str = "scheduler configuration") -> SchedulerConfiguration:
    """The configuration a YAML document describes; raises ConfigFileError naming each bad field."""
    reader = _Reader()
    root = reader.section(raw, "")
    scheduling = root.section("scheduling")
    classes = _priority_classes(scheduling)
    default_class = scheduling.string("defaultPriorityClassName", "armada-default")
    node_types = _well_known_node_types(scheduling)
    protected = scheduling.number("protectedFractionOfFairShare", 1.0, minimum=0.0)
    drf = _drf_resources(
        scheduling, "dominantResourceFairnessResourcesToConsider", ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]
    )
    indexed_resources = _indexed_resources(scheduling)
    indexed_labels = scheduling.strings("indexedNodeLabels", [])
    # Accepted so that Armada's files load; Flotilla matches every taint of every node anyway.
    scheduling.strings("indexedTaints", [])
    rate = scheduling.number("maximumSchedulingRate", 100.0, above=0.0)
    burst = scheduling.integer("maximumSchedulingBurst", 1000, minimum=1)
    queue_rate = scheduling.number("maximumPerQueueSchedulingRate", 50.0, above=0.0)
    queue_burst = scheduling.integer("maximumPerQueueSchedulingBurst", 1000, minimum=1)
    round_limit = scheduling.fractions("maximumResourceFractionToSchedule", {"memory": 1.0, "cpu": 1.0})
    round_limit_by_pool = scheduling.by_pool("maximumResourceFractionToScheduleByPool")
    lookback = scheduling.integer("maxQueueLookback", 100_000, minimum=0)
    prefer_large = scheduling.boolean("enablePreferLargeJobOrdering", False)
    max_retries = scheduling.integer("maxRetries", 3, minimum=0)
    stale_s = scheduling.duration("executorTimeout", 600.0)
    max_unacknowledged = scheduling.integer("maxUnacknowledgedJobsPerExecutor", 2500, minimum=0)
    pools = _pools(scheduling)
    scheduling.done()

    lease_expiry_s = root.duration("executorTimeout", 3600.0)
    missing_run_s = root.duration("missingRunGracePeriod", 60.0)
    orphans_in_later_reports = root.boolean("orphansInLaterReports", True)

    submission = root.section("submission")
    allowed = submission.flags("allowedPriorityClassNames", {"armada-default": True, "armada-preemptible": True})
    submit_default = submission.string("defaultPriorityClassName", default_class)
    min_grace = submission.duration("minTerminationGracePeriod", 1.0, whole_seconds=True)
    max_grace = submission.duration("maxTerminationGracePeriod", 300.0, whole_seconds=True)
    deadline = submission.duration("defaultActiveDeadline", 72 * 3600.0, whole_seconds=True)
    deadline_by_resource = submission.durations("defaultActiveDeadlineByResourceRequest", {"nvidia.com/gpu": 336 * 3600.0})
    max_pod_spec = submission.integer("maxPodSpecSizeBytes", 65535, minimum=1)
    host_namespaces = submission.boolean("allowHostNamespaces", False)
    submission.done()
    root.done()

    known_pools = sorted({p["name"] for p in pools} | set(round_limit_by_pool) | {p for pc in classes.values() for p in pc["byPool"]})
    _cross_checks(reader, classes, node_types, default_class, allowed, submit_default, min_grace, max_grace)
    if reader.problems:
        raise ConfigFileError(source, reader.problems)

    types = {t.name: t for t in node_types}
    resolved = reader.resolved[""]
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]

    def scheduling_for(pool: str | None) -> SchedulingConfig:
        overrides = next((p for p in pools if p["name"] == pool), {})
        resources = overrides.get("drf") or drf
        fair_rate = overrides.get("fairsharePreemptionRateLimit")
        return SchedulingConfig(
            priority_classes={
                name: PriorityClass(
                    name,
                    spec["priority"],
                    spec["preemptible"],
                    tuple(AwayNodeType(a["priority"], a["wellKnownNodeTypeName"]) for a in spec["awayNodeTypes"]),
                    dict(spec["byPool"].get(pool, spec["fractions"]) if pool else spec["fractions"]),
                )
                for name, spec in sorted(classes.items())
            },
            dominant_resource_fairness_resources=tuple(resources),
            dominant_resource_fairness_multipliers={name: m for name, m in resources.items() if m != 1.0},
            indexed_resources=indexed_resources,
            indexed_node_labels=tuple(indexed_labels),
            well_known_node_types=types,
            scheduling_rate=RateLimit(rate, burst),
            per_queue_scheduling_rate=RateLimit(queue_rate, queue_burst),
            fairshare_preemption_rate=RateLimit(fair_rate["maximumRate"], fair_rate["maximumBurst"]) if fair_rate else None,
            max_queue_lookback=lookback,
            maximum_resource_fraction_to_schedule=dict(round_limit_by_pool.get(pool, round_limit) if pool else round_limit),
            protected_fraction_of_fair_share=overrides.get("protectedFractionOfFairShare", protected),
            enable_prefer_large_job_ordering=prefer_large,
            enable_fairshare_preemption=not overrides.get("disableFairshareScheduling", False),
        )

    cycle = CycleConfig(
        scheduling=scheduling_for(None),
        pools={pool: scheduling_for(pool) for pool in known_pools},
        executor_timeout_ms=int(lease_expiry_s * 1000),
        stale_executor_ms=int(stale_s * 1000),
        max_unacknowledged_runs=max_unacknowledged,
        missing_run_grace_ms=int(missing_run_s * 1000),
        orphans_in_later_reports=orphans_in_later_reports,
        max_attempts=max_retries + 1,
        config_hash=digest,
    )
    policy = SubmitPolicy(
        priority_classes=frozenset(name for name, on in allowed.items() if on),
        default_priority_class=submit_default,
        min_termination_grace_period_s=int(min_grace),
        max_termination_grace_period_s=int(max_grace),
        default_active_deadline_s=int(deadline),
        active_deadline_by_resource={name: int(seconds) for name, seconds in deadline_by_resource.items()},
        max_pod_spec_bytes=max_pod_spec,
        allow_host_namespaces=host_namespaces,
    )
    return SchedulerConfiguration(cycle=cycle, policy=policy, resolved=resolved, hash=digest)


# -- sections of the file ------------------------------------------------------------------------
def _priority_classes(scheduling: _Section) -> dict[str, dict[str, Any]]:
    default = {
        "armada-default": {"priority": 1000, "preemptible": False, "maximumResourceFractionPerQueue": {"memory": 1.0, "cpu": 1.0}},
        "armada-preemptible": {"priority": 1000, "preemptible": True},
    }
    found: dict[str, dict[str, Any]] = {}
    for name, section in scheduling.named_sections("priorityClasses", default):
        found[name] = {
            "priority": section.integer("priority", None, minimum=0),
            "preemptible": section.boolean("preemptible", False),
            "fractions": section.fractions("maximumResourceFractionPerQueue", {}),
            "byPool": section.by_pool("maximumResourceFractionPerQueueByPool"),
            "awayNodeTypes": [
                {"priority": away.integer("priority", None, minimum=0), "wellKnownNodeTypeName": away.string("wellKnownNodeTypeName", None)}
                for away in section.sections("awayNodeTypes")
            ],
        }
        section.done()
    if not found:
        scheduling.problem("priorityClasses", "at least one priority class is needed")
    return found


def _well_known_node_types(scheduling: _Section) -> list[WellKnownNodeType]:
    found: list[WellKnownNodeType] = []
    for section in scheduling.sections("wellKnownNodeTypes"):
        name = section.string("name", None)
        taints = tuple(_taint(t) for t in section.sections("taints"))
        section.done()
        if any(t.name == name for t in found):
            section.problem("name", f"node type {name!r} is defined twice")
        found.append(WellKnownNodeType(name, taints))
    return found


def _taint(section: _Section) -> Taint:
    taint = Taint(section.string("key", None), section.string("value", ""), section.choice("effect", "NoSchedule", TAINT_EFFECTS))
    section.done()
    return taint


def _drf_resources(section: _Section, key: str, default: list[str]) -> dict[str, float]:
    """Names, or {name, multiplier} entries as Armada's newer form: name -> multiplier."""
    raw = section.raw.get(key, default)
    path = section.path_of(key)
    if not isinstance(raw, list) or not raw:
        section.reader.problem(path, "expected a non-empty list of resource names or {name, multiplier} entries")
        section.keep(key, default)
        return dict.fromkeys(default, 1.0)
    found: dict[str, float] = {}
    for i, entry in enumerate(raw):
        if isinstance(entry, str) and entry:
            found[entry] = 1.0
            continue
        item = section.reader.section(entry, f"{path}[{i}]")
        name = item.string("name", None)
        multiplier = item.number("multiplier", 1.0, above=0.0)
        item.done()
        found[name] = multiplier
    section.keep(key, [name if m == 1.0 else {"name": name, "multiplier": m} for name, m in found.items()])
    return found


def _indexed_resources(scheduling: _Section) -> tuple[tuple[str, int], ...]:
    default = [
        {"name": "nvidia.com/gpu", "resolution": "1"},
        {"name": "cpu", "resolution": "100m"},
        {"name": "memory", "resolution": "100Mi"},
        {"name": "ephemeral-storage", "resolution": "1Gi"},
    ]
    found = []
    for section in scheduling.sections("indexedResources", default):
        name = section.string("name", None)
        resolution = section.quantity("resolution", "1")
        section.done()
        found.append((name, max(resolution, 1)))
    if not found:
        scheduling.problem("indexedResources", "at least one indexed resource is needed")
    return tuple(found)


def _pools(scheduling: _Section) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for section in scheduling.sections("pools", [{"name": "default"}]):
        pool: dict[str, Any] = {"name": section.string("name", None)}
        if "protectedFractionOfFairShare" in section.raw:
            pool["protectedFractionOfFairShare"] = section.number("protectedFractionOfFairShare", 1.0, minimum=0.0)
        if "dominantResourceFairnessResourcesToConsider" in section.raw:
            pool["drf"] = _drf_resources(section, "dominantResourceFairnessResourcesToConsider", [])
        if "fairsharePreemptionRateLimit" in section.raw:
            limit = section.section("fairsharePreemptionRateLimit")
            pool["fairsharePreemptionRateLimit"] = {
                "maximumRate": limit.number("maximumRate", None, minimum=0.0),
                "maximumBurst": limit.integer("maximumBurst", None, minimum=0),
            }
            limit.done()
        if "disableFairshareScheduling" in section.raw:
            pool["disableFairshareScheduling"] = section.boolean("disableFairshareScheduling", False)
        section.done()
        if any(p["name"] == pool["name"] for p in found):
            section.problem("name", f"pool {pool['name']!r} is listed twice")
        found.append(pool)
    return found


def _cross_checks(
    reader: _Reader,
    classes: dict[str, dict[str, Any]],
    node_types: list[WellKnownNodeType],
    default_class: str,
    allowed: dict[str, bool],
    submit_default: str,
    min_grace: float,
    max_grace: float,
) -> None:
    """Rules between settings, as Armada's own validation of its configuration."""
    names = ", ".join(sorted(classes)) or "none"
    if classes and default_class not in classes:
        reader.problem("scheduling.defaultPriorityClassName", f"{default_class!r} is not one of the priority classes ({names})")
    type_names = {t.name for t in node_types}
    for name, spec in sorted(classes.items()):
        for i, away in enumerate(spec["awayNodeTypes"]):
            where = f"scheduling.priorityClasses.{name}.awayNodeTypes[{i}]"
            if away["wellKnownNodeTypeName"] not in type_names:
                reader.problem(f"{where}.wellKnownNodeTypeName", f"{away['wellKnownNodeTypeName']!r} is not a well-known node type")
            if not spec["preemptible"]:
                reader.problem(where, "a priority class with away node types must be preemptible")
    for name, on in sorted(allowed.items()):
        if on and classes and name not in classes:
            reader.problem(
                f"submission.allowedPriorityClassNames.{name}",
                f"jobs could name class {name!r} but the scheduler has no such priority class ({names})",
            )
    if not any(allowed.values()):
        reader.problem("submission.allowedPriorityClassNames", "no priority class is allowed, so no job could be submitted")
    elif not allowed.get(submit_default, False):
        reader.problem("submission.defaultPriorityClassName", f"{submit_default!r} is not an allowed priority class")
    if min_grace <= 0 or max_grace < min_grace:
        reader.problem(
            "submission", "the termination grace period bounds must satisfy 0 < minTerminationGracePeriod <= maxTerminationGracePeriod"
        )


# -- reading values with their paths ---------------------------------------------------------------
class _Reader:
    """Collects problems and the resolved document while sections of the file are read."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.resolved: dict[str, Any] = {}

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def section(self, raw: Any, path: str) -> _Section:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            self.problem(path or "(top level)", f"expected a mapping of settings, got {_kind(raw)}")
            raw = {}
        section = _Section(self, dict(raw), path)
        if path == "":
            self.resolved[""] = section.resolved
        return section


class _Section:
    """One mapping of the file: each read names its key, records the value in force, and checks it."""

    def __init__(self, reader: _Reader, raw: dict[Any, Any], path: str) -> None:
        self.reader, self.raw, self.path = reader, raw, path
        self.resolved: dict[str, Any] = {}

    def path_of(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def problem(self, key: str, message: str) -> None:
        self.reader.problem(self.path_of(key), message)

    def keep(self, key: str, value: Any) -> None:
        self.resolved[key] = value

    def done(self) -> None:
        """Refuse the keys no read asked for: a misspelt setting is an error, not a silent default."""
        for key in self.raw:
            if key not in self.resolved:
                close = difflib.get_close_matches(str(key), list(self.resolved), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                self.reader.problem(self.path_of(str(key)), f"unknown setting{hint}")

    def _value(
        self, key: str, default: Any, check: Callable[[Any], tuple[Any, str | None]], shown: Callable[[Any], Any] = lambda v: v
    ) -> Any:
        if key not in self.raw or self.raw[key] is None:
            if default is None:
                self.problem(key, "is required")
            self.keep(key, shown(default) if default is not None else None)
            return default
        value, problem = check(self.raw[key])
        if problem is not None:
            self.problem(key, problem)
            value = default
        self.keep(key, shown(value) if value is not None else None)
        return value

    # -- scalars --------------------------------------------------------------------------------
    def number(self, key: str, default: float | None, *, minimum: float | None = None, above: float | None = None) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
                return None, f"expected a number, got {raw!r}"
            if minimum is not None and raw < minimum:
                return None, f"must be at least {minimum:g}, got {raw!r}"
            if above is not None and raw <= above:
                return None, f"must be greater than {above:g}, got {raw!r}"
            return float(raw), None

        return self._value(key, default, check)

    def integer(self, key: str, default: int | None, *, minimum: int | None = None) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            if isinstance(raw, bool) or not isinstance(raw, int):
                return None, f"expected a whole number, got {raw!r}"
            if minimum is not None and raw < minimum:
                return None, f"must be at least {minimum}, got {raw!r}"
            return raw, None

        return self._value(key, default, check)

    def boolean(self, key: str, default: bool) -> Any:
        return self._value(
            key, default, lambda raw: (raw, None) if isinstance(raw, bool) else (None, f"expected true or false, got {raw!r}")
        )

    def string(self, key: str, default: str | None) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            return (raw, None) if isinstance(raw, str) and (raw or default == "") else (None, f"expected a non-empty string, got {raw!r}")

        return self._value(key, default, check)

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            return (raw, None) if raw in choices else (None, f"expected one of {', '.join(choices)}, got {raw!r}")

        return self._value(key, default, check)

    def duration(self, key: str, default: float | None, *, whole_seconds: bool = False) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            seconds = parse_duration(raw)
            if seconds is None:
                return None, f"expected a duration such as 30s, 10m or 1h30m, got {raw!r}"
            if whole_seconds and seconds != int(seconds):
                return None, f"must be a whole number of seconds, got {raw!r}"
            return seconds, None

        return self._value(key, default, check, format_duration)

    def quantity(self, key: str, default: str) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            try:
                milli = to_milli(raw)
            except QuantityError:
                return None, f"expected a Kubernetes quantity such as 100m, 1 or 1Gi, got {raw!r}"
            return (milli, None) if milli > 0 else (None, f"must be positive, got {raw!r}")

        return self._value(key, to_milli(default), check, lambda milli: str(self.raw.get(key) or default))

    # -- collections ----------------------------------------------------------------------------
    def strings(self, key: str, default: list[str]) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
                return None, f"expected a list of names, got {raw!r}"
            return list(raw), None

        return self._value(key, default, check)

    def fractions(self, key: str, default: dict[str, float]) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            if not isinstance(raw, Mapping) or not all(isinstance(k, str) for k in raw):
                return None, f"expected a mapping of resource name to fraction, got {raw!r}"
            for name, value in raw.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value:
                    return None, f"resource {name}: expected a fraction >= 0, got {value!r}"
            return {name: float(value) for name, value in raw.items()}, None

        return self._value(key, default, check)

    def by_pool(self, key: str) -> Any:
        """``{pool: {resource: fraction}}``."""
        raw = self.raw.get(key) or {}
        if not isinstance(raw, Mapping):
            self.problem(key, f"expected a mapping of pool name to {{resource: fraction}}, got {raw!r}")
            self.keep(key, {})
            return {}
        pools = self.reader.section(raw, self.path_of(key))
        found = {str(pool): pools.fractions(str(pool), {}) for pool in raw}
        self.keep(key, pools.resolved)
        return found

    def flags(self, key: str, default: dict[str, bool]) -> Any:
        def check(raw: Any) -> tuple[Any, str | None]:
            if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, bool) for k, v in raw.items()):
                return None, f"expected a mapping of name to true or false, got {raw!r}"
            return dict(raw), None

        return self._value(key, default, check)

    def durations(self, key: str, default: dict[str, float]) -> Any:
        raw = self.raw.get(key, None)
        if raw is None:
            self.keep(key, {name: format_duration(s) for name, s in default.items()})
            return default
        section = self.reader.section(raw, self.path_of(key))
        found = {str(name): section.duration(str(name), 0.0, whole_seconds=True) for name in section.raw}
        self.keep(key, section.resolved)
        return found

    def section(self, key: str) -> _Section:
        section = self.reader.section(self.raw.get(key), self.path_of(key))
        self.keep(key, section.resolved)
        return section

    def sections(self, key: str, default: list[Any] | None = None) -> list[_Section]:
        """A list of mappings; each comes back as a section whose path ends in ``[i]``."""
        raw = self.raw.get(key)
        if raw is None:
            raw = default or []
        if not isinstance(raw, list):
            self.problem(key, f"expected a list, got {_kind(raw)}")
            raw = []
        found = [self.reader.section(entry, f"{self.path_of(key)}[{i}]") for i, entry in enumerate(raw)]
        self.keep(key, [s.resolved for s in found])
        return found

    def named_sections(self, key: str, default: dict[str, Any]) -> list[tuple[str, _Section]]:
        """A mapping of name to settings; each value comes back as a section."""
        raw = self.raw.get(key)
        if raw is None:
            raw = default
        if not isinstance(raw, Mapping):
            self.problem(key, f"expected a mapping of name to settings, got {_kind(raw)}")
            raw = {}
        found = [(str(name), self.reader.section(value, f"{self.path_of(key)}.{name}")) for name, value in raw.items()]
        self.keep(key, {name: s.resolved for name, s in found})
        return found


def parse_duration(raw: Any) -> float | None:
    """Go's duration syntax (``1h30m``, ``10m``, ``30s``, ``500ms``) in seconds; None if it is not one."""
    if not isinstance(raw, str) or not raw:
        return None
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(raw):
        if match.start() != position:
            return None
        total += float(match.group(1)) * units[match.group(2)]
        position = match.end()
    return total if position == len(raw) else None


def format_duration(seconds: float) -> str:
    """Seconds as the shortest duration text that reads back exactly."""
    if seconds and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000):d}ms"


def _kind(raw: Any) -> str:
    return "nothing" if raw is None else f"a {type(raw).__name__} ({raw!r})"
