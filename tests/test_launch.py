"""
:mod:`pgstatus.launch`: the ``pg-status`` command's deferred modules.
"""

from __future__ import annotations

import os
import subprocess
import sys

from pgstatus.launch import twistd_argv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_twistd_command_line() -> None:
    assert twistd_argv([]) == ["twistd", "--nodaemon", "--pidfile=", "pgstatus"]
    assert twistd_argv(["--logfile=x", "--umask=077"]) == [
        "twistd", "--nodaemon", "--pidfile=", "--logfile=x", "--umask=077", "pgstatus"]


def test_deferred_module_is_not_loaded_by_importing_it() -> None:
    """
    Twisted's imports of a deferred module (``import pdb``, ``from http
    import cookiejar``) leave it unloaded, and what it would bring too.
    """
    out = run_python(
        "import sys\n"
        "from pgstatus.launch import DEFERRED, defer\n"
        "for n in DEFERRED: defer(n)\n"
        "import twisted.scripts.twistd, twisted.python.compat\n"
        "from http import cookiejar\n"
        "import pdb\n"
        "print(type(cookiejar).__name__, type(pdb).__name__,\n"
        "      'urllib.request' in sys.modules, 'bdb' in sys.modules)\n")
    assert out == "DeferredModule DeferredModule False False"


def test_deferred_module_loads_at_first_use() -> None:
    """
    The first attribute read imports the real module, which replaces the
    placeholder in ``sys.modules``; the placeholder then answers as the real
    module does, for every way of importing it.
    """
    out = run_python(
        "import sys\n"
        "from pgstatus.launch import defer\n"
        "defer('http.cookiejar'); defer('pdb')\n"
        "from http import cookiejar as early\n"
        "jar = early.CookieJar()\n"
        "import http.cookiejar as late\n"
        "from http.cookiejar import CookieJar\n"
        "real = sys.modules['http.cookiejar']\n"
        "print(type(real).__name__, late is real, CookieJar is real.CookieJar,\n"
        "      type(jar) is CookieJar, early.CookieJar is CookieJar,\n"
        "      'urllib.request' in sys.modules)\n"
        "import pdb\n"
        "print(callable(pdb.post_mortem), pdb.Pdb.__module__)\n")
    assert out.splitlines() == ["module True True True True True", "True pdb"]


def test_a_module_already_imported_is_left_alone() -> None:
    out = run_python(
        "import sys, pdb\n"
        "from pgstatus.launch import defer\n"
        "defer('pdb')\n"
        "print(type(sys.modules['pdb']).__name__)\n")
    assert out == "module"
