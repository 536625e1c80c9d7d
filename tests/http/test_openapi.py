"""
The OpenAPI document (``/openapi.json``): it is a valid OpenAPI 3.1
document, it names exactly the routes, parameters and fields the service
has, its parameter schemas accept exactly the values the server accepts,
and real answers of a running service against real PostgreSQL servers
(ready, not ready, without a master, with a dead host, failing) conform to
it: status code, Content-Type, headers and body.

Answers are checked with ``jsonschema`` against the document's own schemas
(``$ref`` resolved inside the document); the requests come from a fixed
corpus derived from the document, so the run is deterministic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import pytest_twisted
import treq
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from pgtopology import free_port
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.internet.protocol import Protocol
from twisted.web.client import Agent, HTTPConnectionPool

from pgstatus.http import openapi
from pgstatus.http.answer import host_json
from pgstatus.http.app import StatusApp
from pgstatus.http.openapi import DOCUMENT, OTHER_METHODS
from pgstatus.http.params import (
    REPLICA_ROUTES,
    BadParameter,
    parse_key,
    parse_lag,
    parse_lsn,
    parse_timeline,
    parse_wait,
)
from pgstatus.model.status import HostStatus
from service import RunningService, wait_until

DOC_URI = "urn:pg-status:openapi"
REGISTRY = Registry().with_resource(
    DOC_URI, Resource.from_contents(DOCUMENT, default_specification=DRAFT202012))
SELECTION = {"/master"} | {"/" + r for r in REPLICA_ROUTES}
FAST = {"pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "1000"}


def pointer(*tokens: str) -> str:
    """
    A ``$ref`` into the document (JSON pointer, percent-encoded).
    """
    return DOC_URI + "#/" + "/".join(
        quote(t.replace("~", "~0").replace("/", "~1"), safe="") for t in tokens)


def validator(*tokens: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": pointer(*tokens)}, registry=REGISTRY)


def resolve(obj: dict[str, Any]) -> dict[str, Any]:
    """
    Follow a local ``$ref`` (``#/components/...``).
    """
    while "$ref" in obj:
        node: Any = DOCUMENT
        for token in obj["$ref"].removeprefix("#/").split("/"):
            node = node[token.replace("~1", "/").replace("~0", "~")]
        obj = node
    return obj


def parameters(path: str) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in map(resolve, DOCUMENT["paths"][path].get("parameters", []))}


# -- the document itself --------------------------------------------------

def test_document_is_valid_openapi_3_1():
    OpenAPIV31SpecValidator(DOCUMENT).validate()
    for schema in DOCUMENT["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    # what is served is this document, rendered once
    assert json.loads(openapi.RESPONSE.body) == DOCUMENT
    assert (openapi.RESPONSE.status, openapi.RESPONSE.content_type) == (200, b"application/json")


def test_document_names_exactly_the_routes_parameters_and_fields():
    klein_paths = set()
    for rule in StatusApp.app.url_map.iter_rules():
        if "<any(" in rule.rule:
            klein_paths |= {"/" + r for r in REPLICA_ROUTES}
        else:
            klein_paths.add(rule.rule)
    assert set(DOCUMENT["paths"]) == klein_paths
    for path, item in DOCUMENT["paths"].items():
        assert set(item) - {"parameters"} == {"get", "head", *OTHER_METHODS}, path
        for method in OTHER_METHODS:
            assert set(item[method]["responses"]) == {"405"}
        assert set(item["get"]["responses"]) == set(item["head"]["responses"]), path
        want = {"lag_ms", "lag_bytes", "min_lsn", "timeline", "wait_ms", "key"}
        if path == "/most_sync_by_bytes":
            want.discard("key")  # ignored there
        elif path not in SELECTION - {"/master"}:
            want = {"host"} if path == "/status" else \
                {"index"} if path == "/follow/check" else set()
        assert set(parameters(path)) == want, path
        assert "500" in item["get"]["responses"]
    h = HostStatus(0, "h", None, None)
    schemas = DOCUMENT["components"]["schemas"]
    assert list(schemas["HostsItem"]["properties"]) == list(host_json(h))
    assert schemas["HostsItem"]["required"] == list(host_json(h))
    assert list(schemas["HostStatus"]["properties"]) == list(host_json(h, with_name=False))
    assert schemas["HostStatus"]["required"] == list(host_json(h, with_name=False))


PARSERS = {
    "lag_ms": lambda v: parse_lag(v, "lag_ms"),
    "lag_bytes": lambda v: parse_lag(v, "lag_bytes"),
    "min_lsn": parse_lsn,
    "timeline": parse_timeline,
    "wait_ms": parse_wait,
    "key": lambda v: parse_key("replica", {"key": v}),
}


def as_json_value(name: str, raw: str) -> Any:
    """
    A query value as its parameter schema sees it: digits are an integer
    for integer parameters, anything else stays a string.
    """
    schema = DOCUMENT["components"]["parameters"][name]["schema"]
    if schema.get("type") == "integer" and re.fullmatch(r"[0-9]+", raw):
        return int(raw)
    return raw


def schema_accepts(name: str, raw: str) -> bool:
    param = DOCUMENT["components"]["parameters"][name]
    if name == "timeline" and len(raw) > 12:
        # the one rule on the written form, stated in the description
        assert "At most 12 characters" in param["description"]
        return False
    return Draft202012Validator(param["schema"]).is_valid(as_json_value(name, raw))


def server_accepts(name: str, raw: str) -> bool:
    try:
        PARSERS[name](raw)
    except BadParameter:
        return False
    return True


@settings(derandomize=True, max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(PARSERS)),
       raw=st.one_of(
           st.text(alphabet="0123456789/aAfFgGx-+. ", max_size=24),
           st.integers(min_value=-10, max_value=2**66).map(str),
           st.integers(min_value=0, max_value=2**32 + 5).map(lambda n: "0" * 20 + str(n)),
           st.tuples(st.integers(0, 2**32), st.integers(0, 2**32)).map(
               lambda t: f"{t[0]:x}/{t[1]:X}"),
           st.text(min_size=250, max_size=260),
       ))
def test_parameter_schemas_accept_what_the_server_accepts(name, raw):
    assert schema_accepts(name, raw) == server_accepts(name, raw), (name, raw)


# -- checking real answers ------------------------------------------------

class Answer:
    def __init__(self, method: str, path: str, query: str, accept: bool, response: Any,
                 body: bytes) -> None:
        self.method, self.path, self.query, self.accept = method, path, query, accept
        self.code, self.headers, self.body = response.code, response.headers, body
        #: Content-Length (twisted's client takes it out of the headers)
        self.length = response.length

    def header(self, name: str) -> str | None:
        v = self.headers.getRawHeaders(name)
        return v[0] if v else None

    def __repr__(self) -> str:
        return (f"{self.method} {self.path}?{self.query} json={self.accept} -> {self.code} "
                f"{self.header('content-type')} {self.body[:200]!r}")


def check(a: Answer) -> None:
    """
    ``a`` is an answer the document describes.
    """
    item = DOCUMENT["paths"].get(a.path)
    if item is None:
        assert (a.code, a.body, a.header("content-type")) == (404, b"", None), a
        return
    op = item[a.method.lower()]
    code = str(a.code)
    assert code in op["responses"], a
    response = resolve(op["responses"][code])
    for name, h in response.get("headers", {}).items():
        value = a.header(name)
        assert value is not None or not h.get("required"), (a, name)
        if value is not None:
            assert Draft202012Validator(h["schema"]).is_valid(value), (a, name, value)
    assert isinstance(a.length, int), a
    ctype = a.header("content-type")
    if a.method == "HEAD":
        # no body; the headers of the GET answer
        assert a.body == b"", a
        response = resolve(item["get"]["responses"][code])
    elif ctype is None:
        assert a.body == b"", a
    if ctype is None:
        assert "content" not in response or response.get("x-empty-body"), a
        return
    assert ctype in response["content"], a
    if a.path in SELECTION and a.code in (200, 404):
        assert (ctype == "application/json") == a.accept, a
    if a.method == "HEAD":
        return
    tokens = ("paths", a.path, "get", "responses", code, "content", ctype, "schema")
    if "$ref" in item["get"]["responses"][code]:
        name = item["get"]["responses"][code]["$ref"].rsplit("/", 1)[1]
        tokens = ("components", "responses", name, "content", ctype, "schema")
    value = json.loads(a.body) if ctype == "application/json" else a.body.decode("utf-8")
    errors = [e.message for e in validator(*tokens).iter_errors(value)]
    assert not errors, (a, errors)


# Raw values per parameter: valid and invalid.
SAMPLES = {
    "lag_ms": ["0", "1000", "007", "18446744073709551615", "18446744073709551616", "-1",
               "1.5", "", "abc", "1e3"],
    "lag_bytes": ["0", "1000000", "18446744073709551615", "99999999999999999999999", "-5",
                  "", "x"],
    "min_lsn": ["0/0", "0/1", "ffffffff/ffffffff", "3000060", "0/123456789", "G/0", "", "0/"],
    "timeline": ["1", "4294967295", "0", "4294967296", "-1", "x", ""],
    "wait_ms": ["0", "60000", "60001", "-1", "x", ""],
    "key": ["session-1", "k" * 256, "\u00fc" * 256, "k" * 257, "", "a b&c=d/é"],
    "index": ["0", "1", "2", "3", "99999999999999999999", "-1", "x", "", "1.0", "\u00b2"],
}


def queries(path: str, hosts: list[str]) -> Iterator[tuple[str, str | None]]:
    """
    ``(query, invalid parameter or None)`` for ``path``: none, each
    documented parameter with each sample, some combinations and junk.
    """
    yield "", None
    params = parameters(path)
    for name in params:
        if name == "host":
            for h in [*hosts, "nope", ""]:
                yield urlencode({"host": h}), None
            continue
        for raw in SAMPLES[name]:
            valid = schema_accepts(name, raw)
            yield urlencode({name: raw}, safe="/"), None if valid else name
    if "min_lsn" in params:
        yield "min_lsn=0/1&timeline=1", None
        yield "min_lsn=FFFFFFFF/FFFFFFFF&timeline=1&wait_ms=30", None
        yield "lag_ms=x&lag_bytes=y&min_lsn=z&timeline=0&wait_ms=-1", "lag_ms"
        yield "lag_ms=1&lag_ms=x", None
    yield "x=1&&==&", None


class Client:
    """
    Requests over a persistent pool (so connections move from the fast
    path to Klein and back as they would), a few at a time.
    """

    def __init__(self, reactor: Any, base: str) -> None:
        self.base = base
        self.pool = HTTPConnectionPool(reactor, persistent=True)
        self.pool.maxPersistentPerHost = 4

    def one(self, method: str, path: str, query: str = "", accept: bool = False) -> Any:
        headers = {"Accept": "application/json"} if accept else {}
        url = self.base + path + ("?" + query if query else "")
        d = treq.request(method, url, headers=headers, pool=self.pool, allow_redirects=False)
        return d.addCallback(lambda r: r.content().addCallback(
            lambda body: Answer(method, path, query, accept, r, body)))

    @inlineCallbacks
    def many(self, requests: list[tuple[str, str, str, bool]], width: int = 8) -> Any:
        out = []
        for i in range(0, len(requests), width):
            results = yield DeferredList([self.one(*r) for r in requests[i:i + width]],
                                         fireOnOneErrback=True, consumeErrors=True)
            out.extend(r for _, r in results)
        return out

    def close(self) -> Any:
        return self.pool.closeCachedConnections()


def corpus(hosts: list[str]) -> list[tuple[tuple[str, str, str, bool], str | None]]:
    out = []
    for path in DOCUMENT["paths"]:
        for query, invalid in queries(path, hosts):
            for method in ("GET", "HEAD"):
                if (method, path) == ("GET", "/follow"):
                    continue  # a stream that stays open: test_follow_stream_conforms
                for accept in (False, True):
                    out.append(((method, path, query, accept), invalid))
        for method in OTHER_METHODS:
            out.append(((method.upper(), path, "", False), None))
    for path in ("/nowhere", "/master/", "/openapi.json/x"):
        out.append((("GET", path, "", False), None))
    return out


@pytest.fixture
def service(reactor):
    started = []

    def make(env):
        svc = RunningService(reactor, env)
        started.append(svc)
        return svc, Client(reactor, svc.base)

    yield make
    for svc in started:
        pytest_twisted.blockon(svc.stop())


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_real_answers_conform(pg_topology, service, reactor):
    """
    The whole corpus against the live topology, with a follower stream
    open (``/follow/check`` answers only then, else a documented 409):
    every answer conforms; exactly the values the schemas reject get 400
    naming that parameter; every path's documented success answer occurs.
    Then a failing handler: 500 conforms too, and the service keeps
    serving.
    """
    topo = pg_topology
    svc, client = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
    hosts = [n.host for n in topo.nodes]
    requests = corpus(hosts)
    for accept in (False, True):
        a = yield client.one("GET", "/follow/check", "index=0", accept)
        check(a)
        assert a.code == 409, a
    stream = yield Agent(reactor).request(b"GET", (svc.base + "/follow").encode())
    assert stream.code == 200
    reader = Protocol()
    stream.deliverBody(reader)
    try:
        answers = yield client.many([r for r, _ in requests])
        seen: dict[str, set[int]] = {}
        for a, (_, invalid) in zip(answers, requests, strict=True):
            check(a)
            seen.setdefault(a.path, set()).add(a.code)
            if a.path in DOCUMENT["paths"] and a.method in ("GET", "HEAD"):
                # a required parameter left out is a 400 too
                required = {"/status": "host=", "/follow/check": "index="}.get(a.path)
                assert (a.code == 400) == (invalid is not None or (
                    required is not None and required not in a.query)), a
                if invalid is not None and a.method == "GET":
                    assert json.loads(a.body) == {"error_text": f"Invalid {invalid}"}, a
        for path in SELECTION - {"/master"}:
            assert seen[path] == {200, 400, 405}, (path, seen[path])
        assert seen["/master"] == {200, 405}
        assert seen["/status"] == {200, 400, 404, 405}
        assert seen["/follow/check"] == {200, 400, 404, 405}
        assert seen["/follow"] == {200, 405}  # HEAD; GET streams (tested on its own)
        for path in ("/hosts", "/version", "/live", "/ready", "/openapi.json"):
            assert seen[path] == {200, 405}, path
        a = yield client.one("GET", "/openapi.json")
        assert json.loads(a.body) == DOCUMENT

        renderer = svc.svc.api.renderer
        current = renderer._current

        def broken():
            raise RuntimeError("induced failure")

        renderer._current = broken
        try:
            for path in ("/master", "/replica?lag_ms=1", "/hosts", "/status?host=x", "/ready"):
                p, _, q = path.partition("?")
                for method in ("GET", "HEAD"):
                    a = yield client.one(method, p, q, accept=True)
                    assert a.code == 500, a
                    check(a)
        finally:
            renderer._current = current
        a = yield client.one("GET", "/master")
        assert (a.code, a.body.decode()) == (200, topo.primary.host)
    finally:
        reader.transport.stopProducing()
        yield client.close()


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_answers_without_master_and_with_a_dead_host_conform(pg_topology, service, reactor):
    """
    Only the replicas and a host that refuses connections: /master and an
    unsatisfiable min_lsn answer 404 (empty, or JSON nulls); the dead host's
    null measurements in /hosts and /status conform.
    """
    topo = pg_topology
    dead_port = free_port("127.0.0.1")
    env = topo.hosts_env(nodes=topo.replicas)
    env["pg_status__hosts"] += ",127.0.0.1"
    env["pg_status__pg_port"] += f",{dead_port}"
    svc, client = service({**env, **FAST})
    yield wait_until(reactor, lambda: svc.view.ready and all(
        h.alive for h in svc.view.hosts[:2]), 10, "readiness with live replicas")
    try:
        requests = []
        for path in sorted(SELECTION):
            for query in ("", "min_lsn=FFFFFFFF/FFFFFFFF", "timeline=4294967295"):
                for method in ("GET", "HEAD"):
                    for accept in (False, True):
                        requests.append((method, path, query, accept))
        for q in ("host=127.0.0.1", f"host={topo.replicas[0].host}"):
            requests.append(("GET", "/status", q, False))
        requests.append(("GET", "/hosts", "", False))
        answers = yield client.many(requests)
        codes = {}
        for a in answers:
            check(a)
            codes.setdefault(a.path, set()).add(a.code)
        assert codes["/master"] == {404}
        assert codes["/replica"] == {200, 404}
        dead = [a for a in answers if a.path == "/hosts"][0]
        assert json.loads(dead.body)[2] == {
            "host": "127.0.0.1", "dc": None, "geo": None, "master": False, "alive": False,
            "possible_dead": True, "lag_ms": None, "sync_by_time": False, "lag_bytes": None,
            "sync_by_bytes": False, "lsn": None}
    finally:
        yield client.close()


@pytest_twisted.inlineCallbacks
def test_answers_before_readiness_conform(blackhole, service, reactor):
    """
    A host that never answers keeps the service unready: every host
    endpoint answers the documented 503 whatever the parameters; /live,
    /version, /openapi.json and /metrics answer 200.
    """
    svc, client = service({"pg_status__hosts": "127.0.0.1", "pg_status__pg_port": str(blackhole),
                           "pg_status__query_timeout_ms": "30000"})
    try:
        requests = [r for r, _ in corpus(["127.0.0.1"])
                    if r[0] in ("GET", "HEAD") and r[1] in DOCUMENT["paths"]]
        answers = yield client.many(requests)
        assert not svc.view.ready, "the service became ready during the test"
        for a in answers:
            check(a)
            if a.path in ("/live", "/version", "/openapi.json", "/metrics"):
                assert a.code == 200, a
            else:
                assert a.code == 503, a
    finally:
        yield client.close()


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_follow_stream_conforms(pg_topology, service, reactor):
    """
    ``GET /follow``: ``text/event-stream``; its first event is a snapshot
    that the document's ``FollowSnapshot`` schema accepts, then heartbeats.
    """
    topo = pg_topology
    svc, client = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
    got: list[bytes] = []
    done = Deferred()

    class Events(Protocol):
        def dataReceived(self, data: bytes) -> None:
            got.append(data)
            if b"event: heartbeat" in b"".join(got) and not done.called:
                done.callback(None)

    agent = Agent(reactor)
    r = yield agent.request(b"GET", (svc.base + "/follow").encode())
    try:
        assert r.code == 200
        assert r.headers.getRawHeaders("content-type") == ["text/event-stream"]
        assert "200" in DOCUMENT["paths"]["/follow"]["get"]["responses"]
        proto = Events()
        r.deliverBody(proto)
        yield done
        frames = b"".join(got).split(b"\n\n")
        assert frames[0].startswith(b"event: snapshot\ndata: ")
        snapshot = json.loads(frames[0].split(b"data: ", 1)[1])
        schema = {"$ref": "#/components/schemas/FollowSnapshot", **{
            k: v for k, v in DOCUMENT.items() if k == "components"}}
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(snapshot)]
        assert not errors, errors
        assert [h["host"] for h in snapshot["hosts"]] == [n.host for n in topo.nodes]
        assert snapshot["master"] == 0
    finally:
        proto.transport.stopProducing()
        yield client.close()
