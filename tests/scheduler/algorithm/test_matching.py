from streams.scheduler.algorithm.matching import static_mismatch
from streams.scheduler.algorithm.model import Job, Node, NodeSelectorRequirement, Taint, Toleration

NODE = Node("n", {"cpu": 1000}, labels={"zone": "a", "size": "8"}, taints=(Taint("gpu", "true", "NoSchedule"),))


def make(**kwargs):
    return Job("j", "A", "low", {"cpu": 1}, **kwargs)


def test_untolerated_taint_excludes_node():
    mismatch = static_mismatch(NODE, make())
    assert mismatch is not None and "gpu" in mismatch


def test_matching_toleration_or_exists_admits_node():
    assert static_mismatch(NODE, make(tolerations=(Toleration("gpu", "Equal", "true"),))) is None
    assert static_mismatch(NODE, make(tolerations=(Toleration("gpu", "Exists"),))) is None
    assert static_mismatch(NODE, make(tolerations=(Toleration("gpu", "Equal", "false"),))) is not None
    assert static_mismatch(NODE, make(tolerations=(Toleration("gpu", "Equal", "true", "NoExecute"),))) is not None


def test_prefer_no_schedule_taint_is_soft():
    node = Node("n", {"cpu": 1}, taints=(Taint("x", "y", "PreferNoSchedule"),))
    assert static_mismatch(node, make()) is None


def test_node_selector_must_match_every_label():
    ok = (Toleration("gpu", "Exists"),)
    assert static_mismatch(NODE, make(tolerations=ok, node_selector={"zone": "a"})) is None
    assert static_mismatch(NODE, make(tolerations=ok, node_selector={"zone": "b"})) is not None


def test_required_affinity_terms_are_ored_and_requirements_anded():
    ok = (Toleration("gpu", "Exists"),)
    not_b = (NodeSelectorRequirement("zone", "NotIn", ("b",)),)
    big = (NodeSelectorRequirement("size", "Gt", ("16",)),)
    assert static_mismatch(NODE, make(tolerations=ok, affinity=(not_b,))) is None
    assert static_mismatch(NODE, make(tolerations=ok, affinity=(big,))) is not None
    assert static_mismatch(NODE, make(tolerations=ok, affinity=(big, not_b))) is None


def test_unschedulable_node_takes_nothing():
    node = Node("n", {"cpu": 1}, unschedulable=True)
    assert static_mismatch(node, make()) == "node is unschedulable"
