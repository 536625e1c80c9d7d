"""
Checking a configuration without starting (``twistd pgstatus
--check-config``, ``pg-status --check-config``), as Patroni's
``--validate-config`` does.

The check reads what a start reads (the environment, with the file named
by ``pg_status__env_file`` applied) and validates it with the very code a
start uses, :func:`pgstatus.config.environ.load_config`.  A start stops at
the first invalid variable; the check reports that one, sets it aside (as
if it were not set) and validates again, until the rest is valid, so that
every invalid variable is named at once.  Nothing listens and nothing
connects; the only files read are the environment file, the password
file and the PEM files of the Patroni settings.  An error reads as the
line a start prints for it (:func:`error_line`, :func:`refuse_start`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn, TextIO

from pgstatus.config.environ import load_config
from pgstatus.config.files import with_env_file
from pgstatus.config.settings import PREFIX, ConfigError
from pgstatus.config.table import unknown_warnings

_HOSTS = PREFIX + "hosts"
_PG_PORT = PREFIX + "pg_port"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """
    What the check found.

    :ivar errors: every invalid variable, in the order a start would meet
        them; each names its variable.
    :ivar warnings: what a start would log as a warning (unknown variables,
        incomplete locality).
    """

    errors: tuple[ConfigError, ...]
    warnings: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """
        pg-status would start with this configuration (warnings allowed).
        """
        return not self.errors


def _stand_in_hosts(environ: Mapping[str, str]) -> str:
    """
    A valid ``pg_status__hosts`` to check the other variables against when
    the configured one is missing or invalid: as many entries as
    ``pg_status__pg_port`` lists, so that a port list is not reported as
    not matching hosts that are themselves wrong.
    """
    ports = (environ.get(_PG_PORT) or "").strip()
    count = len(ports.split(",")) if ports else 1
    return ",".join(f"host{i}" for i in range(1, count + 1))


def check_environ(environ: Mapping[str, str]) -> CheckResult:
    """
    Check the configuration a start with ``environ`` would read.

    :param environ: the process environment (the environment file it names
        is read and applied over it, as at start).
    :return: every error and warning; no error exactly when
        :func:`load_config` of the same environment succeeds.
    """
    errors: list[ConfigError] = []
    try:
        merged = with_env_file(environ)
    except ConfigError as e:
        # check the rest of the configuration without the file
        errors.append(e)
        merged = environ
    current = dict(merged)
    stand_in = False
    # each failed round sets one variable aside, so this ends
    for _ in range(len(current) + 2):
        try:
            config = load_config(current)
        except ConfigError as e:
            errors.append(e)
            if e.variable == _HOSTS and not stand_in:
                stand_in = True
                current[_HOSTS] = _stand_in_hosts(current)
            elif e.variable in current and e.variable != _HOSTS:
                del current[e.variable]
            else:  # pragma: no cover - every error names a variable that is set
                break
            continue
        # the locality warnings would be about the stand-in hosts
        warnings = unknown_warnings(merged) if stand_in else config.warnings
        return CheckResult(tuple(errors), warnings)
    return CheckResult(tuple(errors), unknown_warnings(merged))  # pragma: no cover


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def error_line(error: ConfigError) -> str:
    """
    The line that reports ``error``, the same from a start and from the
    check: ``pg-status: configuration error: <variable>: <reason>``.
    """
    return f"pg-status: configuration error: {error}"


def refuse_start(error: ConfigError) -> NoReturn:
    """
    What a start does with an invalid configuration, before anything
    listens: :func:`error_line` on standard error, and exit status 2.
    """
    sys.stderr.write(error_line(error) + "\n")
    sys.stderr.flush()
    raise SystemExit(2) from None


def run_check(environ: Mapping[str, str], out: TextIO,
              more: Sequence[ConfigError] = ()) -> int:
    """
    The ``--check-config`` command: check, print every problem on a line
    of its own, then a summary line.

    :param environ: the process environment.
    :param out: where the lines go (standard output).
    :param more: errors found outside the environment that a start would
        meet after the configuration's (a log file that cannot be opened).
    :return: the exit status: 0 if pg-status would start (warnings
        allowed), 2 if not (as a start with this configuration exits).
    """
    checked = check_environ(environ)
    result = CheckResult(checked.errors + tuple(more), checked.warnings)
    for error in result.errors:
        out.write(error_line(error) + "\n")
    for warning in result.warnings:
        out.write(f"pg-status: configuration warning: {warning}\n")
    warned = _count(len(result.warnings), "warning")
    if result.ok:
        out.write(f"pg-status: configuration OK ({warned})\n")
    else:
        out.write(f"pg-status: configuration invalid ({_count(len(result.errors), 'error')}, "
                  f"{warned}): pg-status would not start\n")
    out.flush()
    return 0 if result.ok else 2
