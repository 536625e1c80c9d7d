"""
The Patroni settings (:mod:`pgstatus.config.patroni`): opt-in, validated
by a start and by ``--check-config`` (one line naming the variable, exit 2).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pgstatus.config.check import run_check
from pgstatus.config.environ import load_config
from pgstatus.config.patroni import key_prefix
from pgstatus.config.settings import PREFIX, ConfigError

BASE = {PREFIX + "hosts": "db1,db2"}
ETCD = BASE | {PREFIX + "patroni_etcd": "http://etcd1:2379, http://etcd2",
               PREFIX + "patroni_scope": "demo"}


def env(**values: str) -> dict[str, str]:
    return ETCD | {PREFIX + k: v for k, v in values.items()}


def test_off_by_default() -> None:
    config = load_config(BASE)
    assert config.patroni_etcd == ()


def test_settings() -> None:
    config = load_config(env(patroni_ttl="20", patroni_unreadable="No_Master"))
    assert config.patroni_etcd == ("http://etcd1:2379", "http://etcd2:2379")
    assert (config.patroni_scope, config.patroni_ttl) == ("demo", 20)
    assert config.patroni_unreadable == "no_master"
    assert key_prefix(config.patroni_namespace, config.patroni_scope) == "/service/demo/"
    assert key_prefix("service", "demo") == key_prefix("//service//", "demo")


def test_password_never_shown() -> None:
    config = load_config(env(patroni_username="u", patroni_password="s3cret"))
    assert "s3cret" not in repr(config) and "s3cret" not in str(config.public_items())


def _pem(tmp_path: Path, name: str) -> str:
    p = tmp_path / name
    p.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    return str(p)


@pytest.mark.parametrize("values, variable", [
    ({"patroni_etcd": "etcd1:2379"}, "patroni_etcd"),
    ({"patroni_etcd": "http://etcd1:2379/v3"}, "patroni_etcd"),
    ({"patroni_etcd": "http://a:2379,https://b:2379"}, "patroni_etcd"),
    ({"patroni_etcd": "http://a:2379,http://a"}, "patroni_etcd"),
    ({"patroni_etcd": "http://a:70000"}, "patroni_etcd"),
    ({"patroni_scope": ""}, "patroni_etcd"),
    ({"patroni_scope": "a/b"}, "patroni_scope"),
    ({"patroni_namespace": "/"}, "patroni_namespace"),
    ({"patroni_ttl": "0"}, "patroni_ttl"),
    ({"patroni_unreadable": "maybe"}, "patroni_unreadable"),
    ({"patroni_username": "u"}, "patroni_username"),
    ({"patroni_password": "p"}, "patroni_password"),
    ({"patroni_cacert": "/nonexistent/ca.pem"}, "patroni_cacert"),
])
def test_invalid(values: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env(**values))
    assert info.value.variable == PREFIX + variable


def test_tls_files(tmp_path: Path) -> None:
    https = {"patroni_etcd": "https://etcd1:2379"}
    cert, key = _pem(tmp_path, "c.pem"), _pem(tmp_path, "k.pem")
    config = load_config(env(**https, patroni_cacert=cert, patroni_cert=cert, patroni_key=key))
    assert (config.patroni_cacert, config.patroni_key) == (cert, key)
    with pytest.raises(ConfigError) as info:
        load_config(env(patroni_cacert=cert))  # http endpoints
    assert info.value.variable == PREFIX + "patroni_cacert"
    with pytest.raises(ConfigError) as info:
        load_config(env(**https, patroni_cert=cert))
    assert info.value.variable == PREFIX + "patroni_cert"
    assert "pg_status__patroni_key" in info.value.reason
    (tmp_path / "empty.pem").write_text("nothing\n")
    with pytest.raises(ConfigError) as info:
        load_config(env(**https, patroni_cacert=str(tmp_path / "empty.pem")))
    assert "no PEM" in info.value.reason


def test_check_config_names_each_variable() -> None:
    out = io.StringIO()
    status = run_check(BASE | {PREFIX + "patroni_etcd": "etcd1", PREFIX + "patroni_ttl": "x"},
                       out)
    lines = out.getvalue().splitlines()
    assert status == 2
    assert any(line.startswith("pg-status: configuration error: pg_status__patroni_etcd: ")
               for line in lines), lines
    assert any(line.startswith("pg-status: configuration error: pg_status__patroni_ttl: ")
               for line in lines), lines


def test_tls_policy_loads_the_files(tmp_path: Path) -> None:
    """
    The https policy (:mod:`pgstatus.monitor.patroni_tls`) loads the CA
    bundle and the client certificate with its key, and gives a TLS
    connection creator for an endpoint.
    """
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from twisted.internet.interfaces import IOpenSSLClientConnectionCreator

    from pgstatus.monitor.patroni_tls import policy

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "etcd-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_pem = tmp_path / "cert.pem"
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM) * 2)  # a bundle
    key_pem = tmp_path / "key.pem"
    key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    config = load_config(env(patroni_etcd="https://127.0.0.1:2379",
                             patroni_cacert=str(cert_pem), patroni_cert=str(cert_pem),
                             patroni_key=str(key_pem)))
    creator = policy(config).creatorForNetloc(b"127.0.0.1", 2379)
    assert IOpenSSLClientConnectionCreator.providedBy(creator)


def test_tls_policy_refuses_an_unusable_file(tmp_path: Path) -> None:
    from pgstatus.monitor.patroni_tls import policy

    bad = _pem(tmp_path, "bad.pem")  # a PEM block that is no certificate
    config = load_config(env(patroni_etcd="https://127.0.0.1:2379", patroni_cacert=bad))
    with pytest.raises(ConfigError) as info:
        policy(config)
    assert info.value.variable == PREFIX + "patroni_cacert"
