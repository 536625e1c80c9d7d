"""
Read the Kubernetes manifests under ``deploy/kubernetes`` the way the
kubelet would use them, for the tests that run their containers on Docker:
a container's environment with Secret references resolved, the port a
probe names, the CPU and memory limits as Docker takes them, and the
security context as ``docker run`` options.

Only what the manifests use is supported; anything else raises
:class:`Unsupported`, so a manifest cannot grow a field the tests silently
ignore.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass
from typing import Any

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFESTS = os.path.join(ROOT, "deploy", "kubernetes")


class Unsupported(ValueError):
    """A manifest uses something this module does not translate."""


def load(name: str) -> list[dict[str, Any]]:
    """The documents of ``deploy/kubernetes/<name>``."""
    with open(os.path.join(MANIFESTS, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one document of ``kind`` called ``name``."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    if len(found) != 1:
        raise KeyError(f"{len(found)} {kind} objects called {name}")
    return found[0]


def secret_values(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's values: ``stringData`` as is, ``data`` base64-decoded."""
    values = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    values.update(secret.get("stringData") or {})
    return values


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    """The container ``name`` of a Deployment's pod template."""
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise KeyError(name)


def environment(c: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, str]:
    """
    The container's environment as the kubelet builds it: ``value``\\s,
    ``secretKeyRef``\\s resolved against the Secrets in ``docs``.
    """
    if c.get("envFrom"):
        raise Unsupported("envFrom")
    env: dict[str, str] = {}
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref is None:
            raise Unsupported(f"env {var['name']}: {var}")
        env[var["name"]] = secret_values(find(docs, "Secret", ref["name"]))[ref["key"]]
    return env


def container_port(c: dict[str, Any], port: int | str) -> int:
    """A port number, or the number of the container port named ``port``."""
    if isinstance(port, int):
        return port
    for p in c.get("ports", []):
        if p.get("name") == port:
            return int(p["containerPort"])
    raise KeyError(f"no container port named {port}")


@dataclass(frozen=True)
class HttpProbe:
    """An ``httpGet`` probe: its path and the container port it targets."""

    path: str
    port: int
    timeout: float


def http_probe(c: dict[str, Any], kind: str) -> HttpProbe:
    """The container's ``livenessProbe`` / ``readinessProbe`` (``kind``)."""
    probe = c[kind]
    get = probe.get("httpGet")
    if get is None or set(get) - {"path", "port"}:
        raise Unsupported(f"{kind}: {probe}")
    return HttpProbe(get["path"], container_port(c, get["port"]),
                     float(probe.get("timeoutSeconds", 1)))


_CPU = re.compile(r"^(\d+)(m?)$")
_MEMORY = re.compile(r"^(\d+)(Ki|Mi|Gi)?$")


def cpu_nanos(quantity: str | int) -> int:
    """A CPU quantity (``100m``, ``1``) in Docker's ``NanoCpus``."""
    m = _CPU.match(str(quantity))
    if m is None:
        raise Unsupported(f"cpu {quantity}")
    milli = int(m.group(1)) * (1 if m.group(2) else 1000)
    return milli * 1_000_000


def memory_bytes(quantity: str | int) -> int:
    """A memory quantity (``64Mi``) in bytes."""
    m = _MEMORY.match(str(quantity))
    if m is None:
        raise Unsupported(f"memory {quantity}")
    return int(m.group(1)) * {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[m.group(2)]


def docker_options(c: dict[str, Any]) -> dict[str, Any]:
    """
    ``docker run`` options (docker-py's ``containers.run`` keywords) for the
    container's limits and security context: CPU and memory limits, the user,
    a read-only root file system, dropped capabilities, no privilege
    escalation, and the command and arguments if the manifest overrides
    the image's.
    """
    opts: dict[str, Any] = {}
    limits = c.get("resources", {}).get("limits", {})
    if "cpu" in limits:
        opts["nano_cpus"] = cpu_nanos(limits["cpu"])
    if "memory" in limits:
        opts["mem_limit"] = memory_bytes(limits["memory"])
        opts["memswap_limit"] = opts["mem_limit"]  # no swap either, as in a pod
    sc = c.get("securityContext", {})
    known = {"runAsNonRoot", "runAsUser", "runAsGroup", "readOnlyRootFilesystem",
             "allowPrivilegeEscalation", "capabilities"}
    if set(sc) - known:
        raise Unsupported(f"securityContext: {sorted(set(sc) - known)}")
    if "runAsUser" in sc:
        opts["user"] = f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"
    if sc.get("readOnlyRootFilesystem"):
        opts["read_only"] = True
    if sc.get("allowPrivilegeEscalation") is False:
        opts["security_opt"] = ["no-new-privileges"]
    caps = sc.get("capabilities", {})
    if caps.get("drop"):
        opts["cap_drop"] = list(caps["drop"])
    if caps.get("add"):
        raise Unsupported("capabilities.add")
    if "command" in c:
        opts["entrypoint"] = list(c["command"])
    if "args" in c:
        opts["command"] = list(c["args"])
    return opts
