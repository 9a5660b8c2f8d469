from streams.scheduler.algorithm.fairness import DrfCost, fair_shares


def test_cost_is_the_dominant_share_divided_by_weight():
    cost = DrfCost([32, 256, 8], [0, 1, 2])
    assert cost.unweighted([8, 16, 0]) == 0.25
    assert cost.unweighted([1, 128, 0]) == 0.5
    assert cost.weighted([8, 16, 0], 0.5) == 0.5


def test_cost_ignores_resources_not_considered_or_absent():
    cost = DrfCost([32, 256, 0], [0, 2])
    assert cost.unweighted([8, 256, 5]) == 0.25


def test_raw_fair_share_is_proportional_to_weight():
    raw, _ = fair_shares([1.0, 0.5, 0.5], [1.0, 1.0, 1.0])
    assert raw == [0.5, 0.25, 0.25]


def test_adjusted_share_gives_unused_capacity_to_queues_with_demand():
    _, adjusted = fair_shares([1.0, 1.0, 1.0], [1.0, 1.0, 0.0])
    assert adjusted == [0.5, 0.5, 0.0]


def test_adjusted_share_never_exceeds_demand():
    _, adjusted = fair_shares([1.0, 1.0], [0.1, 0.2])
    assert adjusted == [0.1, 0.2]


def test_adjusted_share_water_fills_by_weight():
    _, adjusted = fair_shares([2.0, 1.0, 1.0], [1.0, 1.0, 0.125])
    assert abs(adjusted[2] - 0.125) < 1e-12
    assert abs(adjusted[0] - 2 * adjusted[1]) < 0.01
    assert abs(sum(adjusted) - 1.0) < 0.01
