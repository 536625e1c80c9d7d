"""
A strict reader of the Prometheus text format as ``/metrics`` writes it:
the families in their order (name, type, help), and every sample with the
family it belongs to and its labels.  Unlike the client library's parser
it keeps counter names whole (``..._total``) and fails on a sample outside
the family announced before it, so a test sees exactly what was written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count")}


@dataclass
class Sample:
    """One sample line."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Family:
    """One family: its ``# HELP`` and ``# TYPE`` lines and its samples."""

    name: str
    help: str
    kind: str = ""
    samples: list[Sample] = field(default_factory=list)


def families(text: str) -> list[Family]:
    """
    The families of an exposition, in order.

    :raises AssertionError: on a line out of place: a sample before any
        family or named for another one, a ``# TYPE`` without its ``# HELP``
        just before, a family announced twice.
    """
    out: list[Family] = []
    seen: set[str] = set()
    expect_type = False
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert not expect_type, line
            name, _, help_ = line[len("# HELP "):].partition(" ")
            assert name not in seen, f"family {name} announced twice"
            seen.add(name)
            out.append(Family(name, help_))
            expect_type = True
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE "):].partition(" ")
            assert expect_type and out[-1].name == name, line
            out[-1].kind = kind
            expect_type = False
        else:
            m = _SAMPLE.match(line)
            assert m is not None and out and not expect_type, line
            name, labels, value = m.groups()
            fam = out[-1]
            allowed = (fam.name,) + tuple(fam.name + s for s in _SUFFIXES.get(fam.kind, ()))
            assert name in allowed, f"{name} under family {fam.name}"
            pairs = _LABEL.findall(labels or "")
            assert "".join(f'{k}="{v}",' for k, v in pairs).rstrip(",") == (labels or ""), line
            fam.samples.append(Sample(name, dict(pairs), float(value)))
    assert not expect_type, "a # HELP without its # TYPE at the end"
    return out
