"""
The locality dimensions of the configuration (``dc`` and ``geo``): each
host's value (``pg_status__hosts_<dim>``) and the current one
(``pg_status__current_<dim>``, or the variable ``pg_status__current_<dim>_env``
names).  A dimension half configured is not an error: it is disabled, with
a warning for the caller to log (:attr:`Config.warnings`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pgstatus.config.settings import (
    ENV_NAME_RE,
    PREFIX,
    ConfigError,
    check_no_nul,
    shown_bytes,
    shown_value,
    stripped,
)


def _parse_locality_list(environ: Mapping[str, str], name: str) -> list[str | None] | None:
    """Per-host values of ``hosts_dc``/``hosts_geo``; ``None`` if not set."""
    text = stripped(environ, name)
    if text is None:
        return None
    check_no_nul(PREFIX + name, text)
    return [part.strip() or None for part in text.split(",")]


def _resolve_current(environ: Mapping[str, str], name: str) -> tuple[str | None, str | None]:
    """
    Effective current value of a locality dimension.

    ``pg_status__current_<dim>`` wins over ``pg_status__current_<dim>_env``.
    The indirect name is always validated when set, and looked up once
    (never recursively).

    :return: ``(value, referenced_name)``; ``value`` is ``None`` when
        unavailable; ``referenced_name`` is the validated indirect name, if
        set (used in warnings).
    """
    env_variable = PREFIX + name + "_env"
    ref = stripped(environ, name + "_env")
    if ref is not None and not ENV_NAME_RE.fullmatch(ref):
        raise ConfigError(
            env_variable,
            "must be the name of an environment variable matching "
            f"[A-Za-z_][A-Za-z0-9_]*, got {shown_value(ref)}",
        )
    direct = stripped(environ, name)
    if direct is not None:
        check_no_nul(PREFIX + name, direct)
        return direct, ref
    if ref is None:
        return None, None
    value = environ.get(ref)
    value = value.strip() if value is not None else ""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            env_variable,
            f"the referenced variable {ref} must be UTF-8 text, got {shown_bytes(value)}",
        ) from None
    if "\x00" in value:
        raise ConfigError(
            env_variable,
            f"the referenced variable {ref} must not contain a NUL character",
        )
    return (value or None), ref


def resolve_locality(
    environ: Mapping[str, str], dim: str, host_names: list[str]
) -> tuple[list[str | None], str | None, bool, str | None]:
    """
    Resolve one locality dimension (``dim`` is ``"dc"`` or ``"geo"``).

    :return: ``(per_host_values, current, used, warning)``.
    """
    list_var = PREFIX + "hosts_" + dim
    current_var = PREFIX + "current_" + dim
    env_var = current_var + "_env"

    values = _parse_locality_list(environ, "hosts_" + dim)
    current, ref = _resolve_current(environ, "current_" + dim)

    count = len(host_names)
    per_host: list[str | None] = [None] * count
    if values is not None:
        for i, value in enumerate(values[:count]):
            per_host[i] = value

    if values is None and current is None:
        return per_host, None, False, None

    problems = []
    if values is None:
        problems.append(f"{list_var} is not set")
    else:
        if len(values) != count:
            entries = "entry" if len(values) == 1 else "entries"
            problems.append(f"{list_var} has {len(values)} {entries} but {PREFIX}hosts has {count}")
        missing = [host_names[i] for i in range(count) if per_host[i] is None]
        if missing and len(values) >= count:
            shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
            problems.append(f"{list_var} has no value for host(s) {shown}")
    if current is None:
        if ref is not None:
            problems.append(
                f"{env_var} names {ref}, which is not set or empty, and {current_var} is not set"
            )
        else:
            problems.append(f"neither {current_var} nor {env_var} is set")

    if problems:
        warning = (f"{dim} preference disabled: incomplete locality configuration; "
                   + "; ".join(problems))
        return per_host, current, False, warning
    return per_host, current, True, None
