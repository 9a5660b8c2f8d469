"""`flotilla-executor --id ID --backend local|fake|kubernetes`: one executor per cluster.

Broker, topic prefix, app id and the Kafka clients' security come from the settings file and
``FLOTILLA_*`` variables like every Flotilla process; ``--broker`` and the Kafka flags
(streams/broker_options.py) override them. Exit status: 0 after a clean stop (SIGTERM, SIGINT), 2 for
a bad command line or configuration (Kafka settings included), 1 when the executor fails while running.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from executor import http
from executor.backend import Backend
from executor.cluster import load_cluster_spec, uniform_nodes
from executor.runtime import Executor, ready_line
from streams.broker_options import add_broker_options, broker_overrides
from streams.config import Settings
from streams.gc_tuning import tune_for_long_lived_state
from streams.kafka import kafka_clients
from streams.logs import LOG_FORMATS, setup_logging

BACKENDS = ("local", "fake", "kubernetes")
_EXECUTOR_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")  # names a directory and a consumer group


class _FakeNodeDefaults(TypedDict):
    nodes: int
    cpu: str
    memory: str


FAKE_NODE_DEFAULTS: _FakeNodeDefaults = {"nodes": 10, "cpu": "32", "memory": "256Gi"}


class UsageError(Exception):
    """A command line or configuration the executor cannot start with."""


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: --kafka-sasl-password would otherwise be taken for --kafka-sasl-password-file.
    parser = argparse.ArgumentParser(prog="flotilla-executor", description="Run leased Flotilla jobs on one cluster", allow_abbrev=False)
    parser.add_argument("--id", required=True, help="executor id (one per cluster)")
    parser.add_argument("--backend", choices=BACKENDS, default="local")
    parser.add_argument("--broker", help="broker URL, e.g. kafka://host:9092 (default $FLOTILLA_BROKER)")
    parser.add_argument("--pool", help='pool of the nodes (default: the cluster spec\'s, else "default")')
    parser.add_argument("--state-dir", type=Path, help="local: run directories and logs (default .flotilla/executors/<id>)")
    parser.add_argument("--nodes", type=int, help="local and fake: number of nodes (default 2 local, 10 fake)")
    parser.add_argument("--node-cpu", help="cpu of each node (default: local, this machine's cpus shared; fake, 32)")
    parser.add_argument("--node-memory", help="memory of each node (default: local, half this machine's RAM shared; fake, 256Gi)")
    parser.add_argument("--cluster", type=Path, help="fake: cluster spec YAML (nodes, pool, run times); see executor/clusters/example.yaml")
    parser.add_argument("--kubeconfig", help="kubernetes: kubeconfig file (default: in-cluster, else ~/.kube/config)")
    parser.add_argument("--namespace", help="kubernetes: put every pod in this namespace (default: each job's own)")
    parser.add_argument(
        "--http-port", type=int, default=0, help="port of /health, /metrics and run logs (default 0: a free port, printed at start)"
    )
    parser.add_argument("--http-host", default="127.0.0.1", help="address of the HTTP endpoints (default 127.0.0.1)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="text or json (one object a line); default $FLOTILLA_LOG_FORMAT or text")
    add_broker_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not _EXECUTOR_ID.match(args.id):
            raise UsageError(f"executor id {args.id!r} must be letters, digits, '.', '_' or '-' (at most 63)")
        settings = Settings.from_env(broker=args.broker, log_format=args.log_format, **broker_overrides(args))
        if settings.log_format not in LOG_FORMATS:
            raise UsageError(f"log format {settings.log_format!r} is not one of {', '.join(LOG_FORMATS)}")
        kafka_clients(settings)  # KafkaConfigError (a ValueError) names every problem, before anything starts
        backend = build_backend(args)
    except (UsageError, ValueError) as exc:  # ValueError: a bad cluster spec or FLOTILLA_* variable
        print(f"flotilla-executor: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, settings.log_format, static={"executor": args.id})
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    tune_for_long_lived_state()
    try:
        asyncio.run(_serve(Executor(settings, args.id, backend), args.http_host, args.http_port))
    except Exception as exc:  # the reason goes to the operator, not a traceback
        logging.getLogger("executor").debug("executor failed", exc_info=True)
        print(f"flotilla-executor: executor {args.id} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


# Options that only some backends take; --state-dir is accepted by all (only local keeps state).
_OPTIONS_OF = {
    "nodes": ("local", "fake"),
    "node_cpu": ("local", "fake"),
    "node_memory": ("local", "fake"),
    "cluster": ("fake",),
    "kubeconfig": ("kubernetes",),
    "namespace": ("kubernetes",),
}


def build_backend(args: argparse.Namespace) -> Backend:
    foreign = [
        f"--{name.replace('_', '-')}"
        for name, backends in _OPTIONS_OF.items()
        if getattr(args, name) is not None and args.backend not in backends
    ]
    if foreign:
        raise UsageError(f"not options of the {args.backend} backend: {', '.join(foreign)}")
    if args.backend == "local":
        return _local(args)
    if args.backend == "fake":
        return _fake(args)
    return _kubernetes(args)


def _local(args: argparse.Namespace) -> Backend:
    from executor.backends.local.backend import LocalBackend

    count = 2 if args.nodes is None else args.nodes
    if count < 1:
        raise UsageError(f"--nodes must be at least 1, got {count}")
    cpu = args.node_cpu or str(max(1, (os.cpu_count() or 1) // count))
    memory = args.node_memory or f"{max(256, _ram_bytes() // 2 // count // 2**20)}Mi"
    nodes = uniform_nodes(count, "local", cpu, memory)
    state_dir = args.state_dir or Path(".flotilla/executors") / args.id
    return LocalBackend(state_dir, nodes, pool=args.pool or "default")


def _fake(args: argparse.Namespace) -> Backend:
    from executor.backends.fake import FakeBackend

    if args.cluster is not None:
        if args.nodes is not None or args.node_cpu or args.node_memory:
            raise UsageError("give either --cluster or --nodes/--node-cpu/--node-memory, not both")
        return FakeBackend.from_spec(load_cluster_spec(args.cluster), pool=args.pool)
    nodes = uniform_nodes(
        FAKE_NODE_DEFAULTS["nodes"] if args.nodes is None else args.nodes,
        "node",
        args.node_cpu or FAKE_NODE_DEFAULTS["cpu"],
        args.node_memory or FAKE_NODE_DEFAULTS["memory"],
    )
    return FakeBackend(nodes, pool=args.pool or "default")


def _kubernetes(args: argparse.Namespace) -> Backend:
    try:
        from executor.backends.kubernetes.backend import KubernetesBackend
    except ImportError as exc:
        raise UsageError(f"the kubernetes backend is not available: {exc}") from exc
    try:
        return KubernetesBackend(executor_id=args.id, pool=args.pool or "default", namespace=args.namespace, kubeconfig=args.kubeconfig)
    except Exception as exc:  # the client's configuration errors come in many types
        raise UsageError(f"cannot reach the Kubernetes cluster: {type(exc).__name__}: {exc}") from exc


async def _serve(executor: Executor, http_host: str, http_port: int) -> None:
    """Run the executor and its HTTP endpoints, printing its address and ready line on stdout whatever the log level."""
    runner, port = await http.serve(executor, http_host, http_port)
    print(f"executor {executor.executor_id} http http://{http_host}:{port} (/health, /metrics, /runs/RUN_ID/logs)", flush=True)

    async def announce() -> None:
        await executor.ready.wait()
        print(ready_line(executor.executor_id), flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await executor.run()
    finally:
        announcer.cancel()
        await runner.cleanup()


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4 * 2**30


if __name__ == "__main__":
    sys.exit(main())
