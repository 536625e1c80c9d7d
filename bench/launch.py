"""
Run pg-status without ``twistd``, optionally with the HTTP fast path off.

``make bench`` runs the service as ``twistd -n pgstatus``; this launcher
exists for the Klein-only comparison: it builds the service exactly as the
twistd plugin does (``pgstatus.tap.makeService``: configuration from the
``pg_status__*`` environment, log observer), then, with
``--no-fast-path``, turns the answer cache off
(``svc.service.site.cache.enabled``) so every request goes through the
front to ``twisted.web`` and Klein, and runs the default reactor until
SIGTERM/SIGINT.

Usage: ``python bench/launch.py [--no-fast-path]``
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--no-fast-path", action="store_true",
                        help="serve every request through twisted.web + Klein")
    args = parser.parse_args(argv)
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)

    from twisted.internet import reactor

    from pgstatus.tap import Options, makeService

    svc = makeService(Options(), reactor)
    if args.no_fast_path:
        svc.service.site.cache.enabled = False
    svc.privilegedStartService()
    svc.startService()
    reactor.addSystemEventTrigger("before", "shutdown", svc.stopService)
    reactor.run()


if __name__ == "__main__":
    main()
