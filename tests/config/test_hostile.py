"""
Hostile values (issue 33): each is refused by a :class:`ConfigError` that
names its variable (or twistd's ``--logfile``), never by another
exception, and never accepted to fail later.  The real commands are run
with them in ``tests/deploy/test_hostile_config.py``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pgstatus.config.check import error_line, run_check
from pgstatus.config.environ import load_config
from pgstatus.config.files import MAX_FILE_BYTES, read_env_file, with_env_file
from pgstatus.config.settings import MAX_INT_DIGITS, PREFIX, ConfigError
from pgstatus.config.table import SETTINGS, setting
from pgstatus.logging.twistd import log_file_error, observer_for_twistd

INTEGER = re.compile(r"integer (\d+)\.\.(\d+)\b")
INTEGER_NAMES = [s.name for s in SETTINGS if INTEGER.match(s.accepts)]
#: a value as os.environ hands on the bytes b"db\xff1" (PEP 383)
NOT_UTF8 = b"db\xff1".decode("utf-8", "surrogateescape")
SECRET = "s3cret-Pa55"


def error_for(values: dict[str, str]) -> ConfigError:
    """
    The error a start meets with ``values`` (``pg_status__hosts=db``
    unless given), the environment file applied as at start.
    """
    environ = {PREFIX + "hosts": "db"} | {PREFIX + k: v for k, v in values.items()}
    with pytest.raises(ConfigError) as info:
        load_config(with_env_file(environ))
    return info.value


# ---------------------------------------------------------------------------
# 1. integers with thousands of digits


@pytest.mark.parametrize("name", INTEGER_NAMES)
def test_integer_with_thousands_of_leading_zeros(name: str) -> None:
    """
    4,302 digits, leading zeros and a value in range: more than Python's
    ``int()`` converts, refused by length, naming the variable.
    """
    text = "0" * 4298 + "1000"
    err = error_for({name: text})
    assert err.variable == PREFIX + name
    assert err.reason.endswith(f"which has 4302 digits (at most {MAX_INT_DIGITS}, "
                               "leading zeros included)"), err
    assert len(str(err)) < 300


def test_integer_digits_bound() -> None:
    """
    Leading zeros are fine up to :data:`MAX_INT_DIGITS` digits in all.
    """
    longest = "0" * (MAX_INT_DIGITS - 4) + "1000"
    assert load_config({PREFIX + "hosts": "db", PREFIX + "sleep_ms": longest}).sleep_ms == 1000
    assert "digits" in error_for({"sleep_ms": "0" + longest}).reason


# ---------------------------------------------------------------------------
# 2 and 6. values that are not UTF-8


@pytest.mark.parametrize("name", [s.name for s in SETTINGS
                                  if s.name not in ("pg_password", "patroni_password")])
def test_every_setting_refuses_bytes_that_are_not_utf8(name: str) -> None:
    """
    Whatever the setting, a value with a byte that is not UTF-8 is an
    error naming it, showing the bytes; hosts, the user and the database
    were accepted and then never worked.
    """
    err = error_for({name: NOT_UTF8})
    assert err.variable == PREFIX + name
    assert err.reason == "must be UTF-8 text, got b'db\\xff1'", err


def test_password_not_utf8() -> None:
    """
    The password is refused without being shown.
    """
    err = error_for({"pg_password": SECRET + NOT_UTF8})
    assert (err.variable, err.reason) == (PREFIX + "pg_password", "must be UTF-8 text")
    assert "s3cret" not in repr(err.args)


def test_referenced_locality_variable_not_utf8() -> None:
    """
    The variable ``pg_status__current_dc_env`` names is checked too, and
    the error names the setting that points at it.
    """
    environ = {PREFIX + "hosts": "db", PREFIX + "hosts_dc": "dc1",
               PREFIX + "current_dc_env": "MY_DC", "MY_DC": NOT_UTF8}
    with pytest.raises(ConfigError) as info:
        load_config(environ)
    assert info.value.variable == PREFIX + "current_dc_env"
    assert info.value.reason == ("the referenced variable MY_DC must be UTF-8 text, "
                                 "got b'db\\xff1'")


def test_utf8_text_is_fine() -> None:
    """
    Text beyond ASCII is UTF-8 like any other: accepted.
    """
    config = load_config({PREFIX + "hosts": "bäse-1", PREFIX + "pg_user": "usér",
                          PREFIX + "pg_database": "数据"})
    assert (config.hosts[0].name, config.pg_user, config.pg_database) == (
        "bäse-1", "usér", "数据")


# ---------------------------------------------------------------------------
# 3. files that are no regular files, or too large


@contextmanager
def _unblock_later(path: Path) -> Iterator[None]:
    """
    A guard for code that would block opening the FIFO ``path`` for
    reading: after 10 s, a writer opens it and closes it at once, so such
    an open returns (and reads nothing) instead of hanging the test run.
    """
    def open_and_close() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader: nothing is blocked
            return
        os.close(fd)

    timer = threading.Timer(10, open_and_close)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """
    A FIFO that no one writes, with :func:`_unblock_later` as a guard.
    """
    path = tmp_path / "fifo"
    os.mkfifo(path)
    with _unblock_later(path):
        yield path


def test_env_file_fifo_is_refused_without_blocking(fifo: Path) -> None:
    err = error_for({"env_file": str(fifo)})
    assert str(err) == f"pg_status__env_file: {str(fifo)!r} is not a regular file"


def test_env_file_device_is_refused() -> None:
    """
    A character device is never read: ``/dev/null`` here, the harmless
    witness of ``/dev/zero``, which grew memory without end (tried under
    a memory limit in ``tests/deploy/test_hostile_config.py``).
    """
    err = error_for({"env_file": "/dev/null"})
    assert str(err) == "pg_status__env_file: '/dev/null' is not a regular file"


def test_env_file_directory_is_refused(tmp_path: Path) -> None:
    assert str(error_for({"env_file": str(tmp_path)})) == (
        f"pg_status__env_file: {str(tmp_path)!r} is not a regular file")


def _password_file(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "password"
    path.write_bytes(content)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("variable", ["env_file", "pg_password_file"])
def test_files_larger_than_the_cap_are_refused(tmp_path: Path, variable: str) -> None:
    """
    :data:`MAX_FILE_BYTES` is read at most: one byte more is refused,
    before reading it, naming the variable; the content is never shown.
    """
    path = _password_file(tmp_path, b"#" * MAX_FILE_BYTES)
    if variable == "env_file":
        assert read_env_file(str(path)) == {}
    else:
        assert load_config({PREFIX + "hosts": "db", PREFIX + "pg_password_file": str(path)})
    with path.open("ab") as f:
        f.write(b"#")
    err = error_for({variable: str(path)})
    assert str(err) == (f"pg_status__{variable}: {str(path)!r} is larger than "
                        f"{MAX_FILE_BYTES} bytes")


def test_password_file_fifo_and_device(fifo: Path, tmp_path: Path) -> None:
    for path in (str(fifo), "/dev/null"):
        err = error_for({"pg_password_file": path})
        assert str(err) == f"pg_status__pg_password_file: {path!r} is not a regular file"


def test_password_file_path_with_nul(tmp_path: Path) -> None:
    """
    An environment file can carry a NUL into the password file's path,
    which no system call takes.
    """
    env_file = tmp_path / "env"
    env_file.write_text("pg_status__pg_password_file=/etc/pass\0word\n")
    err = error_for({"env_file": str(env_file)})
    assert err.variable == PREFIX + "pg_password_file"
    assert err.reason.startswith("must not contain a NUL character")


# ---------------------------------------------------------------------------
# 4. a log file that cannot be opened


def _options(logfile: str, **more: Any) -> dict[str, Any]:
    return {"nodaemon": True, "logfile": logfile, "logger": None, "syslog": False} | more


@pytest.mark.parametrize("make,why", [
    (lambda tmp: tmp / "missing" / "x", "No such file or directory"),
    (lambda tmp: tmp / "file" / "x", "Not a directory"),
    (lambda tmp: tmp, "Is a directory"),
])
def test_log_file_that_cannot_be_opened(tmp_path: Path, make: Callable[[Path], Path],
                                        why: str) -> None:
    """
    The start (opening the file) and the check (without creating it) give
    the same error, naming ``--logfile``; the check changes nothing.
    """
    (tmp_path / "file").write_text("")
    path = str(make(tmp_path))
    expected = f"--logfile: cannot open {path!r} for appending: {why}"
    checked = log_file_error(_options(path))
    assert checked is not None and str(checked) == expected
    with pytest.raises(ConfigError) as info:
        observer_for_twistd(_options(path))
    assert str(info.value) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_log_file_that_can_be_opened(tmp_path: Path) -> None:
    """
    A new file in a writable directory, an existing file: no error, and
    the check creates nothing; no file at all is no error either.
    """
    new = tmp_path / "new.log"
    assert log_file_error(_options(str(new))) is None
    assert not new.exists()
    new.write_text("")
    assert log_file_error(_options(str(new))) is None
    missing = str(tmp_path / "missing" / "x")
    assert log_file_error(None) is None
    assert log_file_error(_options("-")) is None
    assert log_file_error(_options(missing, logger="some.factory")) is None
    assert log_file_error(_options(missing, syslog=True)) is None


def test_check_reports_the_log_file_after_the_configuration() -> None:
    """
    ``--check-config`` adds the log file's error after the configuration's,
    as a start meets them, in the start's own line.
    """
    import io

    error = ConfigError("--logfile", "cannot open '/missing/x' for appending: "
                        "No such file or directory")
    out = io.StringIO()
    assert run_check({PREFIX + "hosts": "db", PREFIX + "sleep_ms": "0"}, out, (error,)) == 2
    assert out.getvalue().splitlines() == [
        "pg-status: configuration error: pg_status__sleep_ms: must be an integer greater "
        "than 0, got '0'",
        error_line(error),
        "pg-status: configuration invalid (2 errors, 0 warnings): pg-status would not start",
    ]


# ---------------------------------------------------------------------------
# 5. a header timeout whose seconds overflow a C int


def test_header_timeout_bound() -> None:
    """
    Its seconds are a ``TCP_DEFER_ACCEPT``, a C int: the largest accepted
    value, in the table too, keeps them one; one more is refused.
    """
    largest = 2**31 - 1
    assert INTEGER.match(setting("http_header_timeout_ms").accepts).group(2) == str(largest)
    config = load_config({PREFIX + "hosts": "db",
                          PREFIX + "http_header_timeout_ms": str(largest)})
    assert config.http_header_timeout_ms // 1000 < 2**31
    for text in (str(largest + 1), str(2**31 * 1000)):
        err = error_for({"http_header_timeout_ms": text})
        assert str(err) == (f"pg_status__http_header_timeout_ms: must be an integer from 1 "
                            f"to {largest}, got {text!r}")
