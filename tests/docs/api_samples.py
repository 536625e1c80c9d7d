"""
The sample request and answer of every endpoint that the API reference
shows, taken from a real run: ``twistd -n pgstatus`` (``tests/daemon.py``)
against the test PostgreSQL topology (a primary and two streaming
replicas on 127.0.0.1-3, ``tests/pgtopology/``), asked over HTTP.

``make docs-samples`` (``python tests/docs/api_samples.py --write``) starts
its own topology and writes :data:`SAMPLES_FILE`, which the docs extension
(``docs/_ext/pgstatus_docs.py``) prints under each path of the API
reference.  ``tests/docs/test_api_samples.py`` asks a running service the
same requests and fails when an answer no longer has the shape the file
shows (status, headers, JSON keys, text kind), so the samples cannot drift
from the code: change the API, then run ``make docs-samples``.

Three instances answer: ``main`` (the three hosts, data centres
``dc-a,dc-a,dc-b``, this instance in ``dc-a``, as the monitoring role
``pgstatus_monitor``), ``starting`` (one host that accepts TCP connections
and never answers, so its first check is still running: not ready) and
``follower`` (follows ``main``).  The ``Server`` and ``Date`` headers are
left out; the port is shown as the default, 8000.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from daemon import Daemon  # noqa: E402
from pgtopology import MONITOR_PASSWORD, MONITOR_USER, PgTopology, lsn_to_int, poll  # noqa: E402

#: the samples the API reference prints
SAMPLES_FILE = ROOT / "docs" / "reference" / "api-samples.json"
#: the address the samples' curl lines name
SHOWN = "localhost:8000"
#: headers that differ on every answer, left out
UNSHOWN_HEADERS = {"server", "date"}
#: what a sample body may show of the longer answers (the rest is cut)
MAX_LINES = {"/metrics": 16}
MAX_CHARS = {"/openapi.json": 240}


@dataclass(frozen=True, slots=True)
class Request:
    """
    One sample request.

    :ivar key: unique name of the sample.
    :ivar route: the route table's path it belongs to.
    :ivar target: path and query as sent; ``{lsn}`` and ``{timeline}`` are
        replaced by the position of a real write on the primary.
    :ivar note: one sentence the reference prints above the sample.
    :ivar instance: ``main``, ``starting`` or ``follower`` (see the module).
    :ivar accept_json: send ``Accept: application/json``.
    :ivar method: the HTTP method.
    :ivar stream: a ``/follow`` stream: read its first events, then close.
    :ivar with_follower: asked while a ``/follow`` stream is open.
    """

    key: str
    route: str
    target: str
    note: str
    instance: str = "main"
    accept_json: bool = False
    method: str = "GET"
    stream: bool = False
    with_follower: bool = False


_R = Request
#: every sample, in the order the reference prints them under each path
REQUESTS: tuple[Request, ...] = (
    _R("master", "/master", "/master", "The master's name, as plain text."),
    _R("master-json", "/master", "/master", "The same, as JSON with its locality.",
       accept_json=True),
    _R("master-post", "/master", "/master", "Every path answers GET and HEAD only.",
       method="POST"),
    _R("master-starting", "/master", "/master",
       "Before every host has completed its first check, every host endpoint answers 503.",
       instance="starting"),
    _R("replica", "/replica", "/replica",
       "A replica in this instance's data centre (dc-a), round-robin among equals."),
    _R("replica-json", "/replica", "/replica", "The same, as JSON.", accept_json=True),
    _R("replica-min-lsn", "/replica", "/replica?min_lsn={lsn}&timeline={timeline}",
       "Read your own write: a replica that has replayed the write's position "
       "(see the selection guide), else the master."),
    _R("replica-invalid", "/replica", "/replica?lag_ms=soon",
       "An invalid parameter value is named."),
    _R("sync-by-time", "/sync_by_time", "/sync_by_time?lag_ms=500",
       "A replica at most 500 ms behind."),
    _R("sync-by-bytes", "/sync_by_bytes", "/sync_by_bytes?lag_bytes=1048576",
       "A replica at most 1 MiB of WAL behind.", accept_json=True),
    _R("sync-by-time-or-bytes", "/sync_by_time_or_bytes", "/sync_by_time_or_bytes",
       "A replica within either default threshold."),
    _R("sync-by-time-and-bytes", "/sync_by_time_and_bytes",
       "/sync_by_time_and_bytes?lag_ms=1000&lag_bytes=65536",
       "A replica within both limits."),
    _R("most-sync-by-bytes", "/most_sync_by_bytes", "/most_sync_by_bytes",
       "The replica with the smallest byte lag (host order on a tie)."),
    _R("hosts", "/hosts", "/hosts", "Every host, in pg_status__hosts order."),
    _R("status", "/status", "/status?host=127.0.0.2", "One host."),
    _R("status-unknown", "/status", "/status?host=db9", "A host that is not monitored."),
    _R("status-missing", "/status", "/status", "No host parameter."),
    _R("version", "/version", "/version", "The version of pg-status."),
    _R("live", "/live", "/live", "The HTTP server runs."),
    _R("ready", "/ready", "/ready", "Every host has completed its first check."),
    _R("ready-starting", "/ready", "/ready", "A host's first check is still running.",
       instance="starting"),
    _R("openapi", "/openapi.json", "/openapi.json",
       "This API's OpenAPI 3.1 document (the start of it)."),
    _R("metrics", "/metrics", "/metrics",
       "Prometheus metrics (the first lines of them)."),
    _R("follow", "/follow", "/follow",
       "The view as Server-Sent Events: a snapshot at once and after each change, "
       "a heartbeat every half second (the first two events).", stream=True),
    _R("follow-follower", "/follow", "/follow",
       "An instance that follows another refuses to be followed.", instance="follower",
       stream=True),
    _R("follow-check", "/follow/check", "/follow/check?index=1",
       "A follower asks for an extra check of the second host.", with_follower=True),
    _R("follow-check-unfollowed", "/follow/check", "/follow/check?index=1",
       "Without an open follower stream, nothing is checked."),
)


# --------------------------------------------------------------------------
# shapes: what must stay the same between the samples and the code


def json_shape(value: Any) -> Any:
    """
    The structure of a JSON value: objects by their keys (sorted), arrays
    item by item, every other value as ``"value"``.
    """
    if isinstance(value, dict):
        return {k: json_shape(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [json_shape(v) for v in value]
    return "value"


def _text_shape(body: str, hosts: tuple[str, ...]) -> str:
    if body in hosts:
        return "a host name"
    if re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+\S*", body):
        return "a version"
    return body


def _metrics_shape(body: str) -> list[str]:
    # each line as its metric name and label names, comments as they are
    out = []
    for line in body.splitlines():
        if line.startswith("#"):
            out.append(" ".join(line.split()[:3]))
        elif line:
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?", line)
            labels = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', (m and m.group(2)) or "")
            out.append(f"{m and m.group(1)}{{{','.join(labels)}}}")
    return out


def _events_shape(body: str) -> list[Any]:
    out: list[Any] = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        out.append([fields.get("event"), json_shape(json.loads(fields.get("data", "null")))])
    return out


def shape(sample: dict[str, Any], hosts: tuple[str, ...]) -> dict[str, Any]:
    """
    What a test holds the samples to: the status, the headers' names (and
    the value of ``Content-Type`` and ``Allow``), and the body's shape: the
    structure of a JSON body (:func:`json_shape`), the kind of a text one
    (a host name, a version, or the text itself), the metric and label
    names of the metrics lines shown, the events of a stream and their
    data's structure.  The body is the full one for JSON (the OpenAPI
    document is shown cut), the shown part otherwise.

    :param sample: a captured sample (see :func:`capture`).
    :param hosts: the topology's host names.
    """
    headers = {k.lower(): v for k, v in sample["headers"]}
    ctype = headers.get("content-type", "")
    body = sample.get("full_body", sample["body"])
    if ctype == "application/json":
        body_shape: Any = json_shape(json.loads(body))
    elif ctype.startswith("text/event-stream"):
        body_shape = _events_shape(body)
    elif sample["route"] == "/metrics":
        body_shape = _metrics_shape(body)
    else:
        body_shape = _text_shape(body, hosts)
    return {
        "status": sample["status"],
        "headers": sorted(k for k in headers if k != "content-length"),
        "content-type": ctype,
        "allow": headers.get("allow"),
        "body": body_shape,
    }


# --------------------------------------------------------------------------
# asking


def _curl(req: Request, target: str) -> str:
    opts = ["-i"]
    if req.stream:
        opts = ["-iN"]
    if req.method != "GET":
        opts.append(f"-X {req.method}")
    if req.accept_json:
        opts.append("-H 'Accept: application/json'")
    url = f"http://{SHOWN}{target}"
    if "&" in url or "?" in url:
        url = f"'{url}'"
    return " ".join(["curl", *opts, url])


def _cut(route: str, body: str) -> tuple[str, bool]:
    if route in MAX_LINES:
        lines = body.splitlines()
        if len(lines) > MAX_LINES[route]:
            return "\n".join(lines[:MAX_LINES[route]]), True
    if route in MAX_CHARS and len(body) > MAX_CHARS[route]:
        return body[:MAX_CHARS[route]], True
    return body, False


def _read_events(resp: http.client.HTTPResponse, count: int) -> str:
    """The first ``count`` Server-Sent Events of ``resp``, as sent."""
    got: list[str] = []
    events = 0
    while events < count:
        line = resp.readline().decode()
        if not line:
            break
        got.append(line)
        if line == "\n":
            events += 1
    return "".join(got)


def ask(daemon: Daemon, req: Request, target: str) -> dict[str, Any]:
    """
    Send ``req`` to ``daemon`` and record the answer as a sample.
    """
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
    try:
        headers = {"Accept": "application/json"} if req.accept_json else {}
        conn.request(req.method, target, headers=headers)
        resp = conn.getresponse()
        if req.stream and resp.status == 200:
            body = _read_events(resp, 2)
        else:
            body = resp.read().decode()
        kept = [[k, v] for k, v in resp.getheaders() if k.lower() not in UNSHOWN_HEADERS]
        status, reason = resp.status, resp.reason
        resp.close()
    finally:
        conn.close()
    if req.stream and status == 200:
        _wait_no_followers(daemon)
    shown, cut = _cut(req.route, body)
    sample: dict[str, Any] = {
        "key": req.key, "route": req.route, "note": req.note,
        "curl": _curl(req, target), "status": status, "reason": reason,
        "headers": kept, "body": shown, "truncated": cut,
    }
    if cut and dict((k.lower(), v) for k, v in kept).get("content-type") == "application/json":
        sample["full_body"] = body
    return sample


@contextlib.contextmanager
def _silent_host() -> Iterator[int]:
    """A port on 127.0.0.1 that takes connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@contextlib.contextmanager
