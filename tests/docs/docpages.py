"""
Building ``docs/`` as ``make docs`` does, and reading its generated pages.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_docs(out: Path, doctrees: Path) -> None:
    """
    Build ``docs/`` into ``out`` with ``sphinx-build -W`` in a subprocess
    (as ``make docs`` does); fail with its output if it fails.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(doctrees), str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def text_of(fragment: str) -> str:
    """The text of an HTML fragment, tags dropped and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@dataclass(frozen=True)
class ReferenceRow:
    """One metric as the metrics reference page shows it (``table``: its section)."""

    table: str
    name: str
    kind: str
    labels: tuple[str, ...]
    meaning: str


def metrics_reference(built: Path) -> list[ReferenceRow]:
    """
    The entries of the generated metrics reference
    (``reference/metrics.html``), in page order: the title of the section
    each is in, the metric's name, type, labels (a histogram's ``le``
    included) and meaning.
    """
    page = (built / "reference" / "metrics.html").read_text()
    rows: list[ReferenceRow] = []
    for section in re.findall(r'<section id="metrics-[a-z]+">(.*?)</section>', page, re.S):
        title = text_of(re.search(r"<h2>(.*?)<a ", section, re.S).group(1)).strip()
        for node_id, term, meaning, facts in re.findall(
                r'<dt id="metric-([^"]+)">(.*?)</dt><dd><p>(.*?)</p>\s*'
                r'<p class="pgstatus-metric-facts">(.*?)</p>', section, re.S):
            name = text_of(term).strip()
            m = re.fullmatch(r"Type: (\w+) · Labels: (.*)", " ".join(text_of(facts).split()))
            assert name == node_id and m is not None, (name, node_id, facts)
            kind, labels = m.groups()
            rows.append(ReferenceRow(
                title, name, kind, () if labels == "none" else tuple(labels.split(", ")),
                " ".join(text_of(meaning).split())))
    return rows
