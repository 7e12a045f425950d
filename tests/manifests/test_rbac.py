"""RBAC grants exactly what the code calls: every rule is used by some kubernetes-asyncio call
in the package its ServiceAccount runs, and every such call is granted.

The (group, resource, verb) of a client method is read from the client itself: the URL
template and HTTP method it sends, mapped to an authorization verb the way the API server's
request-info resolver does (GET+name → get, POST → create, PUT → update, PATCH → patch…).
A list method handed to `Watch.stream` or to a `_watch…` helper (`stream(api.list_namespace,
…)`), or called with `watch=True`, counts as `watch`. Commands people run with their own
kubeconfig (USER_SIDE) make no ServiceAccount's calls.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections import defaultdict
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from common.node_resource_topology import GROUP as NRT_GROUP
from common.node_resource_topology import PLURAL as NRT_PLURAL
from tests.manifests.rendered import REPO, Rendering, render

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

_CALL = re.compile(r"\.([a-z][a-z0-9_]*)\(")
_WATCHED = re.compile(r"\b(?:stream|_?watch\w*)\(\s*[\w.]+\.(list_[a-z0-9_]+)\b(?!\()")
# The claim-templates command runs under its own ServiceAccount (manifests/base/claim-templates).
CLAIMS = ("webhook/claims/", "webhook/cli/claim_templates.py")
_WATCH_ARG = re.compile(r"\.(list_[a-z0-9_]+)\([^()]*?\bwatch=True")
# common/kube/listwatch.py's loop, handed a list method uncalled: it lists and watches.
_LIST_WATCH = re.compile(r"\bListWatch\(\s*[\w.]+\.(list_[a-z0-9_]+)\b(?!\()")
# `explain --kubeconfig` (and `explain pod/NAME`) read the cluster with the user's
# credentials, never in a pod.
USER_SIDE = ("webhook/cli/read_cluster.py", "webhook/cli/explain/live.py")
# Custom-object calls name their group and plural as arguments: the files allowed to make
# them, and the one resource they address: the agent writes NodeResourceTopology objects, the
# webhook's cache reads them.
_CUSTOM = {
    "agent/nrt/": (NRT_GROUP, NRT_PLURAL),
    "webhook/scheduler/nrt_cache.py": (NRT_GROUP, NRT_PLURAL),
}
_CALL_API = re.compile(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'")
_API_CLASSES = [
    cls for name, cls in inspect.getmembers(client, inspect.isclass) if name.endswith("Api")
]


@functools.cache
def grant_of(method: str) -> Grant | None:
    """The authorization attributes of a client method, or None if it is not an API call."""
    for cls in _API_CLASSES:
        impl = getattr(cls, f"{method}_with_http_info", None)
        if impl is None:
            continue
        path, http = _CALL_API.search(inspect.getsource(impl)).groups()
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            group, rest = "", parts[2:]
        else:
            group, rest = parts[1], parts[3:]
        if rest[:2] == ["namespaces", "{namespace}"]:
            rest = rest[2:]
        if not rest:
            return None  # discovery (/apis/{group}/{version}): every authenticated user may
        named = len(rest) > 1
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        verb = {
            "GET": "get" if named else "list",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection",
        }[http]
        return group, resource, verb
    return None


def calls_in(
    package: str, *, only: tuple[str, ...] = (), skip: tuple[str, ...] = ()
) -> dict[Grant, set[str]]:
    """Every Kubernetes API call made anywhere in the package → the files making it
    (`only`/`skip`: paths, or path prefixes ending in '/', to keep or leave out)."""
    found: dict[Grant, set[str]] = defaultdict(set)
    for path in sorted((REPO / package).rglob("*.py")):
        where = path.relative_to(REPO).as_posix()
        if (only and not where.startswith(only)) or (skip and where.startswith(skip)):
            continue
        text = path.read_text()
        listed = set(_LIST_WATCH.findall(text))
        for name in set(_CALL.findall(text)) | listed:
            grant = _custom(grant_of(name), where, name)
            if grant is not None:
                found[grant].add(str(path.relative_to(REPO)))
        for name in set(_WATCHED.findall(text)) | set(_WATCH_ARG.findall(text)) | listed:
            grant = _custom(grant_of(name), where, name)
            if grant is not None and grant[2] == "list":
                found[(grant[0], grant[1], "watch")].add(str(path.relative_to(REPO)))
    return dict(found)


def _custom(grant: Grant | None, where: str, name: str) -> Grant | None:
    if grant is None or grant[0] != "{group}":
        return grant
    custom = [g for prefix, g in _CUSTOM.items() if where.startswith(prefix)]
    assert custom, f"{where}: custom-object call {name} outside {list(_CUSTOM)}"
    return custom[0][0], custom[0][1], grant[2]


def grants_of(r: Rendering, service_account: str) -> set[Grant]:
    roles = {(o["kind"], o["metadata"]["name"]): o for o in r.all("Role") + r.all("ClusterRole")}
    granted: set[Grant] = set()
    for binding in r.all("RoleBinding") + r.all("ClusterRoleBinding"):
        if not any(s["name"] == service_account for s in binding["subjects"]):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            if "nonResourceURLs" in rule:
                continue  # paths, not resources: non_resource_grants_of
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                        granted.add((group, resource, verb))
    return granted


def non_resource_grants_of(r: Rendering, service_account: str) -> set[tuple[str, str]]:
    """(path, verb) of the nonResourceURLs rules bound to `service_account`."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in r.all("Role") + r.all("ClusterRole")}
    granted: set[tuple[str, str]] = set()
    for binding in r.all("RoleBinding") + r.all("ClusterRoleBinding"):
        if any(s["name"] == service_account for s in binding["subjects"]):
            role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
            for rule in role["rules"]:
                granted |= {(u, v) for u in rule.get("nonResourceURLs", ()) for v in rule["verbs"]}
    return granted


