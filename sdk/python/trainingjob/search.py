"""A hyperparameter search of TrainingJobs with Optuna: each trial one TrainingJob, pruned from its live status.

The script in the template's image needs nothing: the trial's values reach it through spec.hyperparameters
(config.json, the environment, its arguments, as always), and the objective is what the operator reads from
its output or metrics endpoint into status.metrics.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import secrets
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import errors
from .client import _HYPERPARAMETER_FIELDS as _FIELDS
from .client import GROUP, PLURAL, VERSION, _load_manifest, _training_job, hyperparameters
from .types import TrainingJob

if TYPE_CHECKING:
    import optuna

    from .client import Client

log = logging.getLogger("trainingjob.search")

#: Labels and annotations on a trial's TrainingJob.
STUDY_LABEL = "ml.example.com/study"
TRIAL_LABEL = "ml.example.com/trial"
STUDY_NAME_ANNOTATION = "ml.example.com/study-name"
#: A random value kept in the study's storage: a TrainingJob of a trial's name is the trial's only when it
#: carries it (labels anyone in the namespace can copy).
TOKEN_ANNOTATION = "ml.example.com/trial-token"

#: Keys of the trial's user attributes in the study's storage.
ATTR_JOB, ATTR_UID, ATTR_DRIVER, ATTR_HEARTBEAT = "trainingjob.name", "trainingjob.uid", "trainingjob.driver", "trainingjob.heartbeat"
ATTR_REASON, ATTR_INTERRUPTED, ATTR_TOKEN = "trainingjob.reason", "trainingjob.interrupted", "trainingjob.token"
ATTR_EPOCHS, ATTR_GPU_S, ATTR_WORKER_S, ATTR_WALL_S = ("trainingjob.epochs", "trainingjob.gpuSeconds",
                                                       "trainingjob.workerSeconds", "trainingjob.wallSeconds")
STUDY_ATTR_ID = "trainingjob.studyID"

#: A driver renews the heartbeat of its trials this often; a trial whose heartbeat is older than
#: STALE_AFTER has no driver, and the next driver of the study adopts it.
HEARTBEAT_SECONDS = 20.0
STALE_AFTER = 3 * HEARTBEAT_SECONDS
#: How long an ended trial's TrainingJob is given for the StatusController to settle its status.
SETTLE_SECONDS = 10.0
#: Creation failures in a row after which the template, not a trial's values, is taken to be wrong.
MAX_CREATE_FAILURES = 3

_MAXIMIZE = re.compile(r"acc|auc|f1|precision|recall|map|ndcg|r2|score|reward|iou", re.IGNORECASE)
_KEEP = ("all", "best", "none")


@dataclass
class TrialRow:
    """One trial of the study as the result's table shows it."""

    number: int
    params: dict[str, Any]
    value: float | None
    state: str
    epochs: int
    gpu_seconds: float
    worker_seconds: float
    wall_seconds: float
    job: str
    reason: str = ""


