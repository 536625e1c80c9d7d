"""
The Kubernetes examples in ``deploy/kubernetes``: schema-valid, consistent
with pg-status's settings, within Pod Security "restricted", and run as
written.

The manifests are checked against the Kubernetes API schemas of the oldest
version they support (``kubernetes-validate``, strict: no unknown fields),
for the fields the examples rely on (native sidecars, one ConfigMap of
shared settings, the hubs' disruption budget, spreading and network
policy), and against the rules of the Pod Security Standards' restricted
profile, written out below from the Kubernetes documentation.  Then their
pg-status containers run from the image ``docker/Dockerfile`` builds, on
the real Docker engine, with the manifests' environment (ConfigMap and
Secret values substituted), CPU and memory limits and security context
(``tests/deploy/kubepod.py``), the probes' paths are asked on the probes'
ports, and SIGTERM is sent as the kubelet sends it.

What differs from a cluster, and why: the containers use host networking
(no bridge network on these machines), so they listen on 127.0.0.1 and a
free port instead of 0.0.0.0:8000 and the probes are sent to that port; the
example database host names are replaced by the local topology's, and the
hub's Service name by the hub container's address.  The role of the
Secret's credentials is created on the topology, so the checks really log
in with them.  Network policies, disruption budgets and spreading need a
cluster: they are checked as files only.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes_validate
import pytest
from kubepod import (
    all_containers,
    config_map_values,
    container,
    container_port,
    docker_options,
    environment,
    find,
    http_probe,
    is_native_sidecar,
    load,
    pod_template,
    pod_templates,
    secret_values,
)
from pgtopology import PgTopology, free_port, poll

import pgstatus
from pgstatus.config.table import known_names, setting

#: the Kubernetes version the examples are validated for: the first whose
#: API server and kubelets run native sidecars by default
KUBERNETES = "1.29"
MANIFESTS = ["sidecar.yaml", "follower.yaml"]
CREDENTIALS = ("pg_status__pg_user", "pg_status__pg_password")
HTTP_PORT = int(setting("http_port").default)
#: seconds of a grace period left over once pg-status has exited
GRACE_MARGIN = 10
#: the label the hubs' NetworkPolicy admits
FOLLOWER_LABEL = ("pg-status/follower", "true")


def docs_of(name: str) -> list[dict[str, Any]]:
    return load(name)


def pg_status_env(docs: list[dict[str, Any]], deployment: str) -> dict[str, str]:
    return environment(container(find(docs, "Deployment", deployment), "pg-status"), docs)


def pg_status_workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Deployments with a pg-status container (hub or sidecar)."""
    return [d for d in docs if d["kind"] == "Deployment"
            and any(c["name"] == "pg-status" for c in all_containers(pod_template(d)["spec"]))]


