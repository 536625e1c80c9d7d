"""
Streaming replication as one server sees it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pgtopology.conf import WRITE_POSITION_SQL
from pgtopology.processes import _pg_ids

if TYPE_CHECKING:
    from pgtopology.servers import PgNode


class NodeReplication:
    """
    One server's side of streaming replication: WAL positions, timeline,
    streaming state, pausing replay, promotion and following a new primary
    (mixed into :class:`~pgtopology.servers.PgNode`).
    """

    def is_in_recovery(self) -> bool:
        """``pg_is_in_recovery()``."""
        return bool(self.value("SELECT pg_is_in_recovery()"))

    def replay_lsn(self) -> str | None:
        """``pg_last_wal_replay_lsn()`` (None on a primary that never was a
        standby)."""
        return self.value("SELECT pg_last_wal_replay_lsn()::text")

    def receive_lsn(self) -> str | None:
        """``pg_last_wal_receive_lsn()``."""
        return self.value("SELECT pg_last_wal_receive_lsn()::text")

    def current_lsn(self) -> str:
        """``pg_current_wal_lsn()`` (primary only)."""
        return self.value("SELECT pg_current_wal_lsn()::text")

    def timeline(self) -> int:
        """
        The node's timeline: on a primary, that of its WAL insert position
        (as in the spec's recipe); on a standby, the WAL receiver's
        ``received_tli``, else the control file's checkpoint timeline.
        """
        if not self.is_in_recovery():
            return int(self.sql(WRITE_POSITION_SQL)[0][1])
        return int(
            self.value(
                "SELECT coalesce((SELECT received_tli FROM pg_stat_wal_receiver),"
                " (SELECT timeline_id FROM pg_control_checkpoint()))"
            )
        )
    # -- replication -------------------------------------------------------

    def is_streaming(self) -> bool:
        """True if this standby's WAL receiver is streaming."""
        return bool(
            self.value(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')"
            )
        )

    def replay_pause_state(self) -> str:
        """``pg_get_wal_replay_pause_state()``: 'not paused', 'pause requested'
        or 'paused'."""
        return self.value("SELECT pg_get_wal_replay_pause_state()")

    def pause_replay(self, timeout: float = 10) -> None:
        """``pg_wal_replay_pause()`` and wait until replay is really paused."""
        self.sql("SELECT pg_wal_replay_pause()")
        self.wait_for(
            "SELECT pg_get_wal_replay_pause_state() = 'paused'",
            timeout=timeout,
            what=f"{self.name}: WAL replay to pause",
        )

    def resume_replay(self, timeout: float = 10) -> None:
        """``pg_wal_replay_resume()`` and wait until replay is not paused."""
        self.sql("SELECT pg_wal_replay_resume()")
        self.wait_for(
            "SELECT pg_get_wal_replay_pause_state() = 'not paused'",
            timeout=timeout,
            what=f"{self.name}: WAL replay to resume",
        )

    def promote(self, timeout: float = 30) -> None:
        """Promote this standby (``pg_promote``) and wait until it is out of
        recovery; it then has no upstream."""
        self.sql("SELECT pg_promote(true, %s)", (int(timeout),))
        self.wait_for(
            "SELECT NOT pg_is_in_recovery()", timeout=timeout, what=f"{self.name}: promotion"
        )
        self.upstream = None

    def follow(self, new_primary: PgNode, timeout: float = 30) -> None:
        """
        Re-point this node at ``new_primary`` (primary_conninfo; a former
        primary gets ``standby.signal``), restart it and wait until it
        streams.  Best effort: a node whose WAL went past the new primary's
        fork point cannot follow (that needs pg_rewind) and times out.
        """
        self.upstream = new_primary
        if self.is_running():
            self.stop("fast", timeout)
        signal_file = os.path.join(self.datadir, "standby.signal")
        if not os.path.exists(signal_file):
            open(signal_file, "w").close()
            ids = _pg_ids()
            if ids is not None:
                os.chown(signal_file, *ids)
        self.start(timeout)
        self.wait_for(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')",
            timeout=timeout,
            what=f"{self.name}: streaming from {new_primary.name}",
        )
