"""
``make bench-hosts``: the service's RSS with 1, 10 and 100 configured hosts.

Starts a real PostgreSQL primary and two streaming replicas
(``tests/pgtopology/``); for each host count N, starts the service
(``twistd -n pgstatus``, as ``make bench`` does) with N host entries that
cycle over the three servers (the same server may be listed several times:
each entry is monitored on its own, with its own connection), waits until
every entry is alive, sends a few thousand requests (``/hosts``, ``/master``,
``/replica``, ``/status``) and reads ``VmRSS`` after the service has polled
for ``--settle`` more seconds.  Reports the RSS per count and the slope per
host, and optionally the same with ``MALLOC_ARENA_MAX=2`` or with
``malloc_trim`` called in the process after the requests (``--malloc``).

Usage: ``.venv/bin/python bench/hosts_rss.py [--counts 1,10,100]
[--settle 10] [--twistd .venv-daemon/bin/twistd]``
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import pgtopology  # noqa: E402
from pgtopology import PgTopology, free_port  # noqa: E402

TWISTD = os.path.join(ROOT, ".venv", "bin", "twistd")


def log(msg: str) -> None:
    sys.stderr.write(f"[hosts-rss {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read()


def measure(topo: PgTopology, n: int, args: argparse.Namespace, extra_env: dict[str, str]
            ) -> dict[str, float]:
    nodes = [topo.nodes[i % len(topo.nodes)] for i in range(n)]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env.update(topo.hosts_env(nodes=nodes))
    env.update({
        "pg_status__http_listen_address": "127.0.0.1",
        "pg_status__http_port": str(port),
        "pg_status__log_level": "warning",
        "PYTHONPATH": ROOT,
        **extra_env,
    })
    proc = subprocess.Popen([args.twistd, "-n", "--pidfile=", "pgstatus"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

        def all_alive() -> bool:
            nonlocal conn
            try:
                status, body = get(conn, "/hosts")
            except OSError:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                return False
            return status == 200 and all(h["alive"] for h in json.loads(body))

        pgtopology.poll(all_alive, timeout=120, what=f"all {n} hosts alive")
        names = [nd.host for nd in nodes]
        for i in range(args.requests):
            path = ("/hosts", "/master", "/replica", f"/status?host={names[i % n]}")[i % 4]
            status, _ = get(conn, path)
            if status != 200:
                raise RuntimeError(f"{path} answered {status}")
        conn.close()
        time.sleep(args.settle)  # keep polling: steady state, not a state to wait for
        rss = rss_kib(proc.pid)
        log(f"{n} hosts {extra_env or ''}: RSS {rss / 1024:.1f} MiB")
        return {"hosts": n, "rss_kib": rss}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--counts", default="1,10,100")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds of polling before RSS is read (default 10)")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--twistd", default=TWISTD)
    parser.add_argument("--malloc", action="store_true",
                        help="also measure with MALLOC_ARENA_MAX=2")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    topo = PgTopology.start(replicas=2)
    results: dict[str, list[dict[str, float]]] = {}
    try:
        variants = {"default": {}}
        if args.malloc:
            variants["MALLOC_ARENA_MAX=2"] = {"MALLOC_ARENA_MAX": "2"}
        for name, extra in variants.items():
            results[name] = [measure(topo, n, args, extra) for n in counts]
    finally:
        with contextlib.suppress(Exception):
            topo.teardown()
    out = ["| variant | " + " | ".join(f"{n} hosts" for n in counts) + " | per host |",
           "|---|" + "---:|" * (len(counts) + 1)]
    for name, rows in results.items():
        first, last = rows[0], rows[-1]
        slope = (last["rss_kib"] - first["rss_kib"]) / max(1, last["hosts"] - first["hosts"])
        out.append(f"| {name} | " + " | ".join(f"{r['rss_kib'] / 1024:.1f} MiB" for r in rows)
                   + f" | {slope:.0f} KiB |")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
