"""
The cyclic garbage collector around start-up.

Start-up (imports, building the service) allocates almost only objects that
live as long as the process.  The collections their number triggers find
next to nothing, and every later full collection would traverse them all
again.  So the ``pg-status`` command holds collections while it starts, and
the service, once started by ``pg-status`` or ``twistd``, freezes what is
alive then (:func:`settle`).

No Twisted import here: the launcher calls :func:`hold_collections` before
anything else is imported.
"""

from __future__ import annotations

import gc

#: whether :func:`hold_collections` turned the collector off
_held = False


def hold_collections() -> None:
    """
    No cyclic garbage collection until :func:`settle` (about 5 % of the
    start's CPU, counted with callgrind).  A collector already off stays
    off after :func:`settle`.
    """
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def settle() -> None:
    """
    Move every object alive now into the collector's permanent generation
    (``gc.freeze``), so that later collections traverse only what the
    running service allocates, and turn the collector back on if
    :func:`hold_collections` turned it off.
    """
    global _held
    gc.freeze()
    if _held:
        _held = False
        gc.enable()
