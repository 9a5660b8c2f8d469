"""The Kubernetes manifests under ops/kubernetes, offline: every overlay renders, every object is valid
against the Kubernetes API's schemas (kubernetes-validate, which bundles them), checkov's static
security checks pass, and what the manifests say agrees with the programs they run: the commands
parse, the settings and scheduler configuration load, the settings' files are mounted, the ports are
the settings' ports, and the executor's RBAC grants exactly what its Kubernetes backend calls."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from executor.backends.kubernetes.backend import KubernetesBackend
from executor.cli import build_parser as executor_parser
from streams.client.cli import build_parser as flotilla_parser
from streams.config import Settings, read_settings_file
from streams.kafka import check
from streams.scheduler.config_file import load as load_scheduler_config
from tests.executor.test_kubernetes_backend import POD, RUN, backend_for, cluster, lease, running, until
from tests.ops.deployment import OVERLAYS, ROOT, config_map_file, one, rendered, rendered_text

KUBERNETES_VERSION = "1.30.0"  # the oldest minor the manifests are checked against; each newer one too
CHECKED_VERSIONS = ("1.30.0", kubernetes_validate.utils.latest_version())
CHECKOV = Path(sys.prefix) / "tools" / "checkov" / "bin" / "checkov"
# Checks the manifests skip, each with its reason in an annotation beside it.
SKIPPED = {"CKV_K8S_43", "CKV_K8S_38"}


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", CHECKED_VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_schemas(overlay: str, version: str) -> None:
    documents = rendered(overlay)
    kinds = sorted({d["kind"] for d in documents})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Namespace",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)  # raises ValidationError naming the field


def test_the_validator_refuses_what_is_wrong() -> None:
    """The schemas are really consulted: a misspelt field and a wrong type are refused."""
    statefulset = one(rendered("base"), "StatefulSet", "flotilla-worker")
    misspelt = json.loads(json.dumps(statefulset))
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, KUBERNETES_VERSION, strict=True)
    wrong = json.loads(json.dumps(statefulset))
    wrong["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, KUBERNETES_VERSION, strict=True)


def checkov(directory: Path) -> dict[str, Any]:
    if not CHECKOV.exists():
        raise AssertionError(f"{CHECKOV} is missing: ops/test installs checkov there (bootstrap.sh: checkov_tool)")
    result = subprocess.run(
        [str(CHECKOV), "--directory", str(directory), "--framework", "kubernetes", "dockerfile", "--output", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    reports = json.loads(result.stdout)
    return {report["check_type"]: report for report in (reports if isinstance(reports, list) else [reports])}


def test_checkov_finds_no_security_problem(tmp_path: Path) -> None:
    for overlay in OVERLAYS:
        (tmp_path / f"{overlay.replace('/', '-')}.yaml").write_text(rendered_text(overlay))
    shutil.copy(ROOT / "ops" / "Dockerfile", tmp_path / "Dockerfile")
    reports = checkov(tmp_path)
    assert set(reports) == {"kubernetes", "dockerfile"}
    for kind, report in reports.items():
        failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
        assert failed == [], f"{kind}: {failed}"
        assert report["summary"]["passed"] > 40, kind
    skipped = {c["check_id"] for c in reports["kubernetes"]["results"]["skipped_checks"]}
    assert skipped == SKIPPED


def test_checkov_reports_a_problem_it_is_shown(tmp_path: Path) -> None:
    """The checker is really run: a privileged container is reported."""
    statefulset = one(rendered("base"), "StatefulSet", "flotilla-worker")
    statefulset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
    (tmp_path / "bad.yaml").write_text(json.dumps(statefulset))
    failed = {c["check_id"] for c in checkov(tmp_path)["kubernetes"]["results"]["failed_checks"]}
    assert "CKV_K8S_16" in failed  # "Container should not be privileged"


# --- what the manifests say agrees with the programs -----------------------------------------


def container(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = one(documents, kind, name)["spec"]["template"]["spec"]["containers"]
    return dict(found)


def mounted(workload: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The volume a file at ``path`` comes from, in ``workload``'s only container."""
    spec = workload["spec"]["template"]["spec"]
    (main,) = spec["containers"]
    for mount in main["volumeMounts"]:
        if path.startswith(mount["mountPath"].rstrip("/") + "/"):
            (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]] or [{"name": mount["name"], "claim": True}]
            return dict(volume)
    return None


