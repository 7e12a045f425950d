"""Bad files and flags as a new user gives them: one `error:` line on stderr, exit 2, nothing
on stdout and nothing created. Wrong-kind input says what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.common.test_yaml_input import laughs
from tests.conftest import REPO_ROOT
from tests.webhook.builders import container, make_pod
from tests.webhook.spans.fleet import node, pod
from webhook.cli.main import main as webhook_main

POLICIES = str(REPO_ROOT / "policies")
KUBECONFIGS = {"empty": "", "malformed": "clusters: 5\ncontexts: [1]\ncurrent-context: x\n"}


def one_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command; it must exit 2 with exactly one error line and print nothing else."""
    try:
        code = webhook_main(list(argv))
    except SystemExit as exit_:  # argparse's refusal of a flag
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == "" and "Traceback" not in err
    # argparse prints its usage before its one error line; validate its notes.
    errors = [line for line in err.splitlines() if not line.startswith(("note:", "usage:", " "))]
    assert len(errors) == 1, err
    return errors[0]


def write(tmp_path: Path, name: str, *docs: object) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(docs)) if docs else "")
    return str(path)


def listed(kind: str, *items: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


@pytest.fixture
def pod_file(tmp_path: Path) -> str:
    return write(tmp_path, "pod.yaml", make_pod(container(gpus=1), policy="inference"))


@pytest.mark.parametrize("kind", KUBECONFIGS)
@pytest.mark.parametrize("command", ["explain", "spans", "kueue-topology", "validate"])
def test_an_empty_or_malformed_kubeconfig(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pod_file: str,
    command: str,
    kind: str,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIGS[kind])
    first = {"explain": [pod_file, "--policies", POLICIES], "validate": [POLICIES]}
    line = one_error(capsys, command, *first.get(command, []), "--kubeconfig", str(config))
    says = "empty; expected a kubeconfig" if kind == "empty" else "clusters must be a list"
    assert line == f"error: kubeconfig {config}: {line.split(': ', 2)[2]}" and says in line


ROOTS = {
    "/": "must not be '/'",
    "/etc": "must be outside the system directory /etc",
    "/usr/local/cache": "must be outside the system directory /usr",
    "/var": "must not hold the system directory /var/lib/containerd",
    "/var/lib": "must not hold the system directory /var/lib/containerd",
    "/var/lib/kubelet/cache": "must be outside the system directory /var/lib/kubelet",
    "/lib64/cache": "must be outside the system directories /lib*",
    "/run/cache": "must be outside the system directory /run",
    "/root/cache": "must be outside the system directory /root",
    "/proc/1": "must be outside the system directory /proc",
    "/data/../etc": "must not contain '..'",
    "cache": "must be an absolute path",
}


@pytest.mark.parametrize(("root", "says"), ROOTS.items(), ids=ROOTS.keys())
@pytest.mark.parametrize("command", ["mutate", "explain", "serve"])
def test_a_cache_root_on_system_directories_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    pod_file: str,
    command: str,
    root: str,
    says: str,
) -> None:
    certs = tmp_path / "certs"
    argv = {
        "mutate": ["mutate", pod_file, "--policies", POLICIES],
        "explain": ["explain", pod_file, "--policies", POLICIES, "--nodes", pod_file],
        "serve": [
            "serve",
            "--policies",
            POLICIES,
            "--self-signed",
            "--self-signed-dir",
            str(certs),
        ],
    }[command]
    line = one_error(capsys, *argv, "--dataset-cache-root", root)
    assert f"--dataset-cache-root {root}: {says}" in line
    assert not certs.exists()


