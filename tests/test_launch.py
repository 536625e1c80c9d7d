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
    assert twistd_argv(["--daemon", "--pidfile=/run/p.pid", "--syslog"]) == [
        "twistd", "--pidfile=/run/p.pid", "--syslog", "pgstatus"]
    # only first: elsewhere it is left to twistd (e.g. an option's value)
    assert twistd_argv(["--logfile", "--daemon"]) == [
        "twistd", "--nodaemon", "--pidfile=", "--logfile", "--daemon", "pgstatus"]


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
    The first attribute read runs the module's code in the placeholder
    itself: every reference, taken before or after, is the one real module,
    whatever way it was imported, and its globals are the module's own.
    """
    out = run_python(
        "import sys\n"
        "from pgstatus.launch import defer\n"
        "defer('http.cookiejar'); defer('pdb'); defer('random')\n"
        "from http import cookiejar as early\n"
        "jar = early.CookieJar()\n"
        "import http.cookiejar as late\n"
        "from http.cookiejar import CookieJar\n"
        "real = sys.modules['http.cookiejar']\n"
        "print(type(real).__name__, early is real, late is real,\n"
        "      CookieJar is real.CookieJar, type(jar) is CookieJar,\n"
        "      'urllib.request' in sys.modules)\n"
        "real.debug = True\n"
        "print(real._debug.__globals__ is vars(early), early.debug)\n"
        "import pdb\n"
        "print(callable(pdb.post_mortem), pdb.Pdb.__module__, type(pdb).__name__)\n"
        "import random\n"
        "random.seed(3); a = random.random(); random.seed(3)\n"
        "print(a == random.random())\n")
    assert out.splitlines() == ["module True True True True True", "True True",
                                "True pdb module", "True"]


def test_module_without_its_extension_is_not_deferred(tmp_path) -> None:
    """
    On a Python built without a module's C extension (``_bz2``, ``_lzma``)
    the module is left alone, so that importing it fails at once, as the
    ``try: import bz2`` in zipfile expects; with the extension it is
    deferred.
    """
    (tmp_path / "optcomp.py").write_text("import _optcomp_missing\n")
    out = run_python(
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from pgstatus import launch\n"
        "launch.EXTENSIONS['optcomp'] = '_optcomp_missing'\n"
        "launch.defer('optcomp'); launch.defer('bz2')\n"
        "print('optcomp' in sys.modules, type(sys.modules['bz2']).__name__)\n"
        "try:\n"
        "    import optcomp\n"
        "except ImportError as e:\n"
        "    print(e.name)\n")
    assert out.splitlines() == ["False DeferredModule", "_optcomp_missing"]


def test_partial_package_gives_its_names_and_loads_the_rest_at_first_use() -> None:
    """
    ``asyncio`` deferred: the three names ``twisted.internet.defer`` imports
    come from their submodules at once, without the package's event
    loops; any other read runs the package in the placeholder, after
    which asyncio and Deferred's bridges to it work, and the early names
    are the package's own.
    """
    out = run_python(
        "import sys\n"
        "from pgstatus.launch import defer\n"
        "defer('asyncio')\n"
        "from asyncio import AbstractEventLoop, Future, iscoroutine\n"
        "from twisted.internet.defer import Deferred\n"
        "import asyncio\n"
        "print(type(asyncio).__name__, 'asyncio.base_events' in sys.modules,\n"
        "      'asyncio.unix_events' in sys.modules)\n"
        "async def main():\n"
        "    d = Deferred()\n"
        "    f = d.asFuture(asyncio.get_running_loop())\n"
        "    d.callback(5)\n"
        "    back = Deferred.fromFuture(asyncio.ensure_future(asyncio.sleep(0, 7)))\n"
        "    return await f, await back.asFuture(asyncio.get_running_loop())\n"
        "print(asyncio.run(main()), type(asyncio).__name__)\n"
        "print(Future is asyncio.Future, AbstractEventLoop is asyncio.AbstractEventLoop,\n"
        "      iscoroutine is asyncio.iscoroutine, 'run' in asyncio.__all__,\n"
        "      sys.modules['asyncio'] is asyncio)\n")
    assert out.splitlines() == ["DeferredModule False False", "(5, 7) module",
                                "True True True True True"]


def test_every_deferred_module_works_once_used() -> None:
    """
    With all of :data:`DEFERRED` in place, each deferred module loads
    whole at its first use, and what Klein, twisted.web and the client
    import (base64, http.cookiejar, email...) works.
    """
    out = run_python(
        "import importlib, sys, types\n"
        "from pgstatus.launch import DEFERRED, defer\n"
        "for n in DEFERRED: defer(n)\n"
        "import twisted.scripts.twistd\n"
        "empty = []\n"
        "for n in DEFERRED:\n"
        "    m = importlib.import_module(n)\n"
        "    getattr(m, '_not_there_', None)\n"
        "    if type(m) is not types.ModuleType or not [k for k in vars(m) if k[:2] != '__']:\n"
        "        empty.append(n)\n"
        "import base64, twisted.web.server, klein, pgstatus.http.slowpath\n"
        "from http.cookiejar import CookieJar\n"
        "print(empty, base64.b64encode(b'ok').decode(), CookieJar.__module__)\n")
    assert out == "[] b2s= http.cookiejar"


def test_extension_modules_are_not_deferred() -> None:
    """
    An extension module (``grp``, ``binascii``) is made by its loader; a
    placeholder could not be filled, so it is left to the usual import.
    """
    out = run_python(
        "import sys\n"
        "from pgstatus.launch import defer\n"
        "defer('grp'); defer('binascii')\n"
        "print('grp' in sys.modules, 'binascii' in sys.modules)\n"
        "import grp, binascii\n"
        "print(grp.getgrgid(0).gr_gid, binascii.hexlify(b'a'))\n")
    assert out.splitlines() == ["False False", "0 b'61'"]


def test_submodule_of_a_partial_package_imported_first() -> None:
    """
    Importing one of asyncio's other submodules before anything else
    touches the package imports that submodule alone (its own ``from .
    import`` lines do not run the package half-way); the package loads at
    its first other use, around the submodules already there.
    """
    out = run_python(
        "import sys\n"
        "from pgstatus.launch import defer\n"
        "defer('asyncio')\n"
        "import asyncio.base_events, asyncio.tasks\n"
        "import asyncio\n"
        "print(type(asyncio).__name__)\n"
        "async def main():\n"
        "    return await asyncio.sleep(0, 3)\n"
        "print(asyncio.run(main()), type(asyncio).__name__,\n"
        "      asyncio.BaseEventLoop is sys.modules['asyncio.base_events'].BaseEventLoop,\n"
        "      asyncio.base_events is sys.modules['asyncio.base_events'],\n"
        "      asyncio.Task is sys.modules['asyncio.tasks'].Task)\n")
    assert out.splitlines() == ["DeferredModule", "3 module True True True"]


def test_partial_package_that_fails_is_left_to_the_usual_import() -> None:
    """
    If a name cannot be given (a Python whose package differs), the package
    is not deferred at all, and its submodules are imported afresh with it.
    """
    out = run_python(
        "import sys\n"
        "from pgstatus import launch\n"
        "launch.PARTIAL['json'] = {'loads': 'decoder'}\n"
        "launch.defer('json')\n"
        "print('json' in sys.modules, 'json.decoder' in sys.modules)\n"
        "import json, json.decoder\n"
        "print(type(json).__name__, json.loads('[1]'),\n"
        "      json.decoder is sys.modules['json.decoder'])\n")
    assert out.splitlines() == ["False False", "module [1] True"]


def test_a_failed_load_can_be_retried() -> None:
    """
    A module whose code fails stays deferred and loads at the next read.
    """
    out = run_python(
        "import sys, types\n"
        "from pgstatus.launch import defer, DeferredModule\n"
        "defer('pprint')\n"
        "import pprint\n"
        "loader = pprint.__spec__.loader\n"
        "real_exec = type(loader).exec_module\n"
        "calls = []\n"
        "def failing(self, module):\n"
        "    calls.append(module.__name__)\n"
        "    if calls == ['pprint']: raise RuntimeError('first')\n"
        "    return real_exec(self, module)\n"
        "type(loader).exec_module = failing\n"
        "try:\n"
        "    pprint.pformat\n"
        "except RuntimeError:\n"
        "    print(type(sys.modules['pprint']).__name__)\n"
        "print(pprint.pformat([1]), type(pprint).__name__, calls.count('pprint'))\n")
    assert out.splitlines() == ["DeferredModule", "[1] module 2"]


def test_another_thread_waits_for_the_load(tmp_path) -> None:
    """
    While one thread runs a deferred module's code, another that reads it
    waits and gets the loaded module (not a half-made one); the module's own
    code reading itself meanwhile gets what a module being imported gives.
    """
    (tmp_path / "slowmod.py").write_text(
        "import sys, time\n"
        "sys.modules['__main__'].loading.set()\n"
        "EARLY = 1\n"
        "me = sys.modules[__name__]\n"
        "try:\n"
        "    me.LATE\n"
        "except AttributeError as e:\n"
        "    SELF_READ = str(e)\n"
        "time.sleep(0.5)\n"
        "LATE = 2\n")
    out = run_python(
        "import sys, threading\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from pgstatus.launch import defer\n"
        "defer('slowmod')\n"
        "import slowmod\n"
        "got = {}\n"
        "def read(key, attr):\n"
        "    try:\n"
        "        got[key] = getattr(slowmod, attr)\n"
        "    except Exception as e:\n"
        "        got[key] = repr(e)\n"
        "loading = threading.Event()\n"
        "a = threading.Thread(target=read, args=('a', 'EARLY'))\n"
        "b = threading.Thread(target=read, args=('b', 'LATE'))\n"
        "a.start()\n"
        "assert loading.wait(10)  # a runs the module's code, which takes 0.5 s\n"
        "b.start(); a.join(); b.join()\n"
        "print(got['a'], got['b'], type(slowmod).__name__)\n"
        "print(slowmod.SELF_READ)\n")
    assert out.splitlines() == [
        "1 2 module", "partially initialized module 'slowmod' has no attribute 'LATE'"]


def test_another_thread_waits_for_a_package_load(tmp_path) -> None:
    """
    While one thread runs a deferred package's code, which is importing a
    submodule of its own, another thread that reads the package waits for
    the load rather than being told the attribute is missing.
    """
    pkg = tmp_path / "slowpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import early, slow\nVALUE = 1\n")
    (pkg / "early.py").write_text("EARLY = 0\n")
    (pkg / "slow.py").write_text(
        "import sys, time\n"
        "sys.modules['__main__'].loading.set()\n"
        "time.sleep(0.5)\n")
    out = run_python(
        "import sys, threading\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from pgstatus import launch\n"
        "launch.PARTIAL['slowpkg'] = {'EARLY': 'early'}\n"
        "launch.defer('slowpkg')\n"
        "import slowpkg\n"
        "got = {}\n"
        "def read(key):\n"
        "    try:\n"
        "        got[key] = slowpkg.VALUE\n"
        "    except Exception as e:\n"
        "        got[key] = repr(e)\n"
        "loading = threading.Event()\n"
        "a = threading.Thread(target=read, args=('a',))\n"
        "b = threading.Thread(target=read, args=('b',))\n"
        "a.start()\n"
        "assert loading.wait(10)  # a is in slowpkg.slow's code, for 0.5 s\n"
        "b.start(); a.join(); b.join()\n"
        "print(got['a'], got['b'], type(slowpkg).__name__, slowpkg.EARLY)\n")
    assert out == "1 1 module 0"


def test_a_module_already_imported_is_left_alone() -> None:
    out = run_python(
        "import sys, pdb\n"
        "from pgstatus.launch import defer\n"
        "defer('pdb')\n"
        "print(type(sys.modules['pdb']).__name__)\n")
    assert out == "module"


def test_help_version_and_bad_options_name_the_command() -> None:
    """
    ``pg-status --help`` and ``--version`` speak of pg-status (its version
    first, then twistd's), and an unknown option exits 1 with a message
    under the command's own name, not twistd's internal command line.
    """
    env = dict(os.environ, PYTHONPATH=ROOT)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pgstatus.launch", *args], env=env,
                              capture_output=True, text=True, timeout=60, cwd="/")

    from pgstatus import __version__

    helped = run("--help")
    assert helped.returncode == 0, helped
    assert helped.stdout.startswith("Usage: pg-status [--daemon] [options]\n")
    assert "pg_status__* environment variables" in helped.stdout
    versioned = run("--version")
    assert versioned.returncode == 0, versioned
    first, second = versioned.stdout.splitlines()[:2]
    assert first == f"pg-status {__version__}"
    assert second.startswith("twistd (the Twisted daemon) ")
    bad = run("-x")
    assert bad.returncode == 1, bad
    assert bad.stdout.splitlines()[-1] == "pg-status: option -x not recognized"
    assert "server started" not in bad.stdout + bad.stderr


def test_configuration_error_exits_as_twistd_does() -> None:
    """
    ``pg-status`` with a bad variable exits with twistd's status (2) and the
    same message naming the variable, before listening.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
    env.update(PYTHONPATH=ROOT, pg_status__hosts="127.0.0.1", pg_status__sleep_ms="abc")
    runs = [subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd="/")
            for cmd in ([sys.executable, "-m", "pgstatus.launch"],
                        [os.path.join(os.path.dirname(sys.executable), "twistd"),
                         "-n", "--pidfile=", "pgstatus"])]
    for done in runs:
        assert done.returncode == 2, done
        assert "pg_status__sleep_ms: must be an integer greater than 0" in done.stderr + done.stdout
        assert "server started" not in done.stderr + done.stdout
