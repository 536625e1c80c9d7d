"""
TLS towards etcd for :mod:`pgstatus.monitor.patroni_store`, as Patroni's
``etcd3`` section takes it: ``cacert`` (else the system's trust store),
``cert`` and ``key`` (a client certificate).  Public Twisted APIs only
(``optionsForClientTLS``, an ``IPolicyForHTTPS``); needs pyOpenSSL, which
treq brings.
"""

from __future__ import annotations

import re
from typing import Any

from twisted.internet.ssl import (
    Certificate,
    PrivateCertificate,
    optionsForClientTLS,
    trustRootFromCertificates,
)
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from pgstatus.config.patroni import pem_bytes
from pgstatus.config.settings import PREFIX, Config, ConfigError

_CERT_RE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


@implementer(IPolicyForHTTPS)
class _Policy:
    def __init__(self, trust: Any, client: Any) -> None:
        self._trust = trust
        self._client = client

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        return optionsForClientTLS(hostname.decode("idna"), trustRoot=self._trust,
                                   clientCertificate=self._client)


def policy(config: Config) -> Any:
    """
    The connection policy for ``config``'s https endpoints.

    :raises ConfigError: naming the setting whose file holds no usable
        certificate or key (a start then stops with that line, exit 2).
    """
    trust = None
    if config.patroni_cacert:
        try:
            certs = [Certificate.loadPEM(m.group(0))
                     for m in _CERT_RE.finditer(pem_bytes("patroni_cacert",
                                                          config.patroni_cacert))]
        except Exception as e:  # noqa: BLE001 - whatever OpenSSL says of the file
            raise _unusable("patroni_cacert", config.patroni_cacert, e) from None
        if not certs:
            raise ConfigError(PREFIX + "patroni_cacert",
                              f"{config.patroni_cacert!r} holds no certificate")
        trust = trustRootFromCertificates(certs)
    client = None
    if config.patroni_cert:
        try:
            client = PrivateCertificate.loadPEM(
                pem_bytes("patroni_cert", config.patroni_cert) + b"\n"
                + pem_bytes("patroni_key", config.patroni_key))
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001
            raise _unusable("patroni_cert", config.patroni_cert, e) from None
    return _Policy(trust, client)


def _unusable(name: str, path: str, error: Exception) -> ConfigError:
    return ConfigError(PREFIX + name, f"{path!r} is not a usable PEM certificate (or key): "
                       f"{error}")
