"""
The documentation builds with warnings as errors (as ``make docs`` does),
and its generated reference pages cover the code they are generated from:
every variable of the settings table, every route of the route table.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pgstatus.config.settings import PREFIX
from pgstatus.config.table import GROUPS, SETTINGS
from pgstatus.http.routes import ROUTES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """
    The HTML build of ``docs/``, made once for this module by
    ``sphinx-build -W`` in a subprocess.
    """
    out = tmp_path_factory.mktemp("html")
    doctrees = tmp_path_factory.mktemp("doctrees")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(doctrees), str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_build_passes_with_warnings_as_errors(built: Path) -> None:
    """
    ``sphinx-build -W`` succeeds (the fixture asserts it) and writes the
    start page and both generated references.
    """
    for page in ("index.html", "reference/configuration.html", "reference/api.html"):
        assert (built / page).is_file(), page


def _span(cls: str, fragment: str) -> str:
    m = re.search(rf'<(?:span|code) class="{cls}[ "][^>]*>(.*?)</(?:span|code)>', fragment, re.S)
    return _text(m.group(1)).strip() if m else "(none)"


def test_configuration_reference_lists_every_setting(built: Path) -> None:
    """
    Every variable of the settings table has an entry of its own, with its
    summary, default, values and whether a reload applies it, and nothing
    else has one.
    """
    page = (built / "reference" / "configuration.html").read_text()
    entries = dict(re.findall(r'<dt id="envvar-([^"]+)">.*?</dt>\s*<dd>(.*?)</dd>', page, re.S))
    assert set(entries) == {PREFIX + s.name for s in SETTINGS}
    for s in SETTINGS:
        entry = entries[PREFIX + s.name]
        assert s.summary in _text(entry), s.name
        assert _span("default", entry) == (s.default or "(none)"), s.name
        assert _span("values", entry) == s.accepts, s.name
        assert _span("reload", entry) == ("applies" if s.reload else "needs a restart"), s.name


def test_configuration_reference_is_grouped_by_topic(built: Path) -> None:
    """
    The reference has a section per topic of the settings table, in its
    order, and each variable is in its own topic's section.
    """
    page = (built / "reference" / "configuration.html").read_text()
    sections = re.findall(r'<section id="settings-([a-z]+)">\s*<h2>(.*?)<a', page, re.S)
    assert [(k, _text(t)) for k, t in sections] == [(g.key, g.title) for g in GROUPS]
    for g in GROUPS:
        body = page.split(f'<section id="settings-{g.key}">', 1)[1].split("</section>", 1)[0]
        found = set(re.findall(r'<dt id="envvar-([^"]+)">', body))
        assert found == {PREFIX + s.name for s in SETTINGS if s.group == g.key}, g.key


def test_configuration_reference_fits_the_page(built: Path) -> None:
    """
    Nothing on the configuration reference is a table: its text wraps to
    the page's width, so no column can be off-screen (at 1,280 px and
    below).
    """
    page = (built / "reference" / "configuration.html").read_text()
    assert "<table" not in page


def test_api_reference_lists_every_route(built: Path) -> None:
    """
    Every path of the route table has its entry in the API page, with the
    methods it answers.
    """
    page = _text((built / "reference" / "api.html").read_text())
    for route in ROUTES:
        assert f"GET, HEAD {route.path}\n" in page or f"GET, HEAD {route.path}¶" in page, \
            route.path


def test_api_reference_shows_every_sample(built: Path) -> None:
    """
    Every sample of ``docs/reference/api-samples.json`` is on the API page:
    its curl command and its status line, under the path it belongs to.
    """
    from api_samples import load

    page = _text((built / "reference" / "api.html").read_text())
    for sample in load()["samples"]:
        after = re.split(rf"GET, HEAD {re.escape(sample['route'])}[¶\n]", page, maxsplit=1)[1]
        shown = after.split("GET, HEAD /", 1)[0]
        assert f"$ {sample['curl']}\nHTTP/1.1 {sample['status']} {sample['reason']}" in shown, \
            sample["key"]
