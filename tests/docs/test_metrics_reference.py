"""
The metrics reference of the documentation (``reference/metrics.html``,
generated from the metric table by ``docs/_ext/pgstatus_docs.py``) against
the table and against real ``/metrics`` answers: a hub (``twistd
pgstatus`` watching the real topology, and Patroni's leader key in an etcd
that does not answer), a follower of it while it follows, and the same
follower polling on its own once the hub is gone.  Each answer announces
exactly the families the reference lists for its kind of instance, with
the reference's types and labels; together they announce every family the
reference lists.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon import Daemon
from docpages import ROOT, ReferenceRow, build_docs, metrics_reference
from exposition import Family, families
from pgtopology import PgTopology, free_port, poll

from pgstatus.http.families import ALL, FOLLOWER, HUB, METRICS, PATRONI

FAST = {"pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "300"}
#: the reference's table captions, by the scope of the families in them
CAPTIONS = {ALL: "Every instance", HUB: "Instances that poll PostgreSQL (not followers)",
            FOLLOWER: "Followers only",
            PATRONI: "Instances that watch Patroni's leader key (pg_status__patroni_etcd)"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh ``sphinx-build -W`` of the documentation."""
    out = tmp_path_factory.mktemp("html")
    build_docs(out, tmp_path_factory.mktemp("doctrees"))
    return out


@pytest.fixture(scope="module")
def reference(built: Path) -> list[ReferenceRow]:
    """The rows of its metrics reference."""
    return metrics_reference(built)


def test_reference_is_the_table(reference: list[ReferenceRow]) -> None:
    """
    One row per family of the metric table, in its order, under the caption
    of the family's scope, with its type, labels (a histogram's ``le`` too)
    and help line; and nothing else.
    """
    order = list(CAPTIONS)
    expected = sorted(METRICS, key=lambda m: order.index(m.scope))
    assert [(r.table, r.name, r.kind, r.labels, r.meaning) for r in reference] == [
        (CAPTIONS[m.scope], m.name, m.kind,
         m.labels + (("le",) if m.kind == "histogram" else ()), m.help) for m in expected]


def test_metric_links_resolve(built: Path, reference: list[ReferenceRow]) -> None:
    """
    The reference registers its rows as ``metric`` objects: every
    ``{metric}`name``` of the Prometheus guide and the runbook is a link to
    the metric's row (and the -W build fails on a name without a row).
    """
    names = {r.name for r in reference}
    for page in ("prometheus", "alerts"):
        source = (ROOT / "docs" / "deploy" / f"{page}.md").read_text()
        written = {part.split("`")[0] for part in source.split("{metric}`")[1:]}
        html = (built / "deploy" / f"{page}.html").read_text()
        links = set(re.findall(r'href="\.\./reference/metrics\.html#metric-([a-z_]+)"', html))
        assert written and written == links and links <= names, page


def check_answer(text: str, rows: list[ReferenceRow], *scopes: str) -> list[Family]:
    """
    ``text`` announces the families of the reference's tables for
    ``scopes`` (and every instance), in order, each with the reference's
    type, and every sample carries the reference's labels for its family.
    """
    fams = families(text)
    wanted = [r for r in rows if r.table in {CAPTIONS[s] for s in (ALL, *scopes)}]
    assert [(f.name, f.kind) for f in fams] == [(r.name, r.kind) for r in wanted]
    labels = {r.name: set(r.labels) for r in wanted}
    for f in fams:
        for s in f.samples:
            expected = labels[f.name] - ({"le"} if not s.name.endswith("_bucket") else set())
            assert set(s.labels) == expected, (f.name, s)
    return fams


def samples(fams: list[Family], name: str) -> dict[str, float]:
    """The samples of family ``name`` by host (or by name, without one)."""
    (fam,) = [f for f in fams if f.name == name]
    return {s.labels.get("host", s.name): s.value for s in fam.samples}


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """pg-status processes of the test, stopped after it."""
    made: list[Daemon] = []
    yield made
    for d in made:
        d.stop()


@pytest.mark.pg
def test_real_answers_are_the_reference(reference: list[ReferenceRow],
                                        guarded_topology: PgTopology,
                                        daemons: list[Daemon]) -> None:
    """
    A hub (watching Patroni's leader key in an etcd that does not answer:
    the store's families are there, saying so), a follower following it,
    then the follower polling on its own (hub killed): each ``/metrics``
    announces exactly the reference's families for it, every one of them
    is announced by one of the answers, and the stalled-check gauge is
    there for hosts this instance checks itself (hub, polling follower),
    recent, and absent while following.
    """
    topo = guarded_topology
    hosts = {n.host for n in topo.nodes}
    etcd = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    hub = Daemon({**topo.hosts_env(), **FAST, "pg_status__patroni_etcd": etcd,
                  "pg_status__patroni_scope": "demo"})
    daemons.append(hub.start())
    hub.wait_ready()
    follower = Daemon({**topo.hosts_env(), **FAST, "pg_status__follow": hub.url,
                       "pg_status__follow_timeout_ms": "2000"})
    daemons.append(follower.start())
    follower.wait_ready()

    def following() -> str | None:
        code, text = follower.get("/metrics")
        return text if code == 200 and 'pgstatus_follow_mode{mode="following"} 1' in text \
            and "pgstatus_follow_view_age_seconds " in text else None

    for d in (hub, follower):
        assert d.get("/master") == (200, topo.primary.host)  # a request to count
    following_text = poll(following, 10, "the follower following, with news from the hub")
    code, hub_text = hub.get("/metrics")
    assert code == 200
    now = time.time()
    hub_fams = check_answer(hub_text, reference, HUB, PATRONI)
    assert samples(hub_fams, "pgstatus_patroni_store_up") == {"pgstatus_patroni_store_up": 0}
    ages = {h: now - t for h, t in samples(hub_fams, "pgstatus_host_last_check_completed_seconds")
            .items()}
    assert set(ages) == hosts and all(-1 < a < 2 for a in ages.values()), ages
    assert samples(hub_fams, "pgstatus_check_interval_seconds") == {
        "pgstatus_check_interval_seconds": 0.2}
    fol_fams = check_answer(following_text, reference, FOLLOWER)
    assert samples(fol_fams, "pgstatus_host_last_check_completed_seconds") == {}
    announced = {f.name for f in hub_fams} | {f.name for f in fol_fams}
    assert announced == {r.name for r in reference}

    hub.kill()

    def polling() -> str | None:
        code, text = follower.get("/metrics")
        if code != 200 or 'pgstatus_follow_mode{mode="polling"} 1' not in text:
            return None
        fams = families(text)
        return text if set(samples(fams, "pgstatus_host_last_check_completed_seconds")) \
            == hosts else None

    polling_text = poll(polling, 15, "the follower polling, every host checked")
    now = time.time()
    fams = check_answer(polling_text, reference, FOLLOWER)
    ages = {h: now - t for h, t in samples(fams, "pgstatus_host_last_check_completed_seconds")
            .items()}
    assert all(-1 < a < 2 for a in ages.values()), ages
