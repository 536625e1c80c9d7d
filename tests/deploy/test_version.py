"""
One version: ``__version__`` in ``pgstatus/__init__.py``.  Everything that
names a version of pg-status follows it, and this test fails when one does
not.

- the Python package: ``setup.py`` reads that line (the built wheel's and
  sdist's metadata are checked in ``test_dist.py``);
- ``packaging/version``, which the Debian package (``packaging/build-deb.sh``,
  checked in ``test_deb_package.py``) and ``docker/build.sh`` take it from;
- the image: ``docker/build.sh`` tags ``pg-status:<version>`` (and
  ``:latest``) unless told another name, and labels it with the version;
- the image the Compose files name, and every pg-status image in the
  Kubernetes examples (``deploy/kubernetes/*.yaml``: containers, init
  containers, wherever an ``image:`` names a repository called
  ``pg-status``), which must pin ``pg-status:<version>``;
- any ``pg-status:X.Y.Z`` image or ``pg-status_X.Y.Z`` package file named in
  the documentation, the deploy and docker files;
- no release section of ``NEWS.md`` is newer than the version.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from packaging.version import Version

from pgstatus import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERSION_SCRIPT = os.path.join(ROOT, "packaging", "version")
#: a reference to the pg-status image or Debian package with a version
#: (``registry.example/pg-status:0.2.0``, ``pg-status_0.2.0_amd64.deb``)
NAMED = re.compile(r"(?<![\w.-])(?:[\w.-]+/)*pg-status(:|_)(\d+\.\d+[\w.~+-]*?)(?=[\s\"'`)|,]|_|$)",
                   re.M)
#: where such references are looked for (release notes name old versions)
TEXT_FILES = ("README.md", "docs/**/*.md", "deploy/**/*", "docker/**/*", "service/*",
              "packaging/**/*")
HISTORY = {"NEWS.md", os.path.join("docs", "changelog.md")}


def _text_files() -> Iterator[str]:
    seen = set()
    for pattern in TEXT_FILES:
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            rel = os.path.relpath(path, ROOT)
            if rel in seen or rel in HISTORY or not os.path.isfile(path) or "_build" in rel:
                continue
            seen.add(rel)
            yield rel


def _split_image(image: str) -> tuple[str, str | None]:
    """``registry/name:tag`` -> (``name``, ``tag``), a Compose default
    (``${VAR:-image}``) standing for the image."""
    m = re.fullmatch(r"\$\{\w+:?-(.*)\}", image)
    if m:
        image = m.group(1)
    image = image.split("@", 1)[0]
    name, _, tag = image.rpartition(":")
    if "/" in tag or not name:
        name, tag = image, ""
    return name.rsplit("/", 1)[-1], tag or None


def _images(node: Any) -> Iterator[str]:
    """Every ``image:`` value anywhere in a loaded YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                yield value
            else:
                yield from _images(value)
    elif isinstance(node, list):
        for item in node:
            yield from _images(item)


def _pg_status_images(paths: list[str]) -> list[tuple[str, str]]:
    found = []
    for path in paths:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                for image in _images(doc):
                    if _split_image(image)[0] == "pg-status":
                        found.append((os.path.relpath(path, ROOT), image))
    return found


