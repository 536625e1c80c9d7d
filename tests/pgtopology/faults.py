"""
Faults the tests inject: on one server and on a whole topology.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

import psycopg2

from pgtopology.processes import _proc_state, _signal, descendants, poll

if TYPE_CHECKING:
    from pgtopology.servers import PgNode


class NodeFaults:
    """
    Fault injection on one server: kill, SIGSTOP/SIGCONT, terminating
    client backends (mixed into :class:`~pgtopology.servers.PgNode`).
    """

    def kill(self) -> None:
        """
        SIGKILL the postmaster (a crash), then make sure its children die
        and are reaped.  The next ``start()`` does crash recovery.
        """
        pm = self.pid or (self._proc.pid if self._proc and self._proc.poll() is None else None)
        if pm is None:
            self._reap_proc()
            return
        self._kill_now(pm)

    def sigstop(self) -> None:
        """
        Freeze the postmaster and all its children (SIGSTOP): new connection
        attempts get TCP-accepted by the kernel but never answered, and
        existing sessions hang.  Returns once all are stopped.
        """
        pm = self.pid
        if pm is None:
            raise RuntimeError(f"{self.name} is not running")
        _signal([pm], signal.SIGSTOP)  # first: no new children meanwhile
        pids = [pm, *descendants(pm)]
        _signal(pids, signal.SIGSTOP)
        self.frozen = True
        poll(
            lambda: all(_proc_state(p) in ("T", "t", "Z", None) for p in pids),
            5,
            f"{self.name} processes to stop",
            0.005,
        )

    def sigcont(self) -> None:
        """Unfreeze what ``sigstop()`` froze (SIGCONT)."""
        pm = self.pid
        if pm is not None:
            pids = [pm, *descendants(pm)]
            _signal(reversed(pids), signal.SIGCONT)
        self.frozen = False


    def backend_pids(
        self, application_name: str | None = None, user: str | None = None
    ) -> list[int]:
        """
        Pids of client backends (from ``pg_stat_activity``), excluding the
        querying session itself.
        """
        q = (
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
            " AND pid <> pg_backend_pid()"
        )
        params: list[Any] = []
        if application_name is not None:
            q += " AND application_name = %s"
            params.append(application_name)
        if user is not None:
            q += " AND usename = %s"
            params.append(user)
        return [r[0] for r in self.sql(q + " ORDER BY pid", params)]

    def connections(self, user: str | None = None, application_name: str | None = None) -> int:
        """Number of client connections (optionally of ``user`` / app name)."""
        return len(self.backend_pids(application_name=application_name, user=user))

    def terminate_backends(
        self, application_name: str | None = None, user: str | None = None
    ) -> int:
        """``pg_terminate_backend`` the matching client backends; return how many."""
        pids = self.backend_pids(application_name=application_name, user=user)
        for p in pids:
            self.sql("SELECT pg_terminate_backend(%s)", (p,))
        return len(pids)



class TopologyFaults:
    """
    Disturbances of a whole topology: failover, health checks and restoring
    the original shape (mixed into :class:`~pgtopology.topology.PgTopology`).
    """


    def failover(self, new_primary: PgNode, old_primary_stop: str | None = "fast") -> None:
        """
        Stop the primary (unless ``old_primary_stop`` is None), promote
        ``new_primary``, make it ``self.primary`` and re-point the other
        running replicas at it.  With a "fast" stop, replicas have all WAL up
        to the shutdown checkpoint, so they can follow.
        """
        old = self.primary
        if old is not None and old_primary_stop is not None and old.is_running():
            old.stop(old_primary_stop)
        new_primary.promote()
        self.primary = new_primary
        for n in self.nodes:
            if n is new_primary or n is old:
                continue
            if n.is_running():
                n.follow(new_primary)
            else:
                n.upstream = new_primary

    def health_problems(self) -> list[str]:
        """What is wrong compared to the healthy state (empty if healthy)."""
        problems: list[str] = []
        for n in self.nodes:
            if n.frozen:
                problems.append(f"{n.name} frozen")
                continue
            if not n.is_running():
                problems.append(f"{n.name} not running")
                continue
            try:
                in_recovery = n.is_in_recovery()
                if n is self.primary and in_recovery:
                    problems.append(f"{n.name} is in recovery")
                if n is not self.primary:
                    if not in_recovery:
                        problems.append(f"{n.name} is not in recovery")
                    elif n.replay_pause_state() != "not paused":
                        problems.append(f"{n.name} replay paused")
                    elif not n.is_streaming():
                        problems.append(f"{n.name} not streaming")
            except psycopg2.Error as e:
                problems.append(f"{n.name} unreachable: {e}".strip())
        return problems

    def restore(self, timeout: float = 30) -> list[str]:
        """
        Bring the topology back to healthy: unfreeze frozen nodes, start
        stopped ones, resume paused replay, wait for streaming.

        :return: the problems found (empty if it was healthy).
        :raises RuntimeError: if roles changed (a promoted replica): that
            cannot be undone; destructive tests must use their own topology.
        """
        problems = self.health_problems()
        if not problems:
            return problems
        for n in self.nodes:
            if n.frozen:
                n.sigcont()
        for n in self.nodes:
            if not n.is_running():
                n.start(timeout)
        for n in self.nodes:
            in_recovery = n.is_in_recovery()
            if (n is self.primary) == in_recovery:
                raise RuntimeError(
                    f"{n.name} changed role (in recovery: {in_recovery}); a test promoted "
                    "a node of a shared topology: use a fresh topology for that"
                )
            if n is not self.primary and n.replay_pause_state() != "not paused":
                n.resume_replay(timeout)
        self.wait_streaming(timeout)
        return problems
