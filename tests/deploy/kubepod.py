"""
Read the Kubernetes manifests under ``deploy/kubernetes`` the way the
kubelet would use them, for the tests that run their containers on Docker:
a workload's pod template and its containers (native sidecars included), a
container's environment with ConfigMap and Secret references resolved, the
port a probe names, the CPU and memory limits as Docker takes them, and the
pod's and container's security contexts as ``docker run`` options.

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


#: kinds whose pod template is ``spec.template``
WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})


def pod_template(doc: dict[str, Any]) -> dict[str, Any]:
    """
    The pod a document makes: a Pod itself, a workload's ``spec.template``, a
    CronJob's job template's.  ``metadata`` and ``spec`` as in a Pod.
    """
    if doc["kind"] == "Pod":
        return doc
    if doc["kind"] in WORKLOADS:
        return dict(doc["spec"]["template"])
    if doc["kind"] == "CronJob":
        return dict(doc["spec"]["jobTemplate"]["spec"]["template"])
    raise KeyError(f"{doc['kind']} makes no pods")


def pod_templates(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``(kind/name, pod)`` for every document of ``docs`` that makes pods."""
    return [(f"{d['kind']}/{d['metadata']['name']}", pod_template(d)) for d in docs
            if d["kind"] in WORKLOADS | {"Pod", "CronJob"}]


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod spec's init (sidecars included), ordinary and ephemeral containers."""
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key, [])]


def is_native_sidecar(c: dict[str, Any]) -> bool:
    """An init container that runs for the pod's life (``restartPolicy: Always``)."""
    return c.get("restartPolicy") == "Always"


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    """The container ``name`` of a workload's pod, init containers included."""
    for c in all_containers(pod_template(workload)["spec"]):
        if c["name"] == name:
            return c
    raise KeyError(name)


def config_map_values(config_map: dict[str, Any]) -> dict[str, str]:
    """A ConfigMap's ``data`` (``binaryData`` is not supported)."""
    if config_map.get("binaryData"):
        raise Unsupported("ConfigMap binaryData")
    return {k: str(v) for k, v in (config_map.get("data") or {}).items()}


def _source(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, str]:
    doc = find(docs, kind, name)
    return config_map_values(doc) if kind == "ConfigMap" else secret_values(doc)


def environment(c: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, str]:
    """
    The container's environment as the kubelet builds it: every key of the
    ``envFrom`` ConfigMaps and Secrets (a later source wins), then the
    ``env`` entries over them: ``value``\\s, ``secretKeyRef``\\s and
    ``configMapKeyRef``\\s resolved against the documents of ``docs``.
    """
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        if set(source) - {"configMapRef", "secretRef"}:
            raise Unsupported(f"envFrom {source}")
        for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if field in source:
                if set(source[field]) != {"name"}:
                    raise Unsupported(f"envFrom {source}")
                env.update(_source(docs, kind, source[field]["name"]))
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        value_from = var.get("valueFrom", {})
        for field, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            ref = value_from.get(field)
            if ref is not None and set(ref) == {"name", "key"} and len(value_from) == 1:
                env[var["name"]] = _source(docs, kind, ref["name"])[ref["key"]]
                break
        else:
            raise Unsupported(f"env {var['name']}: {var}")
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
    """The container's ``startupProbe``, ``livenessProbe`` or ``readinessProbe``."""
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


#: the security context fields a container takes from its pod's unless it
#: sets them itself
_INHERITED = ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile")


def security_context(c: dict[str, Any], pod_spec: dict[str, Any]) -> dict[str, Any]:
    """
    The container's effective security context: its own fields over those
    of the pod's that containers inherit.
    """
    pod_sc = pod_spec.get("securityContext", {})
    if set(pod_sc) - set(_INHERITED):
        raise Unsupported(f"pod securityContext: {sorted(set(pod_sc) - set(_INHERITED))}")
    return {**pod_sc, **c.get("securityContext", {})}


def docker_options(c: dict[str, Any], pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """
    ``docker run`` options (docker-py's ``containers.run`` keywords) for the
    container's limits and security context (with what it inherits from
    ``pod_spec``): CPU and memory limits, the user, a read-only root file
    system, dropped capabilities, no privilege escalation, the seccomp
    profile, and the command and arguments if the manifest overrides the
    image's.  ``runAsNonRoot`` is checked as the kubelet does: a container
    that would run as uid 0 is refused.
    """
    opts: dict[str, Any] = {}
    limits = c.get("resources", {}).get("limits", {})
    if "cpu" in limits:
        opts["nano_cpus"] = cpu_nanos(limits["cpu"])
    if "memory" in limits:
        opts["mem_limit"] = memory_bytes(limits["memory"])
        opts["memswap_limit"] = opts["mem_limit"]  # no swap either, as in a pod
    sc = security_context(c, pod_spec or {})
    known = {"runAsNonRoot", "runAsUser", "runAsGroup", "readOnlyRootFilesystem",
             "allowPrivilegeEscalation", "capabilities", "seccompProfile"}
    if set(sc) - known:
        raise Unsupported(f"securityContext: {sorted(set(sc) - known)}")
    if "runAsUser" in sc:
        opts["user"] = f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"
    elif sc.get("runAsNonRoot"):
        # the kubelet would check the image's user; ours is 10001 but the
        # manifests always name it, and this module does not read images
        raise Unsupported("runAsNonRoot without runAsUser")
    if sc.get("runAsNonRoot") and int(sc["runAsUser"]) == 0:
        raise ValueError("runAsNonRoot with runAsUser 0: the kubelet refuses to start it")
    if sc.get("readOnlyRootFilesystem"):
        opts["read_only"] = True
    security_opt = []
    if sc.get("allowPrivilegeEscalation") is False:
        security_opt.append("no-new-privileges")
    seccomp = sc.get("seccompProfile", {}).get("type")
    if seccomp == "Unconfined":
        security_opt.append("seccomp=unconfined")
    elif seccomp not in (None, "RuntimeDefault"):  # RuntimeDefault: Docker's default
        raise Unsupported(f"seccompProfile {sc['seccompProfile']}")
    if security_opt:
        opts["security_opt"] = security_opt
    caps = sc.get("capabilities", {})
    if caps.get("drop"):
        opts["cap_drop"] = list(caps["drop"])
    if caps.get("add"):
        raise Unsupported("capabilities.add")
    if c.get("restartPolicy", "Always") != "Always":
        raise Unsupported(f"restartPolicy {c['restartPolicy']}")
    if "command" in c:
        opts["entrypoint"] = list(c["command"])
    if "args" in c:
        opts["command"] = list(c["args"])
    return opts
