"""
``make run``: start a local PostgreSQL primary with two streaming replicas
(from the installed PostgreSQL binaries, on loopback addresses and free
ports) and ``twistd -n pgstatus`` in the foreground against them.

Ctrl-C stops pg-status and the servers.  Environment variables
``pg_status__*`` given on the command line override the generated ones
(e.g. ``pg_status__http_port=8080 make run``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pgtopology import PgTopology  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    # Ctrl-C, `kill` and a closed terminal all stop pg-status and PostgreSQL
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    print("starting PostgreSQL: a primary and two streaming replicas ...", flush=True)
    topo = PgTopology.start(replicas=2)
    proc = None
    try:
        env = dict(os.environ)
        env.update(topo.hosts_env())
        env.setdefault("pg_status__http_listen_address", "127.0.0.1")
        env.setdefault("pg_status__http_port", "8000")
        for k, v in os.environ.items():
            if k.startswith("pg_status__"):
                env[k] = v
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        proc = subprocess.Popen([twistd, "-n", "--pidfile=", "pgstatus"], env=env, cwd=ROOT)
        base = f"http://{env['pg_status__http_listen_address']}:{env['pg_status__http_port']}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(base + "/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        if proc.poll() is not None:
            return proc.returncode or 1
        print(f"""
pg-status is ready. Nodes:
{chr(10).join(f"  {n.name:9} {n.host}:{n.port}" for n in topo.nodes)}

Try:
  curl {base}/master
  curl {base}/replica
  curl -H 'Accept: application/json' {base}/replica
  curl {base}/hosts
  curl '{base}/sync_by_bytes?lag_bytes=0'
  curl {base}/ready

Ctrl-C stops pg-status and PostgreSQL.
""", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        print("stopping PostgreSQL ...", flush=True)
        topo.teardown()


if __name__ == "__main__":
    sys.exit(main())