def shutdown_delay_s(env: dict[str, str]) -> float:
    return int(env["pg_status__shutdown_delay_ms"]) / 1000


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a ``matchLabels``-only label selector selects ``labels``."""
    if set(selector) - {"matchLabels"}:
        raise AssertionError(f"only matchLabels selectors are checked: {selector}")
    return selector.get("matchLabels", {}).items() <= labels.items()


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return dict(pod_template(workload)["metadata"]["labels"])


# -- the manifests as files ----------------------------------------------------


@pytest.mark.parametrize("name, kinds", [
    ("sidecar.yaml", {"Secret", "ConfigMap", "Deployment", "NetworkPolicy"}),
    ("follower.yaml", {"Secret", "ConfigMap", "Deployment", "PodDisruptionBudget", "Service",
                       "NetworkPolicy"}),
])
def test_manifests_are_valid_kubernetes(name: str, kinds: set[str]) -> None:
    """
    Every document validates against the API schema of Kubernetes 1.29,
    strictly (an unknown or misspelt field is an error), whatever its kind.
    """
    docs = docs_of(name)
    assert {d["kind"] for d in docs} == kinds
    for doc in docs:
        assert kubernetes_validate.validate(doc, KUBERNETES, strict=True) == KUBERNETES


@pytest.mark.parametrize("name", MANIFESTS)
def test_validation_is_strict(name: str) -> None:
    """
    The validation above would see a misspelt field at any depth: one added
    to each document's spec (or to the document, for those without one),
    and one in the pg-status container, are each rejected.
    """
    for doc in docs_of(name):
        wrong = copy.deepcopy(doc)
        wrong.get("spec", wrong)["restartPolicyy"] = "Always"
        with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicyy"):
            kubernetes_validate.validate(wrong, KUBERNETES, strict=True)
    for workload in pg_status_workloads(docs_of(name)):
        wrong = copy.deepcopy(workload)
        container(wrong, "pg-status")["restartPolicyy"] = "Always"
        with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicyy"):
            kubernetes_validate.validate(wrong, KUBERNETES, strict=True)


@pytest.mark.parametrize("name, deployments", [
    ("sidecar.yaml", ["shop"]),
    ("follower.yaml", ["pg-status-hub", "shop"]),
])
def test_pg_status_containers(name: str, deployments: list[str]) -> None:
    """
    Each pg-status container: only variables pg-status reads (a misspelt one
    would be ignored); credentials from the Secret, neither written in nor in
    the ConfigMap; startup (native sidecars), liveness on /live and
    readiness on /ready, on the port pg-status listens on; CPU and memory
    requests equal to limits; a non-root user; each Deployment's selector
    matches its pod labels; the image tagged with pg-status's version.
    """
    docs = docs_of(name)
    assert {d["metadata"]["name"] for d in pg_status_workloads(docs)} == set(deployments)
    for deployment in deployments:
        d = find(docs, "Deployment", deployment)
        assert selects(d["spec"]["selector"], pod_labels(d))
        c = container(d, "pg-status")
        env = environment(c, docs)
        pg_vars = {k for k in env if k.lower().startswith("pg_status__")}
        assert pg_vars <= known_names(), pg_vars - known_names()
        by_name = {v["name"]: v for v in c["env"]}
        for name_ in CREDENTIALS:
            assert by_name[name_]["valueFrom"]["secretKeyRef"]["name"] == "pg-status-credentials"
        port = int(env.get("pg_status__http_port", HTTP_PORT))
        assert "pg_status__http_listen_address" not in env  # 0.0.0.0: the kubelet's probes
        probes = {"livenessProbe": "/live", "readinessProbe": "/ready"}
        if is_native_sidecar(c):
            probes["startupProbe"] = "/ready"
        assert {k for k in c if k.endswith("Probe")} == set(probes)
        for kind, path in probes.items():
            assert http_probe(c, kind).path == path
            assert http_probe(c, kind).port == port
        assert c["resources"]["requests"] == c["resources"]["limits"]
        assert c["securityContext"]["runAsNonRoot"] is True
        assert c["securityContext"]["runAsUser"] != 0
        assert c["image"] == f"pg-status:{pgstatus.__version__}"


@pytest.mark.parametrize("name", MANIFESTS)
def test_sidecars_are_native(name: str) -> None:
    """
    In the application pods pg-status is a native sidecar: an init
    container with ``restartPolicy: Always`` (so it starts before the
    application and is stopped after it), the only init container, and no
    ordinary container is called pg-status.  Its startup probe, which holds
    the application back, waits for /ready at least 30 s before the
    kubelet restarts it.  The hubs need no sidecar: their pg-status is the
    pod's one ordinary container.
    """
    docs = docs_of(name)
    shop = pod_template(find(docs, "Deployment", "shop"))["spec"]
    (sidecar,) = shop["initContainers"]
    assert sidecar["name"] == "pg-status" and is_native_sidecar(sidecar)
    assert [c["name"] for c in shop["containers"]] == ["app"]
    startup = sidecar["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30
    if name == "follower.yaml":
        hub = pod_template(find(docs, "Deployment", "pg-status-hub"))["spec"]
        assert "initContainers" not in hub
        assert [c["name"] for c in hub["containers"]] == ["pg-status"]


@pytest.mark.parametrize("name", MANIFESTS)
def test_shutdown_delay_fits_the_grace_period(name: str) -> None:
    """
    Every pg-status has a shutdown delay, and exits 0 before the kubelet's
    SIGKILL: a hub gets SIGTERM at once and needs its delay; a native
    sidecar gets it once the application has drained (the examples assume
    it drains within the sidecar's delay, which is what the classic form
    needs: see the Kubernetes page), so drain and delay come one after the
    other.  Each leaves ``GRACE_MARGIN`` seconds to spare.
    """
    docs = docs_of(name)
    for workload in pg_status_workloads(docs):
        spec = pod_template(workload)["spec"]
        grace = spec["terminationGracePeriodSeconds"]
        c = container(workload, "pg-status")
        delay = shutdown_delay_s(environment(c, docs))
        assert delay > 0
        needed = 2 * delay if is_native_sidecar(c) else delay
        assert needed + GRACE_MARGIN <= grace, (workload["metadata"]["name"], delay, grace)


def test_sidecar_gets_a_tenth_of_a_cpu() -> None:
    """The sidecar requests and is limited to 0.1 vCPU."""
    c = container(find(docs_of("sidecar.yaml"), "Deployment", "shop"), "pg-status")
    assert c["resources"]["requests"]["cpu"] == "100m"
    assert c["resources"]["limits"]["cpu"] == "100m"


@pytest.mark.parametrize("name", MANIFESTS)
def test_one_config_map_of_shared_settings(name: str) -> None:
    """
    The host list is written once: in the file's one ConfigMap, which every
    pg-status takes with ``envFrom``; no container sets a variable of the
    ConfigMap itself, and the ConfigMap holds only pg-status settings and
    no credentials.
    """
    docs = docs_of(name)
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    shared = config_map_values(config_map)
    assert "pg_status__hosts" in shared
    assert set(shared) <= known_names() - set(CREDENTIALS), set(shared)
    for workload in pg_status_workloads(docs):
        c = container(workload, "pg-status")
        assert c["envFrom"] == [{"configMapRef": {"name": config_map["metadata"]["name"]}}]
        assert not {v["name"] for v in c["env"]} & set(shared)
        assert shared.items() <= environment(c, docs).items()


def test_followers_point_at_the_hub_service() -> None:
    """
    The followers follow the hub Service's name and port; the Service
    selects the hub pods and targets their pg-status port; followers and
    hubs watch the same hosts (a snapshot for another list is refused).
    """
    docs = docs_of("follower.yaml")
    hub = find(docs, "Deployment", "pg-status-hub")
    service = find(docs, "Service", "pg-status-hub")
    follow = urllib.parse.urlsplit(pg_status_env(docs, "shop")["pg_status__follow"])
    (svc_port,) = service["spec"]["ports"]
    assert (follow.scheme, follow.hostname, follow.port) == (
        "http", service["metadata"]["name"], svc_port["port"])
    assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(hub))
    hub_c = container(hub, "pg-status")
    target = svc_port["targetPort"]
    hub_env = pg_status_env(docs, "pg-status-hub")
    assert container_port(hub_c, target) == int(hub_env.get("pg_status__http_port", HTTP_PORT))
    assert "pg_status__follow" not in pg_status_env(docs, "pg-status-hub")
    assert pg_status_env(docs, "shop")["pg_status__hosts"] == \
        pg_status_env(docs, "pg-status-hub")["pg_status__hosts"]


def test_hubs_have_a_disruption_budget_and_spread() -> None:
    """
    A voluntary disruption (a node drain) may take one hub, never both: the
    budget selects the hubs and nothing else, keeps one of them and lets
    the other go.  The scheduler never puts both on one node, and spreads
    them over zones when it can.
    """
    docs = docs_of("follower.yaml")
    hub = find(docs, "Deployment", "pg-status-hub")
    (budget,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert selects(budget["spec"]["selector"], pod_labels(hub))
    others = [w for w in docs if w["kind"] == "Deployment" and w is not hub]
    assert not any(selects(budget["spec"]["selector"], pod_labels(w)) for w in others)
    assert budget["spec"]["minAvailable"] == 1 < hub["spec"]["replicas"]
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    spread = {t["topologyKey"]: t for t in pod_template(hub)["spec"]["topologySpreadConstraints"]}
    assert set(spread) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    for t in spread.values():
        assert t["maxSkew"] == 1
        assert selects(t["labelSelector"], pod_labels(hub))


def ingress_policies(docs: list[dict[str, Any]], workload: dict[str, Any]) -> list[Any]:
    """The NetworkPolicies of ``docs`` that restrict ingress to ``workload``'s pods."""
    return [p for p in docs if p["kind"] == "NetworkPolicy"
            and "Ingress" in p["spec"]["policyTypes"]
            and selects(p["spec"]["podSelector"], pod_labels(workload))]


