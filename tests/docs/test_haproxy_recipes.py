"""
The HAProxy recipes of ``docs/deploy/haproxy.md`` are valid configurations
for the real HAProxy (``haproxy -c``), and the ``httpchk`` recipe, pointed
at a running pg-status, takes it into the pool once it is ready, even with
its only database host dead, as the page says.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from daemon import Daemon
from pgtopology import free_port
from test_agent import HAProxy

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deploy" / "haproxy.md"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def recipes() -> list[str]:
    """
    The page's ``haproxy`` code blocks, in order.
    """
    return re.findall(r"```haproxy\n(.*?)```", PAGE.read_text(), re.S)


def test_page_has_both_recipes() -> None:
    """
    The httpchk recipe and the agent-check recipe are there.
    """
    found = recipes()
    assert len(found) == 2
    assert "option httpchk" in found[0] and "agent-check" in found[1]


@pytest.mark.parametrize("index", [0, 1])
def test_recipe_is_valid_for_haproxy(tmp_path: Path, index: int) -> None:
    """
    ``haproxy -c`` accepts each recipe as written.
    """
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(recipes()[index])
    check = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True,
                           timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_httpchk_recipe_takes_a_ready_pg_status(tmp_path: Path) -> None:
    """
    The httpchk recipe, with its servers pointed at a pg-status whose one
    database host refuses connections and at a port where nothing listens:
    the pg-status goes UP (``/ready`` is 200 once every host was checked,
    dead or not), the other DOWN, and a request through the frontend gets
    pg-status's answer (``/master``: 404, there is no master).
    """
    body = recipes()[0]
    front = free_port()
    pgs = Daemon({"pg_status__hosts": "127.0.0.1", "pg_status__pg_port": str(free_port()),
                  "pg_status__sleep_ms": "200"}).start()
    try:
        body = body.replace("127.0.0.1:8000", f"127.0.0.1:{front}")
        body = body.replace("10.0.2.20:8000", f"127.0.0.1:{pgs.port}")
        body = body.replace("10.0.2.21:8000", f"127.0.0.1:{free_port()}")
        body = body.replace("inter 2s", "inter 200ms")
        hx = HAProxy(str(tmp_path), body)
        try:
            deadline = time.monotonic() + 10
            while True:
                states = {k[1]: v["status"] for k, v in hx.servers().items()}
                if states.get("pgs-a") == "UP" and states.get("pgs-b", "").startswith("DOWN"):
                    break
                assert time.monotonic() < deadline, (states, hx.log_tail())
                time.sleep(0.1)
            front_url = f"http://127.0.0.1:{front}"
            via = Daemon.__new__(Daemon)
            via.url = front_url
            assert via.get("/ready") == (200, "OK")
            assert via.get("/master")[0] == 404
        finally:
            hx.stop()
    finally:
        pgs.stop()
