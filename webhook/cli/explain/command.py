"""`topoplace-webhook explain`: which nodes a pod fits, node by node, and why not.

FILE holds a Pod or a workload with one pod template (pick one with --template when it has
several); `pod/NAME`, `job/NAME` (and the other workload kinds) read the object from the
cluster instead, and print its events after the table (live.py). The pod is mutated exactly
as the webhook would mutate it, then checked against every node the way kube-scheduler's
filters check it: required node affinity (the policy's terms and the pod's own, ORed),
nodeSelector, cordon, taints against tolerations, and allocatable against requests (minus
what bound pods already request, with --kubeconfig).
Exit 0 when some node fits, 1 when none does, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.cli.engine_flags import add_engine_arguments, settings_from_args

if TYPE_CHECKING:
    from webhook.cli.explain.live import LiveObject
    from webhook.nodefit.explanation import Explanation
    from webhook.nodefit.free_check import StaleOf
    from webhook.placement_model.filters.nodes import NodeView
    from webhook.placement_model.zones import NodeZones

__all__ = ["add_arguments", "run"]

EXIT_NONE_FITS = 1
EXIT_BAD_INPUT = 2
DEFAULT_CONFIGMAP = "topoplace-system/topoplace-policies"
_NRT = "NodeResourceTopology"
_CURRENT = Path("-")  # --kubeconfig given without a path: $KUBECONFIG or ~/.kube/config


def add_arguments(parser: argparse.ArgumentParser, *, cluster_default: bool = False) -> None:
    from common.yaml_input import LISTING, describe

    parser.add_argument(
        "file",
        metavar="FILE|KIND/NAME",
        help=f"YAML with a Pod or a workload; - for stdin ({describe(LISTING)}); or pod/NAME, "
        "job/NAME, jobset/NAME… in the cluster (in -n NS)",
    )
    parser.add_argument(
        "--policies",
        type=Path,
        metavar="DIR",
        help="directory of policy *.yaml (default with --kubeconfig: the policies the webhook "
        f"serves, ConfigMap {DEFAULT_CONFIGMAP})",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help="namespace for a pod without metadata.namespace (default: the kubeconfig "
        "context's namespace with --kubeconfig, else default)",
    )
    source = parser.add_mutually_exclusive_group(required=not cluster_default)
    source.add_argument(
        "--nodes",
        type=Path,
        metavar="NODES.yaml",
        help="`kubectl get nodes -o yaml` output; NodeResourceTopology objects in it add free "
        "capacity per NUMA node",
    )
    source.add_argument(
        "--kubeconfig",
        nargs="?",
        const=_CURRENT,
        type=Path,
        metavar="PATH",
        help="read nodes and the pods bound to them from the cluster (no PATH: $KUBECONFIG "
        "or ~/.kube/config)",
    )
    parser.add_argument(
        "--template",
        metavar="WHERE",
        help="which pod template of a workload with several, e.g. "
        "spec.replicatedJobs[1].template.spec.template",
    )
    parser.add_argument("--output", choices=("table", "json"), default="table")
    add_engine_arguments(parser)
    parser.set_defaults(cluster_default=cluster_default)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    import asyncio

    from common.kube_config import ConfigError
    from webhook.engine.pod_fields import InvalidPod
    from webhook.kube_read import ApiError
    from webhook.nodefit.explanation import explain_pod
    from webhook.placement_model.filters.nodes import NodeError, node_views
    from webhook.placement_model.zones import ZoneError, zones_of_documents
    from webhook.policy.loader import PolicyLoadError, load_policy_dir
    from webhook.yaml_io import YamlInputError, load_documents

    settings = settings_from_args(args)
    if isinstance(settings, str):
        return _fail(settings)
    from webhook.cli.explain.live import live_ref

    ref = live_ref(args.file)
    use_cluster = args.kubeconfig is not None or (args.nodes is None and args.cluster_default)
    if ref is not None and not use_cluster:
        return _fail(f"{args.file} is read from a cluster: give --kubeconfig, not --nodes")
    if not use_cluster and args.policies is None:
        return _fail("--policies DIR is needed with --nodes (only a cluster serves its own)")
    live = None
    try:
        kubeconfig = None if args.kubeconfig in (None, _CURRENT) else args.kubeconfig
        if ref is not None:
            live = _read_live(kubeconfig, ref, args.namespace)
        pod, label, doc_ns = _pod(args, load_documents, live.doc if live else None)
        policies = load_policy_dir(args.policies) if args.policies is not None else None
        context_ns, stale = None, None
        if use_cluster:
            from webhook.cli.read_cluster import read_cluster

            configmap = DEFAULT_CONFIGMAP if policies is None else None
            view = asyncio.run(
                read_cluster(
                    kubeconfig,
                    policies_configmap=configmap,
                    leave_out=live.uid if live is not None else None,
                )
            )
            nodes, context_ns, zones = view.nodes, view.namespace, view.zones
            stale = _stale(zones, view.pods)
            policies = policies or view.policies
        else:
            from webhook.cli.fleet import no_nodes, objects_of

            docs = objects_of(args.nodes, "Node", flag="--nodes", also=(_NRT,))
            # NodeResourceTopology objects beside the Nodes: free capacity per NUMA node.
            zones = zones_of_documents(d for d in docs if d.get("kind") == _NRT)
            nodes = node_views(d for d in docs if d.get("kind") != _NRT)
            if not nodes:
                raise _BadInput(no_nodes(args.nodes))
    except (OSError, UnicodeDecodeError) as exc:
        return _fail(f"cannot read input: {exc}")
    except (YamlInputError, NodeError, ConfigError, ZoneError, _BadInput) as exc:
        return _fail(str(exc))
    except PolicyLoadError as exc:
        return _fail("; ".join(exc.messages))
    except ApiError as exc:
        if exc.status == 404 and ref is not None and live is None:
            where = args.namespace or _namespace_of(kubeconfig)
            return _fail(f"{args.file} not found in namespace {where}")
        return _fail(f"the API server answered {exc}")
    except ValueError as exc:  # an unknown kind in KIND/NAME
        return _fail(str(exc))
    if policies is None:
        return _fail("no placement policies were loaded")
    namespace = doc_ns or args.namespace or context_ns or "default"
    try:
        explanation = explain_pod(
            pod, namespace, policies, nodes, settings, label=label, zones=zones.get, stale=stale
        )
    except InvalidPod as exc:
        return _fail(f"{label}: {exc}")
    return _report(args, explanation, nodes, zones, live, label)


def _stale(zones: dict[str, NodeZones], pods: list[dict[str, Any]]) -> StaleOf:
    """A note for each node whose NodeResourceTopology is out of date (explain.free)."""
    from datetime import UTC, datetime

    from webhook.nodefit.free_check import stale_of

    return stale_of(zones, pods, datetime.now(UTC))


def _report(
    args: argparse.Namespace,
    explanation: Explanation,
    nodes: list[NodeView],
    zones: dict[str, NodeZones],
    live: LiveObject | None,
    label: str,
) -> int:
    """Print the explanation (and a live object's events); the exit status."""
    for warning in explanation.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    unsized = [n.name for n in nodes if not n.resources_known]
    if unsized:
        print(
            f"warning: {len(unsized)} node(s) without status.allocatable ({', '.join(unsized[:5])}"
            f"{', …' if len(unsized) > 5 else ''}): their resources are not checked",
            file=sys.stderr,
        )
    if explanation.denial:
        print(f"error: denied: {explanation.denial}", file=sys.stderr)
        if args.output == "table":  # once: the same reason on every node says nothing more
            print(f"0 of {len(nodes)} nodes: the webhook denies this pod (above)")
            return EXIT_NONE_FITS
    from webhook.cli.explain.workload import render_with_domains

    sys.stdout.write(render_with_domains(args, explanation, nodes, zones.get))
    if live is not None and args.output == "table":
        from webhook.cli.explain.live import render_events

        sys.stdout.write("\n" + render_events(live, label))
    return 0 if explanation.fitting else EXIT_NONE_FITS


def _read_live(kubeconfig: Path | None, ref: tuple[str, str], namespace: str | None) -> LiveObject:
    import asyncio

    from webhook.cli.explain.live import read_live
    from webhook.cli.read_cluster import default_kubeconfig

    path = kubeconfig or default_kubeconfig()
    ns = namespace or _namespace_of(path)
    return asyncio.run(read_live(path, ref[0], ref[1], ns))


def _namespace_of(kubeconfig: Path | None) -> str:
    """The kubeconfig context's namespace, else default (as kubectl chooses)."""
    from webhook.cli.read_cluster import context_namespace

    return context_namespace(kubeconfig) or "default"


class _BadInput(ValueError):
    pass


def _pod(
    args: argparse.Namespace, load_documents: object, live: dict[str, Any] | None = None
) -> tuple[dict[str, Any], str, str | None]:
    """The one pod (template) to explain, its label for the output, and its namespace."""
    from common.yaml_input import LISTING, read_text
    from webhook.workloads.templates import pod_templates

    source = "<stdin>" if args.file == "-" else args.file
    if live is not None:
        docs = [live]
    else:
        text = read_text(args.file, bounds=LISTING)
        docs = load_documents(text, source=source)  # type: ignore[operator]
    found = []
    for doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            raise _BadInput(f"{source}: a document is not a Kubernetes object (no kind)")
        meta = _v if isinstance(_v := doc.get("metadata"), dict) else {}
        name = meta.get("name") or meta.get("generateName") or "?"
        for template in pod_templates(doc):
            where = f" {template.where}" if template.where else ""
            found.append((template, f"{doc['kind']}/{name}{where}", meta.get("namespace"), doc))
    if args.template is not None:
        found = [entry for entry in found if entry[0].where == args.template]
    if len(found) != 1:
        listed = ", ".join(entry[1] for entry in found) or "none"
        hint = " (pick one with --template WHERE)" if len(found) > 1 else ""
        raise _BadInput(f"{source}: needs exactly one pod template, found {listed}{hint}")
    template, label, namespace, doc = found[0]
    args.workload = (doc, template)  # explain/workload.py: the per-domain view
    args.documents = docs  # and the PodGroup the template names, when it is among them
    return _with_workload_label(doc, template.pod), label, namespace


def _with_workload_label(doc: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """The template as the webhook mutates it: the workload's policy label copied in."""
    from webhook.vocabulary import POLICY_LABEL
    from webhook.workloads.mutation import inherits_label

    labels = (doc.get("metadata") or {}).get("labels") or {}
    meta = _v if isinstance(_v := pod.get("metadata"), dict) else {}
    own = _v if isinstance(_v := meta.get("labels"), dict) else {}
    if not inherits_label(doc.get("kind")) or POLICY_LABEL not in labels or POLICY_LABEL in own:
        return pod
    return {**pod, "metadata": {**meta, "labels": {**own, POLICY_LABEL: labels[POLICY_LABEL]}}}
