"""`flotilla up` (everything on this machine, jobs included) and `flotilla worker` (one control-plane worker)."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams.broker_options import add_broker_options, broker_overrides
from streams.config import Settings

if TYPE_CHECKING:
    from ops.executor import ExecutorProcess
    from ops.worker import WorkerProcess

LOCAL_EXECUTOR = "local"


def register(commands: Any) -> None:
    up = commands.add_parser("up", help="run Flotilla on this machine: embedded broker, control plane, REST API, local executor")
    up.add_argument("--broker-port", type=int, default=9092, help="embedded broker port (default 9092; 0 = any free port)")
    up.add_argument("--web-port", type=int, default=8080, help="REST API port on 127.0.0.1 (default 8080)")
    up.add_argument("--grpc-port", type=int, default=50051, help="Armada gRPC API port on 127.0.0.1 (default 50051)")
    up.add_argument(
        "--state-dir", type=Path, default=Path(".flotilla"), help="the log archive, worker data, executor runs and logs (default .flotilla)"
    )
    up.add_argument("--config", type=Path, help=CONFIG_HELP)
    up.set_defaults(func=_up)

    # No abbreviations: --kafka-sasl-password would otherwise be taken for --kafka-sasl-password-file.
    worker = commands.add_parser("worker", help="run one control-plane worker (Faust) against a broker", allow_abbrev=False)
    worker.add_argument(
        "--broker",
        help="kafka://host:port, or tansu://host:port for the embedded broker (default $FLOTILLA_BROKER or tansu://127.0.0.1:9092)",
    )
    worker.add_argument("--web-port", type=int, help="REST API port (default 8080)")
    worker.add_argument("--grpc-port", type=int, help="Armada gRPC API port (default 50051)")
    worker.add_argument("--web-host", help="REST and gRPC API address (default 127.0.0.1)")
    worker.add_argument(
        "--canonical-url",
        help="where the other workers reach this one's REST API (default http://WEB_HOST:WEB_PORT; set it when --web-host is 0.0.0.0)",
    )
    worker.add_argument("--data-dir", type=Path, help="table data directory (default .flotilla/data)")
    worker.add_argument("--partitions", type=int, help="partitions of the partitioned topics (default 1)")
    worker.add_argument(
        "--log-format", choices=("text", "json"), help="text or json (one object a line); default $FLOTILLA_LOG_FORMAT or text"
    )
    worker.add_argument("--config", type=Path, help=CONFIG_HELP)
    worker.add_argument(
        "--archive-dir", help="keep a copy of events and queues under this directory (Avro container files; see `flotilla log`)"
    )
    add_broker_options(worker)
    worker.set_defaults(func=_worker)


CONFIG_HELP = (
    "scheduler configuration file (YAML, as Armada's scheduler and server configuration; example: ops/scheduler.yaml;"
    " default $FLOTILLA_SCHEDULER_CONFIG, else Armada's production defaults)"
)


def _worker(args: argparse.Namespace) -> int:
    from streams.worker import run_worker

    try:
        settings = _worker_settings(args)
    except ValueError as exc:  # a bad settings file or FLOTILLA_* variable
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_worker(settings)


def _worker_settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        broker=args.broker,
        web_port=args.web_port,
        grpc_port=args.grpc_port,
        web_host=args.web_host,
        canonical_url=args.canonical_url,
        data_dir=args.data_dir,
        partitions=args.partitions,
        scheduler_config=str(args.config) if args.config else None,
        log_format=args.log_format,
        archive_dir=args.archive_dir,
        **broker_overrides(args),
    )


def _up(args: argparse.Namespace) -> int:
    from ops.broker import BrokerError, EmbeddedBroker, free_port
    from ops.executor import ExecutorError, ExecutorProcess
    from ops.worker import WorkerError, WorkerProcess
    from streams.archive.lock import Locked
    from streams.archive.reader import ArchiveCorrupt
    from streams.archive.restore import RestoreError
    from streams.auth import AuthConfigError
    from streams.auth.setup import describe_access
    from streams.client.commands.restoring import lock_state_dir, restore_log
    from streams.client.progress import Progress
    from streams.scheduler.config_file import ConfigFileError
    from streams.scheduler.config_file import load as load_scheduler_config

    # The worker inherits FLOTILLA_* from this environment: refuse its authentication settings and
    # its scheduler configuration before starting anything.
    config_path = str(args.config.resolve()) if args.config else Settings.from_env().scheduler_config
    try:
        access = describe_access(Settings.from_env())
        configuration = load_scheduler_config(config_path)
    except (AuthConfigError, ConfigFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(configuration.describe(config_path), flush=True)
    _stop_on_signals()
    state = args.state_dir.resolve()
    try:
        lock = lock_state_dir(state)  # noqa: F841 - held until this process ends
    except (Locked, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    data_dir = state / "data"
    # The embedded broker keeps its log in memory, so it starts empty and the tables are refolded
    # from the log archive restored into it: table state left by an earlier run is not reused.
    shutil.rmtree(data_dir, ignore_errors=True)

    port = args.broker_port or free_port()
    if args.broker_port and not _port_free(port):
        port = free_port()
        print(f"port {args.broker_port} is busy; the embedded broker uses {port} instead", flush=True)
    broker = EmbeddedBroker(port=port, log_path=state / "broker.log", new_session=True)
    try:
        broker.start()
    except BrokerError as exc:
        print(f"error: {exc} (see {state / 'broker.log'})", file=sys.stderr)
        return 1

    executor_http = free_port()
    env = {
        **os.environ,
        **_absolute_auth_paths(),
        # The worker's UI and API read run logs from the local executor there.
        "FLOTILLA_EXECUTOR_URLS": f"{LOCAL_EXECUTOR}=http://127.0.0.1:{executor_http}",
        "FLOTILLA_BROKER": broker.url,
        "FLOTILLA_WEB_PORT": str(args.web_port),
        "FLOTILLA_GRPC_PORT": str(args.grpc_port),
        "FLOTILLA_DATA_DIR": str(data_dir),
        "FLOTILLA_SCHEDULER_CONFIG": config_path and str(Path(config_path).resolve()),
        "FLOTILLA_ARCHIVE_DIR": str(state / "log"),
    }
    try:
        restored = restore_log(Settings.from_env(env))
    except (Locked, ArchiveCorrupt, RestoreError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        broker.stop()
        return 1
    env["FLOTILLA_REFOLD_BEFORE_SCHEDULING"] = "true" if restored else "false"
    refold = Progress("refolded", "records of events")
    worker = WorkerProcess(env=env, log_path=state / "worker.log", web_port=args.web_port)
    # `flotilla job logs` finds a run's output under <state-dir>/executors/<executor id>/.
    executor_dir = state / "executors" / LOCAL_EXECUTOR
    executor = ExecutorProcess(
        executor_id=LOCAL_EXECUTOR,
        backend="local",
        env=env,
        log_path=state / "executor.log",
        args=["--broker", broker.url, "--state-dir", str(executor_dir), "--http-port", str(executor_http)],
    )
    # Stopped in reverse order: the executor before the control plane it reports to.
    children: dict[str, WorkerProcess | ExecutorProcess] = {"control plane": worker, "executor": executor}
    try:
        worker.start(timeout_s=120, on_health=refold.from_health)
        refold.finish()
        executor.start(timeout_s=60)
        print(
            "Flotilla is running:\n"
            f"  broker         {broker.url}  (embedded Tansu, log in memory; archived under {env['FLOTILLA_ARCHIVE_DIR']})\n"
            f"  control plane  pid {_pid(worker)}  "
            f"(ingest, job-state and scheduling agents, queue replica; log {worker.log_path})\n"
            f"  executor       {LOCAL_EXECUTOR}, pid {_pid(executor)}  "
            f"(runs jobs as processes on this machine; runs under {executor_dir / 'runs'}; log {executor.log_path})\n"
            f"  web UI         {worker.url}/\n"
            f"  REST API       {worker.url}  (GET /health, /metrics, /api/v1/queues, /api/v1/jobs; /api/v1/openapi.json)\n"
            f"  gRPC API       127.0.0.1:{args.grpc_port}  (Armada's Submit, QueueService, Jobs, Event: armada_client.ArmadaClient)\n"
            f"  access         {access}\n"
            "Try: flotilla create queue demo && flotilla submit job.yaml && flotilla watch demo JOBSET\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        while all(child.running for child in children.values()):
            time.sleep(0.5)
        for name, child in children.items():
            if not child.running:
                print(f"error: {name} exited\n{child.log_tail()}", file=sys.stderr)
        return 1
    except WorkerError as exc:
        print(f"error: the control plane did not start: {exc}", file=sys.stderr)
        return 1
    except ExecutorError as exc:
        print(f"error: the local executor did not start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping...", flush=True)
        return 0
    finally:
        for child in reversed(list(children.values())):
            child.stop()
        broker.stop()


def _stop_on_signals() -> None:
    """Each way of being told to stop is handled like Ctrl-C, so the children are stopped too, not orphaned:
    SIGTERM (a service manager), SIGHUP (the terminal closed) and SIGINT itself, which a shell starting
    `flotilla up` in the background hands down ignored (and Python then leaves it ignored)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, interrupt)


def _pid(child: WorkerProcess | ExecutorProcess) -> str:
    return str(child.process.pid) if child.process else "?"


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _absolute_auth_paths() -> dict[str, str]:
    """The token file as the user named it, from where they ran `flotilla up`: the worker runs from the repository root."""
    token_file = os.environ.get("FLOTILLA_AUTH_TOKEN_FILE")
    return {"FLOTILLA_AUTH_TOKEN_FILE": str(Path(token_file).resolve())} if token_file else {}