def _follower_stream(daemon: Daemon) -> Iterator[None]:
    """A ``/follow`` stream held open on ``daemon``."""
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
    conn.request("GET", "/follow")
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    _read_events(resp, 1)
    try:
        yield
    finally:
        resp.close()
        conn.close()
        _wait_no_followers(daemon)


def _wait_no_followers(daemon: Daemon) -> None:
    """Until ``daemon`` has seen its follower streams close."""
    poll(lambda: re.search(r"^pgstatus_follow_followers 0$", daemon.get("/metrics")[1], re.M),
         10, "no follower stream open")


def capture(topo: PgTopology, requests: tuple[Request, ...] = REQUESTS
            ) -> list[dict[str, Any]]:
    """
    Start the instances against ``topo`` and record the answer to every
    request, in the order of ``requests``: first ``main``'s, while no
    follower streams from it (but a ``with_follower`` request's own
    stream), then the others'.  The topology is not changed (one row is
    written to ``rw_check`` for the read-your-writes sample).
    """
    env = {**topo.hosts_env(user=MONITOR_USER, password=MONITOR_PASSWORD),
           "pg_status__hosts_dc": "dc-a,dc-a,dc-b", "pg_status__current_dc": "dc-a"}
    daemons: list[Daemon] = []
    answers: dict[str, dict[str, Any]] = {}

    def run(daemon: Daemon, instance: str) -> None:
        for req in requests:
            if req.instance != instance:
                continue
            target = req.target.format(lsn=lsn, timeline=timeline)
            if req.with_follower:
                with _follower_stream(daemon):
                    answers[req.key] = ask(daemon, req, target)
            else:
                answers[req.key] = ask(daemon, req, target)

    try:
        svc = Daemon(env)
        daemons.append(svc)
        svc.start()
        svc.wait_ready()
        # the write replayed and every host measured (lags known)
        lsn, timeline, _ = topo.write("api sample")
        topo.wait_replicated(lsn)
        poll(lambda: all(h["lag_ms"] is not None and h["lsn"] is not None
                         and lsn_to_int(h["lsn"]) >= lsn_to_int(lsn)
                         for h in json.loads(svc.get("/hosts")[1])), 10,
             "every host measured at or past the write's position")
        run(svc, "main")
        follower = Daemon({**env, "pg_status__follow": svc.url})
        daemons.append(follower)
        follower.start()
        run(follower, "follower")
        with _silent_host() as port:
            starting = Daemon({**env, "pg_status__hosts": "127.0.0.1",
                               "pg_status__pg_port": str(port),
                               "pg_status__query_timeout_ms": "600000"})
            daemons.append(starting)
            starting.start()
            run(starting, "starting")
    finally:
        for d in daemons:
            d.stop()
    return [answers[req.key] for req in requests]