@dataclass
class SearchResult:
    """What optimize found: the best trial, its TrainingJob (None when deleted) and every trial."""

    study: Any
    best_number: int | None
    best_value: float | None
    best_params: dict[str, Any]
    best_job: TrainingJob | None
    trials: list[TrialRow] = field(default_factory=list)
    #: The label selector of the study's TrainingJobs: kubectl get tj -l <selector>.
    selector: str = ""

    def table(self) -> str:
        """The trials as a plain-text table, best marked with "*"."""
        names = sorted({k for t in self.trials for k in t.params})
        head = ["#", *names, "objective", "state", "epochs", "gpu_s", "worker_s", "wall_s", "trainingjob"]
        rows = [head]
        for t in self.trials:
            mark = "*" if t.number == self.best_number else ""
            rows.append([f"{t.number}{mark}", *(_fmt(t.params.get(n)) for n in names), _fmt(t.value), t.state,
                         str(t.epochs), f"{t.gpu_seconds:.0f}", f"{t.worker_seconds:.0f}", f"{t.wall_seconds:.0f}",
                         t.job])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

    def __str__(self) -> str:
        return self.table()


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def optimize(client: Client, template: Mapping[str, Any] | str | os.PathLike[str], search_space: Mapping[str, Any], *,
             objective: str = "loss", direction: str | None = None, n_trials: int = 10, parallelism: int = 1,
             sampler: optuna.samplers.BaseSampler | None = None, pruner: optuna.pruners.BasePruner | None = None,
             study_name: str | None = None, storage: str | optuna.storages.BaseStorage | None = None,
             keep: str = "all", on_interrupt: str = "stop", timeout: float | None = None,
             namespace: str | None = None, callback: Callable[[TrialRow], None] | None = None) -> SearchResult:
    """Searches hyperparameters: each trial one TrainingJob made from template with the trial's values.

    search_space maps hyperparameter names to Optuna distributions: the API's fields (learningRate or
    learning_rate, batchSize, epochs, warmupSteps, gradientAccumulationSteps, optimizer, mixedPrecision),
    "additionalParams.<key>", or any other key, which goes to additionalParams. objective is a status.metrics
    field (loss, accuracy) or a custom metric's name (eval-logloss); direction defaults to maximize for names
    like accuracy, auc, f1, score, and to minimize otherwise.

    n_trials is the study's size: trials already in a persistent storage count, so running the same study
    again finishes it. parallelism TrainingJobs run at once (a trial Kueue queues waits: it is reported to
    only on the epochs it ran). Each new epoch in the status is reported to the pruner (median by default);
    a pruned trial's TrainingJob is suspended (workers and quota freed, checkpoint kept). keep says what stays
    of finished trials' TrainingJobs: all, best, or none. On Ctrl-C (or SIGTERM), on_interrupt "stop"
    suspends the running trials' TrainingJobs and "keep" leaves them running; either way the trials stay
    running in the study and a later call with the same study and storage picks them up (resuming a
    suspended one) instead of starting them again.
    """
    try:
        import optuna
    except ImportError as exc:
        raise ImportError("optimize needs optuna: pip install 'trainingjob[optuna]' (Debian: python3-optuna)") from exc
    if keep not in _KEEP:
        raise ValueError(f"keep must be one of {', '.join(_KEEP)}, not {keep!r}")
    if on_interrupt not in ("stop", "keep"):
        raise ValueError(f"on_interrupt must be stop or keep, not {on_interrupt!r}")
    if n_trials < 1 or parallelism < 1:
        raise ValueError("n_trials and parallelism must be at least 1")
    base = _training_job(_load_manifest(template))
    if base.get("spec") is not None and not isinstance(base["spec"], Mapping):
        raise ValueError("the template's spec is not a mapping")
    dists = _distributions(search_space, optuna)
    direction = direction or ("maximize" if _MAXIMIZE.search(objective) else "minimize")
    if sampler is None:
        sampler = optuna.samplers.TPESampler(constant_liar=parallelism > 1)
    if pruner is None:
        pruner = optuna.pruners.MedianPruner()
    study = optuna.create_study(storage=storage, sampler=sampler, pruner=pruner, study_name=study_name,
                                direction=direction, load_if_exists=True)
    search = _Search(client, study, base, dists, objective, n_trials, parallelism, keep,
                     namespace or base.get("metadata", {}).get("namespace") or client.namespace, callback, timeout, optuna)
    with _sigterm_as_interrupt():
        try:
            search.run()
        except KeyboardInterrupt:
            search.interrupt(stop=on_interrupt == "stop")
            raise
    search.apply_keep()
    return search.result()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, while the search runs (main thread only)."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _distributions(space: Mapping[str, Any], optuna: Any) -> dict[str, Any]:
    out = {}
    for name, dist in space.items():
        if not isinstance(dist, optuna.distributions.BaseDistribution):
            raise TypeError(f"search_space[{name!r}] must be an Optuna distribution (FloatDistribution, "
                            f"IntDistribution, CategoricalDistribution), not {type(dist).__name__}")
        path = _path(name)  # fails on a key that cannot be placed
        key = name.removeprefix("hyperparameters.")
        near = [f for f in _FIELDS if f.lower() == key.lower().replace("_", "")]
        if path[0] == "additionalParams" and near:
            log.warning("search space key %r is no field of spec.hyperparameters: it goes to additionalParams as a "
                        "string (did you mean %r?)", name, near[0])
        out[name] = dist
    return out