def admitted_ports(policies: list[dict[str, Any]], c: dict[str, Any]) -> set[int | None]:
    """The container ports the policies admit anyone to (None: every port)."""
    ports: set[int | None] = set()
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            if "ports" not in rule:
                ports.add(None)
            for p in rule.get("ports", []):
                assert p.get("protocol", "TCP") == "TCP" and "endPort" not in p
                try:
                    ports.add(container_port(c, p["port"]))
                except KeyError:  # another container's named port
                    continue
    return ports


def test_only_followers_reach_the_hubs() -> None:
    """
    The hubs' pg-status port (where /follow is) admits pods with the
    follower label, and nothing else: no address block, no namespace, no
    rule open to all.  Every workload whose pg-status follows a hub has
    the label; no other one has it.
    """
    docs = docs_of("follower.yaml")
    hub = find(docs, "Deployment", "pg-status-hub")
    hub_c = container(hub, "pg-status")
    (policy,) = ingress_policies(docs, hub)
    (rule,) = policy["spec"]["ingress"]
    assert admitted_ports([policy], hub_c) == {container_port(hub_c, "pg-status")}
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}
    assert peer["podSelector"] == {"matchLabels": dict([FOLLOWER_LABEL])}
    for workload in pg_status_workloads(docs):
        follows = "pg_status__follow" in environment(container(workload, "pg-status"), docs)
        assert selects(peer["podSelector"], pod_labels(workload)) == follows


