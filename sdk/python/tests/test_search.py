"""Client.optimize on the local stack: Optuna's real TPE sampler and median pruner over real TrainingJobs.

The example trainer's final loss over the learning rate (6 epochs, measured alone): 0.59 at 0.001, 0.33 at
0.01, 0.20 at 0.05, 0.18 at 0.1, 0.155 at 0.3, 0.150 at 1, 0.154 at 3, 0.19 at 10: lowest near 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import REPO, TRAINER_IMAGE
from kubernetes import client as k8s

import trainingjob
from trainingjob import Client, search

LR = optuna.distributions.FloatDistribution(1e-3, 10, log=True)


def template(epochs: int = 6, delay: str = "1s") -> dict[str, Any]:
    return {"apiVersion": "ml.example.com/v1", "kind": "TrainingJob", "metadata": {"name": "ignored"},
            "spec": {"numWorkers": 1, "gpusPerWorker": 0, "image": TRAINER_IMAGE, "command": ["trainer"],
                     "args": [f"--epoch-delay={delay}"], "checkpoint": {"enabled": True, "frequency": 1},
                     "hyperparameters": {"epochs": epochs, "batchSize": 64}}}


def test_search_prunes_and_finds_the_lowest_loss(client: Client) -> None:
    rows: list[search.TrialRow] = []
    result = client.optimize(
        template(), {"learningRate": LR, "additionalParams.note": optuna.distributions.CategoricalDistribution(["x"])},
        objective="loss", n_trials=8, parallelism=3, study_name="lr-search",
        sampler=optuna.samplers.TPESampler(seed=7, constant_liar=True),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1), callback=rows.append)

    print(result.table())
    states = [t.state for t in result.trials]
    assert len(result.trials) == 8 and "RUNNING" not in states, states
    assert states.count("PRUNED") >= 1, result.table()
    assert states.count("COMPLETE") >= 4, result.table()
    assert 0.3 <= result.best_params["learningRate"] <= 3, result.table()
    assert result.best_value is not None and result.best_value < 0.17
    assert result.best_job is not None and result.best_job.state == "Completed"
    assert result.best_job.hyperparameters["learningRate"] == result.best_params["learningRate"]
    assert result.best_job.hyperparameters["additionalParams"] == {"note": "x"}
    assert sorted(r.number for r in rows) == list(range(8)), "callback once per trial"
    jobs = {j.name: j for j in client.list(result.selector)}
    assert set(jobs) == {t.job for t in result.trials}
    for t in result.trials:
        job = jobs[t.job]
        assert job.labels[search.TRIAL_LABEL] == str(t.number)
        assert job.hyperparameters["learningRate"] == t.params["learningRate"]
        assert t.wall_seconds > 0 and t.worker_seconds > 0 and t.epochs > 0, t
        if t.state == "PRUNED":
            assert job.suspended and job.state in ("Suspended", "Running"), job.state
            assert t.epochs < 6 and t.reason.startswith("pruned at epoch")
        if t.state == "COMPLETE":
            assert job.state == "Completed" and t.value == job.metrics.loss


def test_failed_and_refused_trials(client: Client) -> None:
    """A trial whose TrainingJob fails is a failed trial with its reason; one the API server refuses too."""
    tmpl = template(epochs=3, delay="200ms")
    tmpl["spec"]["args"].append("--fail-at=0:2:1")
    tmpl["spec"]["failurePolicy"] = {"backoffLimit": 0}
    result = client.optimize(tmpl, {"learningRate": optuna.distributions.FloatDistribution(5, 20)}, n_trials=2,
                             sampler=optuna.samplers.RandomSampler(seed=1), study_name="failing")
    by_state = {t.state for t in result.trials}
    assert by_state == {"FAIL"}, result.table()
    reasons = sorted(t.reason for t in result.trials)
    assert any("exit code 1" in r for r in reasons) or any("less than or equal to 10" in r for r in reasons), reasons
    assert result.best_number is None and result.best_job is None

    tmpl["spec"]["numWorkers"] = 0  # the template itself is wrong: every trial is refused
    with pytest.raises(trainingjob.InvalidTrainingJob, match="spec.numWorkers"):
        client.optimize(tmpl, {"learningRate": LR}, n_trials=5, study_name="broken")


def test_keep_best_deletes_the_others(client: Client) -> None:
    result = client.optimize(template(epochs=2, delay="100ms"), {"learningRate": LR}, n_trials=3, parallelism=3,
                             keep="best", sampler=optuna.samplers.RandomSampler(seed=3), study_name="keep-best")
    assert [j.name for j in client.list(result.selector)] == [result.best_job.name]


def test_a_strangers_job_is_not_taken(client: Client) -> None:
    """A TrainingJob of a trial's name with the study's labels, made by someone else, is neither followed nor
    deleted: the trial takes another name and runs, the stranger's job stays. (Epochs of 1 s: a run shorter
    than the stack's progress interval may end before its loss is read.)"""
    storage = optuna.storages.InMemoryStorage()
    kwargs: dict[str, Any] = dict(study_name="owned", storage=storage, keep="none",
                                  sampler=optuna.samplers.RandomSampler(seed=3))
    first = client.optimize(template(epochs=2, delay="1s"), {"learningRate": LR}, n_trials=1, **kwargs)
    label = first.selector.split("=", 1)[1]
    prefix = first.trials[0].job.rsplit("-", 1)[0]
    stranger = client.train(TRAINER_IMAGE, ["trainer"], name=f"{prefix}-1", spec={"suspend": True},
                            labels={search.STUDY_LABEL: label, search.TRIAL_LABEL: "1"})

    second = client.optimize(template(epochs=2, delay="1s"), {"learningRate": LR}, n_trials=2, **kwargs)

    assert [t.state for t in second.trials] == ["COMPLETE", "COMPLETE"], second.table()
    assert second.trials[1].job.startswith(f"{prefix}-1-"), second.table()
    assert client.get(stranger.name).uid == stranger.uid and client.get(stranger.name).suspended


