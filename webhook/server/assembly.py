"""What `serve` runs, assembled from its flags: the settings (`ServerConfig`), the stores and
watchers they turn on (`Parts`), the one admission call the handler makes (`build_admitter`),
and the watchers as tasks of the app's lifetime (`start_tasks`). app.py adds the routes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from pathlib import Path

from webhook.engine.outcome import EngineSettings
from webhook.engine.replay.replayer import Replayer
from webhook.scheduler.service import NumaScheduling
from webhook.scheduler.workload_api import WorkloadApi
from webhook.server.answer_cache import CachedAdmitter
from webhook.server.cert_expiry import CertificateExpiry
from webhook.server.metrics import WebhookMetrics
from webhook.server.pod_admission import Admitter, MutateFn, PolicyAdmitter
from webhook.server.reload import PolicyStore, PolicyWatcher
from webhook.server.tls import TlsReloader
from webhook.server.workload_admission import WorkloadAdmitter
from webhook.spans.watch import WorkloadSpans
from webhook.stores.claim_template_store import ClaimTemplateStore
from webhook.stores.node_store import NodeStore
from webhook.warnings.placement import PlacementWarnings

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "Parts",
    "ServerConfig",
    "build_admitter",
    "build_parts",
    "start_tasks",
]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # a large Pod is ~100 KiB; etcd caps objects at 1.5 MiB


@dataclass(frozen=True, slots=True)
class ServerConfig:
    policies_dir: Path
    cert_path: Path
    key_path: Path
    host: str = "0.0.0.0"
    port: int = 8443
    metrics_host: str | None = None  # default: same as host
    metrics_port: int | None = 9102  # None: no metrics listener; 0: any free port
    settings: EngineSettings = field(default_factory=EngineSettings)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    tls_reload_interval: float = 10.0
    policy_poll_interval: float = 10.0
    # Below the default 30 s terminationGracePeriodSeconds, so in-flight requests finish.
    shutdown_timeout: float = 20.0
    # Watch every node and warn at admission when a mutated pod fits none (stores/node_store.py).
    node_cache: bool = False
    kubeconfig: Path | None = None  # for the caches; None: in-cluster or $KUBECONFIG
    claim_template_cache: bool = False  # DRA templates not there yet: fallback (template_cache)
    # NodeResourceTopology watch, the scheduler extender routes, scheduler Lease checks.
    numa_scheduling: bool = False
    lease_check_interval: float = 10.0  # how often a named scheduler's Lease is read
    # The extender's ledger of pods bound but not shown yet (issue 45); off only to measure.
    scheduler_accounting: bool = True
    # Watch the placed pods that opted in: the per-workload audit as metrics (needs node_cache).
    workload_spans: bool = False
    # Look at the Workload API and its gates (scheduler/workload_api.py): keepTogether
    # through PodGroups where the cluster keeps gangs together itself.
    workload_api: bool = False


@dataclass(frozen=True, slots=True)
class Parts:
    """What `serve` runs besides the routes: the stores and watchers its flags turn on."""

    metrics: WebhookMetrics
    store: PolicyStore
    watcher: PolicyWatcher
    tls: TlsReloader
    numa: NumaScheduling | None
    nodes: NodeStore | None
    spans: WorkloadSpans | None
    workload_api: WorkloadApi | None
    templates: ClaimTemplateStore | None


def build_parts(config: ServerConfig) -> Parts:
    """Load policies and TLS (raising PolicyLoadError / OSError / ssl.SSLError at startup)."""
    metrics = WebhookMetrics()
    store = PolicyStore()
    watcher = PolicyWatcher(
        config.policies_dir,
        store,
        on_swap=lambda s: metrics.policy_set_loaded(s.generation_hash, s.names),
        on_error=lambda _errors: metrics.policy_reload_failed(),
    )
    watcher.load_initial()
    tls = TlsReloader(config.cert_path, config.key_path, on_reload=metrics.tls_reloaded)
    metrics.registry.register(CertificateExpiry(config.cert_path))
    numa = None
    if config.numa_scheduling:
        numa = NumaScheduling(
            lambda: store.current,
            lease_interval=config.lease_check_interval,
            on_prediction=metrics.scheduler_prediction,
            accounting=config.scheduler_accounting,
        )
    nodes = NodeStore() if config.node_cache else None
    spans = WorkloadSpans(nodes.labels) if nodes is not None and config.workload_spans else None
    if spans is not None:
        metrics.registry.register(spans)
    return Parts(
        metrics,
        store,
        watcher,
        tls,
        numa,
        nodes,
        spans,
        WorkloadApi() if config.workload_api else None,
        ClaimTemplateStore() if config.claim_template_cache else None,
    )


def build_admitter(parts: Parts, config: ServerConfig, mutate: MutateFn | None) -> Admitter:
    """The one admission call the handler makes: workloads first (a pod request pays one
    lookup there), then alike pods from one answer, then the engine and the placement
    warnings, which read the stores themselves."""
    nodes, numa, templates, store = parts.nodes, parts.numa, parts.templates, parts.store
    warnings = None
    if nodes is not None or numa is not None:
        warnings = PlacementWarnings(
            nodes=nodes,
            zones=numa.zones if numa is not None else None,
            stale=numa.ledger if numa is not None else None,
            scheduler_problem=numa.leases.problem if numa is not None else None,
        )
    settings = config.settings
    if templates is not None:
        settings = replace(settings, claim_templates=templates.lookup)
    if mutate is None:
        # A pod form's answer is computed once (engine/replay); the claim templates are the
        # only thing the engine reads besides the pod, the policy set and the settings.
        mutate = Replayer(stamp=(lambda: templates.generation) if templates is not None else None)
    pods = PolicyAdmitter(lambda: store.current, settings, mutate=mutate, fit_check=warnings)

    def stamp() -> tuple[object, ...]:
        # Everything an answer depends on besides the request (answer_cache.py).
        return (
            store.current,
            nodes.stamp() if nodes is not None else None,
            templates.generation if templates is not None else None,
            numa.stamp() if numa is not None else None,
        )

    workload_api = parts.workload_api
    return WorkloadAdmitter(
        CachedAdmitter(pods, stamp),
        lambda: store.current,
        settings,
        carries=nodes.carries if nodes is not None else None,
        scheduling=(lambda: workload_api.current) if workload_api is not None else None,
    )


def start_tasks(parts: Parts, config: ServerConfig) -> list[asyncio.Task[None]]:
    """The watchers the flags turned on, as tasks of the app's lifetime."""
    kubeconfig = config.kubeconfig
    named = [
        ("policy-watch", parts.watcher.watch(config.policy_poll_interval)),
        ("tls-watch", parts.tls.watch(config.tls_reload_interval)),
    ]
    if parts.nodes is not None:
        named.append(("node-cache", parts.nodes.run(kubeconfig)))
    if parts.spans is not None:
        named.append(("workload-spans", parts.spans.run(kubeconfig)))
    if parts.workload_api is not None:
        named.append(("workload-api", parts.workload_api.run(kubeconfig)))
    if parts.templates is not None:
        named.append(("template-cache", parts.templates.run(kubeconfig)))
    tasks = [asyncio.create_task(coro, name=name) for name, coro in named]
    if parts.numa is not None:
        tasks += [asyncio.create_task(t) for t in parts.numa.tasks(kubeconfig)]
    return tasks
