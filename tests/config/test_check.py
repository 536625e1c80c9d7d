"""
:mod:`pgstatus.config.check`: every invalid variable named at once, the
same verdict as a start, the report's lines.
"""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pgstatus.config.check import check_environ, run_check
from pgstatus.config.environ import load_config
from pgstatus.config.files import with_env_file
from pgstatus.config.settings import PREFIX, ConfigError
from pgstatus.config.table import SETTINGS

P = PREFIX


def named(environ: dict[str, str]) -> list[str]:
    return [e.variable for e in check_environ(environ).errors]


def test_valid_configuration() -> None:
    result = check_environ({P + "hosts": "db1,db2", P + "pg_port": "5432,5433"})
    assert result.ok and result.errors == () and result.warnings == ()


def test_every_bad_variable_is_named() -> None:
    """
    A start stops at the first invalid variable; the check names each,
    with the start's own message for it.
    """
    environ = {P + "hosts": "a,b", P + "pg_port": "1,2,3", P + "sleep_ms": "0",
               P + "log_level": "loud", P + "http_listen_address": "nowhere",
               P + "follow": "https://hub", P + "current_dc_env": "1bad"}
    result = check_environ(environ)
    assert [e.variable for e in result.errors] == [
        P + "pg_port", P + "current_dc_env", P + "sleep_ms", P + "http_listen_address",
        P + "log_level", P + "follow"]
    try:
        load_config(environ)
    except ConfigError as first:
        assert str(result.errors[0]) == str(first)


def test_missing_hosts_and_other_errors() -> None:
    """
    Without ``hosts``, the other variables are still checked, against
    stand-in hosts as many as the port list, so that a port list is not
    blamed for the missing hosts; locality warnings about the stand-ins
    are not reported.
    """
    assert named({P + "pg_port": "1,2,x", P + "max_fails": "0"}) == [
        P + "hosts", P + "pg_port", P + "max_fails"]
    assert named({P + "pg_port": "1,2,3", P + "hosts_dc": "a"}) == [P + "hosts"]
    assert check_environ({P + "hosts_dc": "a", P + "hots": "x"}).warnings == (
        "unknown variable pg_status__hots is ignored; did you mean pg_status__hosts?",)
    assert named({P + "hosts": " , ", P + "sleep_ms": "x"}) == [P + "hosts", P + "sleep_ms"]


def test_password_problems(tmp_path: Path) -> None:
    """
    A password file that cannot be used, and a password with both
    sources, are errors naming the variable; the password is never shown.
    """
    secret = tmp_path / "password"
    secret.write_text("s3cret-value\n")
    secret.chmod(0o644)
    result = check_environ({P + "hosts": "db", P + "pg_password_file": str(secret),
                            P + "pg_password": "other-s3cret", P + "sleep_ms": "-5"})
    assert [e.variable for e in result.errors] == [P + "pg_password_file", P + "sleep_ms"]
    result = check_environ({P + "hosts": "db", P + "pg_password_file": str(secret)})
    assert [e.variable for e in result.errors] == [P + "pg_password_file"]
    assert "0644" in str(result.errors[0])
    out = io.StringIO()
    run_check({P + "hosts": "db", P + "pg_password": "s3cr\x00et", P + "pg_password_file": ""},
              out)
    assert "s3cr" not in out.getvalue() and P + "pg_password:" in out.getvalue()


def test_env_file(tmp_path: Path) -> None:
    """
    The environment file is applied as at start: its bad variables and
    unknown ones are reported; an unreadable file is an error and the
    environment alone is still checked.
    """
    path = tmp_path / "pg-status.env"
    path.write_text("pg_status__sleep_ms=0\npg_status__hotss=x\n")
    result = check_environ({P + "hosts": "db", P + "env_file": str(path),
                            P + "max_fails": "0"})
    assert [e.variable for e in result.errors] == [P + "max_fails", P + "sleep_ms"]
    assert result.warnings == (
        "unknown variable pg_status__hotss is ignored; did you mean pg_status__hosts?",)
    result = check_environ({P + "env_file": str(tmp_path / "missing"), P + "sleep_ms": "0"})
    assert [e.variable for e in result.errors] == [P + "env_file", P + "hosts", P + "sleep_ms"]


def test_report_lines_and_exit_status() -> None:
    """
    One line per problem, the start's ``configuration error:`` line for
    each error, then a summary; 2 when a start would fail, 0 otherwise,
    warnings or not.
    """
    out = io.StringIO()
    assert run_check({P + "hosts": "db", P + "sleep_ms": "0", P + "log_format": "xml",
                      P + "hots": "x"}, out) == 2
    assert out.getvalue().splitlines() == [
        "pg-status: configuration error: pg_status__sleep_ms: must be an integer greater "
        "than 0, got '0'",
        "pg-status: configuration error: pg_status__log_format: must be text or json, "
        "got 'xml'",
        "pg-status: configuration warning: unknown variable pg_status__hots is ignored; "
        "did you mean pg_status__hosts?",
        "pg-status: configuration invalid (2 errors, 1 warning): pg-status would not start",
    ]
    out = io.StringIO()
    assert run_check({P + "hosts": "db", P + "hots": "x"}, out) == 0
    assert out.getvalue().splitlines()[-1] == "pg-status: configuration OK (1 warning)"
    out = io.StringIO()
    assert run_check({P + "hosts": "db"}, out) == 0
    assert out.getvalue() == "pg-status: configuration OK (0 warnings)\n"


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(
    st.sampled_from([s.name for s in SETTINGS if s.name not in ("env_file",
                                                                 "pg_password_file")]
                    + ["hots", "sleep_msec"]),
    st.one_of(st.sampled_from(["", "0", "1", "-1", "x", "a,b", "1,2", "debug", "json",
                               "127.0.0.1", "http://h:1", "NAME"]),
              st.text(max_size=12))))
def test_same_verdict_as_a_start(values: dict[str, str]) -> None:
    """
    For any environment, the check fails exactly when :func:`load_config`
    (what a start runs) fails, its first error is the start's error, each
    error names a different variable, and when both succeed the warnings
    are the start's.
    """
    environ = {P + k: v for k, v in values.items()}
    result = check_environ(environ)
    try:
        config = load_config(with_env_file(environ))
    except ConfigError as e:
        assert not result.ok
        assert str(result.errors[0]) == str(e)
        variables = [err.variable for err in result.errors]
        assert len(variables) == len(set(variables))
    else:
        assert result.ok and result.warnings == config.warnings
