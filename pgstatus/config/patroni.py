"""
The Patroni settings (an addition of ours, opt-in): where Patroni's
distributed configuration store is (etcd v3, through its JSON gateway),
which cluster's keys to read, how to authenticate, and what to do when the
store cannot be read for longer than Patroni's ``ttl``.

They mirror Patroni's own ``namespace``, ``scope``, ``ttl`` and ``etcd3``
section (``hosts`` as URLs, ``cacert``, ``cert``, ``key``, ``username``,
``password``).  Without ``pg_status__patroni_etcd`` none of the others is
read and nothing changes.  Like the rest of :mod:`pgstatus.config` this
does no I/O beyond looking at the files named (that they are readable PEM
files), so that ``--check-config`` names a wrong path.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from typing import TypedDict

from pgstatus.config.files import read_regular_file
from pgstatus.config.settings import (
    PREFIX,
    ConfigError,
    check_no_nul,
    check_utf8,
    shown_value,
    stripped,
)

#: what a master is when the store has not been read for ``ttl``:
#: the hosts' own view, the last leader read, or none
UNREADABLE_RULES = ("hosts", "last_leader", "no_master")

_URL_RE = re.compile(r"(https?)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::([0-9]{1,5}))?/?")
_SCOPE_RE = re.compile(r"[^\s/]+")


class PatroniFields(TypedDict):
    """The :class:`~pgstatus.config.settings.Config` fields of the Patroni settings."""

    patroni_etcd: tuple[str, ...]
    patroni_namespace: str
    patroni_scope: str
    patroni_unreadable: str
    patroni_cacert: str
    patroni_cert: str
    patroni_key: str
    patroni_username: str
    patroni_password: str


def key_prefix(namespace: str, scope: str) -> str:
    """
    The cluster's key prefix, ``<namespace>/<scope>/``, as Patroni builds
    it (``/service/`` and ``service`` are the same namespace).
    """
    return normalise_namespace(namespace) + "/" + scope + "/"


def normalise_namespace(text: str) -> str:
    """
    Patroni's reading of ``namespace``: slashes around it and no doubled
    ones, without the trailing one (``service`` and ``/service/`` are both
    ``/service``).
    """
    return re.sub("/+", "/", "/" + text.strip("/")).rstrip("/") if text.strip("/") else ""


def _endpoints(environ: Mapping[str, str]) -> tuple[str, ...]:
    variable = PREFIX + "patroni_etcd"
    text = stripped(environ, "patroni_etcd")
    if text is None:
        return ()
    urls: list[str] = []
    schemes = set()
    for position, part in enumerate(text.split(","), start=1):
        m = _URL_RE.fullmatch(part.strip())
        if not m or (m.group(3) and not 0 < int(m.group(3)) <= 65535):
            raise ConfigError(variable, f"entry {position} must be an etcd URL like "
                              f"http://etcd1:2379 or https://etcd1:2379, got "
                              f"{shown_value(part.strip())}")
        url = f"{m.group(1)}://{m.group(2)}:{m.group(3) or 2379}"
        if url in urls:
            raise ConfigError(variable, f"names {shown_value(url)} twice")
        urls.append(url)
        schemes.add(m.group(1))
    if len(schemes) > 1:
        raise ConfigError(variable, "mixes http:// and https:// endpoints; use one scheme")
    return tuple(urls)


def _pem_file(environ: Mapping[str, str], name: str) -> str:
    """
    A readable file that holds PEM text, or ``""`` when unset.
    """
    variable = PREFIX + name
    path = stripped(environ, name)
    if path is None:
        return ""
    check_no_nul(variable, path)
    head = read_regular_file(variable, path)
    if b"-----BEGIN " not in head:
        raise ConfigError(variable, f"{shown_value(path)} holds no PEM block")
    return path


def parse_patroni(environ: Mapping[str, str]) -> PatroniFields:
    """
    The Patroni settings as :class:`~pgstatus.config.settings.Config`
    fields (``patroni_ttl`` is an integer setting, parsed with the others).
    Each is validated when set, used or not; what only makes sense with
    ``pg_status__patroni_etcd`` (a scope, https for the TLS files, the
    pairs) is required only with it.

    :raises ConfigError: naming the first invalid variable.
    """
    endpoints = _endpoints(environ)
    ns_text = stripped(environ, "patroni_namespace")
    namespace = "/service/"
    if ns_text is not None:
        check_no_nul(PREFIX + "patroni_namespace", ns_text)
        if not normalise_namespace(ns_text) or not re.fullmatch(r"\S+", ns_text):
            raise ConfigError(PREFIX + "patroni_namespace",
                              f"must be a key path like /service/, got {shown_value(ns_text)}")
        namespace = ns_text
    scope = stripped(environ, "patroni_scope")
    if scope is not None and not _SCOPE_RE.fullmatch(scope):
        raise ConfigError(PREFIX + "patroni_scope",
                          f"must be a name without slashes or spaces, got {shown_value(scope)}")
    unreadable_text = stripped(environ, "patroni_unreadable")
    unreadable = "hosts" if unreadable_text is None else unreadable_text.lower()
    if unreadable not in UNREADABLE_RULES:
        raise ConfigError(PREFIX + "patroni_unreadable",
                          f"must be hosts, last_leader or no_master, got "
                          f"{shown_value(unreadable_text or '')}")
    files = {name: _pem_file(environ, "patroni_" + name) for name in ("cacert", "cert", "key")}
    username = stripped(environ, "patroni_username") or ""
    check_no_nul(PREFIX + "patroni_username", username)
    password = environ.get(PREFIX + "patroni_password", "")
    check_utf8(PREFIX + "patroni_password", password, secret=True)
    check_no_nul(PREFIX + "patroni_password", password, secret=True)
    if endpoints:
        if importlib.util.find_spec("treq") is None:
            raise ConfigError(PREFIX + "patroni_etcd", "needs treq, which is not installed: "
                              "pip install 'pg-status[patroni]'")
        if scope is None:
            raise ConfigError(PREFIX + "patroni_etcd",
                              "needs pg_status__patroni_scope too: Patroni's scope "
                              "(the cluster name)")
        for name, path in files.items():
            if path and not endpoints[0].startswith("https:"):
                raise ConfigError(PREFIX + "patroni_" + name,
                                  "needs https:// endpoints in pg_status__patroni_etcd")
        if bool(files["cert"]) != bool(files["key"]):
            given, missing = (("cert", "key") if files["cert"] else ("key", "cert"))
            raise ConfigError(PREFIX + "patroni_" + given,
                              f"needs pg_status__patroni_{missing} too: a client "
                              "certificate goes with its key")
        if bool(username) != bool(password):
            given, missing = (("username", "password") if username
                              else ("password", "username"))
            raise ConfigError(PREFIX + "patroni_" + given,
                              f"needs pg_status__patroni_{missing} too: etcd authenticates "
                              "a user with a password")
    return {"patroni_etcd": endpoints, "patroni_namespace": namespace,
            "patroni_scope": scope or "", "patroni_unreadable": unreadable,
            "patroni_cacert": files["cacert"], "patroni_cert": files["cert"],
            "patroni_key": files["key"], "patroni_username": username,
            "patroni_password": password}


def pem_bytes(variable: str, path: str) -> bytes:
    """
    The contents of a PEM file named by a setting, read again at start
    (as :func:`~pgstatus.config.files.read_regular_file` reads).
    """
    return read_regular_file(PREFIX + variable, path)
