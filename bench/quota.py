"""
pg-status under a CPU quota (``make bench-quota``), as a sidecar with
``limits.cpu: 100m`` runs.

The service runs in a cgroup of its own (cgroup v1 ``cpu`` and ``cpuacct``
controllers: ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us`` of 100 ms,
``cpu.stat`` for throttled periods, ``cpuacct.usage`` for CPU), from its
very first instruction, against the local primary + two replicas with a
background writer committing about 100 transactions/s.  A client outside
the quota sends ``GET /master`` at a fixed rate over 8 keep-alive
connections; each request's latency is counted from the time it was
scheduled, so a stalled service is not hidden by a client that waits for it
(no coordinated omission).

Reports, per quota and rate: p50 / p99 / max latency, periods throttled,
CPU per request; and the time from the start of the process to ``/ready``.

With ``--image``, the same for the Docker image (``docker/Dockerfile``, built
as the container tests build it, on a Docker engine of our own when none
runs), started with ``docker run --cpus`` and host networking, as built (no
HEALTHCHECK) and with the documented opt-in health check every 5 s; the
numbers come from the container's own cgroup.  Also what Docker charges the
container per ``docker exec`` (of ``true``, and of the bash check).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

from fresh_ryow import writer  # noqa: E402
from pgtopology import PgTopology, free_port  # noqa: E402

CPU = "/sys/fs/cgroup/cpu"
CPUACCT = "/sys/fs/cgroup/cpuacct"
PERIOD_US = 100_000


class Cgroup:
    """
    A cgroup v1 pair (cpu, cpuacct) with a CFS quota.
    """

    def __init__(self, name: str, cpus: float) -> None:
        self.dirs = [os.path.join(CPU, name), os.path.join(CPUACCT, name)]
        for d in self.dirs:
            os.makedirs(d, exist_ok=True)
        self._write(CPU, name, "cpu.cfs_period_us", PERIOD_US)
        self._write(CPU, name, "cpu.cfs_quota_us", int(cpus * PERIOD_US))
        self.name = name

    @staticmethod
    def _write(root: str, name: str, f: str, value: int) -> None:
        with open(os.path.join(root, name, f), "w") as fh:
            fh.write(str(value))

    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def throttled(self) -> tuple[int, int]:
        """``(nr_periods, nr_throttled)``."""
        with open(os.path.join(self.dirs[0], "cpu.stat")) as f:
            stat = dict(line.split() for line in f)
        return int(stat["nr_periods"]), int(stat["nr_throttled"])

    def usage_ns(self) -> int:
        with open(os.path.join(self.dirs[1], "cpuacct.usage")) as f:
            return int(f.read())

    def remove(self) -> None:
        for d in self.dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass


REQUEST = b"GET /master HTTP/1.1\r\nHost: pg-status\r\n\r\n"


def paced(port: int, rate: float, seconds: float, connections: int = 8) -> list[float]:
    """
    Latencies (ms, from the scheduled send time) of ``GET /master`` at
    ``rate`` requests/s over ``connections`` keep-alive connections.
    """
    out: list[float] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    start = time.monotonic() + 0.2
    per = rate / connections

    def run(k: int) -> None:
        try:
            answer_paced(k)
        except BaseException as e:  # reported after the join
            with lock:
                failures.append(e)

    def answer_paced(k: int) -> None:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mine = []
        n = 0
        t0 = start + k / rate  # connections interleaved
        while True:
            due = t0 + n / per
            if due - start >= seconds:
                break
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            s.sendall(REQUEST)
            buf = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("the service closed a keep-alive connection")
                buf += chunk
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if sep:
                    if not head.startswith(b"HTTP/1.1 200 "):
                        raise RuntimeError(f"answered {head.splitlines()[0]!r}")
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    if len(rest) >= length:
                        break
            mine.append((time.monotonic() - due) * 1000)
            n += 1
        s.close()
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"{len(failures)} of {connections} clients failed") from failures[0]
    return out


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return 0, ""


class ContainerGroup(Cgroup):
    """
    The cgroup v1 pair Docker made for a container (cgroupfs driver).
    """

    def __init__(self, container_id: str) -> None:  # noqa: D107 - no quota set here
        self.dirs = [os.path.join(CPU, "docker", container_id),
                     os.path.join(CPUACCT, "docker", container_id)]
        for d in self.dirs:
            if not os.path.isdir(d):
                raise RuntimeError(f"no cgroup {d} (is dockerd using cgroupfs on cgroup v1?)")

    def remove(self) -> None:
        pass


def start_command(twistd: str) -> str:
    """
    The shell command that starts the service: ``twistd -n --pidfile=
    pgstatus``, or the ``pg-status`` command when that is what was given.
    """
    if os.path.basename(twistd) == "pg-status":
        return f"exec {twistd}"
    return f"exec {twistd} -n --pidfile= pgstatus"


def daemon_env(env: dict[str, str]) -> dict[str, str]:
    """
    The environment of the daemon: ours without PYTHONPATH, so that it runs
    the package as installed in the daemon's venv (compiled by pip).
    """
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**base, **env}


def _log_time(line: str) -> float:
    """The wall-clock time of a text log line's timestamp."""
    stamp = line.split(" ", 1)[0].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).replace(
        tzinfo=datetime.UTC).timestamp()


