"""
A real Prometheus server for tests: Debian's ``prometheus`` binary
(``.ci/prometheus-deps`` installs it), started on 127.0.0.1 with its own
configuration and data directory, queried over its HTTP API, and stopped by
its pid.

Prometheus cannot listen on port 0 and tell us the port, so a free port is
picked (:func:`pgtopology.free_port`, below the kernel's range for outgoing
connections) and the start is retried on another one if the server exits
because the port was taken in between.  The package's own system service,
if one runs, uses 9090 and ``/var/lib/prometheus``; neither is used here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import yaml
from pgtopology import free_port, poll


def prometheus_binary() -> str:
    """
    The server binary.

    :raises FileNotFoundError: with what to install.
    """
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
    if found is None:
        raise FileNotFoundError("no prometheus binary: run .ci/prometheus-deps "
                                "(apt-get install prometheus)")
    return found


class PrometheusServer:
    """
    One Prometheus server scraping ``targets`` as job ``job``, evaluating
    ``rule_files``.

    :param targets: ``host:port`` of each target.
    :param rule_files: paths of rule files to load.
    :param interval: scrape and evaluation interval, e.g. ``"1s"``.
    """

    def __init__(self, targets: Sequence[str], rule_files: Sequence[str], job: str,
                 interval: str = "1s") -> None:
        self.dir = tempfile.mkdtemp(prefix="pg-status-prometheus.")
        self.config = os.path.join(self.dir, "prometheus.yml")
        with open(self.config, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": interval, "evaluation_interval": interval,
                           "scrape_timeout": interval},
                "rule_files": list(rule_files),
                "scrape_configs": [{"job_name": job,
                                    "static_configs": [{"targets": list(targets)}]}],
            }, f)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = os.path.join(self.dir, "prometheus.log")

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60, attempts: int = 3) -> PrometheusServer:
        """Start the server and wait until it reports ready (``/-/ready``)."""
        binary = prometheus_binary()
        for attempt in range(attempts):
            self.port = free_port()
            with open(self._log, "ab") as log:
                self.proc = subprocess.Popen(
                    [binary, f"--config.file={self.config}",
                     f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
                     f"--web.listen-address=127.0.0.1:{self.port}"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True)
            proc = self.proc
            poll(lambda p=proc: p.poll() is not None or self._ready(), timeout,
                 "prometheus to be ready", interval=0.1, context=self.log)
            if proc.poll() is None:
                return self
            if "address already in use" not in self.log() or attempt == attempts - 1:
                raise AssertionError(f"prometheus exited with {proc.returncode}:\n"
                                     f"{self.log()}")
        raise AssertionError("unreachable")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``: the ``data`` of a successful answer."""
        query = "?" + urllib.parse.urlencode(params) if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """The active alerts (pending and firing), as ``/api/v1/alerts`` lists them."""
        return list(self.api("alerts")["alerts"])

    def log(self) -> str:
        """The end of the server's log."""
        try:
            with open(self._log, errors="replace") as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server by its pid and remove its directory."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait(what: str, check: Any, timeout: float, server: PrometheusServer) -> Any:
    """:func:`pgtopology.poll` with the server's log tail on timeout."""
    start = time.monotonic()
    result = poll(check, timeout, what, interval=0.2, context=server.log)
    print(f"{what}: {time.monotonic() - start:.1f} s")
    return result