@pytest.mark.parametrize("name", MANIFESTS)
def test_application_pods_keep_pg_status_to_themselves(name: str) -> None:
    """
    In the application pods, a NetworkPolicy admits the application's port
    and not pg-status's: other pods cannot ask a sidecar, nor follow one.
    """
    docs = docs_of(name)
    shop = find(docs, "Deployment", "shop")
    policies = ingress_policies(docs, shop)
    assert policies
    app = container(shop, "app")
    assert admitted_ports(policies, app) == {container_port(app, "app-http")}
    assert None not in admitted_ports(policies, container(shop, "pg-status"))
    assert container_port(container(shop, "pg-status"), "pg-status") not in \
        admitted_ports(policies, container(shop, "pg-status"))


# -- Pod Security Standards: the restricted profile ---------------------------
#
# From https://kubernetes.io/docs/concepts/security/pod-security-standards/
# (Baseline, then Restricted, which includes it).  "Containers" are
# spec.containers, spec.initContainers and spec.ephemeralContainers.

#: Baseline, Capabilities: what a container may add (Restricted allows only
#: NET_BIND_SERVICE of these)
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
#: Baseline, Sysctls: the safe set (with the additions up to 1.29)
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})
#: Baseline, SELinux: the types that may be set
SELINUX_TYPES = frozenset({"container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
#: Restricted, Volume Types: every volume must be one of these
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})
#: Restricted, Seccomp
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_TYPES = frozenset({None, "RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """
    What keeps ``pod`` (``metadata`` and ``spec``, as a workload's
    template) out of a namespace that enforces Pod Security "restricted":
    one line per control and field, empty when it passes.
    """
    out: list[str] = []
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    linux = (spec.get("os") or {}).get("name") != "windows"

    def check(ok: bool, control: str, where: str, value: Any) -> None:
        if not ok:
            out.append(f"{control}: {where} = {value!r}")

    # Baseline
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        check(spec.get(f) in (None, False), "Host Namespaces", f"spec.{f}", spec.get(f))
    for key, value in ((pod.get("metadata") or {}).get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION):
            check(value == "runtime/default" or value.startswith("localhost/"), "AppArmor",
                  f"metadata.annotations[{key}]", value)
    for sysctl in psc.get("sysctls") or []:
        check(sysctl["name"] in SAFE_SYSCTLS, "Sysctls", "spec.securityContext.sysctls",
              sysctl["name"])
    for v in spec.get("volumes") or []:
        # Baseline forbids hostPath; Restricted allows only the core types
        kinds = {k for k, x in v.items() if k != "name" and x is not None}
        check(len(kinds) == 1 and kinds <= RESTRICTED_VOLUMES, "Volume Types",
              f"spec.volumes[{v['name']}]", sorted(kinds))
    contexts = [("spec.securityContext", psc)] + [
        (f"container {c['name']}", c.get("securityContext") or {}) for c in all_containers(spec)]
    for where, sc in contexts:
        hp = (sc.get("windowsOptions") or {}).get("hostProcess")
        check(hp in (None, False), "HostProcess", f"{where}.windowsOptions.hostProcess", hp)
        aa = (sc.get("appArmorProfile") or {}).get("type")
        check(aa in APPARMOR_TYPES, "AppArmor", f"{where}.appArmorProfile.type", aa)
        se = sc.get("seLinuxOptions") or {}
        check(se.get("type") in SELINUX_TYPES | {None}, "SELinux",
              f"{where}.seLinuxOptions.type", se.get("type"))
        for f in ("user", "role"):
            check(se.get(f) is None, "SELinux", f"{where}.seLinuxOptions.{f}", se.get(f))
        # Restricted: runAsUser never 0
        check(sc.get("runAsUser") != 0, "Running as Non-root user", f"{where}.runAsUser", 0)
    # Baseline: Seccomp never Unconfined, the pod's included
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    check(not linux or pod_seccomp in SECCOMP_TYPES | {None}, "Seccomp",
          "spec.securityContext.seccompProfile.type", pod_seccomp)
    for c in all_containers(spec):
        sc = c.get("securityContext") or {}
        where = f"container {c['name']}"
        check(sc.get("privileged") in (None, False), "Privileged Containers",
              f"{where}.privileged", sc.get("privileged"))
        check(sc.get("procMount") in (None, "Default"), "/proc Mount Type",
              f"{where}.procMount", sc.get("procMount"))
        for p in c.get("ports") or []:
            check(p.get("hostPort") in (None, 0), "Host Ports", f"{where}.ports", p)
        caps = sc.get("capabilities") or {}
        add = set(caps.get("add") or [])
        check(add <= BASELINE_CAPABILITIES, "Capabilities", f"{where}.capabilities.add",
              sorted(add))
        # Restricted
        non_root = sc.get("runAsNonRoot")
        check(non_root is True or (non_root is None and psc.get("runAsNonRoot") is True),
              "Running as Non-root", f"{where}.runAsNonRoot", non_root)
        if linux:
            check(sc.get("allowPrivilegeEscalation") is False, "Privilege Escalation",
                  f"{where}.allowPrivilegeEscalation", sc.get("allowPrivilegeEscalation"))
            seccomp = (sc.get("seccompProfile") or {}).get("type")
            check(seccomp in SECCOMP_TYPES or (seccomp is None and pod_seccomp in SECCOMP_TYPES),
                  "Seccomp", f"{where}.seccompProfile.type", seccomp)
            check("ALL" in (caps.get("drop") or []), "Capabilities",
                  f"{where}.capabilities.drop", caps.get("drop"))
            check(add <= RESTRICTED_CAPABILITIES, "Capabilities", f"{where}.capabilities.add",
                  sorted(add))
    return out


@pytest.mark.parametrize("name", MANIFESTS)
def test_pods_pass_pod_security_restricted(name: str) -> None:
    """
    Every pod the manifests make (its every container, the application's
    included) passes the restricted profile: a namespace enforcing it
    admits them.
    """
    templates = pod_templates(docs_of(name))
    assert templates
    for where, pod in templates:
        assert restricted_violations(pod) == [], where


@pytest.mark.parametrize("name", MANIFESTS)
def test_pg_status_is_hardened_beyond_restricted(name: str) -> None:
    """
    Beyond the profile, each pg-status writes nothing: a read-only root
    file system.  Its own security context passes the profile's container
    rules on its own, so it still passes when copied into another pod.
    """
    for workload in pg_status_workloads(docs_of(name)):
        c = container(workload, "pg-status")
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        alone = {"metadata": {}, "spec": {"containers": [c]}}
        assert restricted_violations(alone) == []


def _sidecar_pod() -> dict[str, Any]:
    return copy.deepcopy(pod_template(find(docs_of("sidecar.yaml"), "Deployment", "shop")))


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change of ``pod``: ``path`` (dots; ``init``/``app`` for the containers) set."""
    def change(pod: dict[str, Any]) -> None:
        keys = path.split(".")
        node = pod
        for key in keys[:-1]:
            if key == "init":
                node = node["spec"]["initContainers"][0]
            elif key == "app":
                node = node["spec"]["containers"][0]
            else:
                node = node.setdefault(key, {})
        if value is _DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return change


_DELETE = object()

#: a change to the sidecar pod, and the control that must then fail
RESTRICTED_BREACHES = [
    ("spec.hostNetwork", True, "Host Namespaces"),
    ("spec.hostPID", True, "Host Namespaces"),
    ("spec.hostIPC", True, "Host Namespaces"),
    ("init.securityContext.privileged", True, "Privileged Containers"),
    ("app.securityContext.capabilities.add", ["SYS_ADMIN"], "Capabilities"),
    ("app.securityContext.capabilities.add", ["NET_RAW"], "Capabilities"),
    ("init.securityContext.capabilities.drop", ["NET_RAW"], "Capabilities"),
    ("app.securityContext.capabilities", _DELETE, "Capabilities"),
    ("spec.volumes", [{"name": "h", "hostPath": {"path": "/"}}], "Volume Types"),
    ("spec.volumes", [{"name": "n", "nfs": {"server": "x", "path": "/"}}], "Volume Types"),
    ("app.ports", [{"containerPort": 8080, "hostPort": 8080}], "Host Ports"),
    ("init.securityContext.appArmorProfile", {"type": "Unconfined"}, "AppArmor"),
    ("metadata.annotations", {APPARMOR_ANNOTATION + "app": "unconfined"}, "AppArmor"),
    ("spec.securityContext.seLinuxOptions", {"type": "spc_t"}, "SELinux"),
    ("app.securityContext.seLinuxOptions", {"user": "system_u"}, "SELinux"),
    ("init.securityContext.procMount", "Unmasked", "/proc Mount Type"),
    ("spec.securityContext.seccompProfile", {"type": "Unconfined"}, "Seccomp"),
    ("spec.securityContext.seccompProfile", _DELETE, "Seccomp"),  # the app has none
    ("init.securityContext.seccompProfile", {"type": "Unconfined"}, "Seccomp"),
    ("app.securityContext.allowPrivilegeEscalation", _DELETE, "Privilege Escalation"),
    ("init.securityContext.allowPrivilegeEscalation", True, "Privilege Escalation"),
    ("spec.securityContext.runAsNonRoot", _DELETE, "Running as Non-root"),
    ("init.securityContext.runAsNonRoot", False, "Running as Non-root"),
    ("init.securityContext.runAsUser", 0, "Running as Non-root user"),
    ("spec.securityContext.runAsUser", 0, "Running as Non-root user"),
    ("spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}], "Sysctls"),
    ("spec.securityContext.windowsOptions", {"hostProcess": True}, "HostProcess"),
    ("spec.ephemeralContainers", [{"name": "debug", "image": "debian"}], "Privilege Escalation"),
]

#: changes the profile allows
RESTRICTED_ALLOWED = [
    ("app.securityContext.capabilities.add", ["NET_BIND_SERVICE"]),
    ("spec.volumes", [{"name": "tmp", "emptyDir": {}}, {"name": "c", "configMap": {"name": "x"}}]),
    ("spec.securityContext.sysctls", [{"name": "net.ipv4.ip_local_port_range",
                                       "value": "1024 65535"}]),
    ("app.securityContext.seccompProfile", {"type": "Localhost", "localhostProfile": "p.json"}),
    ("init.securityContext.seLinuxOptions", {"type": "container_t", "level": "s0:c1,c2"}),
    ("spec.securityContext.appArmorProfile", {"type": "RuntimeDefault"}),
]


@pytest.mark.parametrize("path, value, control", RESTRICTED_BREACHES,
                         ids=[f"{p}={'deleted' if v is _DELETE else v}"
                              for p, v, _ in RESTRICTED_BREACHES])
def test_restricted_check_sees_each_breach(path: str, value: Any, control: str) -> None:
    """
    The check above is not vacuous: each way out of the profile, made to
    the sidecar pod (its init container, its application container, its
    pod-level fields), is reported under its control.
    """
    pod = _sidecar_pod()
    _set(path, value)(pod)
    violations = restricted_violations(pod)
    assert any(v.startswith(control + ":") for v in violations), violations


@pytest.mark.parametrize("path, value", RESTRICTED_ALLOWED,
                         ids=[p for p, _ in RESTRICTED_ALLOWED])
def test_restricted_check_allows_what_the_profile_allows(path: str, value: Any) -> None:
    """The check is not stricter than the profile: what it allows stays allowed."""
    pod = _sidecar_pod()
    _set(path, value)(pod)
    assert restricted_violations(pod) == []


# -- the manifests run ---------------------------------------------------------


def get(url: str) -> tuple[int, str]:
    """GET ``url``: (status, body); connection errors raise ``OSError``."""
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class PodContainer:
    """
    One manifest container run on Docker with host networking.

    :ivar port: where it listens (127.0.0.1), standing in for the probes'
        port in the manifest.
    """

    def __init__(self, engine: Any, image: str, workload: dict[str, Any], c: dict[str, Any],
                 env: dict[str, str], overrides: dict[str, str]) -> None:
        from testcontainers.core.container import DockerContainer

        self.port = free_port()
        self.manifest = c
        self.pod_spec = pod_template(workload)["spec"]
        self.options = docker_options(c, self.pod_spec)
        self.container = DockerContainer(image).with_kwargs(network_mode="host",
                                                            **self.options)
        run_env = {**env, **overrides, "pg_status__http_listen_address": "127.0.0.1",
                   "pg_status__http_port": str(self.port)}
        for k, v in run_env.items():
            self.container.with_env(k, v)

    def start(self) -> PodContainer:
        self.container.start()
        return self

    def probe(self, kind: str) -> tuple[int, str]:
        """Ask the path of the manifest's probe ``kind``, as the kubelet would."""
        p = http_probe(self.manifest, kind)
        return get(f"http://127.0.0.1:{self.port}{p.path}")

    def get(self, path: str) -> tuple[int, str]:
        return get(f"http://127.0.0.1:{self.port}{path}")

    def logs(self) -> str:
        return self.container.get_wrapped_container().logs().decode()[-3000:]

    def state(self) -> dict[str, Any]:
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        return dict(wrapped.attrs["State"])

    def terminate(self) -> None:
        """Send what the kubelet sends first: the image's stop signal, SIGTERM."""
        self.container.get_wrapped_container().kill(signal="SIGTERM")

    def wait(self, timeout: float) -> int:
        """The exit status, once the container has stopped."""
        return int(self.container.get_wrapped_container().wait(timeout=timeout)["StatusCode"])

    def stop(self) -> None:
        self.container.stop()


@pytest.fixture
def pods(docker_images: Any, docker_engine: Any) -> Iterator[Callable[..., PodContainer]]:
    """Factory of started :class:`PodContainer`\\s, all removed after the test."""
    started: list[PodContainer] = []

    def make(workload: dict[str, Any], c: dict[str, Any], env: dict[str, str],
             **overrides: str) -> PodContainer:
        pod = PodContainer(docker_engine, docker_images.pg_status, workload, c, env, overrides)
        started.append(pod)
        return pod.start()

    yield make
    for pod in started:
        try:
            pod.stop()
        except Exception:  # noqa: BLE001 - already gone
            pass


@pytest.fixture
def secret_role(pg_topology: PgTopology) -> Iterator[dict[str, str]]:
    """
    The Secret's role, created on the topology (with pg_monitor, as the
    manifest's comment advises) and dropped after the test; the Secret.
    """
    secret = secret_values(find(docs_of("sidecar.yaml"), "Secret", "pg-status-credentials"))
    assert secret == secret_values(find(docs_of("follower.yaml"), "Secret",
                                        "pg-status-credentials"))
    user, password = secret["pg_user"], secret["pg_password"]
    primary = pg_topology.primary
    primary.sql(f'CREATE ROLE "{user}" LOGIN PASSWORD %s', [password])
    primary.sql(f'GRANT pg_monitor TO "{user}"')
    try:
        pg_topology.wait_replicated(primary.value("SELECT pg_current_wal_lsn()::text"))
        yield secret
    finally:
        primary.sql(f'DROP ROLE "{user}"')


def topology_hosts(topo: PgTopology, manifest_env: dict[str, str]) -> dict[str, str]:
    """The manifest's example hosts replaced by the topology's (as many)."""
    assert len(manifest_env["pg_status__hosts"].split(",")) == len(topo.nodes)
    env = topo.hosts_env()
    return {k: env[k] for k in ("pg_status__hosts", "pg_status__pg_port")}


def wait_ready(pod: PodContainer, timeout: float = 60) -> None:
    """Readiness as the kubelet sees it: the probe's path answers 200."""
    poll(lambda: pod.probe("readinessProbe") == (200, "OK"), timeout, "readiness",
         interval=0.2, context=pod.logs)


def wait_started(pod: PodContainer) -> float:
    """
    A native sidecar's start as the kubelet sees it: the startup probe's
    path answers 200 within the probe's window (period × failure
    threshold), after which the kubelet would restart the container.  The
    application container would start now.  Returns the seconds it took.
    """
    probe = pod.manifest["startupProbe"]
    window = probe["periodSeconds"] * probe["failureThreshold"]
    start = time.monotonic()
    poll(lambda: pod.probe("startupProbe") == (200, "OK"), window, "the startup probe",
         interval=0.2, context=pod.logs)
    return time.monotonic() - start


def assert_within_limits(pod: PodContainer) -> None:
    """Still running, never killed for memory, under the manifest's limits."""
    state = pod.state()
    assert state["Running"] and not state["OOMKilled"], (state, pod.logs())
    stats = pod.container.get_wrapped_container().stats(stream=False)
    usage = stats["memory_stats"]["usage"]
    print(f"memory {usage / 2**20:.1f} MiB of {pod.options['mem_limit'] / 2**20:.0f} MiB")
    assert usage < pod.options["mem_limit"]


@pytest.mark.docker
@pytest.mark.pg
def test_sidecar_probes_answer_as_the_manifest_expects(pg_topology: PgTopology,
                                                       secret_role: dict[str, str],
                                                       pods: Callable[..., PodContainer],
                                                       blackhole: int) -> None:
    """
    The sidecar container as the manifest writes it (0.1 CPU, its memory
    limit, read-only root, uid 10001, the runtime's seccomp profile, the
    ConfigMap's settings and the Secret's credentials): liveness answers 200;
    the startup probe, which holds the application back, and readiness
    answer 200 once the first checks are done, well within the startup
    window; the checks log in with the Secret's role (/master finds the
    primary).  With its only host unreachable, the same container is live
    at once, unready until that host's first check times out (still within
    the startup window: the kubelet would not restart it), then ready
    although /master has nothing to answer: what the manifest's comments
    say.
    """
    docs = docs_of("sidecar.yaml")
    shop = find(docs, "Deployment", "shop")
    c = container(shop, "pg-status")
    env = environment(c, docs)
    assert env["pg_status__pg_user"] == secret_role["pg_user"]
    pod = pods(shop, c, env, **topology_hosts(pg_topology, env))
    poll(lambda: pod.probe("livenessProbe") == (200, "OK"), 60, "liveness", interval=0.2,
         context=pod.logs)
    print(f"started after {wait_started(pod):.1f} s")
    wait_ready(pod)
    poll(lambda: pod.get("/master") == (200, pg_topology.primary.host), 30,
         "the master, found with the Secret's credentials", context=pod.logs)
    hosts = json.loads(pod.get("/hosts")[1])
    assert [h["alive"] for h in hosts] == [True] * len(pg_topology.nodes), hosts
    assert_within_limits(pod)

    # every host dead: live, then unready for the first check, then ready
    dead = pods(shop, c, env, pg_status__hosts="127.0.0.1", pg_status__pg_port=str(blackhole),
                pg_status__query_timeout_ms="8000")
    poll(lambda: dead.probe("livenessProbe") == (200, "OK"), 60, "liveness, hosts dead",
         interval=0.2, context=dead.logs)
    code, _ = dead.probe("readinessProbe")
    assert code == 503, dead.logs()
    assert wait_started(dead) > 1
    wait_ready(dead)
    assert dead.get("/master")[0] == 404
    assert json.loads(dead.get("/hosts")[1])[0]["alive"] is False
    assert dead.probe("livenessProbe") == (200, "OK")


@pytest.mark.docker
@pytest.mark.pg
def test_follower_and_hub_probes(pg_topology: PgTopology, secret_role: dict[str, str],
                                 pods: Callable[..., PodContainer]) -> None:
    """
    The hub and a follower sidecar as the follower manifest writes them:
    both live and ready, the follower takes its view from the hub (mode
    ``following`` in its /metrics, one follower on the hub's) and answers
    /master from it.
    """
    docs = docs_of("follower.yaml")
    hub_d = find(docs, "Deployment", "pg-status-hub")
    hub_c = container(hub_d, "pg-status")
    hub_env = environment(hub_c, docs)
    hub = pods(hub_d, hub_c, hub_env, **topology_hosts(pg_topology, hub_env))
    wait_ready(hub)
    assert hub.probe("livenessProbe") == (200, "OK")

    shop = find(docs, "Deployment", "shop")
    follower_c = container(shop, "pg-status")
    env = environment(follower_c, docs)
    # the Service's name and port stand for the hub pod's address
    follower = pods(shop, follower_c, env, **topology_hosts(pg_topology, env),
                    pg_status__follow=f"http://127.0.0.1:{hub.port}")
    wait_started(follower)
    wait_ready(follower)
    assert follower.probe("livenessProbe") == (200, "OK")
    poll(lambda: follower.get("/master") == (200, pg_topology.primary.host), 30,
         "the master, from the hub", context=follower.logs)
    metrics = follower.get("/metrics")[1]
    assert 'pgstatus_follow_mode{mode="following"} 1' in metrics, metrics
    poll(lambda: "pgstatus_follow_followers 1\n" in hub.get("/metrics")[1], 30,
         "the hub counting its follower")
    assert_within_limits(hub)
    assert_within_limits(follower)


@pytest.mark.docker
@pytest.mark.pg
@pytest.mark.parametrize("name, deployment", [
    ("sidecar.yaml", "shop"),
    ("follower.yaml", "pg-status-hub"),
])
def test_stopped_as_the_kubelet_stops_it(pg_topology: PgTopology, secret_role: dict[str, str],
                                         pods: Callable[..., PodContainer], name: str,
                                         deployment: str) -> None:
    """
    SIGTERM to a ready pg-status from the manifest: it keeps answering
    /master for ``pg_status__shutdown_delay_ms``, then exits with status 0
    soon after, well before the pod's ``terminationGracePeriodSeconds``
    would bring SIGKILL.
    """
    docs = docs_of(name)
    workload = find(docs, "Deployment", deployment)
    c = container(workload, "pg-status")
    env = environment(c, docs)
    delay = shutdown_delay_s(env)
    grace = pod_template(workload)["spec"]["terminationGracePeriodSeconds"]
    pod = pods(workload, c, env, **topology_hosts(pg_topology, env))
    wait_ready(pod)
    primary = (200, pg_topology.primary.host)
    poll(lambda: pod.get("/master") == primary, 30, "the master", context=pod.logs)

    start = time.monotonic()
    pod.terminate()
    answered = 0.0
    while time.monotonic() - start < grace:
        try:
            answer = pod.get("/master")
        except OSError:
            break
        if answer != primary:
            break
        answered = time.monotonic() - start
        time.sleep(0.1)
    status = pod.wait(timeout=grace)
    stopped = time.monotonic() - start
    print(f"answered for {answered:.1f} s after SIGTERM, exited {status} after {stopped:.1f} s")
    assert status == 0, pod.logs()
    assert answered >= delay - 0.5, (answered, pod.logs())
    assert stopped <= delay + 3 < grace, pod.logs()
