"""docs/kueue.md stays true: its Job is valid, and the requests it says Kueue counts are the
ones `mutate` (and so the webhook) gives that Job's template."""

from __future__ import annotations

import yaml

from tests.conftest import REPO_ROOT
from tests.docs.markdown import REPO, fenced_blocks
from tests.kube import assert_valid, parse_quantity
from tests.webhook.builders import SETTINGS
from webhook.policy.loader import load_policy_dir
from webhook.vocabulary import POLICY_LABEL
from webhook.workloads.mutation import mutate_workload

PAGE = REPO / "docs" / "kueue.md"


def test_the_job_on_the_page_gets_the_requests_the_page_states() -> None:
    (job,) = [
        doc
        for block in fenced_blocks(PAGE)
        if block.lang == "yaml"
        for doc in yaml.safe_load_all(block.text)
        if doc and doc.get("kind") == "Job"
    ]
    assert_valid(job)
    policies = load_policy_dir(REPO_ROOT / "policies")
    result = mutate_workload(job, "ml-team", policies, SETTINGS)
    template = result.obj["spec"]["template"]
    assert template["metadata"]["labels"][POLICY_LABEL] == job["metadata"]["labels"][POLICY_LABEL]
    (trainer,) = template["spec"]["containers"]
    requests = {k: parse_quantity(v) for k, v in trainer["resources"]["requests"].items()}
    text = PAGE.read_text()
    assert "`cpu: 24`, `memory: 192Gi`" in text and job["spec"]["parallelism"] == 2
    assert requests["cpu"] == 24 and requests["memory"] == parse_quantity("192Gi")
