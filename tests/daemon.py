"""
``twistd -n pgstatus`` as a separate process for tests: started with an
environment, waited for until ``/live`` answers, stopped, killed or frozen
as a real fault.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping

from pgtopology import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")


class Daemon:
    """
    One pg-status process listening on 127.0.0.1.

    :param env: ``pg_status__*`` settings (the listen address and a free
        port are added unless given).
    :param nofile: ``(soft, hard)`` open-files limits to start it with
        (default: this process's).
    """

    def __init__(self, env: Mapping[str, str], port: int | None = None,
                 nofile: tuple[int, int] | None = None) -> None:
        self.port = port or free_port()
        self.nofile = nofile
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("pg_status__")}
        self.env.update({"PYTHONPATH": ROOT, "pg_status__http_listen_address": "127.0.0.1",
                         "pg_status__http_port": str(self.port)})
        self.env.update(env)
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix="pg-status-", suffix=".log", delete=False)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> Daemon:
        self.proc = subprocess.Popen([TWISTD, "-n", "--pidfile=", "pgstatus"], env=self.env,
                                     cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=self._limits if self.nofile else None)
        deadline = time.monotonic() + timeout
        while self.get("/live")[0] != 200:
            if self.proc.poll() is not None:
                raise AssertionError(f"pg-status exited {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"pg-status did not start:\n{self.log()}")
            time.sleep(0.05)
        return self

    def _limits(self) -> None:
        # in the child, before exec
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        """
        ``(status, body)``; ``(0, error)`` when nothing answers.
        """
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def wait_ready(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while self.get("/ready")[0] != 200:
            if time.monotonic() > deadline:
                raise AssertionError(f"pg-status not ready:\n{self.log()}")
            time.sleep(0.05)

    def log(self, tail: int | None = 6000) -> str:
        """
        The output so far: its last ``tail`` characters, or all of it.
        """
        with open(self._log.name, errors="replace") as f:
            text = f.read()
        return text if tail is None else text[-tail:]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: the hub vanishes without closing anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.terminate()
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        os.unlink(self._log.name)
        self.proc = None