# Raw GETs by path (`call_api`, no client method): the files that make them, and the paths.
_RAW_GET = re.compile(r'_get\(api, "(/[^"]+)"\)')


def test_the_only_path_read_is_the_api_servers_metrics_for_its_gates() -> None:
    """GET /metrics (feature gates, scheduler/workload_api.py) is the one nonResourceURL the
    webhook is granted; /apis discovery needs none (system:discovery)."""
    raw = {
        (path, str(p.relative_to(REPO)))
        for p in (REPO / "webhook").rglob("*.py")
        for path in _RAW_GET.findall(p.read_text())
    }
    assert raw == {("/metrics", str(Path("webhook") / "scheduler" / "workload_api.py"))}
    for target in ("", "overlays/cert-manager"):
        granted = non_resource_grants_of(render(target), "topoplace-webhook")
        assert granted == {("/metrics", "get")}, target
    assert non_resource_grants_of(render(), "topoplace-agent") == set()


def test_the_resolver_reads_the_client_correctly() -> None:
    # a few fixed points of the Kubernetes REST mapping, so a parsing slip cannot pass silently
    assert grant_of("patch_node") == ("", "nodes", "patch")
    assert grant_of("read_namespaced_secret") == ("", "secrets", "get")
    assert grant_of("list_namespaced_pod") == ("", "pods", "list")
    assert grant_of("replace_node_status") == ("", "nodes/status", "update")
    assert grant_of("patch_mutating_webhook_configuration") == (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch",
    )
    assert grant_of("read_text") is None


@pytest.mark.parametrize(
    ("service_account", "package", "only", "skip"),
    [
        ("topoplace-agent", "agent", (), ()),
        ("topoplace-webhook", "webhook", (), CLAIMS + USER_SIDE),
        ("topoplace-claim-templates", "webhook", CLAIMS, ()),
    ],
)
def test_rbac_grants_exactly_the_calls_the_code_makes(
    service_account: str, package: str, only: tuple[str, ...], skip: tuple[str, ...]
) -> None:
    used = calls_in(package, only=only, skip=skip)
    granted = grants_of(render(), service_account)
    assert set(used) - granted == set(), f"calls without a grant: {used}"
    assert granted - set(used) == set(), "granted but never called"


