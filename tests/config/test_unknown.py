"""
The warning for an unknown ``pg_status__*`` variable
(:func:`pgstatus.config.table.unknown_warnings`, reported by
:func:`load_config` in :attr:`Config.warnings`): one line per unknown
variable, naming it and the closest known name, never an error.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pgstatus.config.environ import load_config
from pgstatus.config.files import with_env_file
from pgstatus.config.settings import PREFIX
from pgstatus.config.table import SETTINGS, known_names, unknown_warnings

BASE = {PREFIX + "hosts": "db1"}


def unknown(config_warnings: tuple[str, ...]) -> list[str]:
    return [w for w in config_warnings if w.startswith("unknown variable ")]


def test_misspelt_hosts_names_the_closest_known_name() -> None:
    """
    The issue's example: ``pg_status__hots`` gets one warning saying what
    was probably meant, and the configuration is otherwise the same.
    """
    config = load_config(BASE | {PREFIX + "hots": "db2"})
    assert config.warnings == (
        "unknown variable pg_status__hots is ignored; did you mean pg_status__hosts?",)
    assert dataclasses.replace(config, warnings=()) == load_config(BASE)


@pytest.mark.parametrize("name,meant", [
    ("sleep_msec", "sleep_ms"),
    ("pg_pasword", "pg_password"),
    ("sync_max_lag_byte", "sync_max_lag_bytes"),
    ("http_listen_adress", "http_listen_address"),
    ("current_dc_environ", "current_dc_env"),
    ("agentport", "agent_port"),
])
def test_typos(name: str, meant: str) -> None:
    config = load_config(BASE | {PREFIX + name: "1"})
    assert unknown(config.warnings) == [
        f"unknown variable {PREFIX}{name} is ignored; did you mean {PREFIX}{meant}?"]


def test_no_close_name() -> None:
    """
    A variable like no known one (a setting of a later version, say) is
    still named, without a guess.
    """
    config = load_config(BASE | {PREFIX + "future_feature_xyz": "on"})
    assert config.warnings == ("unknown variable pg_status__future_feature_xyz is ignored: "
                               "pg-status has no such setting",)


def test_prefix_in_another_case() -> None:
    """
    ``PG_STATUS__HOSTS`` is not read (names are case-sensitive), which is
    worth a warning pointing at the right spelling.
    """
    warnings = unknown_warnings(BASE | {"PG_STATUS__SLEEP_MS": "10"})
    assert warnings == ("unknown variable PG_STATUS__SLEEP_MS is ignored; "
                        "did you mean pg_status__sleep_ms?",)


def test_known_variables_are_never_warned_about() -> None:
    """
    Every variable of the table set at once: no warning at all.
    """
    environ = {PREFIX + s.name: "" for s in SETTINGS} | BASE
    assert load_config(environ).warnings == ()
    assert unknown_warnings({n: "x" for n in known_names()}) == ()


def test_other_variables_are_not_warned_about() -> None:
    """
    Only the prefix counts: ``PGSSLMODE``, ``pg_status_hosts`` (one
    underscore) and the variable ``current_dc_env`` names are not ours or
    are read.
    """
    environ = BASE | {"PGSSLMODE": "require", "PATH": "/bin", "pg_status_x": "1",
                      PREFIX + "current_dc_env": PREFIX + "platform_dc",
                      PREFIX + "platform_dc": "dc1"}
    config = load_config(environ)
    assert config.current_dc == "dc1"
    assert unknown(config.warnings) == []


def test_one_line_each_sorted_and_values_never_shown() -> None:
    """
    Several unknown variables: one line each, in name order; the value
    (which may be a password) is never in them, and a name with a line
    break is quoted so the warning stays one line.
    """
    environ = BASE | {PREFIX + "pg_pasword": "hunter2secret", PREFIX + "b\nad": "x",
                      PREFIX + "a_thing": "hunter2secret"}
    warnings = unknown(load_config(environ).warnings)
    assert len(warnings) == 3
    assert [w.split()[2] for w in warnings] == ["pg_status__a_thing", "'pg_status__b\\nad'",
                                                "pg_status__pg_pasword"]
    assert all("\n" not in w and "hunter2" not in w for w in warnings)


def test_unknown_variable_in_the_env_file(tmp_path: Path) -> None:
    """
    A misspelt variable in the environment file is warned about as well
    (the file is applied over the environment before the check).
    """
    path = tmp_path / "pg-status.env"
    path.write_text("pg_status__slep_ms=100\npg_status__sleep_ms=200\n")
    config = load_config(with_env_file(BASE | {PREFIX + "env_file": str(path)}))
    assert config.sleep_ms == 200
    assert config.warnings == ("unknown variable pg_status__slep_ms is ignored; "
                               "did you mean pg_status__sleep_ms?",)
