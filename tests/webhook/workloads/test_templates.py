"""Pod templates found in the objects users apply."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from webhook.workloads.templates import pod_templates, replace_at


def template(name: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"t": name}}, "spec": {"containers": [{"name": name}]}}


CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("Pod", {"kind": "Pod", "spec": {"containers": []}}, [""]),
    ("Deployment", {"kind": "Deployment", "spec": {"template": template("a")}}, ["/spec/template"]),
    (
        "StatefulSet",
        {"kind": "StatefulSet", "spec": {"template": template("a")}},
        ["/spec/template"],
    ),
    ("DaemonSet", {"kind": "DaemonSet", "spec": {"template": template("a")}}, ["/spec/template"]),
    ("ReplicaSet", {"kind": "ReplicaSet", "spec": {"template": template("a")}}, ["/spec/template"]),
    ("Job", {"kind": "Job", "spec": {"template": template("a")}}, ["/spec/template"]),
    (
        "CronJob",
        {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": template("a")}}}},
        ["/spec/jobTemplate/spec/template"],
    ),
    (
        "JobSet",
        {
            "kind": "JobSet",
            "spec": {
                "replicatedJobs": [
                    {"name": "driver", "template": {"spec": {"template": template("d")}}},
                    {"name": "workers", "template": {"spec": {"template": template("w")}}},
                ]
            },
        },
        [
            "/spec/replicatedJobs/0/template/spec/template",
            "/spec/replicatedJobs/1/template/spec/template",
        ],
    ),
    (
        "PyTorchJob",
        {
            "kind": "PyTorchJob",
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template("m")},
                    "Worker": {"replicas": 3, "template": template("w")},
                }
            },
        },
        ["/spec/pytorchReplicaSpecs/Master/template", "/spec/pytorchReplicaSpecs/Worker/template"],
    ),
    (
        "TrainJob with an embedded template",
        {"kind": "TrainJob", "spec": {"podTemplateOverrides": [{"template": template("n")}]}},
        ["/spec/podTemplateOverrides/0/template"],
    ),
    (
        "LeaderWorkerSet",
        {
            "kind": "LeaderWorkerSet",
            "spec": {
                "leaderWorkerTemplate": {
                    "leaderTemplate": template("l"),
                    "workerTemplate": template("w"),
                }
            },
        },
        ["/spec/leaderWorkerTemplate/leaderTemplate", "/spec/leaderWorkerTemplate/workerTemplate"],
    ),
    ("TrainJob without one", {"kind": "TrainJob", "spec": {"trainer": {"numNodes": 2}}}, []),
    ("ConfigMap", {"kind": "ConfigMap", "data": {"a": "b"}}, []),
]


@pytest.mark.parametrize(("obj", "pointers"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_templates_found_where_pods_come_from(obj, pointers):
    found = pod_templates(obj)
    assert [t.pointer for t in found] == pointers
    for t in found:  # the pointer resolves to the very dict returned
        assert jsonpatch.JsonPointer(t.pointer).resolve(obj) is t.pod if t.pointer else t.pod is obj


def test_human_path_for_messages():
    obj = CASES[7][1]
    assert pod_templates(obj)[1].where == "spec.replicatedJobs[1].template.spec.template"


def test_replace_at_leaves_the_input_alone():
    obj = {"spec": {"replicatedJobs": [{"a": 1}, {"b": {"c": 2}}]}}
    new = replace_at(obj, ("spec", "replicatedJobs", 1, "b"), {"c": 3})
    assert new == {"spec": {"replicatedJobs": [{"a": 1}, {"b": {"c": 3}}]}}
    assert obj == {"spec": {"replicatedJobs": [{"a": 1}, {"b": {"c": 2}}]}}
