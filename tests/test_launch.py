"""
:mod:`pgstatus.launch`: the ``pg-status`` command.
"""

from __future__ import annotations

import os
import subprocess
import sys

from pgstatus.launch import twistd_argv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str) -> str:
    """
    Run ``code`` in a fresh interpreter with this repository on its path;
    its standard output (other test modules use it too).
    """
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


def test_check_config_goes_to_the_plugin() -> None:
    """
    ``--check-config`` is the plugin's option, not twistd's: it is handed
    on after ``pgstatus`` wherever it is given.
    """
    assert twistd_argv(["--check-config"]) == [
        "twistd", "--nodaemon", "--pidfile=", "pgstatus", "--check-config"]
    assert twistd_argv(["--daemon", "--syslog", "--check-config"]) == [
        "twistd", "--syslog", "pgstatus", "--check-config"]


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
