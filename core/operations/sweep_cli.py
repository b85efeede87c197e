"""`python -m core.operations.sweep`: the sweep job's command line (the CronJob entry, deploy/sweep-cronjob.yaml)."""
from __future__ import annotations

import argparse
import logging

from core.config import load_settings
from core.db import Database
from core.operations.sweep import (DEFAULT_RETENTION_DAYS, RETENTION_ENV, TRIGGERS, SweepInputError,
                                   default_retention_days, run_sweep, validate_retention_days)


def _days_arg(value: str) -> int:
    try:
        return validate_retention_days(value)
    except SweepInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the run finished (or another run already holds the lock), 1 on error, 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m core.operations.sweep",
        description="Sweep expired store rows and old checkpoint threads (one run at a time, logged).")
    parser.add_argument("--trigger", choices=TRIGGERS, default="scheduled")
    parser.add_argument("--retention-days", type=_days_arg, default=None,
                        help=f"delete threads whose newest checkpoint is older than this "
                             f"(default ${RETENTION_ENV} or {DEFAULT_RETENTION_DAYS})")
    parser.add_argument("--dry-run", action="store_true", help="count and list, delete nothing")
    parser.add_argument("--operator", default=None, help="who asked for the run (logged)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        days = default_retention_days() if args.retention_days is None else args.retention_days
    except SweepInputError as exc:
        parser.error(f"{RETENTION_ENV}: {exc}")
    settings = load_settings()
    db = Database.from_settings(settings)
    result = run_sweep(db, trigger=args.trigger, retention_days=days, dry_run=args.dry_run, operator=args.operator)
    if result.locked:
        print("already running: another sweep holds the advisory lock; nothing done")
        return 0
    print(result.summary())
    if args.dry_run:
        for thread_id in result.threads:
            print(f"  old thread: {thread_id}")
    return 1 if result.status == "error" else 0
