"""Node sets for the local and fake backends, and the cluster spec file the fake backend reads.

A cluster spec is YAML::

    pool: default                  # optional; --pool overrides it
    nodes:                         # groups of identical nodes
      - count: 10                  # how many (default 1)
        prefix: node               # names are <prefix>-0, <prefix>-1, ... (default "node")
        cpu: "32"                  # Kubernetes quantities (required)
        memory: 256Gi
        resources: {nvidia.com/gpu: "8"}            # other allocatable resources (optional)
        labels: {topology.kubernetes.io/zone: a}     # kubernetes.io/hostname is always added
        taints: [{key: gpu, value: "true", effect: NoSchedule}]
        unschedulable: false
    runtime:                       # how long simulated runs take when a job does not say
      min_s: 1                     # run time drawn uniformly from [min_s, max_s] ...
      max_s: 5
      seed: 1                      # ... seeded by seed and run id, so a run always takes as long
      startup_s: 0.1               # pending for this long before running

Node names must be unique across groups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from executor.backend import NodeInfo
from streams.domain.quantity import QuantityError, parse_quantity

HOSTNAME_LABEL = "kubernetes.io/hostname"
TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class RuntimeDistribution:
    min_s: float = 1.0
    max_s: float = 5.0
    seed: int = 0
    startup_s: float = 0.1


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[NodeInfo, ...]
    pool: str | None = None
    runtime: RuntimeDistribution = field(default_factory=RuntimeDistribution)


def uniform_nodes(count: int, prefix: str, cpu: str, memory: str) -> tuple[NodeInfo, ...]:
    """``count`` identical nodes named ``<prefix>-<i>``."""
    if count < 1:
        raise ClusterSpecError(f"node count must be at least 1, got {count}")
    return _group({"count": count, "prefix": prefix, "cpu": cpu, "memory": memory}, "nodes")


def load_cluster_spec(path: Path) -> ClusterSpec:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ClusterSpecError(f"cannot read cluster spec {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ClusterSpecError(f"cluster spec {path} is not valid YAML: {exc}") from exc
    try:
        return parse_cluster_spec(raw)
    except ClusterSpecError as exc:
        raise ClusterSpecError(f"cluster spec {path}: {exc}") from exc


def parse_cluster_spec(raw: Any) -> ClusterSpec:
    if not isinstance(raw, Mapping):
        raise ClusterSpecError("expected a mapping with a nodes list")
    unknown = set(raw) - {"pool", "nodes", "runtime"}
    if unknown:
        raise ClusterSpecError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    groups = raw.get("nodes")
    if not isinstance(groups, list) or not groups:
        raise ClusterSpecError("nodes must be a non-empty list of node groups")
    nodes = tuple(node for index, group in enumerate(groups) for node in _group(group, f"nodes[{index}]"))
    duplicates = sorted(name for name, seen in Counter(node.name for node in nodes).items() if seen > 1)
    if duplicates:
        raise ClusterSpecError(f"node names repeat across groups: {', '.join(duplicates[:5])}")
    pool = raw.get("pool")
    if pool is not None and (not isinstance(pool, str) or not pool):
        raise ClusterSpecError("pool must be a non-empty string")
    return ClusterSpec(nodes=nodes, pool=pool, runtime=_runtime(raw.get("runtime") or {}))


def _group(group: Any, where: str) -> tuple[NodeInfo, ...]:
    if not isinstance(group, Mapping):
        raise ClusterSpecError(f"{where}: expected a mapping")
    unknown = set(group) - {"count", "prefix", "cpu", "memory", "resources", "labels", "taints", "unschedulable"}
    if unknown:
        raise ClusterSpecError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    count = group.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ClusterSpecError(f"{where}.count must be a positive integer, got {count!r}")
    prefix = str(group.get("prefix", "node"))
    allocatable = {"cpu": group.get("cpu"), "memory": group.get("memory"), **_mapping(group, "resources", where)}
    for name, amount in allocatable.items():
        if amount is None:
            raise ClusterSpecError(f"{where}.{name} is required")
        try:
            parse_quantity(amount)
        except QuantityError as exc:
            raise ClusterSpecError(f"{where}.{name}: {exc}") from exc
    labels = {str(k): str(v) for k, v in _mapping(group, "labels", where).items()}
    taints = tuple(_taint(taint, f"{where}.taints[{i}]") for i, taint in enumerate(group.get("taints") or []))
    unschedulable = bool(group.get("unschedulable", False))
    quantities = {name: str(amount) for name, amount in allocatable.items()}
    return tuple(
        NodeInfo(
            name=f"{prefix}-{i}",
            allocatable=dict(quantities),
            labels={**labels, HOSTNAME_LABEL: f"{prefix}-{i}"},
            taints=taints,
            unschedulable=unschedulable,
        )
        for i in range(count)
    )


def _mapping(group: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = group.get(key) or {}
    if not isinstance(value, Mapping):
        raise ClusterSpecError(f"{where}.{key} must be a mapping")
    return value


def _taint(raw: Any, where: str) -> dict[str, str | None]:
    if not isinstance(raw, Mapping) or not raw.get("key"):
        raise ClusterSpecError(f"{where}: expected {{key, value, effect}}")
    effect = raw.get("effect")
    if effect not in TAINT_EFFECTS:
        raise ClusterSpecError(f"{where}.effect must be one of {', '.join(sorted(TAINT_EFFECTS))}, got {effect!r}")
    value = raw.get("value")
    return {"key": str(raw["key"]), "value": None if value is None else str(value), "effect": effect}


def _runtime(raw: Any) -> RuntimeDistribution:
    if not isinstance(raw, Mapping):
        raise ClusterSpecError("runtime must be a mapping")
    unknown = set(raw) - {"min_s", "max_s", "seed", "startup_s"}
    if unknown:
        raise ClusterSpecError(f"runtime: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    defaults = RuntimeDistribution()
    try:
        runtime = RuntimeDistribution(
            min_s=float(raw.get("min_s", defaults.min_s)),
            max_s=float(raw.get("max_s", defaults.max_s)),
            seed=int(raw.get("seed", defaults.seed)),
            startup_s=float(raw.get("startup_s", defaults.startup_s)),
        )
    except (TypeError, ValueError) as exc:
        raise ClusterSpecError(f"runtime: {exc}") from exc
    if not 0 <= runtime.min_s <= runtime.max_s or runtime.startup_s < 0:
        raise ClusterSpecError("runtime needs 0 <= min_s <= max_s and startup_s >= 0")
    return runtime
