"""
Follower-mode benchmark (``make bench-follow``): one hub, many followers.

Starts the local primary + two replicas and a hub (``twistd pgstatus`` with
the default 1 s polling), then ``--followers`` followers in ``--workers``
worker processes (each worker runs its share of complete pg-status
services, each with its own HTTP listener and its own stream to the hub).
Measures, on loopback:

- PostgreSQL sessions of pg-status per node with every follower following;
- the hub's CPU per follower per second (its CPU with the followers minus
  its CPU alone, over the same window);
- how long a role change takes from the hub (its ``master changed`` log
  line) to every follower's view (failover: primary stopped, replica
  promoted);
- CPU per ``/master`` request on a follower's fast path and on the hub's
  (``wrk``, CPU from ``/proc``);
- with the hub killed (SIGKILL), how long until each of ``--kill-followers``
  followers polls on its own and has checked every host itself (a smaller
  group: every follower then opens its own PostgreSQL sessions).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

TIMEOUT_MS = 3000


# -- worker: many followers in one process -----------------------------------

def worker(hub: str, count: int, env: dict[str, str]) -> None:
    from twisted.internet import reactor

    from pgstatus.config.environ import load_config
    from pgstatus.tap import make_service

    def say(**event: object) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    services = []
    environ = {**env, "pg_status__follow": hub, "pg_status__http_listen_address": "127.0.0.1",
               "pg_status__http_port": "0",
               "pg_status__follow_timeout_ms": str(TIMEOUT_MS)}
    config = load_config(environ)
    for i in range(count):
        svc = make_service(config, reactor, environ=environ)
        state = {"master": None, "mode": None, "polling_at": None}

        def observe(old, new, i=i, svc=svc, state=state) -> None:
            now = time.time()
            name = new.master.name if new.master is not None else None
            if name != state["master"]:
                state["master"] = name
                say(ev="master", i=i, name=name, t=now)
            mode = svc.follower.mode
            if mode != state["mode"]:
                state["mode"] = mode
                if mode == "polling":
                    state["polling_at"] = now
                say(ev="mode", i=i, mode=mode, t=now)
            if state["polling_at"] is not None and all(
                    m.state.checked and m.checks for m in svc.monitor.monitors):
                say(ev="own", i=i, t=now)
                state["polling_at"] = None

        svc.monitor.registry.observe(observe)
        services.append(svc)

    def start() -> None:
        for svc in services:
            svc.startService()
        say(ev="ports", ports=[s.http.port.getHost().port for s in services])

    reactor.callWhenRunning(start)
    signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(reactor.stop))
    reactor.run()


# -- parent --------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Workers:
    def __init__(self, hub: str, total: int, processes: int, env: dict[str, str]) -> None:
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.procs = []
        self.ports: list[int] = []
        share = [total // processes + (1 if i < total % processes else 0)
                 for i in range(processes)]
        for n in share:
            p = subprocess.Popen(
                [sys.executable, __file__, "--worker", "--hub", hub, "--count", str(n),
                 "--env", json.dumps(env)],
                stdout=subprocess.PIPE, text=True, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": ROOT})
            self.procs.append(p)
            threading.Thread(target=self._read, args=(p, len(self.procs) - 1),
                             daemon=True).start()

    def _read(self, p: subprocess.Popen, w: int) -> None:
        for line in p.stdout:
            e = json.loads(line)
            e["w"] = w
            with self.lock:
                if e["ev"] == "ports":
                    self.ports.extend(e["ports"])
                self.events.append(e)

    def of(self, ev: str, **match: object) -> list[dict]:
        with self.lock:
            return [e for e in self.events
                    if e["ev"] == ev and all(e.get(k) == v for k, v in match.items())]

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(30)


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def hub_master_changes(log: str, host: str) -> list[float]:
    out = []
    for line in log.splitlines():
        if f"master changed master={host} " in line:
            out.append(datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ")
                       .replace(tzinfo=UTC).timestamp())
    return out


def wrk_cpu(url: str, pid: int, seconds: int = 5) -> tuple[float, float]:
    """(requests/s, CPU microseconds per request) of process ``pid``."""
    c0 = cpu_seconds(pid)
    out = subprocess.run(["wrk", "-t1", "-c10", f"-d{seconds}s", url], capture_output=True,
                         text=True, check=True).stdout
    c1 = cpu_seconds(pid)
    total = next(int(line.split()[0]) for line in out.splitlines() if "requests in" in line)
    return total / seconds, (c1 - c0) / total * 1e6


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--hub")
    ap.add_argument("--count", type=int)
    ap.add_argument("--env")
    ap.add_argument("--followers", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--kill-followers", type=int, default=15)
    ap.add_argument("--window", type=int, default=20)
    args = ap.parse_args()
    if args.worker:
        worker(args.hub, args.count, json.loads(args.env))
        return

    from daemon import Daemon
    from pgtopology import PgTopology

    topo = PgTopology.start(replicas=2)
    hub = follower = None
    results: dict[str, object] = {}
    try:
        env = topo.hosts_env()
        hub = Daemon(env).start()
        hub.wait_ready()
        time.sleep(1)
        c0 = cpu_seconds(hub.proc.pid)
        time.sleep(args.window)
        alone = (cpu_seconds(hub.proc.pid) - c0) / args.window
        workers = Workers(hub.url, args.followers, args.workers, env)
        try:
            wait(lambda: len(workers.of("mode", mode="following")) >= args.followers, 120,
                 "every follower following")
            results["followers"] = args.followers
            results["sessions"] = [n.connections(application_name="pg-status")
                                   for n in topo.nodes]
            code, metrics = hub.get("/metrics")
            results["hub_streams"] = next(line for line in metrics.splitlines()
                                          if line.startswith("pgstatus_follow_followers "))
            c0 = cpu_seconds(hub.proc.pid)
            time.sleep(args.window)
            busy = (cpu_seconds(hub.proc.pid) - c0) / args.window
            results["hub_cpu_alone_ms_per_s"] = round(alone * 1000, 2)
            results["hub_cpu_with_followers_ms_per_s"] = round(busy * 1000, 2)
            results["hub_cpu_per_follower_us_per_s"] = round(
                (busy - alone) / args.followers * 1e6, 1)
            # a follower with a fast path of its own, in its own process
            follower = Daemon({**env, "pg_status__follow": hub.url}).start()
            follower.wait_ready()
            rps_h, us_h = wrk_cpu(hub.url + "/master", hub.proc.pid)
            rps_f, us_f = wrk_cpu(follower.url + "/master", follower.proc.pid)
            results["master_cpu_us_per_request"] = {"hub": round(us_h, 1),
                                                    "follower": round(us_f, 1)}
            results["master_requests_per_s"] = {"hub": round(rps_h), "follower": round(rps_f)}
            follower.stop()
            follower = None
            # failover
            new = topo.replicas[0]
            topo.primary.stop("fast")
            new.promote()
            wait(lambda: len(workers.of("master", name=new.host)) >= args.followers, 60,
                 "the new master everywhere")
            seen = hub_master_changes(hub.log(), new.host)
            assert seen, "no 'master changed' line in the hub's log"
            delays = [(e["t"] - seen[0]) * 1000 for e in workers.of("master", name=new.host)]
            results["role_change_ms"] = {"p50": round(pct(delays, 50), 1),
                                         "p99": round(pct(delays, 99), 1),
                                         "max": round(max(delays), 1), "n": len(delays)}
        finally:
            workers.stop()
        # hub killed, with a smaller group (they all open sessions then)
        small = Workers(hub.url, args.kill_followers, 1, topo.hosts_env())
        try:
            wait(lambda: len(small.of("mode", mode="following")) >= args.kill_followers, 60,
                 "the small group following")
            time.sleep(1.5)
            killed = time.time()
            hub.kill()
            wait(lambda: len(small.of("own")) >= args.kill_followers, 30,
                 "own checks everywhere")
            polling = [(e["t"] - killed) * 1000 for e in small.of("mode", mode="polling")]
            own = [(e["t"] - killed) * 1000 for e in small.of("own")]
            results["hub_killed"] = {
                "followers": args.kill_followers,
                "polling_ms_max": round(max(polling)), "polling_ms_min": round(min(polling)),
                "own_checks_done_ms_max": round(max(own)),
                "bound_ms": TIMEOUT_MS + 1000}
        finally:
            small.stop()
    finally:
        for d in (follower, hub):
            if d is not None:
                d.stop()
        topo.teardown()
    print(json.dumps(results, indent=2))
    rc = results["role_change_ms"]
    print(f"""
| measurement | result |
|---|---|
| followers | {results['followers']} ({results['hub_streams']}) |
| PostgreSQL sessions of pg-status per node | {results['sessions']} |
| hub CPU alone / with followers | {results['hub_cpu_alone_ms_per_s']} / \
{results['hub_cpu_with_followers_ms_per_s']} ms per s |
| hub CPU per follower | {results['hub_cpu_per_follower_us_per_s']} µs per s |
| role change, hub → followers | p50 {rc['p50']} ms, p99 {rc['p99']} ms, max {rc['max']} ms \
({rc['n']} followers) |
| `/master` CPU per request, hub / follower | \
{results['master_cpu_us_per_request']['hub']} / \
{results['master_cpu_us_per_request']['follower']} µs |
| hub killed → polling / own checks done (max of {results['hub_killed']['followers']}) | \
{results['hub_killed']['polling_ms_max']} / {results['hub_killed']['own_checks_done_ms_max']} \
ms (bound {results['hub_killed']['bound_ms']} ms) |
""")
    if max(results["sessions"]) > 1:
        raise SystemExit("followers opened PostgreSQL sessions")


if __name__ == "__main__":
    main()
