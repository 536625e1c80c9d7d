"""
``pg-status``: runs ``twistd --nodaemon --pidfile= [options] pgstatus``, the
way a container or a supervisor runs the service, with a lighter start; or,
with ``--daemon``, ``twistd [options] pgstatus``, the way an init script
does.

twistd and Twisted import standard-library modules at start that the
service never uses: ``http.cookiejar`` (for a deprecated alias in
``twisted.python.compat``; it brings ``urllib.request``, ``http.client`` and
the ``email`` package with it), ``pdb`` (for twistd's ``--debug``) and a few
more (:data:`DEFERRED`).  Before twistd is imported, the launcher puts a
placeholder module in their place, which runs the module's code in itself
the first time anybody reads one of its attributes (as
``importlib.util.LazyLoader`` does; that one also loads on the import
system's own reads), so whatever does use them still works.  It also hands
twistd the ``pgstatus`` plugin instead of letting it look through
``twisted/plugins``, whose cache makes every start import every plugin's
interfaces (``twisted.trial`` and ``unittest`` among them).  Measured here,
interleaved starts under a 0.1 vCPU quota: ready after 1.80 s against 2.54 s
for ``twistd pgstatus``, in 33.8 MiB against 39.7 MiB.

``twistd pgstatus`` itself is unchanged and remains the reference way to
run the service.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Sequence

#: modules imported at start but used by no code path of a running
#: service's start and fast path (the footprint tests check it), with what
#: each placeholder saved of the start's instructions (callgrind):
#:
#: - 2.6 %: ``http.cookiejar`` (a deprecated alias in twisted.python.compat;
#:   it brings urllib.request, http.client and email), ``pdb`` (twistd's
#:   --debug), ``argparse``, ``difflib`` and ``pprint`` (unittest, which
#:   Twisted's plugin cache brings in), ``random`` (reconnecting client
#:   factories), ``shutil``, ``bz2`` and ``lzma`` (zipfile, for Twisted's
#:   zip paths), ``tokenize`` (linecache), ``textwrap`` (traceback),
#:   ``copy`` (dataclasses) and ``locale`` (subprocess);
#: - 1.4 %: the reactor's UNIX-socket support, ``twisted.internet.unix``
#:   (finding it imports the ``twisted`` package);
#: - 4.1 %: most of ``asyncio`` (:data:`PARTIAL`);
#: - 3.2 %: ``ssl``, which psycopg2 imports only to have Python set up
#:   libcrypto's locking callbacks, which only OpenSSL before 1.1 needed
#:   (Python 3.10 and later require 1.1.1 or newer); libpq speaks TLS through
#:   libssl itself;
#: - 1.6 %: ``getpass`` (encrypted .tap files), ``twisted.python.logfile``
#:   (--logfile), ``twisted.internet.udp``, ``pty`` (child processes on a
#:   terminal), and ``fnmatch`` and ``ntpath``, which pathlib imports for
#:   functions that Twisted's file paths do not call at start.
#:
#: (Not ``glob``, which twistd's log files import: Python 3.13's pathlib uses
#: it at once.  Not ``ipaddress``, ``twisted.internet.process`` or
#: ``twisted.persisted.sob``, which the started service uses.  Not extension
#: modules such as ``grp`` or ``binascii``, which :func:`defer` leaves alone.)
DEFERRED = ("http.cookiejar", "pdb", "argparse", "difflib", "pprint", "random",
            "shutil", "bz2", "lzma", "tokenize", "textwrap", "copy", "locale",
            "twisted.internet.unix", "asyncio", "ssl",
            "getpass", "twisted.python.logfile", "twisted.internet.udp", "pty", "fnmatch",
            "ntpath")

#: deferred packages of which Twisted reads a few names at import, given at
#: once (name: the submodule that defines it) so that the rest of the package
#: waits for a use: ``twisted.internet.defer`` imports three names of
#: ``asyncio`` (for Deferred.asFuture, fromFuture and coroutines), and the
#: rest of the package, its event loops and streams, costs 4.1 % of the
#: start's instructions
PARTIAL = {"asyncio": {"AbstractEventLoop": "events", "Future": "futures",
                       "iscoroutine": "coroutines"}}

#: deferred modules that import a C extension the interpreter may be built
#: without: deferred only where that extension exists, so that on such a
#: Python ``import bz2`` still fails at once (zipfile, for one, tests for it
#: with ``try: import bz2``) rather than at first use
EXTENSIONS = {"bz2": "_bz2", "lzma": "_lzma", "ssl": "_ssl"}

#: one lock per deferred module, held while it loads
_locks: dict[str, threading.RLock] = {}
#: deferred modules whose code is running now
_loading: set[str] = set()


class DeferredModule(types.ModuleType):
    """
    Stands in ``sys.modules`` for a module not loaded yet.  The first read of
    an attribute it lacks loads the module into this very object (as
    :class:`importlib.util.LazyLoader` does), so every reference, old or
    new, is the one real module from then on.  Another thread reading it
    meanwhile waits until the module's code has run.
    """

    def __getattr__(self, attr: str) -> object:
        if _importing_submodule(self):
            # ``from . import x`` in a submodule of this package that this
            # thread is importing (not one PARTIAL gave): running the
            # package's code here would import that half-made submodule
            # again; the import system imports x itself when x is missing
            raise AttributeError(
                f"deferred package {self.__name__!r} has no attribute {attr!r} yet")
        load(self)
        if type(self) is DeferredModule:
            # read while its code runs, in the thread running it (a circular
            # import): missing, as in any module being imported
            raise AttributeError(
                f"partially initialized module {self.__name__!r} has no attribute {attr!r}")
        return getattr(self, attr)


def _importing_submodule(package: types.ModuleType) -> bool:
    """
    Whether this thread is running the code of a direct submodule of
    ``package`` that the package does not have yet (the import system binds
    a submodule in its package once the submodule's code has run).  Frames
    are per thread: another thread's import does not count, so a thread
    reading the package while another loads it waits for the load.
    """
    if "__path__" not in vars(package):
        return False
    prefix = package.__name__ + "."
    bound = vars(package)
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            name = frame.f_globals.get("__name__", "")
            child = name[len(prefix):]
            if name.startswith(prefix) and "." not in child and child not in bound:
                return True
        frame = frame.f_back
    return False


def load(module: types.ModuleType) -> types.ModuleType:
    """
    Run the code of deferred ``module`` in it, once; a plain module is
    returned as it is.  The placeholder stays a placeholder until the code
    has run, so that other threads wait for the lock rather than read a
    half-made module.
    """
    name = module.__name__
    lock = _locks.get(name)
    if lock is None:
        return module
    with lock:
        if type(module) is DeferredModule and name not in _loading:
            _loading.add(name)
            try:
                module.__spec__.loader.exec_module(module)  # type: ignore[union-attr]
            finally:
                _loading.discard(name)
            module.__class__ = types.ModuleType
    return module


def defer(name: str) -> None:
    """
    Put a :class:`DeferredModule` in place of ``name`` unless it is imported
    already, cannot be found, or lacks the C extension it needs
    (:data:`EXTENSIONS`).  A package listed in :data:`PARTIAL` gets the
    names given there at once, from the submodules that define them.
    """
    if name in sys.modules:
        return
    extension = EXTENSIONS.get(name)
    if extension is not None and importlib.util.find_spec(extension) is None:
        return
    spec = importlib.util.find_spec(name)
    # finding a submodule imports its package, which may import it
    if name in sys.modules:
        return
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return
    if isinstance(spec.loader, (importlib.machinery.ExtensionFileLoader,
                                importlib.machinery.BuiltinImporter)):
        # made by the loader's create_module: its exec_module cannot fill a
        # placeholder (what importlib.util.LazyLoader refuses too)
        return
    # a plain module while PARTIAL's submodules load: their own ``from .
    # import x`` must import x, not the whole package
    placeholder = types.ModuleType(name)
    placeholder.__spec__ = spec
    placeholder.__loader__ = spec.loader
    placeholder.__package__ = spec.parent
    if spec.submodule_search_locations is not None:
        placeholder.__path__ = list(spec.submodule_search_locations)
    if spec.has_location:
        placeholder.__file__ = spec.origin
        placeholder.__cached__ = spec.cached  # type: ignore[attr-defined]
    before = set(sys.modules)
    sys.modules[name] = placeholder
    parent, _, child = name.rpartition(".")
    try:
        for attr, submodule in PARTIAL.get(name, {}).items():
            defining = importlib.import_module(f"{name}.{submodule}")
            setattr(placeholder, attr, getattr(defining, attr))
    except Exception:
        # left to the usual import, which will report whatever is wrong
        for added in set(sys.modules) - before:
            if added == name or added.startswith(name + "."):
                del sys.modules[added]
        return
    _locks[name] = threading.RLock()
    placeholder.__class__ = DeferredModule
    if parent:
        setattr(sys.modules[parent], child, placeholder)


#: ``pg-status``'s own option: run as a daemon, as ``twistd pgstatus`` does
DAEMON = "--daemon"


def twistd_argv(args: Sequence[str]) -> list[str]:
    """
    twistd's command line for ``pg-status [--daemon] [twistd options]``: in
    the foreground without a pid file, or with ``--daemon`` first (not
    taken from among twistd's options, where it could be an option's
    value) as twistd runs by default, forked into the background with a
    pid file.
    """
    if len(args) > 0 and args[0] == DAEMON:
        return ["twistd", *args[1:], "pgstatus"]
    return ["twistd", "--nodaemon", "--pidfile=", *args, "pgstatus"]


def main(args: Sequence[str] | None = None) -> None:
    """
    The ``pg-status`` command.
    """
    from pgstatus.collector import hold_collections

    # until the service has started (PgStatusService.startService settles)
    hold_collections()
    for name in DEFERRED:
        defer(name)
    sys.argv = twistd_argv(sys.argv[1:] if args is None else args)
    from twisted.python import usage
    from twisted.scripts.twistd import runApp

    # twisted.application.app.run, with errors under this command's name
    config = options_class()()
    try:
        config.parseOptions(sys.argv[1:])
    except usage.error as e:
        print(config)
        print(f"pg-status: {e}")
        sys.exit(1)
    runApp(config)


def options_class() -> type:
    """
    twistd's options with the ``pgstatus`` plugin given rather than looked
    for: no scan of ``twisted/plugins`` and no load of Twisted's plugin
    cache, which imports every plugin's interfaces (``twisted.trial`` and
    with it ``unittest``) on every start.
    """
    from twisted.application.service import IServiceMaker
    from twisted.plugin import getPlugins
    from twisted.scripts.twistd import ServerOptions

    def plugins(interface: type, package: object = None) -> list[object]:
        if interface is IServiceMaker:
            from twisted.plugins.pgstatus_plugin import PgStatus

            return [PgStatus]
        return list(getPlugins(interface, package))

    class Options(ServerOptions):
        synopsis = "Usage: pg-status [--daemon] [options]"
        longdesc = (
            "Runs pg-status in the foreground, as twistd --nodaemon --pidfile= "
            "[options] pgstatus does, or with --daemon (first) in the background, as "
            "twistd [options] pgstatus does. The other options are twistd's; "
            "the service itself is configured by pg_status__* environment "
            "variables (see the README).")
        _getPlugins = staticmethod(plugins)

        def opt_version(self) -> None:
            """
            Print version information and exit.
            """
            from pgstatus import __version__

            print(f"pg-status {__version__}")
            super().opt_version()

    return Options


if __name__ == "__main__":  # pragma: no cover - python -m pgstatus.launch
    main()
