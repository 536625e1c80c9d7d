"""
The troubleshooting page (``docs/guide/troubleshooting.md``) has an entry
for every line an operator can see: every message pg-status logs at
``INFO`` or above (found in the code: ``log.info/warn/error/critical``,
``log.failure`` unless at debug, and the state-change and poll-error lines
the monitor emits), and every line of the original service
(``original-log-events.txt``, kept in this test), so a new log line without
an entry fails here.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "troubleshooting.md"

#: the original service's messages (level, component, message key), from the
#: specification's list of its log events
ORIGINAL = (
    ("INFO", "http", "server started"),
    ("INFO", "http", "server stopped"),
    ("ERROR", "http", "event loop failed"),
    ("INFO", "main", "received signal"),
    ("INFO", "monitor", "started hosts"),
    ("INFO", "monitor", "stopped"),
    ("INFO", "monitor", "host state changed"),
    ("WARNING", "monitor", "host state changed"),
    ("INFO", "monitor", "host role changed"),
    ("ERROR", "monitor", "PostgreSQL operation failed"),
    ("ERROR", "monitor", "PostgreSQL poll timed out"),
    ("ERROR", "monitor", "unexpected PostgreSQL result row count"),
    ("WARNING", "monitor", "PostgreSQL permission denied"),
    ("INFO", "monitor", "replica synchronization changed"),
    ("WARNING", "config", "preference disabled: incomplete locality configuration"),
    ("DEBUG", "selection", "master returned instead of replica"),
)
#: the original's operation names of "PostgreSQL operation failed"
ORIGINAL_OPERATIONS = ("connect_start", "connect", "set_non_blocking", "flush", "send_query",
                       "consume_input", "validate_result")

_LEVELS = {"info", "warn", "error", "critical"}


def _text(node: ast.expr) -> str | None:
    """A message literal, with ``{}`` for an f-string's fields."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _is_logger(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name.endswith("log")


def _debug(call: ast.Call) -> bool:
    return any(k.arg == "level" and isinstance(k.value, ast.Attribute)
               and k.value.attr == "debug" for k in call.keywords)


def logged_messages() -> Iterator[tuple[str, str]]:
    """
    ``(file, message)`` for every message pg-status logs at info or above.
    """
    for path in sorted((ROOT / "pgstatus").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and _is_logger(node.func.value) and node.args):
                level = node.func.attr
                if level in _LEVELS or (level == "failure" and not _debug(node)):
                    text = _text(node.args[0])
                    if text is not None:
                        yield rel, text
            # describe_changes(): (info|warn, "format", {fields})
            if (isinstance(node, ast.Tuple) and len(node.elts) == 3
                    and isinstance(node.elts[0], ast.Name)
                    and node.elts[0].id in ("info", "warn")):
                text = _text(node.elts[1])
                if text is not None:
                    yield rel, text
            # poll_error_line(): the error lines' formats
            if rel.endswith("errorlog.py"):
                text = _text(node) if isinstance(node, ast.Constant) else None
                if text and "host={host}" in text and "\n" not in text:
                    yield rel, text


def key_phrase(message: str) -> str:
    """
    The words an operator searches for: the message up to its first field
    (``key=``, or a ``{placeholder}``), without a leading placeholder.
    """
    text = re.sub(r"^\{[^}]*\}\s*", "", message)
    text = re.split(r"\s\S+=|\{|;", text, maxsplit=1)[0]
    return text.strip(" :")


def test_the_code_has_log_lines_to_find() -> None:
    """
    The search finds the lines it is meant to (a broken search would let
    every line through).
    """
    phrases = {key_phrase(m) for _, m in logged_messages()}
    for expected in ("host state changed", "split brain: several hosts report master",
                     "PostgreSQL poll timed out", "PostgreSQL operation failed",
                     "cannot listen", "not following",
                     "monitor ready: every host completed its first check",
                     "configuration reload failed, keeping the running configuration",
                     "internal error in check of", "answering a request"):
        assert expected in phrases, sorted(phrases)
    assert key_phrase("{what} started address={address}") == "started"
    assert key_phrase("{warning}") == ""


def test_every_logged_line_has_an_entry() -> None:
    """
    Each message pg-status logs at info or above is on the page (its words
    up to the first field).
    """
    page = PAGE.read_text()
    missing = sorted({f"{key_phrase(m)!r} ({f})" for f, m in logged_messages()
                      if key_phrase(m) and key_phrase(m) not in page})
    assert not missing, "no troubleshooting entry for:\n" + "\n".join(missing)


def test_every_original_line_has_an_entry() -> None:
    """
    Each line of the original service is on the page with its level and
    component (the debug line named as such), and each of its operation
    names.
    """
    page = PAGE.read_text()
    for level, component, message in ORIGINAL:
        assert re.search(rf"{level} {component}: [^\n`]*{re.escape(message)}", page), \
            (level, component, message)
    for op in ORIGINAL_OPERATIONS:
        assert f"operation={op}" in page, op


def test_config_warnings_have_entries() -> None:
    """
    The configuration's own warnings (logged as ``{warning}``) are on the
    page too.
    """
    page = PAGE.read_text()
    assert "WARNING config: unknown variable pg_status__<name> is ignored" in page
    assert "preference disabled: incomplete locality configuration" in page
