"""Run a command as the reaper of every process it leaves behind, then exit with its code.

`python scripts/reap.py CMD ARGS...`. The test run starts processes that outlive their parents: embedded PostgreSQL
servers (their postmaster, a child of a pytest-xdist worker that never waits for it), chromium's helpers, the children
of a dashboard a test killed. Orphaned, they are re-parented to init, and their CPU time is in no figure the run's
caller reads (`/usr/bin/time`, CI's accounting): before this, `/usr/bin/time` counted 1,615 of the ~2,065 CPU seconds
the run's units measured (2026-12-07). As a child subreaper (Linux's PR_SET_CHILD_SUBREAPER), this process is their
parent instead, waits for each as it ends, and so its own caller's wait counts their time too.

Signals SIGINT and SIGTERM go to the command; the exit code is the command's (128 + N if a signal N ended it).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: reap.py COMMAND [ARGS...]", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:  # not Linux, or refused: run the command all the same
        print(f"reap.py: prctl failed ({os.strerror(ctypes.get_errno())}); orphans go to init", file=sys.stderr)
    child = os.fork()
    if child == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda n, _frame: os.kill(child, n))
    code = None
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:  # nobody left to wait for
            break
        except InterruptedError:
            continue
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            break
    # the orphans already ended are waited for (counted); those still running are not waited on, they go to init
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    assert code is not None
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
