"""The client against the local stack's real API server, operator and process nodes."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, TRAINER_IMAGE
from kubernetes import client as k8s

import trainingjob
from trainingjob import Client, TrainingJob
from trainingjob.client import _lines


def trainer(client: Client, name: str, *args: str, workers: int = 1, epochs: int = 4, lr: float = 0.5,
            spec: dict[str, Any] | None = None) -> TrainingJob:
    return client.train(TRAINER_IMAGE, ["trainer"], ["--epoch-delay=300ms", *args], name=name, num_workers=workers,
                        gpus_per_worker=0, hyperparameters={"learning_rate": lr, "epochs": epochs}, spec=spec)


def test_train_wait_logs_events(client: Client) -> None:
    views: list[TrainingJob] = []
    created = trainer(client, "first", workers=2, epochs=4)
    assert created.name == "first" and created.namespace == client.namespace and created.uid

    done = client.wait("first", timeout=120, callback=views.append, show_progress=True)

    assert done.state == "Completed", done
    assert (done.reason, done.epoch, done.total_epochs, done.progress) == ("Succeeded", 4, 4, "100%")
    assert done.metrics.loss is not None and 0 < done.metrics.loss < 1
    assert done.goodput is not None and done.goodput.productive_seconds > 0
    assert done.started is not None and done.finished is not None and done.created is not None
    assert done.hyperparameters == {"learningRate": 0.5, "epochs": 4}
    assert any(v.state == "Running" for v in views), [v.state for v in views]
    lines = list(client.logs("first"))
    assert lines[-1] == "training complete: 4 epochs on 2 ranks", lines[-3:]
    reasons = [e.reason for e in client.events("first")]
    assert "Completed" in reasons, reasons
    assert [j.name for j in client.list()] == ["first"]
    assert client.list(selector={"team": "nobody"}) == []
    client.delete("first")
    with pytest.raises(trainingjob.NotFound):
        client.get("first")
    client.delete("first", missing_ok=True)


def test_create_from_yaml_text_file_and_dict(client: Client, tmp_path: Path) -> None:
    manifest = textwrap.dedent(f"""\
        apiVersion: ml.example.com/v1
        kind: TrainingJob
        metadata:
          name: from-text
          labels: {{team: a}}
        spec:
          numWorkers: 1
          gpusPerWorker: 0
          image: {TRAINER_IMAGE}
          command: [trainer]
          hyperparameters: {{epochs: 2, learningRate: 0.1}}
        """)
    assert client.create(manifest).name == "from-text"
    path = tmp_path / "job.yaml"
    path.write_text(manifest.replace("from-text", "from-file"))
    assert client.create(str(path)).name == "from-file"
    doc = yaml.safe_load(manifest.replace("from-text", "from-dict"))
    assert client.create(doc).labels == {"team": "a"}
    assert doc["metadata"].get("namespace") is None, "create must not change the caller's dict"
    assert {j.name for j in client.list("team=a")} == {"from-text", "from-file", "from-dict"}
    with pytest.raises(ValueError, match="one TrainingJob document"):
        client.create(manifest + "---\n" + manifest)
    with pytest.raises(ValueError, match="not a TrainingJob"):
        client.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})


def test_generated_name_and_kwargs(client: Client) -> None:
    job = client.train(TRAINER_IMAGE, ["trainer"], num_workers=1, gpus_per_worker=0,
                       hyperparameters={"batch_size": 32, "epochs": 1, "dropout": 0.1, "use_amp": True},
                       env={"NCCL_DEBUG": "INFO"}, checkpoint=True, labels={"team": "b"})
    assert job.name.startswith("train-")
    spec = job.raw["spec"]
    assert spec["hyperparameters"] == {"batchSize": 32, "epochs": 1,
                                       "additionalParams": {"dropout": "0.1", "use_amp": "true"}}
    assert spec["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}]
    assert spec["checkpoint"]["enabled"] is True


@pytest.mark.parametrize("spec, field, words", [
    ({"hyperparameters": {"learningRate": 50}}, "spec.hyperparameters.learningRate", "less than or equal to 10"),
    ({"numWorkers": 0}, "spec.numWorkers", "greater than or equal to 1"),
    ({"env": [{"name": "RANK", "value": "3"}]}, "spec.env", "must not set a variable"),
])
def test_refusal_carries_the_servers_message_and_field(client: Client, spec: dict[str, Any], field: str,
                                                       words: str) -> None:
    body = {"numWorkers": 1, "image": TRAINER_IMAGE, "command": ["trainer"], **spec}
    with pytest.raises(trainingjob.InvalidTrainingJob) as err:
        client.create({"metadata": {"name": "refused"}, "spec": body})
    assert field in err.value.fields, err.value.causes
    assert words in err.value.message and field in err.value.message
    assert str(err.value) == err.value.message
    with pytest.raises(trainingjob.InvalidTrainingJob):
        client.create({"metadata": {"name": "Not_A_DNS_Name"}, "spec": {"numWorkers": 1, "image": "x"}})


def test_already_exists(client: Client) -> None:
    trainer(client, "twice", spec={"suspend": True})
    with pytest.raises(trainingjob.AlreadyExists):
        trainer(client, "twice")


def test_missing_namespace_and_job(kubeconfig: str) -> None:
    c = Client(namespace="no-such-namespace-here", kubeconfig=kubeconfig)
    with pytest.raises(trainingjob.NamespaceNotFound, match="no-such-namespace-here"):
        c.train(TRAINER_IMAGE, ["trainer"], name="x")
    with pytest.raises(trainingjob.NotFound, match='"nothing" not found'):
        c.get("nothing")
    with pytest.raises(trainingjob.NotFound):
        c.wait("nothing", timeout=5)


def test_unreachable_cluster(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
           "users": [{"name": "u", "user": {"token": "t"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    c = Client(kubeconfig=str(path))
    assert c.namespace == "team-a"
    with pytest.raises(trainingjob.ClusterUnreachable, match=f"127.0.0.1:{port}"):
        c.list()


def test_a_server_that_never_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An API server that accepts connections and never answers: each call ends with ClusterUnreachable after
    the request timeout (kubectl's 32 s; 2 s here) instead of hanging; wait's own timeout bounds it sooner."""
    monkeypatch.setattr(trainingjob.client, "REQUEST_TIMEOUT", (1, 2))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepted by the kernel, never read
    try:
        port = listener.getsockname()[1]
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
               "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
               "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
               "users": [{"name": "u", "user": {"token": "t"}}]}
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        c = Client(kubeconfig=str(path))
        c.api_client.configuration.retries = 0
        for call in (lambda: c.get("x"), lambda: c.list(), lambda: c.wait("x", timeout=1)):
            start = time.monotonic()
            with pytest.raises(trainingjob.ClusterUnreachable):
                call()
            assert time.monotonic() - start < 20
    finally:
        listener.close()


