"""`flotilla-executor --id NAME --backend local|fake|kubernetes`: one executor per cluster.

The command line is fixed now so deployment scripts can be written against it; the backends
arrive with the pipeline issue, and until then the command says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

BACKENDS = ("local", "fake", "kubernetes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flotilla-executor", description="Run leased Flotilla jobs on one cluster")
    parser.add_argument("--id", required=True, help="executor id (one per cluster)")
    parser.add_argument("--backend", choices=BACKENDS, default="local")
    parser.add_argument("--broker", help="kafka://host:port (default $FLOTILLA_BROKER)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(
        f"flotilla-executor: the {args.backend} backend is not available in this release; "
        "executors arrive with the job-running pipeline",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