def _path(name: str) -> tuple[str, ...]:
    """Where a searched value goes under spec.hyperparameters."""
    key = name.removeprefix("hyperparameters.")
    if key in ("", "additionalParams"):
        raise ValueError(f"search space key {name!r} names no hyperparameter: use additionalParams.<key>")
    if key.startswith("additionalParams."):
        sub = key.removeprefix("additionalParams.")
        if not sub:
            raise ValueError(f"search space key {name!r} names no additional parameter")
        return ("additionalParams", sub)
    placed = hyperparameters({key: 0})
    if "additionalParams" in placed:
        return ("additionalParams", key)
    return (next(iter(placed)),)


#: The schemes of the sources the operator fetches into the input cache (pvc:// and nfs:// are mounted).
FETCHED = ("s3://", "gs://", "hf://", "https://", "http://")


def trial_spec(template: Mapping[str, Any], params: Mapping[str, Any], cache_group: str = "") -> dict[str, Any]:
    """The template with a trial's values in spec.hyperparameters (additionalParams as strings).

    With cache_group and a fetched model or dataset source, spec.inputs.cacheGroup is cache_group unless the
    template names one: the trials share each node's copy of their sources (the PerNode cache).
    """
    obj = copy.deepcopy(dict(template))
    spec = obj["spec"] = dict(obj.get("spec") or {})
    spec.pop("suspend", None)  # a trial runs; the pruner suspends it
    if cache_group and any(str(spec.get(k) or "").startswith(FETCHED) for k in ("model", "dataset")):
        inputs = spec.get("inputs") or {}
        inputs.setdefault("cacheGroup", cache_group)
        spec["inputs"] = inputs
    hp = spec.setdefault("hyperparameters", {}) or {}
    obj["spec"]["hyperparameters"] = hp
    for name, value in params.items():
        path = _path(name)
        if path[0] == "additionalParams":
            hp.setdefault("additionalParams", {})[path[1]] = hyperparameters({path[1]: value})["additionalParams"][path[1]]
        else:
            hp[path[0]] = value
    return obj


def _token(job: TrainingJob) -> str | None:
    """The trial token a TrainingJob carries (TOKEN_ANNOTATION)."""
    return job.raw["metadata"].get("annotations", {}).get(TOKEN_ANNOTATION)


def _label_value(s: str, limit: int) -> str:
    v = re.sub(r"[^a-z0-9-]+", "-", s.lower()).strip("-")[:limit].strip("-")
    return v or "study"


@dataclass
class _Run:
    """A trial this driver follows: its Optuna trial and TrainingJob."""

    trial: Any
    job: str
    uid: str = ""
    last_epoch: int = 0
    #: When the trial's TrainingJob was first seen ended but not yet settled (its last metrics may follow).
    unsettled_since: float | None = None


