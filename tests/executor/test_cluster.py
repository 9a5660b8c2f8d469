"""Cluster specs for the fake backend and uniform node sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.cluster import ClusterSpecError, RuntimeDistribution, load_cluster_spec, parse_cluster_spec, uniform_nodes

EXAMPLE = Path(__file__).resolve().parents[2] / "executor" / "clusters" / "example.yaml"


def test_the_example_spec_loads() -> None:
    spec = load_cluster_spec(EXAMPLE)
    assert spec.pool == "default"
    assert len(spec.nodes) == 12
    gpu = spec.nodes[-1]
    assert gpu.name == "gpu-1"
    assert gpu.allocatable == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
    assert gpu.labels == {"accelerator": "a100", "kubernetes.io/hostname": "gpu-1"}
    assert gpu.taints == ({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},)
    assert spec.runtime == RuntimeDistribution(min_s=1, max_s=5, seed=1, startup_s=0.1)


def test_uniform_nodes_are_named_by_prefix_and_index() -> None:
    nodes = uniform_nodes(3, "local", "2", "4Gi")
    assert [n.name for n in nodes] == ["local-0", "local-1", "local-2"]
    assert nodes[1].labels == {"kubernetes.io/hostname": "local-1"}
    assert nodes[1].allocatable == {"cpu": "2", "memory": "4Gi"}


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ([], "expected a mapping"),
        ({"nodes": []}, "non-empty list"),
        ({"nodes": [{"cpu": "1"}]}, r"nodes\[0\]\.memory is required"),
        ({"nodes": [{"cpu": "lots", "memory": "1Gi"}]}, r"nodes\[0\]\.cpu: 'lots' is not a quantity"),
        ({"nodes": [{"count": 0, "cpu": "1", "memory": "1Gi"}]}, "positive integer"),
        ({"nodes": [{"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"}]}, "node names repeat across groups: node-0"),
        ({"nodes": [{"cpu": "1", "memory": "1Gi", "taints": [{"key": "k", "effect": "Sometimes"}]}]}, "effect must be one of"),
        ({"nodes": [{"cpu": "1", "memory": "1Gi", "gpus": 2}]}, "unknown field"),
        ({"nodes": [{"cpu": "1", "memory": "1Gi"}], "runtime": {"min_s": 5, "max_s": 1}}, "min_s <= max_s"),
    ],
)
def test_bad_specs_are_refused_with_where_and_why(raw: object, error: str) -> None:
    with pytest.raises(ClusterSpecError, match=error):
        parse_cluster_spec(raw)


def test_an_unreadable_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [unclosed")
    with pytest.raises(ClusterSpecError, match="bad.yaml is not valid YAML"):
        load_cluster_spec(bad)
    with pytest.raises(ClusterSpecError, match="cannot read cluster spec"):
        load_cluster_spec(tmp_path / "missing.yaml")
