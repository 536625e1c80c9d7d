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

import pytest
from daemon import Daemon

pytestmark = pytest.mark.pg

FOLLOWERS = 50
TIMEOUT_MS = 3000
#: how long every follower is asked after the kill: its silence, its own
#: first round, and then several periods of its own polling
AFTER = TIMEOUT_MS / 1000 + 6
TOOK_OVER = "every host checked by us; our view replaces the mirrored one"


def ask_master(port: int, stop: threading.Event, answers: list[tuple[float, int, str]]) -> None:
    """``/master`` on one keep-alive connection every 50 ms until ``stop``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        try:
            conn.request("GET", "/master")
            r = conn.getresponse()
            answers.append((time.monotonic(), r.status, r.read().decode()))
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            answers.append((time.monotonic(), 0, repr(e)))
        time.sleep(0.05)
    conn.close()


def test_fifty_follower_processes_never_blink_when_the_hub_dies(pg_topology):
    topo = pg_topology
    topo.restore()
    env = topo.hosts_env()
    hub = Daemon(env).start()
    followers: list[Daemon] = []
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
        stop = threading.Event()
        answers: list[list[tuple[float, int, str]]] = [[] for _ in followers]
        askers = [threading.Thread(target=ask_master, args=(f.port, stop, a), daemon=True)
                  for f, a in zip(followers, answers, strict=True)]
        for t in askers:
            t.start()
        time.sleep(2)
        hub.kill()
        killed = time.monotonic()
        time.sleep(AFTER)
        stop.set()
        for t in askers:
            t.join(15)
        wrong = Counter((status, body[:40]) for a in answers for _, status, body in a
                        if (status, body) != (200, master))
        assert not wrong, wrong
        # every follower was asked before, during and after its takeover
        for i, (f, a) in enumerate(zip(followers, answers, strict=True)):
            assert sum(1 for when, _, _ in a if when < killed) >= 10, i
            assert sum(1 for when, _, _ in a if when > killed + AFTER - 2) >= 10, i
            assert TOOK_OVER in f.log(None), (i, f.log())
    finally:
        for f in followers:
            f.stop()
        hub.stop()