def time_starts(topo: PgTopology, cpus: float, starts: int, twistd: str) -> dict:
    """
    Start the service ``starts`` times in a quota of ``cpus``: seconds from
    the start of the process to listening (``live``) and to ready, taken from
    the timestamps of its own log lines (``http: server started``, ``monitor
    ready``) so that asking does not spend the quota being measured; and the
    CPU it used to get ready.
    """
    runs = []
    for _ in range(starts):
        port = free_port()
        env = {**topo.hosts_env(), "pg_status__http_listen_address": "127.0.0.1",
               "pg_status__http_port": str(port)}
        group = Cgroup(f"pgstatus-start-{os.getpid()}", cpus)
        enter = " ".join(f"echo $$ > {f};" for f in group.procs_files())
        log = tempfile.TemporaryFile("w+")
        t0 = time.time()
        proc = subprocess.Popen(["sh", "-c", f"{enter} {start_command(twistd)}"],
                                env=daemon_env(env), cwd="/",
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            while get(port, "/ready")[0] != 200:
                if proc.poll() is not None:
                    raise RuntimeError(f"{twistd} exited with status {proc.returncode}")
                if time.time() - t0 > 120:
                    raise RuntimeError("not ready within 120 s")
                time.sleep(0.25)
            cpu_ms = group.usage_ns() / 1e6
            log.seek(0)
            lines = log.read().splitlines()
            live = next(_log_time(x) for x in lines if " http: server started " in x)
            ready = next(_log_time(x) for x in lines if " monitor: monitor ready" in x)
            runs.append({"live_s": round(live - t0, 3), "ready_s": round(ready - t0, 3),
                         "cpu_ms": round(cpu_ms, 1)})
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()
            group.remove()
    ready = sorted(r["ready_s"] for r in runs)
    return {"cpus": cpus, "starts": runs, "ready_median_s": ready[len(ready) // 2],
            "ready_max_s": ready[-1]}


def exec_charges(topo: PgTopology, engine, image: str, runs: int = 15) -> dict:
    """
    The CPU a container's cgroup is charged per ``docker exec``: of ``true``
    (Docker's own floor for any HEALTHCHECK) and of the opt-in bash check.
    """
    port = free_port()
    args = ["run", "-d", "--rm", "--network", "host"]
    for k, v in {**topo.hosts_env(), "pg_status__http_listen_address": "127.0.0.1",
                 "pg_status__http_port": str(port)}.items():
        args += ["-e", f"{k}={v}"]
    cid = engine.run([*args, image]).stdout.strip()
    group = ContainerGroup(cid)
    out = {}
    try:
        deadline = time.monotonic() + 120
        while get(port, "/live")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the container did not answer /live within 120 s")
            time.sleep(0.1)
        for label, cmd in (("true", ["true"]),
                           ("healthcheck.sh", ["/bin/bash",
                                               "/usr/local/lib/pg-status/healthcheck.sh"])):
            charged = []
            for _ in range(runs):
                u0 = group.usage_ns()
                engine.run(["exec", cid, *cmd])
                charged.append((group.usage_ns() - u0) / 1e6)
            charged.sort()
            out[label] = {"median_ms": round(charged[len(charged) // 2], 1),
                          "min_ms": round(charged[0], 1), "max_ms": round(charged[-1], 1)}
    finally:
        engine.run(["stop", cid], check=False)
    return out


def run_quota(topo: PgTopology, cpus: float, rates: list[int], seconds: float,
              twistd: str, engine=None, image: str | None = None,
              healthcheck: bool = True, other: str | None = None) -> dict:
    """
    One service in a quota of ``cpus``: pg-status (``twistd``), its image,
    or ``other``, a drop-in service binary started with the same
    environment (such as a build of the original C service), whose start is
    timed to its first ``/master`` naming the primary, polled every 50 ms
    (an older build may have neither ``/ready`` nor pg-status's log lines).
    """
    port = free_port()
    env = {**topo.hosts_env(), "pg_status__http_listen_address": "127.0.0.1",
           "pg_status__http_port": str(port)}
    t0 = time.time()
    log = tempfile.TemporaryFile("w+")
    if image is None:
        group = Cgroup(f"pgstatus-bench-{os.getpid()}", cpus)
        enter = " ".join(f"echo $$ > {f};" for f in group.procs_files())
        command = f"exec {other}" if other else start_command(twistd)
        proc = subprocess.Popen(["sh", "-c", f"{enter} {command}"],
                                env=daemon_env(env), cwd="/",
                                stdout=log, stderr=subprocess.STDOUT)

        def stop() -> None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
            group.remove()
            log.close()

        def log_lines() -> list[str]:
            log.seek(0)
            return log.read().splitlines()
    else:
        args = ["run", "-d", "--rm", "--network", "host", f"--cpus={cpus}"]
        if healthcheck:  # the documented opt-in (the image has no HEALTHCHECK)
            args += ["--health-cmd", "/bin/bash /usr/local/lib/pg-status/healthcheck.sh",
                     "--health-interval", "5s", "--health-timeout", "3s"]
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        cid = engine.run([*args, image]).stdout.strip()
        group = ContainerGroup(cid)

        def stop() -> None:
            engine.run(["stop", cid], check=False)

        def log_lines() -> list[str]:
            out = engine.run(["logs", cid])
            return (out.stdout + out.stderr).splitlines()
    what = f"other: {other}" if other else ("pip install ., pg-status"
                                            if os.path.basename(twistd) == "pg-status"
            else "pip install .") if image is None else \
        "image, opt-in health check every 5 s" if healthcheck else "image"
    result: dict = {"cpus": cpus, "rates": [], "what": what}
    try:
        if other:
            while get(port, "/master") != (200, topo.primary.host):
                if proc.poll() is not None or time.time() - t0 > 120:
                    tail = "\n".join(log_lines()[-20:])
                    raise RuntimeError(f"{other} did not answer /master (exit status "
                                       f"{proc.returncode})\n{tail}")
                time.sleep(0.05)
            result["ready_s"] = result["live_s"] = round(time.time() - t0, 2)
        # asked seldom, so that asking does not spend the quota; the times
        # come from the service's own log lines
        while not other and get(port, "/ready")[0] != 200:
            if time.time() - t0 > 120:
                raise RuntimeError("not ready within 120 s")
            time.sleep(0.25)
        if not other:
            lines = log_lines()
            ready = next(_log_time(x) for x in lines if " monitor: monitor ready" in x)
            live = next(_log_time(x) for x in lines if " http: server started " in x)
            result["ready_s"] = round(ready - t0, 2)
            result["live_s"] = round(live - t0, 2)
        if image is not None:
            # the container's process started this long after `docker run`
            started = engine.run(["inspect", "-f", "{{.State.StartedAt}}", cid]).stdout.strip()
            stamp = started.rstrip("Z")[:26]
            begun = datetime.datetime.fromisoformat(stamp).replace(
                tzinfo=datetime.UTC).timestamp()
            result["process_ready_s"] = round(ready - begun, 2)
        time.sleep(2)
        periods0, thr0 = group.throttled()
        idle0 = group.usage_ns()
        time.sleep(5)
        periods1, thr1 = group.throttled()
        result["idle"] = {"cpu_ms_per_s": round((group.usage_ns() - idle0) / 5e6, 2),
                          "throttled": f"{thr1 - thr0}/{periods1 - periods0}"}
        for rate in rates:
            periods0, thr0 = group.throttled()
            u0 = group.usage_ns()
            lat = paced(port, rate, seconds)
            u1 = group.usage_ns()
            periods1, thr1 = group.throttled()
            result["rates"].append({
                "rate": rate, "requests": len(lat),
                "p50_ms": round(pct(lat, 50), 2), "p99_ms": round(pct(lat, 99), 2),
                "max_ms": round(max(lat), 2),
                "throttled": f"{thr1 - thr0}/{periods1 - periods0}",
                "cpu_us_per_request": round((u1 - u0) / 1000 / len(lat), 1),
            })
        # the service's resident memory after the load
        pid = proc.pid if image is None else int(
            engine.run(["inspect", "-f", "{{.State.Pid}}", cid]).stdout.strip())
        with open(f"/proc/{pid}/status") as f:
            rss_kib = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
        result["rss_mib_after"] = round(rss_kib / 1024, 1)
    finally:
        stop()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cpus", type=float, nargs="+", default=[0.1, 0.25])
    ap.add_argument("--rates", type=int, nargs="+", default=[200, 500, 1000, 1500])
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--twistd", default=os.path.join(os.path.dirname(sys.executable), "twistd"),
                    help="the twistd to run (make bench-quota: the daemon's own venv)")
    ap.add_argument("--starts", type=int, default=0,
                    help="only time N starts (to /ready, as `pip install .` runs it) per quota")
    ap.add_argument("--launcher", action="store_true",
                    help="run the pg-status command (next to --twistd) instead of twistd")
    ap.add_argument("--image", action="store_true",
                    help="also measure the Docker image (docker run --cpus)")
    ap.add_argument("--other", default=os.environ.get("PGSTATUS_BENCH_OTHER"),
                    help="also measure this drop-in service binary, e.g. a build of the "
                    "original C service (start timed to its first /master); default "
                    "$PGSTATUS_BENCH_OTHER")
    args = ap.parse_args()
    args.twistd = os.path.abspath(args.twistd)
    if args.other:
        args.other = os.path.abspath(args.other)
        if args.starts:
            print("--other is not timed with --starts (its start is in the rate runs)",
                  file=sys.stderr)
    if args.launcher:
        args.twistd = os.path.join(os.path.dirname(args.twistd), "pg-status")
    if not os.path.isdir(CPU) or not os.access(CPU, os.W_OK):
        print(f"bench-quota needs a writable cgroup v1 cpu controller at {CPU}", file=sys.stderr)
        return 2
    topo = PgTopology.start(replicas=2)
    stop = threading.Event()
    bg = threading.Thread(target=writer, args=(topo, stop), daemon=True)
    results = []
    try:
        bg.start()
        if args.starts:
            for cpus in args.cpus:
                r = time_starts(topo, cpus, args.starts, args.twistd)
                for x in r["starts"]:
                    print(f"{cpus} vCPU: live {x['live_s']} s, ready {x['ready_s']} s, "
                          f"CPU {x['cpu_ms']} ms")
                print(f"{cpus} vCPU: /ready median {r['ready_median_s']} s, "
                      f"max {r['ready_max_s']} s")
            return 0
        for cpus in args.cpus:
            results.append(run_quota(topo, cpus, args.rates, args.seconds, args.twistd))
            if args.other:
                try:
                    results.append(run_quota(topo, cpus, args.rates, args.seconds,
                                             args.twistd, other=shlex.quote(args.other)))
                except Exception as e:  # pg-status's own figures still count
                    print(f"--other at {cpus} vCPU failed: {e}", file=sys.stderr)
                    results.append({"what": f"other: {args.other}", "cpus": cpus,
                                    "error": str(e)})
        if args.image:
            from dockerengine import DockerEngine, base_images, build_pg_status

            engine = DockerEngine.find_or_start()
            try:
                images = base_images(engine)
                build_pg_status(engine, images)
                charges = exec_charges(topo, engine, images.pg_status)
                for label, c in charges.items():
                    print(f"docker exec {label}: {c['median_ms']} ms of CPU charged to the "
                          f"container (median; {c['min_ms']}-{c['max_ms']})")
                results.append({"what": "docker exec charges", "exec": charges})
                for cpus in args.cpus:
                    for healthcheck in (True, False):
                        results.append(run_quota(topo, cpus, args.rates, args.seconds,
                                                 args.twistd, engine, images.pg_status,
                                                 healthcheck))
            finally:
                engine.stop()
    finally:
        stop.set()
        bg.join(5)
        topo.teardown()
    print("\n| run | vCPU | start → /ready | idle CPU (throttled periods) | `/master` at | "
          "p50 / p99 / max ms | throttled periods | CPU per request |")
    print("|---|---:|---:|---|---:|---|---:|---:|")
    for r in results:
        for i, x in enumerate(r.get("rates", ())):
            ready = f"{r['ready_s']} s" + (f" (process start → ready {r['process_ready_s']} s)"
                                           if "process_ready_s" in r else "")
            first = (f"| {r['what']} | {r['cpus']} | {ready} | "
                     f"{r['idle']['cpu_ms_per_s']} ms/s ({r['idle']['throttled']}) |"
                     ) if i == 0 else "| | | | |"
            print(f"{first} {x['rate']}/s | {x['p50_ms']} / {x['p99_ms']} / {x['max_ms']} | "
                  f"{x['throttled']} | {x['cpu_us_per_request']} µs |")
    for r in results:
        if "error" in r:
            print(f"{r['what']}, {r['cpus']} vCPU: FAILED: {r['error'].splitlines()[0]}")
        if "rss_mib_after" in r:
            print(f"{r['what']}, {r['cpus']} vCPU: RSS after the load {r['rss_mib_after']} MiB")
    os.makedirs(os.path.join(ROOT, "bench-results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench-results", "quota.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
