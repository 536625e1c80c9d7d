"""
Hostile extra checks (``make bench-hostile``): how many checks of one host a
single client can cause with tight loops of requests that ask for extra
checks.

Starts the local primary + two replicas and the service (default 1 s
polling), then, each for ``--seconds`` on one keep-alive connection:

- ``GET /follow/check?index=0`` (the master) in a loop, first with no
  follower stream connected, then with one (the client opens a ``/follow``
  stream itself, the most a client can do to be answered);
- ``GET /replica?min_lsn=FFFFFFFF/0&wait_ms=1`` in a loop (no replica ever
  has that position: every request asks for checks of both replicas);
- both again with a replica stopped and dead, against that replica (each
  of its checks is a connection attempt).

Checks are counted from ``pgstatus_host_checks_total`` in ``/metrics``,
before and after each loop.  ``--root`` runs another source tree of
pg-status (e.g. an export of an older commit) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from pgtopology import PgTopology, free_port  # noqa: E402

FAR = "FFFFFFFF/0"


def checks(port: int) -> list[int]:
    """``pgstatus_host_checks_total`` of every host, in host order."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return [int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("pgstatus_host_checks_total{")]


def loop(port: int, path: str, seconds: float) -> tuple[int, dict[int, int]]:
    """Requests sent and answers by status, one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    codes: dict[int, int] = {}
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        codes[r.status] = codes.get(r.status, 0) + 1
        n += 1
    conn.close()
    return n, codes


def measure(port: int, what: str, path: str, hosts: list[int], seconds: float) -> dict:
    before = checks(port)
    t0 = time.monotonic()
    sent, codes = loop(port, path, seconds)
    elapsed = time.monotonic() - t0
    after = checks(port)
    rates = [(after[i] - before[i]) / elapsed for i in hosts]
    return {"what": what, "path": path, "requests_per_s": sent / elapsed, "answers": codes,
            "checks_per_s": rates}


def follow_stream(port: int) -> socket.socket:
    """A ``/follow`` stream held open (read by nobody: a hub keeps it 10 s)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /follow HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    s.recv(4096)
    return s


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    except OSError as e:
        return 0, str(e)
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--root", default=ROOT, help="the pg-status source tree to run")
    args = ap.parse_args()
    topo = PgTopology.start(replicas=2)
    proc = None
    results = []
    try:
        port = free_port()
        env = dict(os.environ, **topo.hosts_env(), PYTHONPATH=args.root,
                   pg_status__http_listen_address="127.0.0.1", pg_status__http_port=str(port))
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        proc = subprocess.Popen([twistd, "-n", "--pidfile=", "pgstatus"], env=env,
                                cwd=args.root, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        wait(lambda: get(port, "/ready") == (200, "OK"), 30, "readiness")
        time.sleep(1)
        s = args.seconds
        results.append(measure(port, "idle (schedule only)", "/version", [0, 1, 2], s))
        results.append(measure(port, "follow/check, no follower stream",
                               "/follow/check?index=0", [0], s))
        stream = follow_stream(port)
        results.append(measure(port, "follow/check, a follower stream open",
                               "/follow/check?index=0", [0], s))
        results.append(measure(port, "min_lsn far ahead, wait_ms=1",
                               f"/replica?min_lsn={FAR}&wait_ms=1", [1, 2], s))
        dead = topo.replicas[1]
        dead.stop("immediate")
        wait(lambda: not json.loads(get(port, "/hosts")[1])[2]["alive"], 20, "the dead host")
        time.sleep(1)
        results.append(measure(port, "follow/check of a dead host",
                               "/follow/check?index=2", [2], s))
        results.append(measure(port, "min_lsn far ahead, wait_ms=1, one replica dead",
                               f"/replica?min_lsn={FAR}&wait_ms=1", [1, 2], s))
        stream.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        topo.teardown()
    print("\n| loop | requests/s | answers | checks/s of the host(s) asked about |")
    print("|---|---:|---|---|")
    for r in results:
        rates = ", ".join(f"{x:.1f}" for x in r["checks_per_s"])
        print(f"| {r['what']} (`{r['path']}`) | {r['requests_per_s']:.0f} | {r['answers']} | "
              f"{rates} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
