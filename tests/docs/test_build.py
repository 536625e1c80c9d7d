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
from pgstatus.config.table import SETTINGS
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


def test_configuration_reference_lists_every_setting(built: Path) -> None:
    """
    Every variable of the settings table has a row of its own, with its
    default and whether a reload applies it, and nothing else has one.
    """
    page = (built / "reference" / "configuration.html").read_text()
    rows = dict(re.findall(r'<tr[^>]* id="envvar-([^"]+)"[^>]*>(.*?)</tr>', page, re.S))
    assert set(rows) == {PREFIX + s.name for s in SETTINGS}
    for s in SETTINGS:
        cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                     rows[PREFIX + s.name], re.S)]
        assert cells[0] == PREFIX + s.name
        assert cells[1] == (s.default or "(none)"), s.name
        assert cells[2] == s.accepts, s.name
        assert cells[3] == ("yes" if s.reload else "restart"), s.name


def test_api_reference_lists_every_route(built: Path) -> None:
    """
    Every path of the route table has its entry in the API page, with the
    methods it answers.
    """
    page = _text((built / "reference" / "api.html").read_text())
    for route in ROUTES:
        assert f"GET, HEAD {route.path}\n" in page or f"GET, HEAD {route.path}¶" in page, \
            route.path
