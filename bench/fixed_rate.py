"""
Latency at a fixed request rate (``make bench-rate``): the service pinned to
one core, wrk pinned to the other, each of ``--connections`` keep-alive
connections pacing its requests with wrk's ``delay()`` so that the total
rate is ``--rate`` requests/s.  Reports achieved rate and p50/p99/max.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from pgtopology import PgTopology, free_port  # noqa: E402

LUA = """
local paths = {"/master", "/replica", "/sync_by_time", "/hosts", "/master",
               "/most_sync_by_bytes", "/master", "/replica?lag_ms=1000", "/master", "/replica"}
local i = 0
function request()
  i = i + 1
  return wrk.format("GET", paths[(i %% #paths) + 1])
end
function delay()
  return %d
end
"""


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=20)
    args = ap.parse_args()
    delay_ms = max(1, round(args.connections * 1000 / args.rate))
    topo = PgTopology.start(replicas=2)
    proc = None
    try:
        port = free_port()
        env = dict(os.environ, **topo.hosts_env(), PYTHONPATH=ROOT,
                   pg_status__http_listen_address="127.0.0.1",
                   pg_status__http_port=str(port), pg_status__log_level="warning")
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        proc = subprocess.Popen(["taskset", "-c", "0", twistd, "-n", "--pidfile=", "pgstatus"],
                                env=env, cwd=ROOT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if get(port, "/ready") == "OK":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("service not ready")
            time.sleep(0.1)
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(LUA % delay_ms)
            script = f.name
        out = subprocess.run(
            ["taskset", "-c", "1", "wrk", "-t2", f"-c{args.connections}", f"-d{args.seconds}s",
             "--latency", "-s", script, f"http://127.0.0.1:{port}/"],
            capture_output=True, text=True, timeout=args.seconds + 60, check=True).stdout
        os.unlink(script)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        topo.teardown()
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    worst = re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out).group(1)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    print("\n| target req/s | achieved req/s | p50 ms | p90 ms | p99 ms | max ms | non-2xx |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.rate} | {rate:,.0f} | {ms(lat['50']):.2f} | {ms(lat['90']):.2f} | "
          f"{ms(lat['99']):.2f} | {ms(worst):.2f} | {errors.group(1) if errors else 0} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
