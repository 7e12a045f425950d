"""Keep the Helm chart's generated parts equal to their one source (`make chart`).

The chart renders the kustomize base's own objects: `charts/topoplace/files/` holds verbatim
copies of `manifests/base/**.yaml` (less its kustomization), the cert-manager and
numa-scheduler overlays' objects, the monitoring component's files and the example policies,
and the templates load them with
`.Files.Get`. Helm cannot read outside the chart directory, and symlinks there make every
helm command log a warning, hence copies. `charts/topoplace/crds/` holds the
NodeResourceTopology CRD (manifests/components/noderesourcetopology-crd). `values.schema.json`
embeds the PlacementPolicy schema that `topoplace-webhook schema` publishes, so `helm install`
checks inline policies field by field, the shipped alerts' names as the only keys of
`monitoring.alerts`, and the agent's metadata providers as `agent.networkMetadata.provider`'s.

    python charts/sync.py          # rewrite what differs
    python charts/sync.py --check  # exit 1 naming what differs (make test runs this)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "topoplace"
FILES = CHART / "files"
# Helm installs what is in crds/ only where it is absent and never upgrades or deletes it:
# a cluster that has the NodeResourceTopology CRD from NFD keeps theirs.
CRDS = CHART / "crds"
SCHEMA = CHART / "values.schema.json"
POLICY_DEF = "PlacementPolicy"
MONITORING = REPO / "manifests" / "components" / "monitoring"


def sources() -> dict[str, Path]:
    """Chart-relative path under files/ → the file it copies."""
    out: dict[str, Path] = {}
    base = REPO / "manifests" / "base"
    for path in sorted(base.rglob("*.yaml")):
        # Not the Namespace: Helm keeps a release inside a namespace that exists first.
        if path.name not in ("kustomization.yaml", "namespace.yaml"):
            out[f"manifests/base/{path.relative_to(base)}"] = path
    certs = REPO / "manifests" / "overlays" / "cert-manager" / "certificates.yaml"
    out["manifests/overlays/cert-manager/certificates.yaml"] = certs
    numa = REPO / "manifests" / "overlays" / "numa-scheduler" / "scheduler.yaml"
    out["manifests/overlays/numa-scheduler/scheduler.yaml"] = numa
    for path in sorted((REPO / "policies").glob("*.yaml")):
        out[f"policies/{path.name}"] = path
    for path in sorted(MONITORING.glob("*")):
        if path.name != "kustomization.yaml":
            out[f"manifests/components/monitoring/{path.name}"] = path
    return out


def alert_names() -> list[str]:
    """The shipped alerts: the only keys `monitoring.alerts` takes (the schema's enum)."""
    import yaml

    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def with_alert_names(values_schema: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """values_schema whose `monitoring.alerts` accepts exactly these alert names."""
    out = json.loads(json.dumps(values_schema))
    alerts = out["properties"]["monitoring"]["properties"]["alerts"]
    alerts["propertyNames"] = {"enum": names}
    return out


def with_metadata_providers(values_schema: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """values_schema whose `agent.networkMetadata.provider` is "" (off) or one of `names`."""
    out = json.loads(json.dumps(values_schema))
    metadata = out["properties"]["agent"]["properties"]["networkMetadata"]
    metadata["properties"]["provider"] = {"enum": ["", *names]}
    return out


def metadata_providers() -> list[str]:
    """The agent's `--network-metadata` choices."""
    from agent.position.metadata import PROVIDERS

    return sorted(PROVIDERS)


def policy_schema() -> dict[str, Any]:
    webhook = Path(sys.executable).with_name("topoplace-webhook")
    done = subprocess.run([str(webhook), "schema"], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def with_policy_schema(values_schema: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    """values_schema with the policy schema's definitions in its `$defs` (the policy's own
    `#/$defs/...` references then resolve unchanged) and the policy itself as PlacementPolicy."""
    policy = dict(policy)
    defs = policy.pop("$defs", {})
    policy.pop("$schema", None)
    own = {k: v for k, v in values_schema.get("$defs", {}).items() if k.startswith("values.")}
    return {**values_schema, "$defs": {**own, **defs, POLICY_DEF: policy}}


def _dump(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def copies() -> dict[Path, Path]:
    """Every copy the chart holds → the file it copies."""
    out = {FILES / rel: src for rel, src in sources().items()}
    crd = REPO / "manifests" / "components" / "noderesourcetopology-crd" / "crd.yaml"
    out[CRDS / "noderesourcetopology.yaml"] = crd
    return out


def differences() -> tuple[list[str], dict[Path, str | Path], list[Path]]:
    """(what differs, file → new content or source, stale copies to remove)."""
    wanted = copies()
    changes: dict[Path, str | Path] = {}
    for dest, src in wanted.items():
        if not dest.exists() or dest.read_bytes() != src.read_bytes():
            changes[dest] = src
    present = {p for d in (FILES, CRDS) if d.exists() for p in d.rglob("*") if p.is_file()}
    stale = sorted(present - set(wanted))
    current = json.loads(SCHEMA.read_text())
    schema = with_alert_names(with_policy_schema(current, policy_schema()), alert_names())
    schema = with_metadata_providers(schema, metadata_providers())
    schema_text = _dump(schema)
    if SCHEMA.read_text() != schema_text:
        changes[SCHEMA] = schema_text
    notes = [f"{p.relative_to(REPO)} differs from its source" for p in changes]
    notes += [f"{p.relative_to(REPO)} has no source any more" for p in stale]
    return notes, changes, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python charts/sync.py", description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a diff")
    args = parser.parse_args(argv)
    notes, changes, stale = differences()
    if args.check:
        for note in notes:
            print(f"{note}: run `make chart`", file=sys.stderr)
        return 1 if notes else 0
    for dest, content in changes.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, dest)
        else:
            dest.write_text(content)
    for path in stale:
        path.unlink()
    for note in notes:
        print(f"updated: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