def test_agent_calls_only_get_and_patch_on_nodes_and_watches_pods() -> None:
    assert set(calls_in("agent")) == {
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),  # its own node's pods (dataset leases), never one by name
        ("", "pods", "watch"),
        # its node's NodeResourceTopology: never listed, watched or deleted
        *((NRT_GROUP, NRT_PLURAL, v) for v in ("get", "create", "patch")),
    }


def test_claim_templates_only_keep_templates_and_watch_namespaces() -> None:
    assert set(calls_in("webhook", only=CLAIMS)) == {
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        *(("resource.k8s.io", "resourceclaimtemplates", v) for v in ("list", "watch")),
        *(("resource.k8s.io", "resourceclaimtemplates", v) for v in ("create", "delete")),
    }


def importers_of(module: str) -> set[str]:
    own = module.rsplit(".", 1)[1] + ".py"
    return {
        str(p.relative_to(REPO))
        for p in (REPO / "webhook").rglob("*.py")
        if module in p.read_text() and p.name != own
    }


NODE_READS = {("", "nodes", "list"), ("", "nodes", "watch")}
TOPOLOGY_READS = {(NRT_GROUP, NRT_PLURAL, v) for v in ("list", "watch")}
LEASE_READS = {("coordination.k8s.io", "leases", "get")}
TEMPLATE_READS = {("resource.k8s.io", "resourceclaimtemplates", v) for v in ("list", "watch")}
POD_READS = {("", "pods", "list"), ("", "pods", "watch")}


def test_only_the_certs_sidecar_and_the_node_cache_talk_to_the_api() -> None:
    # The webhook's token is mounted in two containers only: certs, and serve for its node
    # cache (claim-templates is its own Deployment with its own ServiceAccount, checked above)
    calls = calls_in("webhook", skip=CLAIMS + USER_SIDE)
    cache = str(Path("webhook") / "stores" / "node_store.py")
    templates = str(Path("webhook") / "stores" / "claim_template_store.py")
    topology = str(Path("webhook") / "scheduler" / "nrt_cache.py")
    leases = str(Path("webhook") / "scheduler" / "leases.py")
    spans = str(Path("webhook") / "spans" / "watch.py")
    bound = str(Path("webhook") / "scheduler" / "pods.py")  # the extender's ledger (issue 45)
    assert set().union(*calls.values()) == {
        str(Path("webhook") / "certs" / "sync.py"),
        cache,
        templates,
        topology,
        leases,
        spans,
        bound,
    }
    assert {grant for grant, files in calls.items() if cache in files} == NODE_READS
    assert {grant for grant, files in calls.items() if templates in files} == TEMPLATE_READS
    assert {grant for grant, files in calls.items() if topology in files} == TOPOLOGY_READS
    assert {grant for grant, files in calls.items() if leases in files} == LEASE_READS
    assert {grant for grant, files in calls.items() if spans in files} == POD_READS
    assert {grant for grant, files in calls.items() if bound in files} == POD_READS
    # the `certs` command, run only by the sidecar; the node cache, started by the server app
    assert importers_of("webhook.certs.sync") == {str(Path("webhook") / "cli" / "certs.py")}
    server = {str(Path("webhook") / "server" / m) for m in ("app.py", "assembly.py")}
    assert importers_of("webhook.stores.node_store") == server
    assert importers_of("webhook.stores.claim_template_store") == server
    service = {str(Path("webhook") / "scheduler" / "service.py")}
    assert importers_of("webhook.scheduler.nrt_cache") == service
    assert importers_of("webhook.scheduler.leases") == service
    assert importers_of("webhook.scheduler.pods") == service
    assembly = {str(Path("webhook") / "server" / "assembly.py")}
    assert importers_of("webhook.spans.watch") == assembly


def test_serve_runs_the_node_cache_in_every_overlay() -> None:
    from tests.manifests.test_consistency import container, parse, webhook_pod

    for target in ("", "overlays/cert-manager"):
        serve = container(webhook_pod(render(target)), "serve")
        assert parse("webhook.cli.serve", serve, {}).node_cache, target


def test_cert_manager_overlay_grants_the_webhook_only_node_reads() -> None:
    reads = NODE_READS | TEMPLATE_READS | TOPOLOGY_READS | LEASE_READS | POD_READS
    assert grants_of(render("overlays/cert-manager"), "topoplace-webhook") == reads
