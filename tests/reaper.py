"""
Run one command under a small init: ``python reaper.py PIDFILE UID GID -- CMD...``.

Started as root, this process makes itself a child subreaper (Linux
``PR_SET_CHILD_SUBREAPER``), forks, and the child drops to ``UID``/``GID``
and executes ``CMD``; the child's pid goes to ``PIDFILE``.  Orphans of the
command's tree are adopted here and reaped, and this process exits once the
command and every adopted orphan are gone, with the command's exit status.

Why: Patroni starts its postmaster the way ``pg_ctl`` does, through a short-
lived intermediate process, so the postmaster is orphaned at once and left
to init to reap.  Init here (PID 1) does not, and a postmaster that stays a
zombie looks alive to Patroni, which then waits for it to stop until its
timeout.  With this process as the nearest subreaper the postmaster is
reaped the moment it exits, and this process staying alive means "something
of this node still runs".

SIGTERM, SIGINT and SIGHUP are passed on to the command.  When the process
that started this one dies, this one gets SIGTERM (``PR_SET_PDEATHSIG``), so
a test run that is killed leaves Patroni to stop its PostgreSQL and exit.

Standard library only: it runs with the test interpreter, as root, before
any privilege is dropped.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    if len(argv) < 6 or argv[4] != "--":
        print("usage: reaper.py PIDFILE UID GID -- CMD...", file=sys.stderr)
        return 2
    pidfile, uid, gid, cmd = argv[1], int(argv[2]), int(argv[3]), argv[5:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"reaper: prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}",
              file=sys.stderr)
        return 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.execv(cmd[0], cmd)
        except BaseException as e:  # noqa: BLE001 - report, never return into the parent's code
            print(f"reaper: cannot run {cmd[0]}: {e}", file=sys.stderr, flush=True)
        os._exit(127)
    with open(pidfile + ".tmp", "w") as f:
        f.write(f"{child}\n")
    os.rename(pidfile + ".tmp", pidfile)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    status = 0
    while True:
        try:
            pid, raw = os.wait()
        except ChildProcessError:
            break
        if pid == child:
            status = os.waitstatus_to_exitcode(raw)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
