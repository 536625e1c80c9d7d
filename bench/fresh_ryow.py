"""
Fresh read-your-writes benchmark (``make bench-fresh``): how often a read
right after a committed write can be served by a replica that has it.

Starts the local primary + two replicas, a background writer committing
about 100 transactions/s, and the service with the default 1 s polling.
Then, for each of ``--reads`` reads: commit a row, read the insert LSN and
timeline as the spec prescribes, and ask ``/replica?min_lsn=…&timeline=…``
with and without ``wait_ms``.  Every replica answered is checked to contain
the row.  Reports the replica share and the extra status queries per second
(replica checks counted in the service's debug log).  The same reads are
then sent to a follower of that service (follower mode), whose ``wait_ms``
reads ask the service for the extra checks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from pgtopology import PgTopology, free_port  # noqa: E402


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def wait_ready(port: int, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if get(port, "/ready") == "OK":
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready")
        time.sleep(0.1)


def replica_checks(logfile: str) -> int:
    """
    Replica status queries so far, counted from the service's debug log.
    """
    with open(logfile, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if "checked host=" in line and "role=replica" in line)


def writer(topo: PgTopology, stop: threading.Event, rate: float = 100.0) -> None:
    conn = topo.primary.connect(application_name="bench-writer")
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("INSERT INTO rw_check (payload) VALUES ('bg')")
                time.sleep(1 / rate)
    finally:
        conn.close()


def run(topo: PgTopology, port: int, reads: int, wait_ms: int, logfile: str) -> dict:
    replicas = {n.host: n for n in topo.replicas}
    before = replica_checks(logfile)
    t0 = time.monotonic()
    on_replica = verified = 0
    latencies = []
    answered: list[tuple[str, int]] = []
    conn = topo.primary.connect(application_name="bench-rw")
    try:
        with conn.cursor() as cur:
            for _ in range(reads):
                cur.execute("INSERT INTO rw_check (payload) VALUES ('rw') RETURNING id")
                row = cur.fetchone()[0]
                cur.execute("SELECT pg_current_wal_insert_lsn(), ('x' || substr(pg_walfile_name("
                            "pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint")
                lsn, tl = cur.fetchone()
                q = f"/replica?min_lsn={lsn}&timeline={tl}"
                if wait_ms:
                    q += f"&wait_ms={wait_ms}"
                s = time.monotonic()
                host = get(port, q)
                latencies.append(time.monotonic() - s)
                if host in replicas:
                    on_replica += 1
                    answered.append((host, row))
                time.sleep(0.02)
    finally:
        conn.close()
    elapsed = time.monotonic() - t0
    extra = replica_checks(logfile) - before
    # verified after the count, so these reads are not counted as checks;
    # a replica that had the row when it answered still has it
    for host, row in answered:
        if not topo.has_row(replicas[host], row):
            raise AssertionError(f"{host} answered for row {row} but lacks it")
        verified += 1
    latencies.sort()
    return {
        "wait_ms": wait_ms, "reads": reads, "replica_answers": on_replica,
        "replica_share": on_replica / reads, "verified_rows": verified,
        "replica_checks_per_s": extra / elapsed, "reads_per_s": reads / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reads", type=int, default=500)
    ap.add_argument("--wait-ms", type=int, default=20)
    ap.add_argument("--no-follower", action="store_true",
                    help="skip the runs against a follower of the service")
    args = ap.parse_args()
    topo = PgTopology.start(replicas=2)
    stop = threading.Event()
    bg = threading.Thread(target=writer, args=(topo, stop), daemon=True)
    proc = None
    try:
        bg.start()
        port = free_port()
        env = dict(os.environ, **topo.hosts_env(), PYTHONPATH=ROOT,
                   pg_status__http_listen_address="127.0.0.1",
                   pg_status__http_port=str(port), pg_status__log_level="debug")
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        logfile = os.path.join(topo.base_dir, "pgstatus.log")
        log = open(logfile, "w")
        proc = subprocess.Popen([twistd, "-n", "--pidfile=", "pgstatus"], env=env, cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
        wait_ready(port, "service")
        results = [dict(run(topo, port, args.reads, 0, logfile), on="hub"),
                   dict(run(topo, port, args.reads, args.wait_ms, logfile), on="hub")]
        if not args.no_follower:
            # the same reads against a follower of that service (follower
            # mode): its wait_ms reads ask the hub for the extra checks
            fport = free_port()
            fenv = dict(env, pg_status__http_port=str(fport), pg_status__log_level="info",
                        pg_status__follow=f"http://127.0.0.1:{port}")
            follower = subprocess.Popen([twistd, "-n", "--pidfile=", "pgstatus"], env=fenv,
                                        cwd=ROOT, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
            try:
                wait_ready(fport, "follower")
                results += [dict(run(topo, fport, args.reads, 0, logfile), on="follower"),
                            dict(run(topo, fport, args.reads, args.wait_ms, logfile),
                                 on="follower")]
            finally:
                follower.terminate()
                follower.wait(10)
    finally:
        stop.set()
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        bg.join(5)
        topo.teardown()
    print("\n| asked | wait_ms | reads (per s) | answered by a replica | rows verified | status "
          "queries/s on the replicas (2/s are the scheduled checks) | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['on']} | {r['wait_ms']} | {r['reads']} ({r['reads_per_s']:.0f}) | "
              f"{r['replica_share']:.1%} | {r['verified_rows']} | "
              f"{r['replica_checks_per_s']:.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")
    os.makedirs(os.path.join(ROOT, "bench-results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench-results", "fresh_ryow.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
