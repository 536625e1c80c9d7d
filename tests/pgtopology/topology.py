"""
The test topology: a primary and its streaming replicas, each on its own
loopback address, with data helpers and the environment for the service
under test.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
from collections.abc import Callable, Sequence
from typing import Any

from pgtopology.conf import (
    LOG_FILE,
    LOOPBACK_HOSTS,
    NODE_CONF,
    SUPERUSER,
    SUPERUSER_PASSWORD,
    WRITE_POSITION_SQL,
)
from pgtopology.faults import TopologyFaults
from pgtopology.processes import (
    _alive,
    _make_pg_dir,
    _new_scratch_root,
    _run,
    find_pg_bindir,
    free_port,
)
from pgtopology.servers import PgNode, template_datadir

# --------------------------------------------------------------------------
# a topology


class PgTopology(TopologyFaults):
    """
    A primary and its streaming replicas, each on its own loopback address.

    Build with ``PgTopology.start()``; each call makes an independent
    topology (own data dirs and ports), so destructive tests can have one to
    themselves.  Always call ``teardown()``.

    :ivar nodes: every node, primary first.
    :ivar primary: the node that writes go to (``failover`` changes it).
    :ivar base_dir: the directory holding the data directories.
    """

    def __init__(self, base_dir: str, bindir: str, owns_base_dir: bool) -> None:
        self.base_dir = base_dir
        self.bindir = bindir
        self.nodes: list[PgNode] = []
        self.primary: PgNode | None = None  # type: ignore[assignment]
        self._owns_base_dir = owns_base_dir
        self._torn_down = False

    def __repr__(self) -> str:
        return f"<PgTopology {self.nodes!r}>"

    @property
    def replicas(self) -> list[PgNode]:
        """Every node but the primary."""
        return [n for n in self.nodes if n is not self.primary]

    def node(self, name: str) -> PgNode:
        """The node called ``name``."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @classmethod
    def start(
        cls,
        base_dir: str | None = None,
        replicas: int = 2,
        *,
        bindir: str | None = None,
        hosts: Sequence[str] | None = None,
        timeout: float = 60,
    ) -> PgTopology:
        """
        Create, start and verify a primary and ``replicas`` streaming
        replicas.  On any failure everything started so far is torn down.

        :param base_dir: directory for the data dirs; created (and removed by
            ``teardown``) if it does not exist; default: a new one in
            ``scratch_dir()``.
            The ``postgres`` OS user must be able to reach it.
        :param hosts: listen addresses, primary first; default
            127.0.0.1, 127.0.0.2, ...
        """
        bindir = bindir or find_pg_bindir()
        hosts = list(hosts or LOOPBACK_HOSTS[: replicas + 1])
        if len(hosts) < replicas + 1:
            raise ValueError("need one host per node")
        if base_dir is None:
            base_dir = _new_scratch_root("pgstatus-topo-")
            owns = True
        else:
            owns = not os.path.exists(base_dir)
        topo = cls(base_dir, bindir, owns)
        try:
            _make_pg_dir(base_dir)
            template = template_datadir(bindir)
            primary = topo._add_primary(template, hosts[0])
            for i in range(1, replicas + 1):
                topo._add_replica(f"replica{i}", hosts[i], primary, timeout)
            topo.wait_streaming(timeout)
        except BaseException:
            topo.teardown()
            raise
        return topo

    def _add_primary(self, template: str, host: str) -> PgNode:
        datadir = os.path.join(self.base_dir, "primary")
        _run(["cp", "-a", template, datadir], 60, "copying the template data dir")
        node = PgNode("primary", host, free_port(host), datadir, self.bindir)
        self.nodes.append(node)
        self.primary = node
        node.start()
        return node

    def _add_replica(self, name: str, host: str, upstream: PgNode, timeout: float) -> PgNode:
        datadir = os.path.join(self.base_dir, name)
        node = PgNode(name, host, free_port(host), datadir, self.bindir, upstream=upstream)
        self.nodes.append(node)
        _run(
            [
                os.path.join(self.bindir, "pg_basebackup"),
                "-D", datadir,
                "-d", f"host={upstream.host} port={upstream.port} user={SUPERUSER} "
                f"application_name={name}_basebackup",
                "-R", "-c", "fast", "-X", "stream", "--no-sync",
            ],
            timeout,
            f"pg_basebackup for {name}",
        )
        # -R put primary_conninfo into postgresql.auto.conf, which would
        # override ours (and follow() could not change it): drop it.
        auto = os.path.join(datadir, "postgresql.auto.conf")
        with open(auto) as f:
            kept = [ln for ln in f if not ln.startswith("primary_conninfo")]
        with open(auto, "w") as f:
            f.writelines(kept)
        for junk in [LOG_FILE, NODE_CONF, *glob.glob(os.path.join(datadir, ".s.PGSQL.*"))]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(datadir, junk))
        node.start(timeout)
        return node

    # -- data ----------------------------------------------------------------

    def write(self, payload: str | None = None, node: PgNode | None = None) -> tuple[str, int, int]:
        """
        Insert a ``rw_check`` row on the primary (autocommit), then read the
        WAL insert position and timeline after the commit, as the
        read-your-writes recipe in the spec does.

        :param node: write there instead of ``self.primary``.
        :return: ``(lsn, timeline, row_id)``.
        """
        target = node or self.primary
        assert target is not None
        conn = target.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO rw_check (payload) VALUES (%s) RETURNING id", (payload,))
                row_id = cur.fetchone()[0]
                cur.execute(WRITE_POSITION_SQL)
                lsn, timeline = cur.fetchone()
        finally:
            conn.close()
        return lsn, int(timeline), int(row_id)

    def has_row(self, node: PgNode, row_id: int) -> bool:
        """True if ``node`` has the ``rw_check`` row ``row_id``."""
        return bool(node.sql("SELECT 1 FROM rw_check WHERE id = %s", (row_id,)))

    def wait_replicated(
        self, lsn: str, timeout: float = 10, nodes: Sequence[PgNode] | None = None
    ) -> None:
        """
        Wait until every running replica (or every node in ``nodes``) has
        replayed WAL up to ``lsn``.
        """
        targets = (
            list(nodes)
            if nodes is not None
            else [n for n in self.replicas if n.is_running() and not n.frozen]
        )
        for n in targets:
            n.wait_for(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                (lsn,),
                timeout=timeout,
                what=f"{n.name} to replay {lsn} (at {_safe(n.replay_lsn)})",
            )

    def wait_streaming(self, timeout: float = 30) -> None:
        """Wait until every replica streams from its upstream, as seen by
        both ends."""
        for n in self.replicas:
            up = n.upstream
            if up is None:
                continue
            n.wait_for(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')",
                timeout=timeout,
                what=f"{n.name} WAL receiver to stream from {up.name}",
            )
            up.wait_for(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_replication"
                " WHERE application_name = %s AND state = 'streaming')",
                (n.name,),
                timeout=timeout,
                what=f"{up.name} to stream to {n.name}",
            )

    # -- for the service under test ---------------------------------------------

    def hosts_env(
        self,
        user: str = SUPERUSER,
        password: str = SUPERUSER_PASSWORD,
        dbname: str = "postgres",
        nodes: Sequence[PgNode] | None = None,
    ) -> dict[str, str]:
        """
        ``pg_status__*`` environment for a service watching these nodes.

        :param nodes: which nodes, in which order; default all, primary first.
        """
        nodes = list(nodes) if nodes is not None else self.nodes
        return {
            "pg_status__hosts": ",".join(n.host for n in nodes),
            "pg_status__pg_port": ",".join(str(n.port) for n in nodes),
            "pg_status__pg_user": user,
            "pg_status__pg_password": password,
            "pg_status__pg_database": dbname,
        }

    def all_pids(self) -> list[int]:
        """Every live process of every node."""
        return [p for n in self.nodes for p in n.all_pids()]

    def teardown(self) -> None:
        """
        Stop every node (immediate shutdown, SIGKILL fallback) and remove
        the data. Idempotent; safe after a partial start.

        :raises RuntimeError: if a server process survived.
        """
        survivors: list[str] = []
        for n in reversed(self.nodes):
            try:
                n.stop("immediate", timeout=10)
            except Exception:  # noqa: BLE001 - fall back to SIGKILL
                n.kill()
            left = [p for p in n.all_pids() if _alive(p)]
            if left:
                survivors.append(f"{n.name}: {left}")
        if not survivors:
            if self._owns_base_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)
            else:
                for n in self.nodes:
                    shutil.rmtree(n.datadir, ignore_errors=True)
        self._torn_down = True
        if survivors:
            raise RuntimeError(f"PostgreSQL processes survived teardown: {survivors}")


def _safe(f: Callable[[], Any]) -> Any:
    try:
        return f()
    except Exception as e:  # noqa: BLE001 - for messages only
        return f"<{type(e).__name__}>"
