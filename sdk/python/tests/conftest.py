"""Fixtures: the local stack (a real kube-apiserver, etcd, kube-controller-manager, kube-scheduler, two process
nodes and the operator, started once by bin/trainingjob-local) and a namespace per test.

TRAININGJOB_TEST_KUBECONFIG uses a running cluster instead. Otherwise the stack needs the repository's
bin/ (make build) and the control plane's binaries (KUBEBUILDER_ASSETS, else hack/testbin.sh builds them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "sdk" / "python"))

from trainingjob import Client  # noqa: E402

#: The example trainer's image name: on process nodes its command runs from bin/.
TRAINER_IMAGE = "ghcr.io/trainingjob-operator/example-trainer:v0.1.0"


def _assets() -> str:
    if os.environ.get("KUBEBUILDER_ASSETS"):
        return os.environ["KUBEBUILDER_ASSETS"]
    out = subprocess.run([str(REPO / "hack" / "testbin.sh"), "etcd", "kube-apiserver", "kube-controller-manager",
                          "kube-scheduler", "kubectl"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if os.environ.get("TRAININGJOB_TEST_KUBECONFIG"):
        yield os.environ["TRAININGJOB_TEST_KUBECONFIG"]
        return
    up = REPO / "bin" / "trainingjob-local"
    if not up.exists():
        pytest.fail(f"{up} is missing: run make build (make test-python does)")
    state = tmp_path_factory.mktemp("stack")
    log = open(state / "up.log", "wb")
    proc = subprocess.Popen([str(up), "up", "--assets", _assets(), "--path", str(REPO / "bin"), "--state-dir",
                             str(state), "--nodes", "2", "--progress-interval", "1s"], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while b"are up" not in (state / "up.log").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the local stack did not start:\n" + (state / "up.log").read_text(errors="replace"))
            time.sleep(0.5)
        yield str(state / "kubeconfig")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture
def namespace(kubeconfig: str) -> Iterator[str]:
    c = Client(kubeconfig=kubeconfig)
    name = f"sdk-{uuid.uuid4().hex[:8]}"
    core = k8s.CoreV1Api(c.api_client)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def client(kubeconfig: str, namespace: str) -> Client:
    return Client(namespace=namespace, kubeconfig=kubeconfig)
