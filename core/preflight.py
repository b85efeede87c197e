"""`python -m core.preflight`: refuse a production start that lacks a required setting (issue 54 #9).

Exits 0 when this process may start (always in the embedded demo, which needs no configuration), else prints one
line naming the setting on stderr and exits 2. deploy/dashboard-deployment.yaml runs it as the dashboard's
startupProbe: a replica without TERM_HASH_KEY never becomes ready and the probe's line says why. The dashboard
(every page) and the sweep job (before it touches the database) ask the same question
(core.config.production_refusal)."""

from __future__ import annotations

import argparse
import sys

from core.config import production_refusal

REFUSED_EXIT = 2


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="python -m core.preflight",
        description="Exit 0 when this process may start; else one line naming the missing setting, exit 2.",
    ).parse_args(argv)
    refusal = production_refusal()
    if refusal is None:
        return 0
    print(refusal.line, file=sys.stderr)
    return REFUSED_EXIT


if __name__ == "__main__":
    sys.exit(main())
