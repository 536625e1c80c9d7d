"""
Fifty followers, each a ``twistd pgstatus`` process of its own, lose their
hub (SIGKILL) while every one of them is asked ``/master`` twenty times a
second (issue 33, item 6).  The primary stays healthy throughout, so any
answer but its name is a blink: from the hub's last snapshot while a
follower waits ``follow_timeout_ms``, through its takeover (each follower's
first round of its own checks, all of them opening connections to the three
PostgreSQL servers in the same few seconds), to its own view.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from datetime import datetime

import pytest
from daemon import Daemon

pytestmark = pytest.mark.pg

FOLLOWERS = 50
TIMEOUT_MS = 3000
TOOK_OVER = "every host checked by us; our view replaces the mirrored one"
#: answers each follower must give before the kill and after its own view
#: replaced the hub's
ENOUGH = 3


def ask_master(port: int, stop: threading.Event, answers: list[tuple[float, int, str]]) -> None:
    """``/master`` on one keep-alive connection every 50 ms until ``stop``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        try:
            conn.request("GET", "/master")
            r = conn.getresponse()
            answers.append((time.time(), r.status, r.read().decode()))
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            answers.append((time.time(), 0, repr(e)))
        time.sleep(0.05)
    conn.close()


def took_over_at(log: str) -> float | None:
    """When the follower's own view replaced the hub's (its log line's time)."""
    for line in log.splitlines():
        if TOOK_OVER in line:
            return datetime.fromisoformat(line.split(" ", 1)[0]).timestamp()
    return None


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_fifty_follower_processes_never_blink_when_the_hub_dies(pg_topology):
    topo = pg_topology
    topo.restore()
    env = topo.hosts_env()
    hub = Daemon(env).start()
    followers: list[Daemon] = []
    stop = threading.Event()
    try:
        hub.wait_ready()
        fenv = {**env, "pg_status__follow": hub.url,
                "pg_status__follow_timeout_ms": str(TIMEOUT_MS)}
        followers = [Daemon(fenv) for _ in range(FOLLOWERS)]
        for f in followers:
            f.start(60)
        for f in followers:
            f.wait_ready(60)
        master = topo.primary.host
        answers: list[list[tuple[float, int, str]]] = [[] for _ in followers]
        askers = [threading.Thread(target=ask_master, args=(f.port, stop, a), daemon=True)
                  for f, a in zip(followers, answers, strict=True)]
        for t in askers:
            t.start()
        wait_for(lambda: all(len(a) >= ENOUGH for a in answers), 60, "answers before the kill")
        killed = time.time()
        hub.kill()
        taken: list[float | None] = [None] * FOLLOWERS

        def all_took_over() -> bool:
            for i, f in enumerate(followers):
                if taken[i] is None:
                    taken[i] = took_over_at(f.log(None))
            return all(t is not None for t in taken)

        wait_for(all_took_over, 60, "every follower's own view")
        wait_for(lambda: all(sum(when > t for when, _, _ in a) >= ENOUGH
                             for a, t in zip(answers, taken, strict=True)),
                 60, "answers from every follower's own view")
        stop.set()
        for t in askers:
            t.join(15)
        wrong = Counter((status, body[:40]) for a in answers for _, status, body in a
                        if (status, body) != (200, master))
        assert not wrong, wrong
        for i, (f, a) in enumerate(zip(followers, answers, strict=True)):
            assert sum(when < killed for when, _, _ in a) >= ENOUGH, i
            # the hub's reconnection attempts leave no Twisted factory lines
            assert "Starting factory" not in f.log(None), (i, f.log())
    finally:
        stop.set()
        for f in followers:
            f.stop()
        hub.stop()