def hosts_of(topo: PgTopology) -> tuple[str, ...]:
    """The host names the samples may show."""
    return tuple(n.host for n in topo.nodes)


def write(samples: list[dict[str, Any]], hosts: tuple[str, ...],
          path: Path = SAMPLES_FILE) -> None:
    """
    Write the samples, each with its shape (what the test compares), as
    :data:`SAMPLES_FILE`.
    """
    doc = {
        "comment": "Written by `make docs-samples` (tests/docs/api_samples.py) from a real "
                   "run; printed by docs/_ext/pgstatus_docs.py; held to the code by "
                   "tests/docs/test_api_samples.py.",
        "hosts": list(hosts),
        "samples": [{**{k: v for k, v in s.items() if k != "full_body"},
                     "shape": shape(s, hosts)} for s in samples],
    }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def load(path: Path = SAMPLES_FILE) -> dict[str, Any]:
    """The samples file, as written by :func:`write`."""
    return json.loads(path.read_text())


def main(argv: list[str] | None = None, start: Callable[[], PgTopology] = PgTopology.start
         ) -> int:
    """
    ``--write``: capture the samples against a topology of our own and
    write :data:`SAMPLES_FILE`.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", required=True)
    parser.parse_args(argv)
    began = time.monotonic()
    topo = start()
    try:
        samples = capture(topo)
        write(samples, hosts_of(topo))
    finally:
        topo.teardown()
    print(f"{SAMPLES_FILE.relative_to(ROOT)}: {len(samples)} samples "
          f"in {time.monotonic() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