def env(main: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in main.get("env", [])}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_settings_and_scheduler_configuration_load_and_their_files_are_mounted(overlay: str, tmp_path: Path) -> None:
    documents = rendered(overlay)
    settings_path = tmp_path / "settings.yaml"
    settings_path.write_text(config_map_file(documents, "flotilla-settings", "settings.yaml"))
    values = read_settings_file(settings_path)
    settings = Settings.from_env({}, settings_file=str(settings_path))
    scheduler_path = tmp_path / "scheduler.yaml"
    scheduler_path.write_text(config_map_file(documents, "flotilla-scheduler", "scheduler.yaml"))
    load_scheduler_config(str(scheduler_path))  # ConfigFileError names any problem

    worker, executor = one(documents, "StatefulSet", "flotilla-worker"), one(documents, "Deployment", "flotilla-executor")
    # The only problems left are the files the pods mount (certificates, passwords): each is mounted.
    files = {name: value for name, value in values.items() if name.endswith("file") and value}
    for problem in check(settings):
        assert any(path in problem for path in files.values()), problem
    for workload in (worker, executor):
        main = workload["spec"]["template"]["spec"]["containers"][0]
        assert mounted(workload, env(main)["FLOTILLA_SETTINGS_FILE"]) == {
            "name": "settings",
            "configMap": {"name": one_name(documents, "flotilla-settings")},
        }
        for name, path in files.items():
            if name != "auth_token_file" or workload is worker:
                assert mounted(workload, path) is not None, f"{name} {path} is not mounted in {workload['metadata']['name']}"
    main = worker["spec"]["template"]["spec"]["containers"][0]
    assert mounted(worker, env(main)["FLOTILLA_SCHEDULER_CONFIG"]) == {
        "name": "scheduler",
        "configMap": {"name": one_name(documents, "flotilla-scheduler")},
    }
    # The tables live on the worker's persistent volume.
    assert mounted(worker, str(settings.data_dir) + "/x") == {"name": "data", "claim": True}
    assert settings.web_host == "0.0.0.0" and settings.auth_token_file, "bound to every address, so callers must authenticate"


def one_name(documents: list[dict[str, Any]], prefix: str) -> str:
    (name,) = [d["metadata"]["name"] for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(prefix + "-")]
    return str(name)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_commands_are_the_programs_and_the_ports_their_settings(overlay: str, tmp_path: Path) -> None:
    documents = rendered(overlay)
    settings_path = tmp_path / "settings.yaml"
    settings_path.write_text(config_map_file(documents, "flotilla-settings", "settings.yaml"))
    settings = Settings.from_env({}, settings_file=str(settings_path))
    scripts = project_scripts()

    worker = container(documents, "StatefulSet", "flotilla-worker")
    program, *arguments = worker["command"]
    assert program == "flotilla" and scripts[program] == "streams.client.cli:main"
    assert flotilla_parser().parse_args(arguments).command == "worker"
    ports = {port["name"]: port["containerPort"] for port in worker["ports"]}
    assert ports == {"http": settings.web_port, "grpc": settings.grpc_port}
    for probe in ("startupProbe", "readinessProbe"):
        assert worker[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert worker["resources"]["requests"]["cpu"] and worker["resources"]["requests"]["memory"]

    executor = container(documents, "Deployment", "flotilla-executor")
    program, *arguments = executor["command"]
    assert program == "flotilla-executor" and scripts[program] == "executor.cli:main"
    args = executor_parser().parse_args(arguments)
    assert (args.backend, args.http_host) == ("kubernetes", "0.0.0.0")
    assert [port["containerPort"] for port in executor["ports"]] == [args.http_port]
    assert executor["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert executor["resources"]["requests"]["cpu"] and executor["resources"]["requests"]["memory"]
    # The control plane finds the executor's run logs at its Service.
    (url,) = [u.split("=", 1)[1] for u in settings.executor_urls.split(",") if u.startswith(f"{args.id}=")]
    service = one(documents, "Service", "flotilla-executor")
    assert url == f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{service['spec']['ports'][0]['port']}"

    deployment = one(documents, "Deployment", "flotilla-executor")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    statefulset = one(documents, "StatefulSet", "flotilla-worker")
    assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    pdb = one(documents, "PodDisruptionBudget", "flotilla-worker")
    assert pdb["spec"]["selector"]["matchLabels"] == statefulset["spec"]["selector"]["matchLabels"]
    api = one(documents, "Service", "flotilla-api")
    assert {p["name"]: p["port"] for p in api["spec"]["ports"]} == {"http": settings.web_port, "grpc": settings.grpc_port}
    for workload in (statefulset, deployment):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == image_user()
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) in {p["containerPort"] for p in pod["containers"][0]["ports"]}


def project_scripts() -> dict[str, str]:
    import tomllib

    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def image_user() -> int:
    (user,) = re.findall(r"^USER (\d+):\d+$", (ROOT / "ops" / "Dockerfile").read_text(), re.MULTILINE)
    return int(user)


def test_the_image_definition_copies_what_exists_and_runs_a_real_command_as_non_root() -> None:
    """Docker is not available here, so the image is not built: what can be checked without building it is."""
    text = (ROOT / "ops" / "Dockerfile").read_text()
    sources = [source for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.MULTILINE) for source in line.split()[:-1]]
    assert sources and all((ROOT / source).exists() for source in sources), sources
    # pip install . needs the package directories setuptools is told to include, and the readme pyproject names.
    assert {"pyproject.toml", "README.md", "schemas", "streams", "executor", "ops"} <= set(sources)
    (python,) = re.findall(r"^FROM python:(\d+\.\d+)-slim-\w+$", text, re.MULTILINE)[-1:]
    assert python == "3.11"
    (command,) = re.findall(r"^CMD (.+)$", text, re.MULTILINE)
    program, *arguments = json.loads(command)
    assert program in project_scripts() and flotilla_parser().parse_args(arguments).command == "worker"
    assert image_user() != 0
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert not any(source in ignored for source in sources)


