"""
How long pg-status's background work runs in one go (``make
bench-iterations``): under a CPU quota, work that overruns a period's
budget stalls every request in flight, so what matters is the longest
stretch of CPU between two waits for I/O, not the total.

Runs the service in this process on the epoll reactor against the local
primary + two replicas (100 commits/s from a background writer), no HTTP
load, and measures the CPU time (``time.thread_time``) of every reactor
iteration: from the moment ``epoll_wait`` returns to the next call of it.
``--repeat 17`` lists the three servers 17 times (51 hosts, a connection
each).  Reports the number of iterations with work, p50 / p99 / max CPU per
iteration.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from twisted.internet import epollreactor  # noqa: E402

epollreactor.install()

from fresh_ryow import writer  # noqa: E402
from pgtopology import PgTopology, free_port  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--repeat", type=int, default=1,
                    help="list the three servers this many times (17: 51 hosts)")
    args = ap.parse_args()

    from twisted.internet import reactor

    from pgstatus.config import load_config
    from pgstatus.tap import make_service

    topo = PgTopology.start(replicas=2)
    stop = threading.Event()
    bg = threading.Thread(target=writer, args=(topo, stop), daemon=True)
    work: list[float] = []
    state = {"since": None, "measuring": False}
    poller = reactor._poller
    real_poll = poller.poll

    class Poller:
        """The reactor's epoll object, timing the work between two polls."""

        def __getattr__(self, name: str):
            return getattr(poller, name)

        def poll(self, *a, **kw):
            since = state["since"]
            if since is not None and state["measuring"]:
                work.append(time.thread_time() - since)
            events = real_poll(*a, **kw)
            state["since"] = time.thread_time()
            return events

    reactor._poller = Poller()
    import gc

    collections: list[tuple[int, float]] = []
    gc_start = {}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start["t"] = time.thread_time()
        elif state["measuring"]:
            collections.append((info["generation"], time.thread_time() - gc_start["t"]))

    gc.callbacks.append(on_gc)
    hosts = topo.hosts_env()
    for key in ("pg_status__hosts", "pg_status__pg_port"):
        hosts[key] = ",".join([hosts[key]] * args.repeat)
    environ = {**hosts, "pg_status__http_listen_address": "127.0.0.1",
               "pg_status__http_port": str(free_port())}
    svc = make_service(load_config(environ), reactor, environ=environ)

    def start() -> None:
        svc.startService()
        reactor.callLater(args.warmup, lambda: state.update(measuring=True))
        reactor.callLater(args.warmup + args.seconds, reactor.stop)

    try:
        bg.start()
        reactor.callWhenRunning(start)
        reactor.run()
        svc.stopService()
    finally:
        stop.set()
        bg.join(5)
        topo.teardown()
    busy = sorted(w for w in work if w > 0)
    checks = sum(m.checks for m in svc.monitor.monitors)
    print(f"\n{len(work)} iterations in {args.seconds:.0f} s ({checks} checks in all), "
          f"{len(busy)} with CPU time above the clock's resolution")
    worst = max((c for c in collections), key=lambda c: c[1], default=None)
    print(f"{len(collections)} garbage collections while measuring"
          + (f", the longest {worst[1] * 1000:.3f} ms (generation {worst[0]})" if worst else ""))
    print("| CPU per iteration | p50 | p99 | p99.9 | max |")
    print("|---|---:|---:|---:|---:|")

    def q(p: float) -> str:
        return f"{busy[min(len(busy) - 1, int(p * len(busy)))] * 1000:.3f} ms"

    print(f"| {3 * args.repeat} hosts, sleep_ms 1000, 100 commits/s | {q(0.5)} | {q(0.99)} | "
          f"{q(0.999)} | "
          f"{busy[-1] * 1000:.3f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
