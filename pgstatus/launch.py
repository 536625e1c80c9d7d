"""
``pg-status``: runs ``twistd --nodaemon --pidfile= [options] pgstatus``, the
way a container or a supervisor runs the service, with a lighter start.

twistd and Twisted import standard-library modules at start that the
service never uses: ``http.cookiejar`` (for a deprecated alias in
``twisted.python.compat``; it brings ``urllib.request``, ``http.client`` and
the ``email`` package with it), ``pdb`` (for twistd's ``--debug``) and a few
more (:data:`DEFERRED`).  Before
twistd is imported, the launcher puts a placeholder module in their place,
which imports the real module the first time anybody reads one of its
attributes, so whatever does use them still works.  Measured here: about
11 ms less CPU before the service listens (a tenth of a second under a 0.1
vCPU quota) and 1.5 MiB less memory.

``twistd pgstatus`` itself is unchanged and remains the reference way to
run the service (and the only one that daemonizes).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Sequence

#: standard-library modules imported at start but used by no code path of a
#: running service: for a deprecated alias (http.cookiejar), for twistd's
#: --debug (pdb), by the unittest package that Twisted's plugin cache brings
#: in (argparse, difflib, pprint), for reconnecting client factories (random)
DEFERRED = ("http.cookiejar", "pdb", "argparse", "difflib", "pprint", "random")

_lock = threading.RLock()


class DeferredModule(types.ModuleType):
    """
    Stands in ``sys.modules`` for a module not imported yet; the first
    attribute read that the placeholder lacks imports the real module, which
    then takes its place in ``sys.modules`` and lends the placeholder its
    namespace.
    """

    def __getattr__(self, attr: str) -> object:
        return getattr(load(self), attr)


def load(placeholder: DeferredModule) -> types.ModuleType:
    """
    Import the real module behind ``placeholder`` (once).
    """
    name = placeholder.__name__
    with _lock:
        real = sys.modules.get(name)
        if real is None or real is placeholder:
            del sys.modules[name]
            try:
                real = importlib.import_module(name)
            except BaseException:
                sys.modules[name] = placeholder
                raise
        vars(placeholder).update(vars(real))
        return real


def defer(name: str) -> None:
    """
    Put a :class:`DeferredModule` in place of ``name`` unless it is imported
    already.
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    placeholder = DeferredModule(name)
    placeholder.__spec__ = spec
    placeholder.__loader__ = spec.loader
    placeholder.__package__ = spec.parent
    placeholder.__file__ = spec.origin
    sys.modules[name] = placeholder
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, placeholder)


def twistd_argv(args: Sequence[str]) -> list[str]:
    """
    twistd's command line for ``pg-status [twistd options]``.
    """
    return ["twistd", "--nodaemon", "--pidfile=", *args, "pgstatus"]


def main(args: Sequence[str] | None = None) -> None:
    """
    The ``pg-status`` command.
    """
    for name in DEFERRED:
        defer(name)
    sys.argv = twistd_argv(sys.argv[1:] if args is None else args)
    from twisted.scripts.twistd import run

    run()


if __name__ == "__main__":  # pragma: no cover - python -m pgstatus.launch
    main()