def test_packaging_version_prints_the_package_version() -> None:
    out = subprocess.run([VERSION_SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout == f"{__version__}\n"


@pytest.mark.parametrize("python,debian", [
    ("0.2.0", "0.2.0"),
    ("1.0.0rc1", "1.0.0~rc1"),
    ("1.0.0b2", "1.0.0~b2"),
    ("1.0.0.dev3", "1.0.0~dev3"),
])
def test_debian_version(tmp_path: Any, python: str, debian: str) -> None:
    """
    ``packaging/version --debian``: a pre-release sorts before its release,
    as ``~`` makes dpkg sort it; a release is the version unchanged.
    """
    (tmp_path / "packaging").mkdir()
    (tmp_path / "pgstatus").mkdir()
    shutil.copy(VERSION_SCRIPT, tmp_path / "packaging" / "version")
    (tmp_path / "pgstatus" / "__init__.py").write_text(f'"""x"""\n\n__version__ = "{python}"\n')
    out = subprocess.run([str(tmp_path / "packaging" / "version"), "--debian"],
                         capture_output=True, text=True, check=True)
    assert out.stdout == f"{debian}\n"
    if python != debian and shutil.which("dpkg"):
        assert subprocess.run(["dpkg", "--compare-versions", debian, "lt",
                               debian.split("~")[0]]).returncode == 0


@pytest.mark.parametrize("env,tags", [
    ({}, [f"pg-status:{__version__}", "pg-status:latest"]),
    ({"TAG": "pg-status:test"}, ["pg-status:test"]),
])
def test_build_script_tags_the_version(tmp_path: Any, env: dict[str, str],
                                       tags: list[str]) -> None:
    """
    ``docker/build.sh`` tags the image ``pg-status:<version>`` and
    ``pg-status:latest`` unless ``TAG`` names it, and always labels it with
    the version (seen through a stand-in docker client that records its
    arguments).
    """
    log = tmp_path / "docker.log"
    fake = tmp_path / "docker"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n')
    fake.chmod(0o755)
    run_env = {k: v for k, v in os.environ.items()
               if k not in ("TAG", "PYTHON_IMAGE", "CA_CERTS")}
    run_env.update(env, DOCKER=str(fake))
    subprocess.run([os.path.join(ROOT, "docker", "build.sh")], env=run_env, check=True,
                   capture_output=True, timeout=60)
    build = [line.split() for line in log.read_text().splitlines()
             if line.startswith("build ")]
    assert len(build) == 1, log.read_text()
    args = build[0]
    named = [args[i + 1] for i, a in enumerate(args) if a == "-t"]
    assert named == tags
    labels = [args[i + 1] for i, a in enumerate(args) if a == "--label"]
    assert f"org.opencontainers.image.version={__version__}" in labels


def test_compose_files_name_the_version() -> None:
    files = sorted(glob.glob(os.path.join(ROOT, "docker", "docker-compose*.yml")))
    found = _pg_status_images(files)
    assert {path for path, _ in found} == {os.path.relpath(f, ROOT) for f in files}
    for path, image in found:
        assert _split_image(image)[1] == __version__, f"{path}: {image}"


def test_kubernetes_examples_name_the_version() -> None:
    """
    Every pg-status container of the Kubernetes examples runs
    ``pg-status:<version>`` (any registry in front), never an untagged or
    ``latest`` image.
    """
    files = sorted(glob.glob(os.path.join(ROOT, "deploy", "kubernetes", "*.y*ml")))
    found = _pg_status_images(files)
    assert found, "no pg-status image in deploy/kubernetes"
    wrong = [f"{path}: {image}" for path, image in found
             if _split_image(image)[1] != __version__]
    assert not wrong, f"not pg-status:{__version__}: {wrong}"


def test_text_names_no_other_version() -> None:
    """Documentation, deploy and docker files name no other version of the
    image or the Debian package (release notes aside)."""
    wrong = []
    for rel in _text_files():
        try:
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            continue
        for m in NAMED.finditer(text):
            if m.group(2) not in (__version__, "<version>"):
                line = text.count("\n", 0, m.start()) + 1
                wrong.append(f"{rel}:{line}: {m.group(0)}")
    assert not wrong, f"not version {__version__}: {wrong}"


def test_no_release_notes_newer_than_the_version() -> None:
    with open(os.path.join(ROOT, "NEWS.md")) as f:
        released = re.findall(r"^## pg-status (\S+) ", f.read(), re.M)
    assert released, "NEWS.md has no release section"
    newer = [v for v in released if Version(v) > Version(__version__)]
    assert not newer, f"NEWS.md has releases after {__version__}: {newer}"


def test_text_pattern_finds_references() -> None:
    """The pattern ``test_text_names_no_other_version`` relies on."""
    text = ("image: registry.example/pg-status:0.1.0\n"
            "apt-get install ./pg-status_0.1.0_amd64.deb\n"
            "`pg-status:0.1.0`, pg-status-local/python:3.11 pg-status:demo\n")
    assert [m.group(0) for m in NAMED.finditer(text)] == [
        "registry.example/pg-status:0.1.0", "./pg-status_0.1.0", "pg-status:0.1.0"]