@pytest.mark.parametrize("image", ["", " ", "img:1 --privileged"])
@pytest.mark.parametrize("command", ["mutate", "serve"])
def test_an_empty_prefetch_image_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pod_file: str, command: str, image: str
) -> None:
    certs = tmp_path / "certs"
    argv = {
        "mutate": ["mutate", pod_file, "--policies", POLICIES],
        "serve": [
            "serve",
            "--policies",
            POLICIES,
            "--self-signed",
            "--self-signed-dir",
            str(certs),
        ],
    }[command]
    line = one_error(capsys, *argv, "--prefetch-image", image)
    assert f"--prefetch-image {image!r}: expected an image such as" in line
    assert not certs.exists()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("Bad_Name!", "name 'Bad_Name!' must consist of lowercase alphanumerics"),
        ("", "a name must not be empty"),
        ("a" * 250, "is longer than 253 characters"),  # its ResourceFlavor, NAME-flavor, is
        ("a.", "must consist of lowercase alphanumerics"),
    ],
)
def test_kueue_topology_refuses_an_invalid_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, says: str
) -> None:
    nodes = write(tmp_path, "nodes.yaml", listed("Node", node("w1")))
    line = one_error(capsys, "kueue-topology", "--nodes", nodes, "--name", name)
    assert line.startswith("topoplace-webhook kueue-topology: error: argument --name: ")
    assert says in line


def test_explain_refuses_a_nodes_file_without_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pod_file: str
) -> None:
    explain = ["explain", pod_file, "--policies", POLICIES, "--nodes"]
    empty = write(tmp_path, "empty.yaml")
    line = one_error(capsys, *explain, empty)
    assert line == f"error: {empty}: empty (expected `kubectl get ... -o yaml` output)"
    no_items = write(tmp_path, "none.yaml", listed("Node"))
    line = one_error(capsys, *explain, no_items)
    assert line == (
        f"error: --nodes {no_items}: holds no Node objects (expected `kubectl get nodes -o yaml` "
        "output)"
    )
    pods = write(tmp_path, "pods.yaml", listed("Pod", pod("p", "w1", {})))
    line = one_error(capsys, *explain, pods)
    assert line == (
        f"error: --nodes {pods}: holds Pod objects; expected Node objects (`kubectl get nodes "
        "-o yaml` output)"
    )
    scalars = write(tmp_path, "scalars.yaml", ["a", "b"])
    assert "object 1 is a list, not a Kubernetes object" in one_error(capsys, *explain, scalars)


def test_kueue_topology_and_validate_refuse_pods_given_as_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = write(tmp_path, "pods.yaml", listed("Pod", pod("p", "w1", {})))
    expected = f"error: --nodes {pods}: holds Pod objects; expected Node objects"
    assert one_error(capsys, "kueue-topology", "--nodes", pods).startswith(expected)
    assert one_error(capsys, "validate", POLICIES, "--nodes", pods).startswith(expected)


def test_spans_refuses_nodes_and_pods_swapped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = write(tmp_path, "nodes.yaml", listed("Node", node("w1"), node("w2")))
    pods = write(tmp_path, "pods.yaml", listed("Pod", pod("p", "w1", {})))
    line = one_error(capsys, "spans", "--nodes", pods, "--pods", nodes)
    assert line.startswith(f"error: --nodes {pods}: holds Pod objects; expected Node objects")
    line = one_error(capsys, "spans", "--nodes", nodes, "--pods", nodes)
    assert line.startswith(f"error: --pods {nodes}: holds Node objects; expected Pod objects")
    # No pods at all is a cluster with nothing running: an empty table, not an error.
    no_pods = write(tmp_path, "no-pods.yaml", listed("Pod"))
    assert webhook_main(["spans", "--nodes", nodes, "--pods", no_pods]) == 0


def test_mutate_refuses_a_pod_without_containers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = make_pod(policy="inference")
    bare["spec"]["containers"] = []
    path = write(tmp_path, "pod.yaml", bare)
    line = one_error(capsys, "mutate", path, "--policies", POLICIES)
    assert line == f"error: {path}: Pod/train-0: spec.containers must hold at least one container"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (laughs(9), "line 6: YAML aliases expand to more than 100,000 nodes"),
        ("kind: Pod\nspec: " + "[" * 150 + "]" * 150 + "\n", "line 2: nested deeper than 100"),
        ("kind: Pod\nspec: {containers: [\n", "invalid YAML"),
    ],
)
def test_mutate_reads_its_input_within_bounds(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    says: str,
) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(text)
    line = one_error(capsys, "mutate", str(path), "--policies", POLICIES)
    assert line.startswith(f"error: {path}: ") and says in line
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(text))
    line = one_error(capsys, "mutate", "-", "--policies", POLICIES)
    assert line.startswith("error: <stdin>: ") and says in line
