from streams.domain.resources import job_resource_request
from tests.kit.jobs import container


def test_sum_over_containers_in_milli_units():
    spec = {"containers": [container(cpu="500m", memory="1Gi"), container(cpu="1.5", memory="512Mi")]}
    assert job_resource_request(spec) == {"cpu": 2000, "memory": (2**30 + 2**29) * 1000}


def test_init_container_raises_a_resource_only_when_larger():
    spec = {
        "containers": [container(cpu="1", memory="1Gi"), container(cpu="1", memory="1Gi")],
        "init_containers": [container(cpu="3", memory="1Gi"), container(cpu="1", gpu="1")],
    }
    assert job_resource_request(spec) == {"cpu": 3000, "memory": 2 * 2**30 * 1000, "nvidia.com/gpu": 1000}


def test_empty_spec_requests_nothing():
    assert job_resource_request({"containers": []}) == {}
