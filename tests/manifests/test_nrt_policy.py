"""The NodeResourceTopology CRD accepts exactly what the agent writes, and the agent's
ValidatingAdmissionPolicy keeps it to its own node's object (evaluated with cel-python as the
API server evaluates it; see test_node_policy.py for the scheme)."""

from __future__ import annotations

from typing import Any

import celpy
import jsonschema
import pytest

from agent.nrt.body import NodeRef, topology_body
from agent.nrt.zones import NumaFacts, compute_zones
from agent.sources.kubelet import KubeletFiles
from agent.sources.podresources import Allocatable, DeviceAssignment
from common.node_resource_topology import GROUP, KIND, PLURAL, VERSION
from tests.manifests.rendered import render
from tests.manifests.test_node_policy import NODE_NAME_EXTRA, _program, _true, agent_username


def _crd() -> dict[str, Any]:
    return render().one("CustomResourceDefinition", f"{PLURAL}.{GROUP}")


def _json_schema(schema: Any) -> Any:
    """OpenAPI v3 as the API server reads it → JSON Schema (x-kubernetes-* only annotate)."""
    if isinstance(schema, dict):
        return {k: _json_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
    if isinstance(schema, list):
        return [_json_schema(v) for v in schema]
    return schema


def _body(name: str = "dgx-a") -> dict[str, Any]:
    facts = NumaFacts(cpus={0: frozenset(range(4)), 1: frozenset(range(4, 8))},
                      memory_bytes={0: 1 << 34, 1: 1 << 34},
                      distances={0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}})  # fmt: skip
    offered = Allocatable(
        devices=(DeviceAssignment("nvidia.com/gpu", ("0", "1"), (0,)),),
        cpu_ids=tuple(range(1, 8)),
        memory=(),
    )
    config = KubeletFiles(topology_manager_policy="single-numa-node",
                           topology_manager_scope="container")  # fmt: skip
    return topology_body(NodeRef(name, "uid-1"), compute_zones(facts, offered, ()), config)


def test_the_crd_is_the_apis_v1alpha2_cluster_scoped_with_its_short_name() -> None:
    crd = _crd()
    # The API server refuses a CRD in a *.k8s.io group without an approval annotation.
    assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("https://")
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == (GROUP, "Cluster", KIND)
    assert spec["names"]["shortNames"] == ["node-res-topo"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)


def test_the_crd_schema_accepts_what_the_agent_writes_and_refuses_garbage() -> None:
    (version,) = _crd()["spec"]["versions"]
    schema = _json_schema(version["schema"]["openAPIV3Schema"])
    jsonschema.validate(_body(), schema)
    broken = _body()
    broken["zones"][0]["resources"][0]["available"] = "four"
    with pytest.raises(jsonschema.ValidationError, match="four"):
        jsonschema.validate(broken, schema)
    del broken["zones"]
    with pytest.raises(jsonschema.ValidationError, match="zones"):
        jsonschema.validate(broken, schema)


def admit(obj: dict[str, Any], *, node: str | None, operation: str = "CREATE") -> list[str]:
    """Messages of the failed validations for the agent writing `obj` from `node`."""
    policy = render().one("ValidatingAdmissionPolicy", "topoplace-agent-nrt-scope")["spec"]
    user: dict[str, Any] = {"username": agent_username(), "groups": []}
    if node is not None:
        user["extra"] = {NODE_NAME_EXTRA: [node]}
    activation = {
        "object": celpy.json_to_cel(obj),
        "request": celpy.json_to_cel({"operation": operation, "userInfo": user}),
    }
    assert all(_true(_program(c["expression"]), activation) for c in policy["matchConditions"])
    return [
        v["message"]
        for v in policy["validations"]
        if not _true(_program(v["expression"]), activation)
    ]


def test_the_agent_writes_its_own_nodes_object() -> None:
    assert admit(_body("dgx-a"), node="dgx-a") == []
    assert admit(_body("dgx-a"), node="dgx-a", operation="UPDATE") == []


def test_the_agent_may_not_write_another_nodes_object() -> None:
    (message,) = admit(_body("dgx-b"), node="dgx-a")
    assert "Node it runs on" in message


def test_the_object_must_be_owned_by_its_node_alone() -> None:
    obj = _body("dgx-a")
    obj["metadata"]["ownerReferences"][0]["name"] = "dgx-b"
    assert admit(obj, node="dgx-a") != []
    obj["metadata"]["ownerReferences"] = []
    assert admit(obj, node="dgx-a") != []


def test_policy_matches_the_crds_resource() -> None:
    policy = render().one("ValidatingAdmissionPolicy", "topoplace-agent-nrt-scope")["spec"]
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == ([GROUP], [PLURAL])
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