class _Search:
    def __init__(self, client: Client, study: Any, template: dict[str, Any], dists: dict[str, Any], objective: str,
                 n_trials: int, parallelism: int, keep: str, namespace: str,
                 callback: Callable[[TrialRow], None] | None, timeout: float | None, optuna: Any):
        self.c, self.study, self.template, self.dists = client, study, template, dists
        self.objective, self.n_trials, self.parallelism, self.keep = objective, n_trials, parallelism, keep
        self.ns, self.callback, self.optuna = namespace, callback, optuna
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.driver = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.active: dict[int, _Run] = {}
        self.create_failures = 0
        self.stopped = False
        self.last_beat = 0.0
        sid = study.user_attrs.get(STUDY_ATTR_ID)
        if not sid:
            sid = secrets.token_hex(3)
            study.set_user_attr(STUDY_ATTR_ID, sid)
        # The study's label value and the prefix of its TrainingJobs' names: its name and a random ID kept in
        # the storage, so two studies of one name (two in-memory runs) never take each other's jobs.
        self.label = f"{_label_value(study.study_name, 30)}-{sid}"
        self.prefix = f"{_label_value(study.study_name, 20)}-{sid}"
        template.setdefault("metadata", {})

    # --- the loop --------------------------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            others = self.adopt()
            while (len(self.active) < self.parallelism and self.launched() < self.n_trials and not self.expired()
                   and not self.stopped):
                self.launch()
            if not self.active and not others:
                return
            if not self.active:  # trials another driver follows (or did, until its heartbeat goes stale)
                if self.expired():
                    return
                time.sleep(min(5.0, HEARTBEAT_SECONDS))
                continue
            if self.expired():
                log.info("search timed out; stopping %d running trials", len(self.active))
                self.interrupt(stop=True, reason="the search's timeout")
                return
            self.follow()

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def launched(self) -> int:
        """The study's trials so far, less the enqueued ones (study.enqueue_trial) that ask will hand out."""
        return len([t for t in self.study.get_trials(deepcopy=False) if t.state != self.optuna.trial.TrialState.WAITING])

    def follow(self) -> None:
        """Reads the study's TrainingJobs (a list, then the watch) until a trial ends or HEARTBEAT_SECONDS pass."""
        listed = self.c._call(self.c._custom.list_namespaced_custom_object, GROUP, VERSION, self.ns, PLURAL,
                              label_selector=f"{STUDY_LABEL}={self.label}")
        ended = False
        for obj in listed["items"]:
            ended |= self.observe("MODIFIED", obj)
        seen = {o["metadata"]["name"] for o in listed["items"]}
        for number, run in list(self.active.items()):
            if run.job not in seen and run.uid:
                ended |= self.end_failed(number, run, "its TrainingJob was deleted")
        if ended:
            return
        deadline = time.monotonic() + HEARTBEAT_SECONDS
        if self.deadline is not None:
            deadline = min(deadline, self.deadline)
        try:
            for kind, obj, _ in self.c._watch(self.ns, listed["metadata"]["resourceVersion"], deadline,
                                              label_selector=f"{STUDY_LABEL}={self.label}"):
                if self.observe(kind, obj):
                    break
        except Exception as exc:  # a gone resourceVersion: the next round lists again
            if type(exc).__name__ != "_Expired":
                raise
        self.heartbeat()

    def observe(self, kind: str, obj: dict[str, Any]) -> bool:
        """Acts on one view of a trial's TrainingJob; True when its trial ended."""
        job = TrainingJob.from_dict(obj)
        try:
            number = int(job.labels.get(TRIAL_LABEL, ""))
        except ValueError:
            return False
        run = self.active.get(number)
        if run is None or job.name != run.job or (run.uid and job.uid != run.uid):
            return False  # not a trial this driver follows (a stranger's labels, an earlier job of the name)
        if kind == "DELETED":
            return self.end_failed(number, run, "its TrainingJob was deleted")
        if job.done and not job.settled:
            run.unsettled_since = run.unsettled_since or time.monotonic()
            if time.monotonic() - run.unsettled_since < SETTLE_SECONDS:
                return False
        if job.state == "Completed":
            value = self.value(job)
            if value is None:
                return self.end_failed(number, run, f"it completed with no {self.objective!r} in status.metrics "
                                       "(never printed, or its last value was nan or inf)", job)
            self.record(run, job)
            self.tell(run.trial, value)
            return self.ended(number, job)
        if job.state == "Failed":
            return self.end_failed(number, run, f"{job.reason}: {job.message}".strip(": "), job)
        epoch, value = job.metrics.epoch or job.epoch, self.value(job)
        if value is not None and epoch > run.last_epoch:
            run.trial.report(value, epoch)
            run.last_epoch = epoch
            if run.trial.should_prune():
                log.info("trial %d pruned at epoch %d (%s %g): suspending %s", number, epoch, self.objective, value,
                         job.name)
                self.suspend(run.job)
                self.record(run, job, reason=f"pruned at epoch {epoch}")
                self.tell(run.trial, state=self.optuna.trial.TrialState.PRUNED)
                return self.ended(number, job)
        return False

    def tell(self, trial: Any, value: float | None = None, state: Any = None) -> None:
        """Ends a trial in the study. A sampler that calls study.stop (GridSampler, its grid done) stops the search."""
        try:
            self.study.tell(trial, value, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            log.info("the sampler stopped the search (its space is exhausted)")
            self.stopped = True  # the trial was told: Optuna stores it before the sampler's after_trial fails

    def value(self, job: TrainingJob) -> float | None:
        return job.metrics.get(self.objective)

    def end_failed(self, number: int, run: _Run, reason: str, job: TrainingJob | None = None) -> bool:
        log.info("trial %d failed: %s", number, reason)
        self.record(run, job, reason=reason)
        self.tell(run.trial, state=self.optuna.trial.TrialState.FAIL)
        return self.ended(number, job)

    def ended(self, number: int, job: TrainingJob | None) -> bool:
        self.active.pop(number, None)
        run_uid = job.uid if job is not None else ""
        if self.keep == "none" and job is not None:
            self.delete(job.name, run_uid)
        if self.callback:
            self.callback(next(r for r in self.rows() if r.number == number))
        return True

    # --- starting and adopting trials ------------------------------------------------------------------------

    def launch(self) -> None:
        trial = self.study.ask(self.dists)
        name = f"{self.prefix}-{trial.number}"
        trial.set_user_attr(ATTR_JOB, name)
        trial.set_user_attr(ATTR_TOKEN, secrets.token_hex(16))
        self.claim(trial)
        run = _Run(trial=trial, job=name)
        try:
            self.create(run, trial.params)
        except errors.ApiError as exc:
            self.create_failures += 1
            trial.set_user_attr(ATTR_REASON, f"not created: {exc.message}"[:1024])
            self.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            log.warning("trial %d: TrainingJob %s not created: %s", trial.number, name, exc)
            if self.create_failures >= MAX_CREATE_FAILURES:
                raise
            return
        self.create_failures = 0
        self.active[trial.number] = run

    def create(self, run: _Run, params: Mapping[str, Any]) -> None:
        obj = trial_spec(self.template, params, cache_group=self.label)
        meta = obj["metadata"]
        meta.pop("generateName", None)
        meta.pop("resourceVersion", None)
        meta["name"], meta["namespace"] = run.job, self.ns
        meta.setdefault("labels", {}).update({STUDY_LABEL: self.label, TRIAL_LABEL: str(run.trial.number)})
        token = run.trial.user_attrs.get(ATTR_TOKEN) or ""
        meta.setdefault("annotations", {}).update({STUDY_NAME_ANNOTATION: self.study.study_name, TOKEN_ANNOTATION: token})
        for _ in range(3):
            try:
                job = self.c.create(obj)
                break
            except errors.AlreadyExists:
                # A driver that died after creating it and before recording its UID: the job of this name is
                # this trial's when it carries the trial's token. Someone else's: the trial takes another name.
                job = self.c.get(run.job, self.ns)
                if token and _token(job) == token:
                    break
                taken = run.job
                run.job = meta["name"] = f"{self.prefix}-{run.trial.number}-{secrets.token_hex(2)}"
                run.trial.set_user_attr(ATTR_JOB, run.job)
                log.warning("trial %d: %s is someone else's TrainingJob; naming the trial's %s", run.trial.number,
                            taken, run.job)
        else:
            raise errors.AlreadyExists(409, "AlreadyExists", f"trial {run.trial.number}: every name tried is taken")
        run.uid = job.uid
        run.trial.set_user_attr(ATTR_UID, job.uid)
        log.info("trial %d: created %s with %s", run.trial.number, run.job, dict(params))

    def claim(self, trial: Any) -> None:
        trial.set_user_attr(ATTR_DRIVER, self.driver)
        trial.set_user_attr(ATTR_HEARTBEAT, time.time())

    def heartbeat(self) -> None:
        if time.monotonic() - self.last_beat < HEARTBEAT_SECONDS / 2:
            return
        self.last_beat = time.monotonic()
        for run in self.active.values():
            run.trial.set_user_attr(ATTR_HEARTBEAT, time.time())

    def adopt(self) -> bool:
        """Takes over the study's running trials that no live driver follows: an interrupted or killed run's.

        Returns whether running trials are left that another driver follows (or a killed one did, until its
        heartbeat goes stale)."""
        running = self.study.get_trials(deepcopy=False, states=(self.optuna.trial.TrialState.RUNNING,))
        now = time.time()
        others = False
        for ft in running:
            if ft.number in self.active:
                continue
            attrs = ft.user_attrs
            mine = attrs.get(ATTR_DRIVER) == self.driver
            beat = attrs.get(ATTR_HEARTBEAT) or 0
            if not mine and attrs.get(ATTR_DRIVER) and now - float(beat) < STALE_AFTER:
                others = True  # another driver of a shared study follows it
                continue
            trial = self.optuna.trial.Trial(self.study, ft._trial_id)
            name = attrs.get(ATTR_JOB) or f"{self.prefix}-{ft.number}"
            run = _Run(trial=trial, job=name, uid=attrs.get(ATTR_UID, ""),
                       last_epoch=max(ft.intermediate_values, default=0))
            self.claim(trial)
            try:
                job = self.c.get(name, self.ns)
            except errors.NotFound:
                job = None
            if job is not None and (job.uid != run.uid if run.uid else
                                    _token(job) != attrs.get(ATTR_TOKEN)):
                job = None  # the name holds someone else's job
            if job is None and run.uid:
                self.active[ft.number] = run
                self.end_failed(ft.number, run, "its TrainingJob was deleted while no driver followed it")
                continue
            if job is None:
                log.info("trial %d: its TrainingJob was never created; creating %s", ft.number, name)
                try:
                    self.create(run, ft.params)
                except errors.ApiError as exc:
                    trial.set_user_attr(ATTR_REASON, f"not created: {exc.message}"[:1024])
                    self.tell(trial, state=self.optuna.trial.TrialState.FAIL)
                    continue
            else:
                run.uid = job.uid
                trial.set_user_attr(ATTR_UID, job.uid)
                if job.suspended and attrs.get(ATTR_INTERRUPTED):
                    log.info("trial %d: resuming %s, suspended when its search was interrupted", ft.number, name)
                    self.c.suspend(name, self.ns, suspended=False)
                log.info("trial %d: re-attached to %s (%s)", ft.number, name, job.state or "no state yet")
            trial.set_user_attr(ATTR_INTERRUPTED, False)
            self.active[ft.number] = run
        return others

    def interrupt(self, stop: bool, reason: str = "an interrupt") -> None:
        """Leaves the running trials for a later driver: suspended (stop) or running, their claims released."""
        for number, run in list(self.active.items()):
            try:
                if stop:
                    self.suspend(run.job)
                    run.trial.set_user_attr(ATTR_INTERRUPTED, True)
                run.trial.set_user_attr(ATTR_HEARTBEAT, 0)
                log.info("trial %d: %s %s after %s", number, "suspended" if stop else "left running", run.job, reason)
            except errors.TrainingJobError as exc:
                log.warning("trial %d: %s not suspended: %s", number, run.job, exc)
        self.active.clear()

    def suspend(self, name: str) -> None:
        try:
            self.c.suspend(name, self.ns)
        except errors.NotFound:
            pass

    # --- results ---------------------------------------------------------------------------------------------

    def record(self, run: _Run, job: TrainingJob | None, reason: str = "") -> None:
        """Keeps what the table shows of the trial in the storage: its TrainingJob may go."""
        if reason:
            run.trial.set_user_attr(ATTR_REASON, reason[:1024])
        if job is None:
            return
        g = job.goodput
        wall = g.wall_seconds if g else 0.0
        queued = g.badput_seconds.get("queued", 0.0) if g else 0.0
        run.trial.set_user_attr(ATTR_EPOCHS, job.epoch)
        run.trial.set_user_attr(ATTR_GPU_S, g.gpu_seconds if g else 0.0)
        run.trial.set_user_attr(ATTR_WALL_S, wall)
        run.trial.set_user_attr(ATTR_WORKER_S, max(0.0, wall - queued) * max(1, job.num_workers))

    def rows(self) -> list[TrialRow]:
        rows = []
        for ft in self.study.get_trials(deepcopy=False):
            a = ft.user_attrs
            rows.append(TrialRow(number=ft.number, params=dict(ft.params), value=ft.value, state=ft.state.name,
                                 epochs=int(a.get(ATTR_EPOCHS, max(ft.intermediate_values, default=0))),
                                 gpu_seconds=float(a.get(ATTR_GPU_S, 0.0)), worker_seconds=float(a.get(ATTR_WORKER_S, 0.0)),
                                 wall_seconds=float(a.get(ATTR_WALL_S, 0.0)), job=str(a.get(ATTR_JOB, "")),
                                 reason=str(a.get(ATTR_REASON, ""))))
        return rows

    def best(self) -> Any:
        try:
            return self.study.best_trial
        except ValueError:  # no completed trial
            return None

    def apply_keep(self) -> None:
        if self.keep != "best":
            return
        best = self.best()
        keep = best.number if best else None
        for ft in self.study.get_trials(deepcopy=False):
            uid = ft.user_attrs.get(ATTR_UID)
            if ft.number != keep and uid and ft.state != self.optuna.trial.TrialState.RUNNING:
                self.delete(ft.user_attrs.get(ATTR_JOB, ""), uid)

    def delete(self, name: str, uid: str) -> None:
        """Deletes a trial's TrainingJob: only the one it created (its UID), never another of the name."""
        if not name or not uid:
            return
        try:
            self.c.delete(name, self.ns, missing_ok=True, uid=uid)
        except errors.ApiError as exc:
            if exc.status != 409:
                raise
            log.info("%s is not the trial's TrainingJob any more (another of the name): left alone", name)

    def result(self) -> SearchResult:
        best = self.best()
        job = None
        if best is not None:
            try:
                job = self.c.get(best.user_attrs.get(ATTR_JOB, ""), self.ns)
            except errors.NotFound:
                job = None
            if job is not None and job.uid != best.user_attrs.get(ATTR_UID):
                job = None
        return SearchResult(study=self.study, best_number=best.number if best else None,
                            best_value=best.value if best else None, best_params=dict(best.params) if best else {},
                            best_job=job, trials=self.rows(), selector=f"{STUDY_LABEL}={self.label}")


def study_label(study_name: str, study: Any) -> str:
    """The label value a study's TrainingJobs carry (kubectl get tj -l ml.example.com/study=<it>)."""
    return f"{_label_value(study_name, 30)}-{study.user_attrs[STUDY_ATTR_ID]}"

