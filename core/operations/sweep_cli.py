"""`python -m core.operations.sweep_cli`: the sweep
job's command line (the CronJob entry, deploy/sweep-cronjob.yaml)."""

from __future__ import annotations

import argparse
import logging
import sys

from core.config import load_settings, production_refusal
from core.db import Database
from core.operations.sweep import (
    DEFAULT_RETENTION_DAYS,
    RETENTION_ENV,
    TRIGGERS,
    SweepInputError,
    default_retention_days,
    run_sweep,
    validate_retention_days,
)
from core.storage.prune import POLICY_ENV, PruneInputError, policy_from_env


def _days_arg(value: str) -> int:
    try:
        return validate_retention_days(value)
    except SweepInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the run finished (or another run already holds the lock), 1 on error, 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m core.operations.sweep_cli",
        description="Sweep expired store rows and old checkpoint threads (one run at a time, logged).",
    )
    parser.add_argument("--trigger", choices=TRIGGERS, default="scheduled")
    parser.add_argument(
        "--retention-days",
        type=_days_arg,
        default=None,
        help=f"delete threads whose newest checkpoint is older than this "
        f"(default ${RETENTION_ENV} or {DEFAULT_RETENTION_DAYS})",
    )
    parser.add_argument("--dry-run", action="store_true", help="count and list, delete nothing")
    parser.add_argument("--operator", default=None, help="who asked for the run (logged)")
    prune = parser.add_argument_group("history pruning of live threads (core/storage/prune.py)")
    prune.add_argument(
        "--keep-latest",
        metavar="N",
        default=None,
        help=f"keep the latest N checkpoints of each thread per namespace, delete older ones "
        f"(default ${POLICY_ENV['keep_latest']}; unset: no pruning)",
    )
    prune.add_argument(
        "--idle-minutes",
        metavar="M",
        default=None,
        help=f"only threads idle for M minutes (default ${POLICY_ENV['idle_minutes']})",
    )
    prune.add_argument(
        "--prune-agent",
        metavar="NAME",
        default=None,
        help=f"only threads of this agent: metadata agente or graph_id (${POLICY_ENV['agent']})",
    )
    prune.add_argument(
        "--prune-root",
        metavar="ROOT",
        default=None,
        help=f"only threads of this namespace root: clientes, proveedores, empleados (${POLICY_ENV['root']})",
    )
    args = parser.parse_args(argv)
    refusal = production_refusal()
    if refusal is not None:  # before anything is read or deleted: the erasure re-check would fail after the pruning
        print(refusal.line, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        days = default_retention_days() if args.retention_days is None else args.retention_days
    except SweepInputError as exc:
        parser.error(f"{RETENTION_ENV}: {exc}")
    try:
        policy = policy_from_env(
            keep_latest=args.keep_latest, idle_minutes=args.idle_minutes, agent=args.prune_agent, root=args.prune_root
        )
    except PruneInputError as exc:
        parser.error(str(exc))
    settings = load_settings()
    db = Database.from_settings(settings)
    result = run_sweep(
        db, trigger=args.trigger, retention_days=days, dry_run=args.dry_run, operator=args.operator, prune=policy
    )
    if result.locked:
        print("already running: another sweep holds the advisory lock; nothing done")
        return 0
    print(result.summary())
    if args.dry_run:
        for thread_id in result.threads:
            print(f"  old thread: {thread_id}")
    if result.prune is not None:
        for t in result.prune.threads:
            print(
                f"  pruned thread: {t.thread_id} ({t.checkpoints} checkpoints, {t.writes} writes, {t.blobs} blobs, "
                f"{t.bytes} bytes)"
            )
    return 1 if result.status == "error" else 0


if __name__ == "__main__":  # the CronJob entry
    sys.exit(main())
