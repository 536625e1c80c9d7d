"""Tests for :mod:`pgstatus.config` (pure functions, no reactor)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgstatus.config.environ import load_config, log_settings
from pgstatus.config.settings import Config, ConfigError, HostConfig

P = "pg_status__"
INT_MAX = 2**63 - 1
SECRET = "s3cr3t-Pa55word"


def env(**values: str) -> dict[str, str]:
    """An environment with one host plus ``pg_status__<key>=<value>``."""
    result = {P + "hosts": "db1"}
    result.update({P + key: value for key, value in values.items()})
    return result


def error_for(environ: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(environ)
    return info.value


# ---------------------------------------------------------------------------
# ConfigError


def test_config_error_attributes_and_str():
    err = ConfigError("pg_status__sleep_ms", "must be an integer greater than 0, got '0'")
    assert err.variable == "pg_status__sleep_ms"
    assert err.reason == "must be an integer greater than 0, got '0'"
    assert str(err) == "pg_status__sleep_ms: must be an integer greater than 0, got '0'"
    assert isinstance(err, Exception)


def test_config_error_message_example_from_brief():
    err = error_for(env(sleep_ms="0"))
    assert str(err) == "pg_status__sleep_ms: must be an integer greater than 0, got '0'"


def test_config_error_is_one_line_even_for_multiline_values():
    err = error_for(env(sleep_ms="1\n2"))
    assert "\n" not in str(err)


def test_config_error_shortens_long_values():
    err = error_for(env(log_level="x" * 10_000))
    assert err.variable == P + "log_level"
    assert len(str(err)) < 300


# ---------------------------------------------------------------------------
# Defaults

DEFAULTS = {
    "pg_user": "postgres",
    "pg_password": "postgres",
    "pg_database": "postgres",
    "current_dc": None,
    "current_geo": None,
    "use_dc": False,
    "use_geo": False,
    "max_fails": 3,
    "sleep_ms": 1000,
    "query_timeout_ms": 1000,
    "conn_max_age_ms": 3600000,
    "poll_error_log_interval_ms": 60000,
    "sync_max_lag_ms": 1000,
    "sync_max_lag_bytes": 1000000,
    "http_listen_address": "0.0.0.0",
    "http_port": 8000,
    "log_level": "info",
    "log_format": "text",
    "follow": (),
    "follow_timeout_ms": 3000,
    "warnings": (),
}


@pytest.mark.parametrize(("attr", "expected"), sorted(DEFAULTS.items()))
def test_default(attr, expected):
    config = load_config({P + "hosts": "db1"})
    assert getattr(config, attr) == expected


@pytest.mark.parametrize(("attr", "expected"), sorted(DEFAULTS.items()))
def test_dataclass_default_matches_loaded_default(attr, expected):
    config = Config(hosts=(HostConfig("db1", 5432, None, None),))
    assert getattr(config, attr) == expected


def test_default_hosts():
    config = load_config({P + "hosts": "db1"})
    assert config.hosts == (HostConfig(name="db1", port=5432, dc=None, geo=None),)


@pytest.mark.parametrize(
    "name",
    [
        "pg_user",
        "pg_database",
        "pg_port",
        "hosts_dc",
        "current_dc",
        "current_dc_env",
        "hosts_geo",
        "current_geo",
        "current_geo_env",
        "max_fails",
        "sleep_ms",
        "query_timeout_ms",
        "conn_max_age_ms",
        "poll_error_log_interval_ms",
        "sync_max_lag_ms",
        "sync_max_lag_bytes",
        "http_listen_address",
        "http_port",
        "log_level",
        "log_format",
    ],
)
def test_empty_optional_value_means_default(name):
    assert load_config(env(**{name: ""})) == load_config(env())


@pytest.mark.parametrize(
    "name",
    [
        "pg_port",
        "max_fails",
        "sleep_ms",
        "http_port",
        "http_listen_address",
        "log_level",
        "log_format",
        "current_dc",
        "current_dc_env",
        "hosts_dc",
    ],
)
def test_blank_parsed_value_means_default(name):
    assert load_config(env(**{name: "   "})) == load_config(env())


def test_config_is_frozen():
    config = load_config(env())
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.sleep_ms = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.hosts[0].port = 1  # type: ignore[misc]


def test_unknown_variables_are_ignored():
    """
    Unknown variables change nothing but the warnings (one each, see
    tests/config/test_unknown.py); other variables are not warned about.
    """
    config = load_config(
        env(future_option="whatever", sleep_msec="abc", **{"": "x"}) | {"OTHER": "1"}
    )
    assert dataclasses.replace(config, warnings=()) == load_config(env())
    assert len(config.warnings) == 3


def test_environ_is_not_modified():
    environ = env(sleep_ms="5", current_dc_env="PLATFORM_DC") | {"PLATFORM_DC": "x"}
    snapshot = dict(environ)
    load_config(environ)
    assert environ == snapshot


# ---------------------------------------------------------------------------
# Hosts


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("db1", ("db1",)),
        ("db1,db2,db3", ("db1", "db2", "db3")),
        (" db1 , db2 ", ("db1", "db2")),
        ("10.0.0.1,::1,db.example.com", ("10.0.0.1", "::1", "db.example.com")),
        ("\tdb1\n", ("db1",)),
    ],
)
def test_hosts_valid(value, names):
    config = load_config({P + "hosts": value})
    assert tuple(h.name for h in config.hosts) == names


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {P + "hosts": ""},
        {P + "hosts": "   "},
        {P + "hosts": ","},
        {P + "hosts": "db1,"},
        {P + "hosts": ",db1"},
        {P + "hosts": "db1,,db2"},
        {P + "hosts": "db1, ,db2"},
        {P + "hosts": "db\x001"},
        {"PG_STATUS__HOSTS": "db1"},
    ],
)
def test_hosts_invalid(environ):
    err = error_for(environ)
    assert err.variable == P + "hosts"


def test_hosts_missing_message_is_helpful():
    assert "required" in str(error_for({}))


def test_hosts_empty_entry_message_names_position():
    err = error_for({P + "hosts": "db1,,db2"})
    assert "entry 2 of 3 is empty" in err.reason


# ---------------------------------------------------------------------------
# Ports


@pytest.mark.parametrize(
    ("hosts", "value", "ports"),
    [
        ("a", "5433", (5433,)),
        ("a,b,c", "6432", (6432, 6432, 6432)),
        ("a,b,c", "5432,5433,5434", (5432, 5433, 5434)),
        ("a,b", " 1 , 65535 ", (1, 65535)),
        ("a,b", "05432", (5432, 5432)),
        ("a,b", "", (5432, 5432)),
    ],
)
def test_pg_port_valid(hosts, value, ports):
    config = load_config({P + "hosts": hosts, P + "pg_port": value})
    assert tuple(h.port for h in config.hosts) == ports


@pytest.mark.parametrize(
    ("hosts", "value"),
    [
        ("a", "0"),
        ("a", "65536"),
        ("a", "-1"),
        ("a", "+5432"),
        ("a", "54 32"),
        ("a", "5432.0"),
        ("a", "abc"),
        ("a", "0x1538"),
        ("a", "1e3"),
        ("a", "٥٤٣٢"),  # non-ASCII digits
        ("a", "99999999999999999999999999"),
        ("a", "5432,5433"),
        ("a,b", "5432,5433,5434"),
        ("a,b,c", "5432,5433"),
        ("a,b", "5432,"),
        ("a,b", ",5432"),
        ("a,b,c", "5432,,5434"),
        ("a,b", "5432,0"),
        ("a,b", "5432,x"),
    ],
)
def test_pg_port_invalid(hosts, value):
    err = error_for({P + "hosts": hosts, P + "pg_port": value})
    assert err.variable == P + "pg_port"


def test_pg_port_count_mismatch_message():
    err = error_for({P + "hosts": "a,b,c", P + "pg_port": "1,2"})
    assert "3" in err.reason and "got 2" in err.reason


# ---------------------------------------------------------------------------
# Plain string settings


@pytest.mark.parametrize("name", ["pg_user", "pg_database"])
@pytest.mark.parametrize("value", ["monitor", "Ünïcode user", " spaced ", "a=b'c"])
def test_string_settings_verbatim(name, value):
    assert getattr(load_config(env(**{name: value})), name) == value


@pytest.mark.parametrize("name", ["pg_user", "pg_database"])
def test_string_settings_reject_nul(name):
    assert error_for(env(**{name: "a\x00b"})).variable == P + name


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "postgres"),
        ({P + "pg_password": ""}, ""),
        ({P + "pg_password": SECRET}, SECRET),
        ({P + "pg_password": " with spaces "}, " with spaces "),
    ],
)
def test_pg_password(environ, expected):
    assert load_config({P + "hosts": "db1"} | environ).pg_password == expected


def test_pg_password_with_nul_error_does_not_echo_value():
    err = error_for(env(pg_password=SECRET + "\x00"))
    assert err.variable == P + "pg_password"
    assert SECRET not in str(err)
    assert SECRET not in repr(err.args)


# ---------------------------------------------------------------------------
# Integer settings

INT_RULES = {
    # name: (smallest valid, largest valid)
    "max_fails": (1, INT_MAX),
    "sleep_ms": (1, INT_MAX),
    "query_timeout_ms": (1, INT_MAX),
    "conn_max_age_ms": (1, INT_MAX),
    "poll_error_log_interval_ms": (0, INT_MAX),
    "sync_max_lag_ms": (0, INT_MAX),
    "sync_max_lag_bytes": (0, INT_MAX),
    "http_port": (0, 65535),
}
INT_NAMES = sorted(INT_RULES)


def _valid_int_cases():
    for name, (lo, hi) in INT_RULES.items():
        for text, value in [
            (str(lo), lo),
            (str(hi), hi),
            (str(lo + 1), lo + 1),
            (f"  {lo + 7}  ", lo + 7),
            ("000" + str(lo + 2), lo + 2),
        ]:
            yield pytest.param(name, text, value, id=f"{name}={text!r}")


@pytest.mark.parametrize(("name", "text", "value"), list(_valid_int_cases()))
def test_int_valid(name, text, value):
    assert getattr(load_config(env(**{name: text})), name) == value


def test_int_typical_values():
    config = load_config(
        env(
            max_fails="5",
            sleep_ms="250",
            query_timeout_ms="2500",
            conn_max_age_ms="60000",
            poll_error_log_interval_ms="0",
            sync_max_lag_ms="0",
            sync_max_lag_bytes="16777216",
            http_port="0",
        )
    )
    assert (
        config.max_fails,
        config.sleep_ms,
        config.query_timeout_ms,
        config.conn_max_age_ms,
        config.poll_error_log_interval_ms,
        config.sync_max_lag_ms,
        config.sync_max_lag_bytes,
        config.http_port,
    ) == (5, 250, 2500, 60000, 0, 0, 16777216, 0)


COMMON_BAD_INTS = [
    "-1",
    "+1",
    "1.0",
    "1.5",
    "1e3",
    "0x10",
    "1_000",
    "1 000",
    "abc",
    "12abc",
    "١٢",  # Arabic-Indic digits: str.isdigit() but not plain ASCII decimal
    "²",
    "NaN",
    "inf",
    str(2**63),
    "9" * 30,
    "1" * 5000,  # longer than Python's int() digit limit
]


def _invalid_int_cases():
    for name, (lo, hi) in INT_RULES.items():
        bad = list(COMMON_BAD_INTS)
        if lo > 0:
            bad.append(str(lo - 1))
        if hi < INT_MAX:
            bad.append(str(hi + 1))
        for text in bad:
            yield pytest.param(name, text, id=f"{name}={text[:20]!r}")


@pytest.mark.parametrize(("name", "text"), list(_invalid_int_cases()))
def test_int_invalid(name, text):
    err = error_for(env(**{name: text}))
    assert err.variable == P + name
    assert str(err).startswith(P + name + ": must be ")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("max_fails", "at least 1"),
        ("sleep_ms", "greater than 0"),
        ("query_timeout_ms", "greater than 0"),
        ("conn_max_age_ms", "greater than 0"),
        ("poll_error_log_interval_ms", "non-negative"),
        ("sync_max_lag_ms", "non-negative"),
        ("sync_max_lag_bytes", "non-negative"),
        ("http_port", "0 to 65535"),
    ],
)
def test_int_error_explains_range(name, expected):
    assert expected in error_for(env(**{name: "-5"})).reason


def test_int_too_large_error_says_so():
    err = error_for(env(sleep_ms=str(2**64)))
    assert "too large" in err.reason


# ---------------------------------------------------------------------------
# HTTP listen address


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("*", "*"),
        (" * ", "*"),
        ("0.0.0.0", "0.0.0.0"),
        ("127.0.0.1", "127.0.0.1"),
        ("192.168.1.20", "192.168.1.20"),
        ("::", "::"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("[::]", "::"),
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:DB8:0:0::1]", "2001:DB8:0:0::1"),
        ("::ffff:10.0.0.1", "::ffff:10.0.0.1"),
        ("fe80::1%eth0", "fe80::1%eth0"),
    ],
)
def test_http_listen_address_valid(value, expected):
    assert load_config(env(http_listen_address=value)).http_listen_address == expected


@pytest.mark.parametrize(
    "value",
    [
        "localhost",
        "example.com",
        "**",
        "0.0.0.0:8000",
        "256.0.0.1",
        "1.2.3",
        "010.0.0.1",
        "[127.0.0.1]",
        "[::1",
        "::1]",
        "::1::2",
        "[]",
        "1.2.3.4/32",
        "0",
    ],
)
def test_http_listen_address_invalid(value):
    err = error_for(env(http_listen_address=value))
    assert err.variable == P + "http_listen_address"
    assert "IPv4" in err.reason and "IPv6" in err.reason


# ---------------------------------------------------------------------------
# Logging


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("debug", "debug"),
        ("info", "info"),
        ("warning", "warning"),
        ("warn", "warning"),
        ("error", "error"),
        ("fatal", "fatal"),
        ("DEBUG", "debug"),
        ("Info", "info"),
        ("WARN", "warning"),
        ("WaRnInG", "warning"),
        (" error ", "error"),
        ("FATAL", "fatal"),
    ],
)
def test_log_level_valid(value, expected):
    assert load_config(env(log_level=value)).log_level == expected


@pytest.mark.parametrize("value", ["trace", "critical", "warnings", "err", "1", "info,debug"])
def test_log_level_invalid(value):
    err = error_for(env(log_level=value))
    assert err.variable == P + "log_level"
    assert "debug" in err.reason and "fatal" in err.reason


@pytest.mark.parametrize(
    ("value", "expected"),
    [("text", "text"), ("json", "json"), ("JSON", "json"), (" Text ", "text")],
)
def test_log_format_valid(value, expected):
    assert load_config(env(log_format=value)).log_format == expected


@pytest.mark.parametrize("value", ["logfmt", "plain", "yaml", "jsonl", "1"])
def test_log_format_invalid(value):
    assert error_for(env(log_format=value)).variable == P + "log_format"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, ("info", "text")),
        ({P + "log_level": "WARN", P + "log_format": "JSON"}, ("warning", "json")),
        ({P + "log_level": "debug"}, ("debug", "text")),
        ({P + "log_level": "loud", P + "log_format": "json"}, ("info", "json")),
        ({P + "log_level": "error", P + "log_format": "xml"}, ("error", "text")),
        ({P + "log_level": "", P + "log_format": ""}, ("info", "text")),
    ],
)
def test_log_settings_never_raises(environ, expected):
    # No hosts needed: used to set up logging before full validation.
    assert log_settings(environ) == expected


# ---------------------------------------------------------------------------
# Locality

HOSTS3 = {P + "hosts": "h1,h2,h3"}


def loc(**values: str) -> dict[str, str]:
    """Three hosts plus the given variables (keys without prefix for pg_status__ ones)."""
    result = dict(HOSTS3)
    for key, value in values.items():
        result[key if key.isupper() else P + key] = value
    return result


def test_locality_complete_both_dimensions():
    config = load_config(
        loc(
            hosts_dc="fra,ams,fra",
            current_dc="fra",
            hosts_geo="eu,eu,us",
            current_geo="eu",
        )
    )
    assert config.use_dc and config.use_geo
    assert config.current_dc == "fra" and config.current_geo == "eu"
    assert [(h.dc, h.geo) for h in config.hosts] == [
        ("fra", "eu"),
        ("ams", "eu"),
        ("fra", "us"),
    ]
    assert config.warnings == ()


def test_locality_spec_example():
    config = load_config(
        {
            P + "hosts": "db-frankfurt.example,db-amsterdam.example",
            P + "hosts_dc": "frankfurt,amsterdam",
            P + "hosts_geo": "europe,europe",
            P + "current_dc": "frankfurt",
            P + "current_geo_env": "PLATFORM_GEO",
            "PLATFORM_GEO": "europe",
        }
    )
    assert config.use_dc and config.use_geo
    assert config.current_dc == "frankfurt"
    assert config.current_geo == "europe"
    assert config.warnings == ()


def test_locality_values_are_stripped():
    config = load_config(loc(hosts_dc=" a , b ,c ", current_dc=" a "))
    assert [h.dc for h in config.hosts] == ["a", "b", "c"]
    assert config.current_dc == "a"
    assert config.use_dc


def test_locality_not_configured_no_warning():
    config = load_config(loc())
    assert not config.use_dc and not config.use_geo
    assert config.warnings == ()
    assert all(h.dc is None and h.geo is None for h in config.hosts)


def test_locality_env_name_pointing_to_missing_variable_alone_is_not_a_warning():
    # Only the indirection is configured; it resolves to nothing, so nothing
    # of the dimension is available.
    config = load_config(loc(current_dc_env="PLATFORM_DC"))
    assert not config.use_dc
    assert config.current_dc is None
    assert config.warnings == ()


@pytest.mark.parametrize("dim", ["dc", "geo"])
@pytest.mark.parametrize(
    ("values", "mentions"),
    [
        # hosts list only
        ({"hosts_{d}": "x,y,z"}, ["current_{d}", "current_{d}_env"]),
        # current value only
        ({"current_{d}": "x"}, ["hosts_{d}"]),
        # env indirection resolves, but no hosts list
        ({"current_{d}_env": "WHERE", "WHERE": "x"}, ["hosts_{d}"]),
        # one host has an empty value
        ({"hosts_{d}": "x,,z", "current_{d}": "x"}, ["hosts_{d}", "h2"]),
        ({"hosts_{d}": "x,y, ", "current_{d}": "x"}, ["hosts_{d}", "h3"]),
        ({"hosts_{d}": ",,", "current_{d}": "x"}, ["hosts_{d}", "h1"]),
        # list shorter / longer than hosts
        ({"hosts_{d}": "x,y", "current_{d}": "x"}, ["hosts_{d}", "2 entries", "3"]),
        ({"hosts_{d}": "x,y,z,w", "current_{d}": "x"}, ["hosts_{d}", "4 entries"]),
        ({"hosts_{d}": "x", "current_{d}": "x"}, ["hosts_{d}", "1 entry but"]),
        # mismatch and no current value: both reported
        ({"hosts_{d}": "x,y"}, ["hosts_{d}", "2 entries", "current_{d}"]),
        # indirection points to a missing / empty variable
        ({"hosts_{d}": "x,y,z", "current_{d}_env": "WHERE"}, ["current_{d}_env", "WHERE"]),
        (
            {"hosts_{d}": "x,y,z", "current_{d}_env": "WHERE", "WHERE": ""},
            ["current_{d}_env", "WHERE"],
        ),
        (
            {"hosts_{d}": "x,y,z", "current_{d}_env": "WHERE", "WHERE": "  "},
            ["current_{d}_env", "WHERE"],
        ),
    ],
)
def test_locality_partial_warns_and_is_not_used(dim, values, mentions):
    other = "geo" if dim == "dc" else "dc"
    environ = dict(HOSTS3)
    for key, value in values.items():
        key = key.format(d=dim)
        environ[key if key.isupper() else P + key] = value
    # The other dimension is complete and must still apply.
    environ[P + f"hosts_{other}"] = "o1,o2,o3"
    environ[P + f"current_{other}"] = "o1"

    config = load_config(environ)

    assert getattr(config, f"use_{dim}") is False
    assert getattr(config, f"use_{other}") is True
    assert len(config.warnings) == 1
    warning = config.warnings[0]
    # the original service's line: "<dc|geo> preference disabled: ..."
    assert warning.startswith(f"{dim} preference disabled: incomplete locality configuration; ")
    assert "\n" not in warning
    for mention in mentions:
        mention = mention.format(d=dim)
        if mention[0].islower() and mention.startswith(("hosts_", "current_")):
            mention = P + mention
        assert mention in warning
    assert f"{P}hosts_{other}" not in warning


def test_both_dimensions_partial_two_warnings():
    config = load_config(loc(hosts_dc="a,b,c", current_geo="eu"))
    assert not config.use_dc and not config.use_geo
    assert len(config.warnings) == 2
    assert config.warnings[0].startswith("dc preference disabled: ")
    assert config.warnings[1].startswith("geo preference disabled: ")


def test_locality_mismatched_length_keeps_positional_values():
    config = load_config(loc(hosts_dc="a,b", current_dc="a"))
    assert [h.dc for h in config.hosts] == ["a", "b", None]
    config = load_config(loc(hosts_dc="a,b,c,d", current_dc="a"))
    assert [h.dc for h in config.hosts] == ["a", "b", "c"]


def test_locality_partial_keeps_configured_values_for_reporting():
    config = load_config(loc(hosts_geo="eu,,us"))
    assert [h.geo for h in config.hosts] == ["eu", None, "us"]
    assert config.current_geo is None
    config = load_config(loc(current_dc="fra"))
    assert config.current_dc == "fra"
    assert not config.use_dc


def test_locality_single_host():
    config = load_config({P + "hosts": "db", P + "hosts_dc": "fra", P + "current_dc": "fra"})
    assert config.use_dc
    assert config.hosts[0].dc == "fra"


def test_current_dc_may_match_no_host():
    # Complete metadata is enough; a current DC without local hosts is valid.
    config = load_config(loc(hosts_dc="a,b,c", current_dc="zzz"))
    assert config.use_dc
    assert config.warnings == ()


@pytest.mark.parametrize("dim", ["dc", "geo"])
def test_direct_current_value_wins_over_env(dim):
    config = load_config(
        loc(
            **{
                f"hosts_{dim}": "a,b,c",
                f"current_{dim}": "direct",
                f"current_{dim}_env": "PLATFORM",
                "PLATFORM": "indirect",
            }
        )
    )
    assert getattr(config, f"current_{dim}") == "direct"
    assert getattr(config, f"use_{dim}")


@pytest.mark.parametrize("dim", ["dc", "geo"])
def test_env_used_when_direct_value_empty(dim):
    config = load_config(
        loc(
            **{
                f"hosts_{dim}": "a,b,c",
                f"current_{dim}": "",
                f"current_{dim}_env": "PLATFORM",
                "PLATFORM": " indirect ",
            }
        )
    )
    assert getattr(config, f"current_{dim}") == "indirect"
    assert getattr(config, f"use_{dim}")


@pytest.mark.parametrize("dim", ["dc", "geo"])
@pytest.mark.parametrize("name", ["_", "A", "PLATFORM_DC", "x1", "_9", "pg_status__other"])
def test_env_name_valid(dim, name):
    config = load_config(loc(**{f"current_{dim}_env": name}) | {name: "here"})
    assert getattr(config, f"current_{dim}") == "here"


@pytest.mark.parametrize("dim", ["dc", "geo"])
@pytest.mark.parametrize(
    "name",
    ["1ABC", "PLATFORM-DC", "PLATFORM.DC", "$PLATFORM_DC", "${PLATFORM_DC}", "A B", "É", "a=b"],
)
def test_env_name_invalid(dim, name):
    err = error_for(loc(**{f"current_{dim}_env": name}) | {name: "x"})
    assert err.variable == f"{P}current_{dim}_env"
    assert "[A-Za-z_][A-Za-z0-9_]*" in err.reason


def test_env_name_invalid_even_when_direct_value_set():
    err = error_for(loc(current_dc="fra", current_dc_env="BAD-NAME"))
    assert err.variable == P + "current_dc_env"


def test_env_lookup_is_not_recursive():
    config = load_config(
        loc(
            hosts_dc="SECOND,b,c",
            current_dc_env="FIRST",
            FIRST="SECOND",
            SECOND="final",
        )
    )
    assert config.current_dc == "SECOND"
    assert config.use_dc


def test_env_lookup_value_that_looks_like_a_reference_is_literal():
    config = load_config(loc(current_geo_env="FIRST", FIRST="$SECOND", SECOND="eu"))
    assert config.current_geo == "$SECOND"


def test_env_referenced_variable_with_nul_is_rejected():
    err = error_for(loc(current_dc_env="FIRST", FIRST="a\x00b"))
    assert err.variable == P + "current_dc_env"


@pytest.mark.parametrize("var", ["hosts_dc", "current_dc", "hosts_geo", "current_geo"])
def test_locality_values_reject_nul(var):
    assert error_for(loc(**{var: "a\x00b"})).variable == P + var


# ---------------------------------------------------------------------------
# Secrets and public items


def full_env() -> dict[str, str]:
    return {
        P + "hosts": "db1,db2",
        P + "pg_port": "5432,6432",
        P + "pg_user": "monitor",
        P + "pg_password": SECRET,
        P + "pg_database": "app",
        P + "hosts_dc": "fra,ams",
        P + "current_dc": "fra",
        P + "hosts_geo": "eu,eu",
        P + "current_geo_env": "PLATFORM_GEO",
        "PLATFORM_GEO": "eu",
        P + "max_fails": "4",
        P + "sleep_ms": "500",
        P + "query_timeout_ms": "700",
        P + "conn_max_age_ms": "60000",
        P + "poll_error_log_interval_ms": "0",
        P + "sync_max_lag_ms": "2000",
        P + "sync_max_lag_bytes": "1024",
        P + "http_listen_address": "::1",
        P + "http_port": "0",
        P + "log_level": "WARN",
        P + "log_format": "json",
    }


def test_full_configuration():
    config = load_config(full_env())
    assert config == Config(
        hosts=(
            HostConfig("db1", 5432, "fra", "eu"),
            HostConfig("db2", 6432, "ams", "eu"),
        ),
        pg_user="monitor",
        pg_password=SECRET,
        pg_database="app",
        current_dc="fra",
        current_geo="eu",
        use_dc=True,
        use_geo=True,
        max_fails=4,
        sleep_ms=500,
        query_timeout_ms=700,
        conn_max_age_ms=60000,
        poll_error_log_interval_ms=0,
        sync_max_lag_ms=2000,
        sync_max_lag_bytes=1024,
        http_listen_address="::1",
        http_port=0,
        log_level="warning",
        log_format="json",
        warnings=(),
    )


def test_password_not_in_repr_or_str():
    config = load_config(full_env())
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert "pg_password" not in repr(config)


def test_password_not_in_public_items():
    items = load_config(full_env()).public_items()
    assert all("password" not in key for key, _ in items)
    assert all(SECRET not in value for _, value in items)
    assert SECRET not in repr(items)


@pytest.mark.parametrize(
    "bad",
    [
        {P + "sleep_ms": "nope"},
        {P + "pg_port": "1,2,3"},
        {P + "hosts": "a,,b"},
        {P + "current_dc_env": "BAD NAME"},
        {P + "http_listen_address": "nowhere"},
        {P + "log_level": "loud"},
    ],
)
def test_password_not_in_config_errors(bad):
    err = error_for(full_env() | bad)
    assert SECRET not in str(err)
    assert SECRET not in repr(err)
    assert SECRET not in err.reason


def test_public_items_full():
    items = load_config(full_env()).public_items()
    assert items == [
        ("hosts", "db1,db2"),
        ("pg_port", "5432,6432"),
        ("pg_user", "monitor"),
        ("pg_database", "app"),
        ("hosts_dc", "fra,ams"),
        ("current_dc", "fra"),
        ("use_dc", "true"),
        ("hosts_geo", "eu,eu"),
        ("current_geo", "eu"),
        ("use_geo", "true"),
        ("max_fails", "4"),
        ("sleep_ms", "500"),
        ("query_timeout_ms", "700"),
        ("conn_max_age_ms", "60000"),
        ("poll_error_log_interval_ms", "0"),
        ("sync_max_lag_ms", "2000"),
        ("sync_max_lag_bytes", "1024"),
        ("http_listen_address", "::1"),
        ("http_port", "0"),
        ("log_level", "warning"),
        ("log_format", "json"),
        ("min_lsn_wait_ms", "0"),
        ("extra_check_interval_ms", "20"),
        ("http_max_connections", "10000"),
        ("http_idle_timeout_ms", "60000"),
        ("http_header_timeout_ms", "10000"),
        ("sync_evict_after_checks", "0"),
        ("sync_reenter_lag_ms", ""),
        ("sync_reenter_lag_bytes", ""),
        ("min_serving_replicas", "0"),
        ("split_brain", "first"),
        ("agent_port", "0"),
        ("follow", ""),
        ("follow_timeout_ms", "3000"),
        ("shutdown_delay_ms", "0"),
        ("patroni_etcd", ""),
        ("patroni_namespace", "/service/"),
        ("patroni_scope", ""),
        ("patroni_ttl", "30"),
        ("patroni_unreadable", "hosts"),
        ("patroni_cacert", ""),
        ("patroni_cert", ""),
        ("patroni_key", ""),
        ("patroni_username", ""),
    ]


def test_public_items_defaults():
    items = dict(load_config({P + "hosts": "a,b"}).public_items())
    assert items["pg_port"] == "5432"
    assert items["hosts_dc"] == ""
    assert items["current_dc"] == ""
    assert items["use_dc"] == "false"
    assert items["http_listen_address"] == "0.0.0.0"
    assert all(isinstance(value, str) for value in items.values())


def test_public_items_partial_locality_shows_gaps():
    items = dict(load_config(loc(hosts_geo="eu,,us")).public_items())
    assert items["hosts_geo"] == "eu,,us"
    assert items["use_geo"] == "false"


# ---------------------------------------------------------------------------
# Property tests

NUMERIC_VARIABLES = [*INT_NAMES, "pg_port"]


# Note: @given is combined with st.sampled_from rather than
# @pytest.mark.parametrize: pytest-twisted's test wrapper breaks parametrized
# hypothesis tests after the first parameter.


@settings(max_examples=1000, deadline=None)
@given(name=st.sampled_from(NUMERIC_VARIABLES), text=st.text())
def test_numeric_arbitrary_text_returns_config_or_names_variable(name, text):
    environ = {P + "hosts": "a,b", P + name: text}
    try:
        config = load_config(environ)
    except ConfigError as err:
        assert err.variable == P + name
        assert "\n" not in str(err)
    else:
        assert isinstance(config, Config)


@settings(max_examples=500, deadline=None)
@given(
    name=st.sampled_from(NUMERIC_VARIABLES),
    text=st.from_regex(r"\A\s*[0-9]{1,25}\s*\Z"),
)
def test_numeric_digit_strings_parse_exactly_or_name_variable(name, text):
    environ = {P + "hosts": "a", P + name: text}
    try:
        config = load_config(environ)
    except ConfigError as err:
        assert err.variable == P + name
    else:
        value = int(text.strip())
        if name == "pg_port":
            assert config.hosts[0].port == value
        else:
            assert getattr(config, name) == value


@settings(max_examples=150, deadline=None)
@given(
    values=st.dictionaries(
        st.sampled_from(
            [
                "hosts",
                "pg_port",
                "hosts_dc",
                "current_dc",
                "current_dc_env",
                "hosts_geo",
                "current_geo",
                "current_geo_env",
                "http_listen_address",
                "log_level",
                "log_format",
                "pg_user",
                "pg_database",
                "pg_password",
            ]
        ),
        st.text(max_size=30),
    )
)
def test_arbitrary_environment_never_raises_other_exceptions(values):
    environ = {P + key: value for key, value in values.items()}
    try:
        config = load_config(environ)
    except ConfigError as err:
        assert err.variable.startswith(P)
        assert "\n" not in str(err)
        password = values.get("pg_password", "")
        if err.variable == P + "pg_password" and password:
            assert password not in str(err)
    else:
        assert len(config.hosts) >= 1
        assert len(config.warnings) <= 2
        if config.use_dc:
            assert config.current_dc and all(h.dc for h in config.hosts)
        if config.use_geo:
            assert config.current_geo and all(h.geo for h in config.hosts)


def test_password_file(tmp_path):
    """
    pg_status__pg_password_file is read once, one trailing newline dropped;
    it must be 0600-like; it excludes pg_status__pg_password; errors never
    show its content.
    """
    import os

    f = tmp_path / "pw"
    f.write_text("s3cret-from-file\n")
    os.chmod(f, 0o600)
    cfg = load_config({P + "hosts": "a", P + "pg_password_file": str(f)})
    assert cfg.pg_password == "s3cret-from-file"
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.public_items())
    os.chmod(f, 0o644)
    with pytest.raises(ConfigError) as e:
        load_config({P + "hosts": "a", P + "pg_password_file": str(f)})
    assert e.value.variable == P + "pg_password_file" and "0644" in str(e.value)
    assert "s3cret" not in str(e.value)
    os.chmod(f, 0o600)
    with pytest.raises(ConfigError) as e:
        load_config({P + "hosts": "a", P + "pg_password_file": str(f), P + "pg_password": "x"})
    assert e.value.variable == P + "pg_password_file"
    with pytest.raises(ConfigError) as e:
        load_config({P + "hosts": "a", P + "pg_password_file": str(tmp_path / "missing")})
    assert e.value.variable == P + "pg_password_file"
    with pytest.raises(ConfigError):
        load_config({P + "hosts": "a", P + "pg_password_file": str(tmp_path)})


# ---------------------------------------------------------------------------
# follower mode


def test_follow_urls():
    config = load_config({P + "hosts": "db1", P + "follow": " http://hub-a:8000/ ,http://[::1]:9000,"
                          "http://10.0.0.7/pg-status", P + "follow_timeout_ms": "2500"})
    assert config.follow == ("http://hub-a:8000", "http://[::1]:9000", "http://10.0.0.7/pg-status")
    assert config.follow_timeout_ms == 2500
    assert ("follow", "http://hub-a:8000,http://[::1]:9000,http://10.0.0.7/pg-status") in \
        config.public_items()


@pytest.mark.parametrize("value", [
    "https://hub:8000", "hub:8000", "http://hub:0", "http://hub:70000", "http://hub?x=1",
    "http://hub,,http://other", "http://hub,http://hub/", "http://user@hub", "ftp://hub",
])
def test_follow_invalid(value):
    err = error_for({P + "hosts": "db1", P + "follow": value})
    assert err.variable == P + "follow"


@pytest.mark.parametrize("value", ["0", "1999", "-1", "3600001", "soon"])
def test_follow_timeout_invalid(value):
    err = error_for({P + "hosts": "db1", P + "follow": "http://hub",
                     P + "follow_timeout_ms": value})
    assert err.variable == P + "follow_timeout_ms"


# ---------------------------------------------------------------------------
# shutdown delay


def test_shutdown_delay_default_and_value():
    assert load_config({P + "hosts": "db1"}).shutdown_delay_ms == 0
    config = load_config({P + "hosts": "db1", P + "shutdown_delay_ms": " 15000 "})
    assert config.shutdown_delay_ms == 15000
    assert ("shutdown_delay_ms", "15000") in config.public_items()


@pytest.mark.parametrize("value", ["-1", "3600001", "2s", "1.5"])
def test_shutdown_delay_invalid(value):
    err = error_for({P + "hosts": "db1", P + "shutdown_delay_ms": value})
    assert err.variable == P + "shutdown_delay_ms"
    assert "an integer from 0 to 3600000" in err.reason
