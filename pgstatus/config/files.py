"""
The files that configuration names: the password file
(``pg_status__pg_password_file``) and the environment file
(``pg_status__env_file``) re-read on SIGHUP, and the one read of the
process environment.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping

from pgstatus.config.settings import (
    ENV_NAME_RE,
    PREFIX,
    ConfigError,
    check_no_nul,
    stripped,
)

#: the largest file configuration reads (the password file, the environment
#: file): far more than either holds, and a bound on what a wrong path costs
MAX_FILE_BYTES = 1 << 20


def read_regular_file(variable: str, path: str,
                      check: Callable[[os.stat_result], None] | None = None) -> bytes:
    """
    The content of the regular file ``path``, read without ever blocking
    or reading without end: anything but a regular file (a FIFO that no one
    writes, ``/dev/zero``, a directory) is refused before it is opened, the
    file is opened non-blocking and checked again once open (in case the
    path changed in between), and at most :data:`MAX_FILE_BYTES` are read.

    :param variable: the variable that names the file, for errors.
    :param check: also called with the file's status, before and once
        open, to refuse more (e.g. permissions); raises :class:`ConfigError`.
    :raise ConfigError: naming ``variable``: the file is missing,
        unreadable, not a regular file or too large.
    """
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise ConfigError(variable, f"{path!r} is not a regular file")
        if check is not None:
            check(before)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(variable, f"cannot read {path!r}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(variable, f"{path!r} is not a regular file")
        if check is not None:
            check(st)
        too_large = ConfigError(variable, f"{path!r} is larger than {MAX_FILE_BYTES} bytes")
        if st.st_size > MAX_FILE_BYTES:
            raise too_large
        chunks = []
        size = 0
        while chunk := os.read(fd, MAX_FILE_BYTES + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_FILE_BYTES:  # it grew since fstat
                raise too_large
        return b"".join(chunks)
    except OSError as e:
        raise ConfigError(variable, f"cannot read {path!r}: {e.strerror}") from None
    finally:
        os.close(fd)


def read_password_file(path: str) -> str:
    """
    The password in ``path`` (``pg_status__pg_password_file``), read once
    at startup.  Like libpq with ``.pgpass``, the file must be a regular
    file that neither its group nor others may access (``chmod 0600``).
    It is read as :func:`read_regular_file` says.  One trailing line break
    is dropped.

    :raise ConfigError: the file is missing, unreadable, too open, too
        large or not UTF-8; the message never contains the file's content.
    """
    variable = PREFIX + "pg_password_file"

    def private(st: os.stat_result) -> None:
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                variable,
                f"{path!r} has permissions {stat.S_IMODE(st.st_mode):04o}; group and others "
                "must have no access (chmod 0600)")

    data = read_regular_file(variable, path, private)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(variable, f"cannot read {path!r}: {type(e).__name__}") from None
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    check_no_nul(variable, text, secret=True)
    return text


def process_environ() -> Mapping[str, str]:
    """
    This process's environment.  The one place in pg-status that reads
    ``os.environ``; everything else receives a :class:`Config`.
    """
    return os.environ


#: the variable naming the environment file re-read on SIGHUP (an addition of ours)
ENV_FILE = PREFIX + "env_file"

_EXPORT_RE = re.compile(r"export\s+")
_DOUBLE_ESCAPES = {"\\": "\\", '"': '"', "$": "$", "`": "`"}


def env_file_path(environ: Mapping[str, str]) -> str | None:
    """
    The environment file named by ``pg_status__env_file``, or ``None``.

    :raises ConfigError: the value contains a NUL character.
    """
    path = stripped(environ, "env_file")
    if path is not None:
        check_no_nul(ENV_FILE, path)
    return path


def parse_env_file(text: str, path: str = "<env file>") -> dict[str, str]:
    """
    Parse shell-style ``NAME=value`` lines, as in systemd's
    ``EnvironmentFile=`` and the init script's defaults file: blank lines
    and lines starting with ``#`` or ``;`` are skipped, ``export`` before
    the name is allowed, and a value may be enclosed in single quotes
    (taken literally) or double quotes (``\\``, ``\\"``, ``\\$`` and
    ``\\``` escapes).  An unquoted value is taken as written, without
    surrounding whitespace (no inline comments).  A later line wins.

    :raises ConfigError: naming ``pg_status__env_file`` and the line
        number; the line's content is never shown (it may hold a password).
    """
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = _EXPORT_RE.match(line)
        if m is not None:
            line = line[m.end():]
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not ENV_NAME_RE.fullmatch(name):
            raise ConfigError(ENV_FILE, f"{path} line {number}: expected NAME=value")
        value = value.strip()
        if value[:1] in ("'", '"'):
            quote = value[0]
            if len(value) < 2 or value[-1] != quote:
                raise ConfigError(ENV_FILE, f"{path} line {number} ({name}): "
                                  "unterminated quoted value")
            value = value[1:-1]
            if quote == '"':
                value = _unescape_double(value)
        out[name] = value
    return out


def _unescape_double(value: str) -> str:
    parts = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value) and value[i + 1] in _DOUBLE_ESCAPES:
            parts.append(_DOUBLE_ESCAPES[value[i + 1]])
            i += 2
            continue
        parts.append(c)
        i += 1
    return "".join(parts)


def read_env_file(path: str) -> dict[str, str]:
    """
    The variables set in the environment file ``path`` (see
    :func:`parse_env_file`), read as :func:`read_regular_file` says.  The
    only I/O is reading the file.

    :raises ConfigError: naming ``pg_status__env_file`` when the file cannot
        be read or a line is invalid.
    """
    data = read_regular_file(ENV_FILE, path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(ENV_FILE, f"{path!r} is not UTF-8 text") from None
    return parse_env_file(text, path)


def with_env_file(environ: Mapping[str, str]) -> Mapping[str, str]:
    """
    ``environ`` with the variables of the file named by its
    ``pg_status__env_file`` applied over it (the file wins); ``environ``
    itself when no file is named.  ``pg_status__env_file`` set in the file
    is ignored: only the process environment names the file.

    :raises ConfigError: the file cannot be read or parsed.
    """
    path = env_file_path(environ)
    if path is None:
        return environ
    values = read_env_file(path)
    values.pop(ENV_FILE, None)
    return {**environ, **values}