def test_wait_raises_on_failure_naming_state_and_message(client: Client) -> None:
    trainer(client, "exits", "--fail-at=0:2:1", epochs=5)
    with pytest.raises(trainingjob.JobFailed) as err:
        client.wait("exits", timeout=120)
    assert err.value.job.state == "Failed"
    assert "is Failed: " in str(err.value) and err.value.job.message in str(err.value)
    assert "exit code 1" in err.value.job.message, err.value.job.message


def test_wait_timeout_and_other_states(client: Client) -> None:
    trainer(client, "held", spec={"suspend": True})
    with pytest.raises(trainingjob.WaitTimeout):
        client.wait("held", timeout=3)
    assert client.wait("held", until=("Suspended",), timeout=60).state == "Suspended"
    client.suspend("held", suspended=False)
    assert client.wait("held", until=("Running", "Completed"), timeout=120).state in ("Running", "Completed")


def test_wait_sees_deletion(client: Client) -> None:
    trainer(client, "goes", spec={"suspend": True})
    threading.Timer(2, client.delete, args=("goes",)).start()
    with pytest.raises(trainingjob.JobDeleted):
        client.wait("goes", timeout=60)


@pytest.mark.parametrize("strategy", ["InPlace", "Recreate"])
def test_logs_follow_across_a_restart(client: Client, strategy: str) -> None:
    """Rank 0 is killed as epoch 3 starts; following its log shows both runs of its trainer, each once."""
    name = f"follow-{strategy.lower()}"
    trainer(client, name, "--fail-at=0:3:137", workers=2, epochs=5,
            spec={"checkpoint": {"enabled": True, "frequency": 1},
                  "failurePolicy": {"backoffLimit": 2, "restartStrategy": strategy}})
    lines = list(client.logs(name, rank=0, follow=True))
    done = client.get(name)
    assert (done.state, done.attempt) == ("Completed", 1), (done.state, done.attempt, done.message)

    def count(text: str) -> int:
        return sum(text in line for line in lines)

    assert (count("epoch 1/5 loss="), count("injected fault at epoch 3"), count("resuming from"),
            count("epoch 5/5 loss="), count("training complete")) == (1, 1, 1, 1, 1), lines


def test_logs_skip_a_pod_that_only_carries_the_labels(client: Client) -> None:
    trainer(client, "lonely", spec={"suspend": True})
    core = k8s.CoreV1Api(client.api_client)
    core.create_namespaced_pod(client.namespace, k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="impostor", labels={"ml.example.com/trainingjob-name": "lonely",
                                                           "batch.kubernetes.io/job-completion-index": "0"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="trainer", image=TRAINER_IMAGE,
                                                       command=["sh", "-c", "echo forged; sleep 30"])])))
    with pytest.raises(trainingjob.TrainingJobError, match="has no pod of rank 0"):
        list(client.logs("lonely"))


def test_log_lines_are_bounded() -> None:
    big = b"x" * (300 << 10)
    out = list(_lines([b"a\nb", b"c\n", big[: 100 << 10], big, b"\nend"]))
    assert out[:2] == ["a", "bc"] and len(out[2]) == trainingjob.client.MAX_LOG_LINE and out[3] == "end"


def test_hyperparameters_mapping() -> None:
    assert trainingjob.hyperparameters({"learning_rate": 0.1, "learningRate": 0.2, "optimizer": "adam",
                                        "layers": 3, "additionalParams": {"a": 1}}) == {
        "learningRate": 0.2, "optimizer": "adam", "additionalParams": {"layers": "3", "a": "1"}}


def test_pip_install(tmp_path: Path) -> None:
    """pip install ./sdk/python works offline beside the system's kubernetes and PyYAML."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                    str(REPO / "sdk" / "python")], check=True, cwd=tmp_path)
    out = subprocess.run([str(py), "-c", "import trainingjob, os; print(trainingjob.__version__, "
                          "os.path.dirname(trainingjob.__file__))"], check=True, capture_output=True, text=True,
                         cwd=tmp_path).stdout.split()
    assert out[0] == trainingjob.__version__ and str(venv) in out[1]