DRIVER = textwrap.dedent("""\
    import logging, sys
    sys.path.insert(0, {sdk!r})
    import optuna
    from trainingjob import Client, search
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    search.HEARTBEAT_SECONDS, search.STALE_AFTER = 1.0, 3.0
    c = Client(namespace={ns!r}, kubeconfig={kubeconfig!r})
    r = c.optimize({template!r}, {{"learningRate": optuna.distributions.FloatDistribution(1e-3, 10, log=True)}},
                   n_trials=5, parallelism=2, study_name="resumable", storage={storage!r},
                   sampler=optuna.samplers.TPESampler(seed=5), pruner=optuna.pruners.NopPruner())
    print(r.table())
    """)


@pytest.mark.parametrize("kill", ["SIGINT", "SIGKILL"])
def test_resume_after_the_driver_is_killed(client: Client, kubeconfig: str, tmp_path: Path, kill: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver dies with two trials running; run again with the SQLite storage, the study finishes with
    each trial run once: no TrainingJob twice, none orphaned."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(sdk=str(REPO / "sdk" / "python"), ns=client.namespace, kubeconfig=kubeconfig,
                                    template=template(epochs=8, delay="2s"), storage=storage))
    out = open(tmp_path / "driver.log", "w")
    # As from a terminal: a test run in the background (CI) inherits SIGINT ignored, and Python keeps it so.
    driver = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    # Two trials started and running (a loaded machine may show one Initializing still): not yet done.
    while sum(j.state in ("Initializing", "Running") and not j.done for j in client.list()) < 2 or \
            not any(j.state == "Running" for j in client.list()):
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()
        assert time.monotonic() < deadline, "two trials never ran"
        time.sleep(0.2)
    driver.send_signal(getattr(signal, kill))
    assert driver.wait(60) != 0
    out.close()
    log = (tmp_path / "driver.log").read_text()
    if kill == "SIGINT":
        assert "KeyboardInterrupt" in log and log.count("after an interrupt") == 2, log
        assert sum(j.suspended for j in client.list()) == 2, "Ctrl-C suspends the running trials"

    monkeypatch.setattr(search, "HEARTBEAT_SECONDS", 1.0)
    monkeypatch.setattr(search, "STALE_AFTER", 3.0)
    if kill == "SIGKILL":
        time.sleep(3.5)  # the killed driver's claims go stale
    result = client.optimize(template(epochs=8, delay="1s"), {"learningRate": LR}, n_trials=5, parallelism=2,
                             study_name="resumable", storage=storage, sampler=optuna.samplers.TPESampler(seed=5),
                             pruner=optuna.pruners.NopPruner())
    print(result.table())
    assert [t.number for t in result.trials] == list(range(5))
    assert {t.state for t in result.trials} == {"COMPLETE"}, result.table()
    jobs = client.list(result.selector)
    assert sorted(j.name for j in jobs) == sorted(t.job for t in result.trials), "one TrainingJob per trial"
    assert all(j.state == "Completed" and not j.suspended for j in jobs)
    assert {j.labels[search.TRIAL_LABEL] for j in jobs} == {str(n) for n in range(5)}
    assert all(j.restarts == 0 for j in jobs)
    assert client.list() == jobs or len(client.list()) == len(jobs), "nothing left unlabelled"
    study = optuna.load_study(study_name="resumable", storage=storage)
    assert len(study.trials) == 5


