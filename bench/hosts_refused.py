"""
``make bench-hosts``, second part: CPU and ``/live`` latency with many
hosts that refuse connections.

For each host count N (``--counts 100,300,1000``) starts the service
(``twistd -n pgstatus``, as the other benchmarks do) with N host entries
on distinct loopback addresses (``127.0.x.y``) and one closed port: every
check is a TCP connection attempt that the kernel refuses at once, so every
host is dead after its first check and is checked every ``sleep_ms`` (1 s
by default), N checks a second.  No PostgreSQL server is needed.

Once ``/ready`` answers and the service has polled for ``--warmup``
seconds, it measures over ``--seconds`` (10 by default):

- the service's CPU time per second, from ``utime + stime`` in
  ``/proc/<pid>/stat``;
- the checks started, from ``pgstatus_host_checks_total`` in ``/metrics``
  (read just before and just after the window, outside the CPU readings),
  and so the CPU per check;
- the latency of ``/live``: ``--requests`` sequential requests on one
  keep-alive connection, spread evenly over the window so that they sample
  every phase of the hosts' schedule.

``--root`` runs another source tree of pg-status (e.g. an export of an
older commit, ``git archive``) for a before/after comparison.

Usage: ``.venv/bin/python bench/hosts_refused.py [--counts 100,300,1000]
[--seconds 10] [--requests 300] [--twistd .venv-daemon/bin/twistd]
[--root DIR]``
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TWISTD = os.path.join(ROOT, ".venv-daemon", "bin", "twistd")
TICK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    sys.stderr.write(f"[hosts-refused {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def free_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def addresses(n: int) -> list[str]:
    """``n`` distinct loopback addresses, 127.0.1.1 onwards."""
    return [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(n)]


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after the command name: state is field 3, utime 14 and stime 15
    return (int(fields[11]) + int(fields[12])) / TICK


def get(port: int, path: str, timeout: float = 30) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    except OSError as e:
        return 0, str(e).encode()
    finally:
        conn.close()


def checks(port: int) -> int:
    """Every host's ``pgstatus_host_checks_total``, added up."""
    status, body = get(port, "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return sum(int(line.rsplit(b" ", 1)[1]) for line in body.splitlines()
               if line.startswith(b"pgstatus_host_checks_total{"))


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def measure(n: int, args: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    closed = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env.update({
        "pg_status__hosts": ",".join(addresses(n)),
        "pg_status__pg_port": str(closed),
        "pg_status__http_listen_address": "127.0.0.1",
        "pg_status__http_port": str(port),
        "PYTHONPATH": args.root,
    })
    proc = subprocess.Popen([args.twistd, "-n", "--pidfile=", "pgstatus"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, cwd=args.root)
    try:
        wait(lambda: proc.poll() is not None or get(port, "/ready", 5)[0] == 200, 120,
             f"readiness with {n} hosts")
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited {proc.returncode}")
        time.sleep(args.warmup)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c0 = checks(port)
        t0, cpu0 = time.monotonic(), cpu_seconds(proc.pid)
        gap = args.seconds / args.requests
        latencies = []
        for i in range(args.requests):
            due = t0 + i * gap
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            start = time.perf_counter()
            conn.request("GET", "/live")
            r = conn.getresponse()
            r.read()
            latencies.append(time.perf_counter() - start)
            if r.status != 200:
                raise RuntimeError(f"/live answered {r.status}")
        pause = t0 + args.seconds - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        t1, cpu1 = time.monotonic(), cpu_seconds(proc.pid)
        c1 = checks(port)
        conn.close()
        latencies.sort()
        elapsed, cpu, done = t1 - t0, cpu1 - cpu0, c1 - c0
        row = {
            "hosts": n,
            "cpu_pct": 100 * cpu / elapsed,
            "checks_per_s": done / elapsed,
            "us_per_check": 1e6 * cpu / max(done, 1),
            "p50_ms": 1000 * percentile(latencies, 0.50),
            "p99_ms": 1000 * percentile(latencies, 0.99),
            "max_ms": 1000 * latencies[-1],
        }
        log(f"{n} hosts: CPU {row['cpu_pct']:.1f} %, {row['checks_per_s']:.0f} checks/s, "
            f"{row['us_per_check']:.0f} µs/check, /live p50 {row['p50_ms']:.2f} ms "
            f"p99 {row['p99_ms']:.2f} ms")
        return row
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--counts", default="100,300,1000")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of the measurement window (default 10)")
    parser.add_argument("--warmup", type=float, default=3.0,
                        help="seconds of polling after readiness before measuring (default 3)")
    parser.add_argument("--requests", type=int, default=300,
                        help="/live requests over the window (default 300)")
    parser.add_argument("--twistd", default=TWISTD)
    parser.add_argument("--root", default=ROOT, help="the pg-status source tree to run")
    args = parser.parse_args(argv)
    rows = [measure(int(c), args) for c in args.counts.split(",")]
    out = ["| refused hosts | CPU | checks/s | CPU per check | `/live` p50 | p99 | max |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['hosts']:,} | {r['cpu_pct']:.1f} % | {r['checks_per_s']:.0f} | "
                   f"{r['us_per_check']:.0f} µs | {r['p50_ms']:.2f} ms | {r['p99_ms']:.2f} ms | "
                   f"{r['max_ms']:.2f} ms |")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
