"""
The settings table (:mod:`pgstatus.config.table`) held to the code that
reads the variables: the names it looks up, the defaults it applies, the
integer ranges it enforces, what a reload applies.  The documentation's
configuration reference is generated from the table, so these tests are
what keeps that reference true.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from pgstatus.config.environ import load_config, log_settings
from pgstatus.config.files import with_env_file
from pgstatus.config.reload import RESTART_SETTINGS, EnvFileReloader, plan_reload
from pgstatus.config.settings import PREFIX, Config, ConfigError
from pgstatus.config.table import GROUPS, SETTINGS, Setting, known_names, setting

NAMES = [s.name for s in SETTINGS]
BASE = {PREFIX + "hosts": "h"}
INTEGER = re.compile(r"integer (\d+)\.\.(\d+)\b")
INTEGERS = [s for s in SETTINGS if INTEGER.match(s.accepts)]


def name(s: Setting) -> str:
    return s.name


#: Config fields that no single variable sets: derived from several, or not
#: configuration at all
DERIVED_FIELDS = {"use_dc", "use_geo", "warnings"}
#: variables that are no Config field of their own: they end up inside
#: another field (hosts, pg_password, current_dc, current_geo) or, for
#: env_file, decide where the other variables come from
NOT_FIELDS = {"pg_port", "hosts_dc", "hosts_geo", "current_dc_env", "current_geo_env",
              "pg_password_file", "env_file"}


class Recording(Mapping[str, str]):
    """
    An environment that remembers every name looked up in it.

    :param values: the variables it holds.
    """

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)
        self.looked_up: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.looked_up.add(name)
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def test_names_are_unique_and_sentences() -> None:
    """
    One entry per variable, each with a one-sentence summary and a
    description of what it accepts.
    """
    assert len(NAMES) == len(set(NAMES))
    assert known_names() == frozenset(PREFIX + n for n in NAMES)
    for s in SETTINGS:
        assert isinstance(s, Setting)
        assert not s.name.startswith(PREFIX)
        assert s.summary.endswith(".") and s.summary[0].isupper(), s
        assert s.summary.count(". ") == 0, s
        assert s.accepts, s
        assert setting(s.name) is s


def test_every_setting_has_a_topic() -> None:
    """
    Every variable belongs to one topic of the configuration reference
    (a setting added outside the table's ``_group`` calls has none), every
    topic has variables, and the pages a topic names exist.
    """
    keys = [g.key for g in GROUPS]
    assert len(keys) == len(set(keys))
    assert {s.group for s in SETTINGS} == set(keys), [s.name for s in SETTINGS
                                                       if s.group not in keys]
    docs = Path(__file__).resolve().parents[2] / "docs"
    for g in GROUPS:
        assert g.title and g.intro.endswith("."), g
        for page in g.see:
            assert (docs / (page + ".md")).is_file(), (g.key, page)


def test_every_variable_looked_up_is_in_the_table() -> None:
    """
    The variables the code reads are exactly the table's: every name that
    :func:`load_config`, the environment file and the log setup look up
    in the environment is in the table, and every table entry is looked
    up.  A new variable in the code without a table entry fails here.
    """
    environ = Recording(BASE)
    load_config(environ)
    with_env_file(environ)
    log_settings(environ)
    looked_up = {n for n in environ.looked_up if n.startswith(PREFIX)}
    assert looked_up == known_names()


def test_config_fields_match_the_table() -> None:
    """
    Every :class:`Config` field that comes from a variable has a table
    entry of the same name, and every table entry is a field or one of the
    variables folded into another field.
    """
    fields = {f.name for f in dataclasses.fields(Config)}
    assert fields - DERIVED_FIELDS == set(NAMES) - NOT_FIELDS
    assert not NOT_FIELDS & fields


def _int_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(Config)
            if str(f.type) in ("int", "int | None")}


def test_integer_settings_say_their_range() -> None:
    """
    Every integer field is described as ``integer LO..HI`` (pg_port too, a
    list of them); nothing else is.
    """
    described = {s.name for s in SETTINGS if INTEGER.match(s.accepts)}
    assert described == _int_fields() | {"pg_port"}


def _value(config: Config, name: str) -> str:
    return dict(config.public_items())[name]


@pytest.mark.parametrize("s", INTEGERS, ids=name)
def test_integer_range_is_enforced(s: Setting) -> None:
    """
    The bounds of ``accepts`` are accepted and mean themselves; one past
    either bound (and a negative number) is refused naming the variable.
    """
    m = INTEGER.match(s.accepts)
    assert m is not None
    lo, hi = int(m.group(1)), int(m.group(2))
    variable = PREFIX + s.name
    for good in (lo, hi):
        assert _value(load_config(BASE | {variable: str(good)}), s.name) == str(good)
    bad = [str(hi + 1), "-1"] + ([str(lo - 1)] if lo > 0 else [])
    for text in bad:
        with pytest.raises(ConfigError) as info:
            load_config(BASE | {variable: text})
        assert info.value.variable == variable, text


@pytest.mark.parametrize("s", SETTINGS, ids=name)
def test_documented_default_is_the_default(s: Setting) -> None:
    """
    The documented default is what pg-status uses when the variable is not
    set: setting it explicitly to the default changes nothing, and the
    effective value shown at start (or the password) is the default as
    written.  A setting without a default is unset when absent.
    """
    variable = PREFIX + s.name
    if s.name == "hosts":
        assert s.default == ""
        with pytest.raises(ConfigError) as info:
            load_config({})
        assert info.value.variable == variable
        return
    default = load_config(BASE)
    assert load_config(BASE | {variable: s.default}) == default
    public = dict(default.public_items())
    if s.name in public:
        assert public[s.name] == s.default
    elif s.name in ("pg_password", "patroni_password"):
        assert getattr(default, s.name) == s.default
    else:
        # not shown at start: the file-naming variables, the *_env
        # indirections, and http_listen while unset (shown once set)
        assert s.name in {"pg_password_file", "env_file", "current_dc_env",
                          "current_geo_env", "http_listen"}
        assert s.default == ""


def test_dataclass_defaults_agree() -> None:
    """
    :class:`Config`'s own field defaults (used by code that builds a
    Config directly) agree with the table.
    """
    built = Config(hosts=load_config(BASE).hosts)
    assert built == dataclasses.replace(load_config(BASE), warnings=())


def test_reload_flags_match_restart_settings() -> None:
    """
    A setting is marked as applied by a reload exactly when it is not in
    :data:`RESTART_SETTINGS`; ``env_file`` itself needs a restart (only
    the process environment names the file).
    """
    assert set(RESTART_SETTINGS) <= set(NAMES)
    for s in SETTINGS:
        expected = s.name not in RESTART_SETTINGS and s.name != "env_file"
        assert s.reload is expected, s.name


#: a valid value other than the default, for each setting but env_file
SAMPLES = {
    "hosts": "h,h2", "pg_port": "6432", "pg_user": "u", "pg_password": "p",
    "pg_password_file": "<file>", "pg_database": "d", "hosts_dc": "a",
    "current_dc": "a", "current_dc_env": "MY_DC", "hosts_geo": "g", "current_geo": "g",
    "current_geo_env": "MY_GEO", "max_fails": "4", "sleep_ms": "500",
    "query_timeout_ms": "700", "conn_max_age_ms": "1000", "poll_error_log_interval_ms": "0",
    "sync_max_lag_ms": "5", "sync_max_lag_bytes": "5", "sync_evict_after_checks": "3",
    "sync_reenter_lag_ms": "1", "sync_reenter_lag_bytes": "1", "min_serving_replicas": "1",
    "min_lsn_wait_ms": "100", "extra_check_interval_ms": "50",
    "http_listen_address": "127.0.0.1", "http_port": "8001",
    "http_listen": "tcp:8003:interface=127.0.0.1",
    "http_max_connections": "10", "http_idle_timeout_ms": "1000",
    "http_header_timeout_ms": "1000", "agent_port": "8002", "follow": "http://hub:8000",
    "follow_timeout_ms": "2000", "log_level": "debug", "log_format": "json",
    "split_brain": "timeline", "shutdown_delay_ms": "2000",
    "patroni_etcd": "http://etcd:2379", "patroni_namespace": "/other/",
    "patroni_scope": "demo", "patroni_ttl": "20", "patroni_unreadable": "no_master",
    "patroni_cacert": "<pem>", "patroni_cert": "<pem>", "patroni_key": "<pem>",
    "patroni_username": "u", "patroni_password": "p",
}
#: what a sample needs beside it to be valid
COMPANIONS = {"patroni_etcd": {PREFIX + "patroni_scope": "demo"}}
#: the effective setting a variable changes, when it is not its own
EFFECT = {"current_dc_env": "current_dc", "current_geo_env": "current_geo",
          "pg_password_file": "pg_password"}


@pytest.mark.parametrize("s", [s for s in SETTINGS if s.name != "env_file"], ids=name)
def test_reload_applies_what_the_table_says(s: Setting, tmp_path: Path) -> None:
    """
    Changing one setting and reloading applies it when the table says a
    reload does, and keeps the running value (logged as needing a
    restart) when it does not.
    """
    assert set(SAMPLES) == set(NAMES) - {"env_file"}
    value = SAMPLES[s.name]
    if s.name == "pg_password_file":
        secret = tmp_path / "password"
        secret.write_text("from-file\n")
        secret.chmod(0o600)
        value = str(secret)
    if value == "<pem>":
        pem = tmp_path / "file.pem"
        pem.write_text("-----BEGIN CERTIFICATE-----\n")
        value = str(pem)
    old = load_config(BASE)
    new = load_config(BASE | {PREFIX + s.name: value, "MY_DC": "a", "MY_GEO": "g"}
                      | COMPANIONS.get(s.name, {}))
    plan = plan_reload(old, new)
    effect = EFFECT.get(s.name, s.name)
    changed = [item.split("=", 1)[0] for item in plan.changed]
    restart = [item.split("=", 1)[0] for item in plan.needs_restart]
    if s.reload:
        assert effect in changed and effect not in restart, plan
        assert plan.config == new
    else:
        assert effect in restart and effect not in changed, plan
        assert getattr(plan.config, effect) == getattr(old, effect)


def test_env_file_named_in_the_file_is_ignored(tmp_path: Path) -> None:
    """
    ``env_file`` is not applied by a reload: a file that names another
    file is read for its other variables only.
    """
    other = tmp_path / "other.env"
    other.write_text("pg_status__sleep_ms=123\n")
    first = tmp_path / "first.env"
    first.write_text(f"pg_status__env_file={other}\npg_status__sleep_ms=456\n")
    config = EnvFileReloader(str(first), BASE).load()
    assert config.sleep_ms == 456
    assert with_env_file(BASE | {PREFIX + "env_file": str(first)})[PREFIX + "sleep_ms"] == "456"