@pytest.mark.parametrize("spec, want", [
    ({"dataset": "s3://datasets/squad"}, {"cacheGroup": "study-1"}),
    ({"model": "hf://google-bert/bert-base-uncased", "inputs": {"endpoint": "http://minio:9000"}},
     {"endpoint": "http://minio:9000", "cacheGroup": "study-1"}),
    ({"dataset": "s3://datasets/squad", "inputs": {"cacheGroup": "mine"}}, {"cacheGroup": "mine"}),
    ({"dataset": "pvc://data/squad"}, None),  # mounted, not fetched: no cache
    ({"dataset": "mnist"}, None),
])
def test_trials_share_the_node_cache(spec: dict[str, Any], want: dict[str, Any] | None) -> None:
    """A trial with a fetched source joins the study's cache group (the shared fetch: tests/e2e TestInputsCacheGroup)."""
    tmpl = {"apiVersion": "ml.example.com/v1", "kind": "TrainingJob", "metadata": {"name": "t"}, "spec": spec}
    got = search.trial_spec(tmpl, {"learningRate": 0.1}, cache_group="study-1")
    assert got["spec"].get("inputs") == want
    assert "cacheGroup" not in (spec.get("inputs") or {}) or spec["inputs"]["cacheGroup"] == "mine", "template unchanged"


def test_a_diverged_trial_is_not_the_best(client: Client) -> None:
    """A trial whose loss turns to nan (a learning rate too high) fails instead of winning with its last finite
    loss; the enqueued trials (study.enqueue_trial) are the ones that run."""
    script = ("echo 'epoch 1/3 loss=0.1'; sleep 1.2; "
              "if grep -Eq '\"learningRate\": *10(,|$)' \"$TRAININGJOB_CONFIG\"; then l=nan; else l=0.3; fi; "
              "echo \"epoch 2/3 loss=$l\"; sleep 1.2; echo \"epoch 3/3 loss=$l\"; sleep 1.2")
    tmpl = template()
    tmpl["spec"].update(command=["sh", "-c", script], args=[], checkpoint={"enabled": False})
    study = optuna.create_study(study_name="diverged", storage=optuna.storages.InMemoryStorage())
    for lr in (10.0, 0.1):
        study.enqueue_trial({"learningRate": lr})
    result = client.optimize(tmpl, {"learningRate": LR}, n_trials=2, parallelism=2, study_name="diverged",
                             storage=study._storage, pruner=optuna.pruners.NopPruner())
    by_lr = {t.params["learningRate"]: t for t in result.trials}
    assert sorted(by_lr) == [0.1, 10.0], result.table()
    assert by_lr[10.0].state == "FAIL" and "nan" in by_lr[10.0].reason, result.table()
    assert by_lr[0.1].state == "COMPLETE" and result.best_params == {"learningRate": 0.1}, result.table()


def test_grid_sampler_and_a_suspended_template(client: Client) -> None:
    """Optuna's GridSampler stops the study when its grid is done; a template written suspended still runs. (In
    parallel, GridSampler may hand a point out twice: Optuna's own behaviour.)"""
    tmpl = template(epochs=2, delay="1s")
    tmpl["spec"]["suspend"] = True
    grid = optuna.samplers.GridSampler({"learningRate": [0.1, 1.0]})
    result = client.optimize(tmpl, {"learningRate": LR}, n_trials=5, parallelism=1, sampler=grid, study_name="grid",
                             timeout=120)
    assert sorted(t.params["learningRate"] for t in result.trials) == [0.1, 1.0], result.table()
    assert [t.state for t in result.trials] == ["COMPLETE", "COMPLETE"], result.table()
