"""
The sample requests and answers of the API reference
(``docs/reference/api-samples.json``, written by ``make docs-samples``) are
what the service answers: every route has one, and a running pg-status
asked the same requests against the test topology answers each with the
shape the file shows (status, headers, JSON keys, kind of text).  When the
API changes, ``make docs-samples`` writes the file again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_samples import REQUESTS, capture, hosts_of, json_shape, load, shape
from pgtopology import PgTopology

from pgstatus.http.openapi import DOCUMENT
from pgstatus.http.routes import ROUTES

REGENERATE = "the API changed: run `make docs-samples` and check the diff of the samples"


def test_every_route_has_a_sample() -> None:
    """
    Every path of the route table (and of the OpenAPI document) has at
    least one sample, and the file holds exactly the samples
    :data:`api_samples.REQUESTS` defines, in its order.
    """
    samples = load()["samples"]
    assert [s["key"] for s in samples] == [r.key for r in REQUESTS], REGENERATE
    assert {s["route"] for s in samples} == {r.path for r in ROUTES} == set(DOCUMENT["paths"])


def test_each_sample_is_what_the_service_answered() -> None:
    """
    The file is as written: each sample's recorded shape is the shape of
    the answer it shows (JSON bodies parse; the cut OpenAPI document is
    the one exception, its shape taken from the whole), and every status is
    one the OpenAPI document gives for that path.
    """
    doc = load()
    hosts = tuple(doc["hosts"])
    for sample in doc["samples"]:
        codes = DOCUMENT["paths"][sample["route"]]["get"]["responses"]
        method = sample["curl"].split(" -X ")[1].split()[0] if " -X " in sample["curl"] else "GET"
        assert str(sample["status"]) in codes or (method != "GET" and sample["status"] == 405), \
            sample["key"]
        if not sample["truncated"]:
            assert shape(sample, hosts) == sample["shape"], sample["key"]


@pytest.mark.pg
def test_service_answers_like_the_samples(pg_topology: PgTopology) -> None:
    """
    A running pg-status, asked every sample request against the test
    topology, answers each with the status, headers and body shape the
    samples show.
    """
    saved = {s["key"]: s for s in load()["samples"]}
    hosts = hosts_of(pg_topology)
    drift: list[str] = []
    for live in capture(pg_topology):
        want = saved[live["key"]]["shape"]
        got = shape(live, hosts)
        if got != want:
            drift.append(f"{live['key']} ({live['curl']}):\n  docs: {_short(want)}\n"
                         f"  now:  {_short(got)}")
    assert not drift, REGENERATE + "\n" + "\n".join(drift)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) < 600 else text[:600] + "…"


def test_json_shape_compares_keys_not_values() -> None:
    """
    Two answers of the same shape compare equal whatever their values; a
    key more or less, or an object instead of a list, does not.
    """
    a = [{"host": "h1", "lag_ms": 3}, {"host": "h2", "lag_ms": None}]
    b = [{"lag_ms": 0, "host": "h9"}, {"host": "h3", "lag_ms": 12}]
    assert json_shape(a) == json_shape(b)
    assert json_shape(a) != json_shape([{"host": "h1"}, {"host": "h2", "lag_ms": 1}])
    assert json_shape(a) != json_shape({"host": "h1", "lag_ms": 3})