def test_the_prometheus_job_scrapes_the_pods_the_manifests_annotate() -> None:
    import yaml

    (job,) = yaml.safe_load((ROOT / "ops" / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    (discovery,) = job["kubernetes_sd_configs"]
    documents = rendered("base")
    workloads = [one(documents, "StatefulSet", "flotilla-worker"), one(documents, "Deployment", "flotilla-executor")]
    assert discovery["role"] == "pod" and discovery["namespaces"]["names"] == sorted({w["metadata"]["namespace"] for w in workloads})
    used = {label for rule in job["relabel_configs"] for label in rule["source_labels"]}
    for workload in workloads:
        for key in workload["spec"]["template"]["metadata"]["annotations"]:
            assert "__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9]", "_", key) in used


# --- the executor's RBAC is what its Kubernetes backend calls -------------------------------------


def authorization(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str, str]:
    """(namespace or "", API group, resource, verb) of one request, as the API server authorizes it."""
    match = re.fullmatch(r"/api/v1(?:/namespaces/([^/]+))?/(\w+)(?:/([^/]+))?(?:/(\w+))?", path) or re.fullmatch(
        r"/apis/([\w.]+)/v1(?:/namespaces/([^/]+))?/(\w+)(?:/([^/]+))?(?:/(\w+))?", path
    )
    assert match is not None, path
    if path.startswith("/apis/"):
        group, namespace, resource, name, sub = match.groups()
    else:
        group, (namespace, resource, name, sub) = "", match.groups()
    resource = f"{resource}/{sub}" if sub else resource
    verb = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}.get(method)
    if verb is None:
        verb = "get" if name else ("watch" if query.get("watch") in ("true", "1", "True") else "list")
    return namespace or "", group, resource, verb


def granted(documents: list[dict[str, Any]], account: str) -> set[tuple[str, str, str, str]]:
    """(namespace or "*" for every namespace and the cluster, group, resource, verb) the account may do."""
    namespace, name = account.split(":")
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    grants: set[tuple[str, str, str, str]] = set()
    for binding in documents:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding") or subject not in binding["subjects"]:
            continue
        role = one(documents, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        where = binding["metadata"]["namespace"] if binding["kind"] == "RoleBinding" else "*"
        for rule in role["rules"]:
            grants |= {(where, g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return grants


def allowed(grants: set[tuple[str, str, str, str]], request: tuple[str, str, str, str]) -> Iterable[tuple[str, str, str, str]]:
    namespace, group, resource, verb = request
    return [g for g in grants if g[1:] == (group, resource, verb) and g[0] in ("*", namespace)]


def test_the_executor_may_do_exactly_what_its_kubernetes_backend_calls() -> None:
    documents = rendered("base")
    executor = container(documents, "Deployment", "flotilla-executor")
    args = executor_parser().parse_args(executor["command"][1:])
    account = one(documents, "Deployment", "flotilla-executor")["spec"]["template"]["spec"]["serviceAccountName"]
    grants = granted(documents, f"flotilla:{account}")

    async def every_call() -> list[tuple[str, str, dict[str, str], Any]]:
        async with cluster(namespace=args.namespace) as h:
            h.api.namespaces.add(args.namespace)
            await h.start()
            await h.backend.nodes()
            services = [{"type": "NodePort", "ports": [8080], "name": None}]
            ingresses = [{"ports": [8080], "annotations": {}, "tls_enabled": False, "cert_name": None, "use_cluster_ip": False}]
            await h.backend.launch(lease(services=services, ingresses=ingresses))
            h.api.set_pod_status(args.namespace, POD, running())
            await until(lambda: h.states()[-1:] == ["running"], "running reported")
            assert await h.backend.logs(RUN, 100) is not None
            # A second life of the executor finds the pod made by the first: it reads it rather than creating it twice.
            again: KubernetesBackend = backend_for(h.api, namespace=args.namespace)
            await again.launch(lease(services=services, ingresses=ingresses))
            again._api.close()
            await h.backend.kill(RUN, 5, "cancelled")
            return list(h.api.requests)

    requests = {authorization(method, path, query) for method, path, query, _ in asyncio.run(every_call())}
    refused = sorted(request for request in requests if not allowed(grants, request))
    assert refused == [], f"the RBAC does not allow: {refused}"
    unused = sorted(grant for grant in grants if not any(allowed({grant}, request) for request in requests))
    assert unused == [], f"the RBAC grants what the backend never calls: {unused}"
    assert ("", "", "nodes", "list") in requests and (args.namespace, "networking.k8s.io", "ingresses", "create") in requests
