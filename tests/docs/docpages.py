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
    """One metric as the metrics reference page shows it."""

    table: str
    name: str
    kind: str
    labels: tuple[str, ...]
    meaning: str


def metrics_reference(built: Path) -> list[ReferenceRow]:
    """
    The rows of the generated metrics reference (``reference/metrics.html``),
    in page order: the caption of the table each is in, the metric's name,
    type, labels (a histogram's ``le`` included) and meaning.
    """
    page = (built / "reference" / "metrics.html").read_text()
    rows: list[ReferenceRow] = []
    for table in re.findall(r"<table[^>]*>(.*?)</table>", page, re.S):
        caption = text_of(re.search(r'<span class="caption-text">(.*?)</span>', table).group(1))
        for node_id, row in re.findall(r'<tr[^>]* id="metric-([^"]+)"[^>]*>(.*?)</tr>',
                                       table, re.S):
            first, meaning = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            name, kinds = (text_of(p).strip()
                           for p in re.findall(r"<p>(.*?)</p>", first, re.S))
            kind, _, labels = kinds.partition(", ")
            assert name == node_id, (name, node_id)
            rows.append(ReferenceRow(
                caption, name, kind,
                () if labels == "no labels" else tuple(labels.split(", ")),
                " ".join(text_of(meaning).split())))
    return rows
