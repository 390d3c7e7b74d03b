"""Client: create, follow and delete TrainingJobs through the official Kubernetes Python client."""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8sconfig
from kubernetes import watch as k8swatch
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from . import errors
from .types import TERMINAL_STATES, Event, TrainingJob

if TYPE_CHECKING:
    from .search import SearchResult

log = logging.getLogger("trainingjob")

GROUP, VERSION, PLURAL, KIND = "ml.example.com", "v1", "trainingjobs", "TrainingJob"
API_VERSION = f"{GROUP}/{VERSION}"
#: The label the operator sets on a TrainingJob's children and pods.
NAME_LABEL = "ml.example.com/trainingjob-name"
#: The pod label carrying a worker's rank (Kubernetes' Job controller sets it on an Indexed Job's pods).
RANK_LABEL = "batch.kubernetes.io/job-completion-index"
ATTEMPT_LABEL = "ml.example.com/attempt"
#: The trainer's container in every worker pod.
CONTAINER = "trainer"
#: The longest log line logs() yields; the rest of a longer line is dropped (a pod's output is not trusted).
MAX_LOG_LINE = 64 << 10

_SERVICE_ACCOUNT_NS = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_HYPERPARAMETERS = {"learning_rate": "learningRate", "batch_size": "batchSize", "epochs": "epochs",
                    "warmup_steps": "warmupSteps", "gradient_accumulation_steps": "gradientAccumulationSteps",
                    "optimizer": "optimizer", "mixed_precision": "mixedPrecision"}
_HYPERPARAMETER_FIELDS = set(_HYPERPARAMETERS.values())
#: Seconds to connect to the API server and to wait for its answer, as kubectl's 32 s.
REQUEST_TIMEOUT = (10, 32)

_UNREACHABLE = (urllib3.exceptions.MaxRetryError, urllib3.exceptions.NewConnectionError,
                urllib3.exceptions.ProtocolError, urllib3.exceptions.TimeoutError, ConnectionError)


def hyperparameters(values: Mapping[str, Any]) -> dict[str, Any]:
    """Turns keyword hyperparameters into spec.hyperparameters.

    The API's fields are taken by their JSON name or in snake case (learning_rate, batch_size...); every other
    key goes to additionalParams as a string, as the API holds them.
    """
    out: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for k, v in values.items():
        if k == "additionalParams":
            extra.update({str(a): _param_string(b) for a, b in dict(v).items()})
        elif k in _HYPERPARAMETER_FIELDS or k in _HYPERPARAMETERS:
            out[_HYPERPARAMETERS.get(k, k)] = v
        else:
            extra[str(k)] = _param_string(v)
    if extra:
        out["additionalParams"] = extra
    return out


def _param_string(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Client:
    """A client of one cluster's TrainingJobs, in one namespace by default.

    namespace defaults to the kubeconfig context's namespace (in a pod: the pod's), else "default";
    kubeconfig and context choose the cluster as kubectl's --kubeconfig and --context do (KUBECONFIG is read
    when kubeconfig is None); in a pod without a kubeconfig the pod's service account is used. api_client,
    when given, is used as it is.
    """

    def __init__(self, namespace: str | None = None, kubeconfig: str | None = None, context: str | None = None,
                 api_client: k8s.ApiClient | None = None):
        ns_from_config = None
        if api_client is None:
            api_client, ns_from_config = _load(kubeconfig, context)
        self.api_client = api_client
        self.namespace = namespace or ns_from_config or "default"
        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._batch = k8s.BatchV1Api(api_client)

    # --- writing ---------------------------------------------------------------------------------------------

    def create(self, job: Mapping[str, Any] | str | os.PathLike[str], namespace: str | None = None) -> TrainingJob:
        """Creates a TrainingJob from a dict, a YAML or JSON file, or YAML text: what a person would kubectl apply.

        The API server's refusal raises InvalidTrainingJob with its message and the fields it names, unchanged.
        """
        obj = _training_job(_load_manifest(job))
        meta = obj.setdefault("metadata", {})
        ns = namespace or meta.get("namespace") or self.namespace
        meta["namespace"] = ns
        created = self._call(self._custom.create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, obj)
        return TrainingJob.from_dict(created)

    def train(self, image: str | None = None, command: list[str] | None = None, args: list[str] | None = None, *,
              name: str | None = None, num_workers: int = 1, gpus_per_worker: int | None = None,
              hyperparameters: Mapping[str, Any] | None = None, checkpoint: bool | Mapping[str, Any] | None = None,
              inputs: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
              framework: str | None = None, model: str | None = None, dataset: str | None = None,
              labels: Mapping[str, str] | None = None, queue: str | None = None, namespace: str | None = None,
              spec: Mapping[str, Any] | None = None) -> TrainingJob:
        """Creates a TrainingJob from keyword arguments; name defaults to a generated "train-xxxxx".

        hyperparameters take the API's names or snake case (learning_rate=1e-3); other keys become
        additionalParams. checkpoint=True turns checkpoints on (the operator picks the storage); a mapping is
        spec.checkpoint as it is. spec holds any other spec field, merged last.
        """
        body: dict[str, Any] = {"numWorkers": num_workers}
        for key, value in (("image", image), ("command", command), ("args", args), ("gpusPerWorker", gpus_per_worker),
                           ("framework", framework), ("model", model), ("dataset", dataset),
                           ("inputs", dict(inputs) if inputs else None)):
            if value is not None:
                body[key] = list(value) if isinstance(value, (list, tuple)) else value
        if hyperparameters:
            body["hyperparameters"] = globals()["hyperparameters"](hyperparameters)
        if checkpoint is not None:
            body["checkpoint"] = {"enabled": True} if checkpoint is True else (
                {"enabled": False} if checkpoint is False else dict(checkpoint))
        if env:
            body["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
        body.update(copy.deepcopy(dict(spec or {})))
        meta: dict[str, Any] = {"labels": dict(labels or {})}
        if queue:
            meta["labels"]["kueue.x-k8s.io/queue-name"] = queue
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = "train-"
        return self.create({"metadata": meta, "spec": body}, namespace=namespace)

    def delete(self, name: str, namespace: str | None = None, missing_ok: bool = False, uid: str | None = None) -> None:
        """Deletes a TrainingJob (its Job, pods, Service and ConfigMap go with it); NotFound unless missing_ok.

        uid, when given, is a precondition: a job created again under the name is left alone (ApiError 409).
        """
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call(self._custom.delete_namespaced_custom_object, GROUP, VERSION, namespace or self.namespace,
                       PLURAL, name, body=body)
        except errors.NotFound:
            if not missing_ok:
                raise

    def suspend(self, name: str, namespace: str | None = None, suspended: bool = True) -> TrainingJob:
        """Sets spec.suspend: the workers stop and free their quota, the checkpoints stay; False resumes."""
        patched = self._call(self._custom.patch_namespaced_custom_object, GROUP, VERSION, namespace or self.namespace,
                             PLURAL, name, {"spec": {"suspend": suspended}})
        return TrainingJob.from_dict(patched)

    # --- reading ---------------------------------------------------------------------------------------------

    def get(self, name: str, namespace: str | None = None) -> TrainingJob:
        """The TrainingJob as the API server holds it now."""
        return TrainingJob.from_dict(self._call(self._custom.get_namespaced_custom_object, GROUP, VERSION,
                                                namespace or self.namespace, PLURAL, name))

    def list(self, selector: str | Mapping[str, str] | None = None, namespace: str | None = None) -> list[TrainingJob]:
        """The namespace's TrainingJobs, oldest first; selector is a label selector ("team=a,study") or a dict."""
        return [TrainingJob.from_dict(o) for o in self._list(selector, namespace)["items"]]

    def _list(self, selector: str | Mapping[str, str] | None, namespace: str | None) -> dict[str, Any]:
        out = self._call(self._custom.list_namespaced_custom_object, GROUP, VERSION, namespace or self.namespace, PLURAL,
                         label_selector=_selector(selector))
        out["items"].sort(key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"].get("name", "")))
        return out

    def events(self, name: str, namespace: str | None = None) -> list[Event]:
        """The events about this TrainingJob (not about an earlier one of the same name), oldest first."""
        ns = namespace or self.namespace
        uid = self.get(name, ns).uid
        sel = f"involvedObject.kind={KIND},involvedObject.name={name},involvedObject.uid={uid}"
        out = self._call(self._core.list_namespaced_event, ns, field_selector=sel, _preload_content=False)
        items = _json(out).get("items") or []
        evs = [Event.from_dict(e) for e in items]
        evs.sort(key=lambda e: (e.last_time.timestamp() if e.last_time else 0.0))
        return evs

    def wait(self, name: str, until: Iterable[str] = ("Completed",), timeout: float | None = None,
             callback: Callable[[TrainingJob], None] | None = None, show_progress: bool = False,
             namespace: str | None = None) -> TrainingJob:
        """Waits on the watch API until the job's state is one of until, and returns it.

        A job that ends otherwise raises JobFailed naming its state and status message (a Completed job, when
        only earlier states were awaited, is returned: it passed them). callback gets every new view;
        show_progress draws a tqdm bar from the status (epoch, loss, ETA) when tqdm is installed. Raises
        WaitTimeout after timeout seconds, JobDeleted when the job goes.
        """
        ns, wanted = namespace or self.namespace, tuple(until)
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = _Bar(name) if show_progress else None
        last: TrainingJob | None = None
        try:
            for kind, job in self._watch_one(name, ns, deadline):
                if kind == "DELETED":
                    raise errors.JobDeleted(f"TrainingJob {ns}/{name} was deleted while awaited (last state "
                                            f"{job.state or 'none'})")
                if job.done and not job.settled:
                    job = self.settle(job, 10.0)
                last = job
                if bar:
                    bar.update(job)
                if callback:
                    callback(job)
                if job.state in wanted:
                    return job
                if job.state in TERMINAL_STATES:
                    if job.state == "Completed" and "Failed" not in wanted and not set(wanted) & {"Suspended"}:
                        return job
                    raise errors.JobFailed(job)
        finally:
            if bar:
                bar.close()
        raise errors.WaitTimeout(last, timeout or 0.0)

    def settle(self, job: TrainingJob, within: float) -> TrainingJob:
        """The job once its end is settled (the first view of an ended job may still hold the last progress read
        while it ran), or job as it is after within seconds."""
        for kind, view in self._watch_one(job.name, job.namespace, time.monotonic() + within):
            if kind == "DELETED":
                break
            if view.settled:
                return view
        return job

    def _watch_one(self, name: str, ns: str, deadline: float | None) -> Iterator[tuple[str, TrainingJob]]:
        """Yields the job as it is now, then each change, until the deadline."""
        sel = f"metadata.name={name}"
        while True:
            timeout = REQUEST_TIMEOUT if deadline is None else (
                REQUEST_TIMEOUT[0], max(1.0, min(REQUEST_TIMEOUT[1], deadline - time.monotonic())))
            listed = self._call(self._custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, field_selector=sel,
                                _request_timeout=timeout)
            if not listed["items"]:
                raise errors.NotFound(404, "NotFound", f'trainingjobs.{GROUP} "{name}" not found')
            yield "ADDED", TrainingJob.from_dict(listed["items"][0])
            rv = listed["metadata"]["resourceVersion"]
            try:
                for kind, obj, _ in self._watch(ns, rv, deadline, field_selector=sel):
                    yield kind, TrainingJob.from_dict(obj)
                    if kind == "DELETED":
                        return
            except _Expired:  # the version is gone: list again
                continue
            return

    def _watch(self, ns: str, rv: str, deadline: float | None,
               **selectors: str) -> Iterator[tuple[str, dict[str, Any], str | None]]:
        """Yields (type, object, resourceVersion) from the watch API until the deadline; raises _Expired when the
        server says the version is gone (the caller lists again)."""
        while deadline is None or time.monotonic() < deadline:
            # At most a minute per watch: a server that stops sending is noticed within 70 s (read timeout).
            left = 60 if deadline is None else max(1, min(60, int(deadline - time.monotonic()) + 1))
            w = k8swatch.Watch()
            try:
                stream = w.stream(self._custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                                  resource_version=rv, timeout_seconds=left, allow_watch_bookmarks=True,
                                  _request_timeout=(REQUEST_TIMEOUT[0], left + 10), **selectors)
                for ev in stream:
                    obj = ev["raw_object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev["type"] == "BOOKMARK":
                        continue
                    yield ev["type"], obj, rv
                    if deadline is not None and time.monotonic() >= deadline:
                        return
            except ApiException as exc:
                if exc.status == 410:
                    raise _Expired() from exc
                raise errors.from_api_exception(exc) from exc
            except _UNREACHABLE as exc:
                raise errors.ClusterUnreachable(f"the API server at {self.api_client.configuration.host} cannot be "
                                                f"reached: {exc}") from exc
            finally:
                w.stop()

    def logs(self, name: str, rank: int = 0, follow: bool = False, namespace: str | None = None) -> Iterator[str]:
        """Yields the lines rank's trainer printed (without their newline).

        With follow, it goes on across a restart in place (the container starts again in the same pod) and a
        recreated pod (a gang restart's new attempt) until the job ends; each container's output once.
        """
        ns = namespace or self.namespace
        seen: set[str] = set()
        while True:
            job = self.get(name, ns)
            pod, container_id = self._rank_pod(job, rank)
            if pod is None or container_id in seen or not container_id:
                if not follow:
                    if pod is None:
                        raise errors.TrainingJobError(f"TrainingJob {ns}/{name} has no pod of rank {rank} now "
                                                      f"(state {job.state or 'none'})")
                    if not container_id:
                        return
                if job.done and (pod is None or container_id in seen or not container_id):
                    return
                self._await_pod_change(job, rank)
                continue
            seen.add(container_id)
            yield from self._container_log(pod.metadata.name, ns, follow)
            if not follow:
                return

    def _rank_pod(self, job: TrainingJob, rank: int) -> tuple[Any, str]:
        """The pod of rank in the job's newest attempt that the job's own Job made, and its trainer container's ID
        ("" before it runs). A pod that only carries the labels is not taken: its owner must be the job's Job."""
        pods = self._call(self._core.list_namespaced_pod, job.namespace,
                          label_selector=f"{NAME_LABEL}={job.name},{RANK_LABEL}={rank}").items
        jobs = {j.metadata.uid for j in self._call(self._batch.list_namespaced_job, job.namespace,
                                                   label_selector=f"{NAME_LABEL}={job.name}").items
                if any(o.uid == job.uid and o.controller for o in j.metadata.owner_references or [])}
        own = [p for p in pods if any(o.kind == "Job" and o.controller and o.uid in jobs
                                      for o in p.metadata.owner_references or [])]
        if not own:
            return None, ""
        own.sort(key=lambda p: (int((p.metadata.labels or {}).get(ATTEMPT_LABEL, "0") or 0),
                                p.metadata.creation_timestamp))
        pod = own[-1]
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            if cs.name == CONTAINER and (cs.state and (cs.state.running or cs.state.terminated)):
                return pod, f"{pod.metadata.uid}/{cs.container_id or ''}/{cs.restart_count}"
        return pod, ""

    def _await_pod_change(self, job: TrainingJob, rank: int) -> None:
        """Waits (on the watch API, at most 30 s) for the rank's pods or the job to change."""
        w = k8swatch.Watch()
        try:
            for _ in w.stream(self._core.list_namespaced_pod, job.namespace, timeout_seconds=30, _request_timeout=60,
                              label_selector=f"{NAME_LABEL}={job.name},{RANK_LABEL}={rank}"):
                break
        except ApiException as exc:
            raise errors.from_api_exception(exc, resource="pods") from exc
        finally:
            w.stop()

    def _container_log(self, pod: str, ns: str, follow: bool) -> Iterator[str]:
        try:
            # Connecting is bounded; a follow may wait for the program's next line as long as it likes.
            resp = self._core.read_namespaced_pod_log(pod, ns, container=CONTAINER, follow=follow,
                                                      _preload_content=False,
                                                      _request_timeout=(REQUEST_TIMEOUT[0], None if follow else REQUEST_TIMEOUT[1]))
        except ApiException as exc:
            if exc.status == 400:  # the container is not running yet, or went between the list and the read
                return
            raise errors.from_api_exception(exc, resource="pods") from exc
        try:
            yield from _lines(resp.stream(32 << 10))
        except _UNREACHABLE:
            return
        finally:
            resp.release_conn()

    # --- search ----------------------------------------------------------------------------------------------

    def optimize(self, template: Mapping[str, Any] | str | os.PathLike[str], search_space: Mapping[str, Any],
                 **kwargs: Any) -> SearchResult:
        """Runs a hyperparameter search of TrainingJobs with Optuna; see trainingjob.search.optimize."""
        from .search import optimize

        return optimize(self, template, search_space, **kwargs)

    # --- plumbing --------------------------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)  # an API server that accepts and never answers
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise errors.from_api_exception(exc) from exc
        except _UNREACHABLE as exc:
            raise errors.ClusterUnreachable(f"the API server at {self.api_client.configuration.host} cannot be "
                                            f"reached: {exc}") from exc


class _Expired(Exception):
    """A watch's resourceVersion is gone."""


def _load(kubeconfig: str | None, context: str | None) -> tuple[k8s.ApiClient, str | None]:
    """The API client and namespace of the kubeconfig (or, in a pod without one, the service account)."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    if kubeconfig or context or os.path.exists(path):
        try:
            api = k8sconfig.new_client_from_config(config_file=path, context=context)
            _, active = k8sconfig.list_kube_config_contexts(config_file=path)
            if context:
                contexts, _ = k8sconfig.list_kube_config_contexts(config_file=path)
                active = next((c for c in contexts if c["name"] == context), active)
        except (ConfigException, OSError) as exc:
            raise errors.TrainingJobError(f"cannot load the kubeconfig {path}: {exc}") from exc
        api.configuration.retries = 1
        return api, (active or {}).get("context", {}).get("namespace")
    cfg = k8s.Configuration()
    try:
        k8sconfig.load_incluster_config(client_configuration=cfg)
    except ConfigException as exc:
        raise errors.TrainingJobError(f"no kubeconfig at {path} and not in a pod: {exc}") from exc
    cfg.retries = 1
    ns = None
    if os.path.exists(_SERVICE_ACCOUNT_NS):
        with open(_SERVICE_ACCOUNT_NS, encoding="utf-8") as f:
            ns = f.read().strip() or None
    return k8s.ApiClient(cfg), ns


def _load_manifest(job: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """One TrainingJob from a mapping, a file or YAML/JSON text."""
    if isinstance(job, Mapping):
        return copy.deepcopy(dict(job))
    text = str(job)
    if isinstance(job, os.PathLike) or (("\n" not in text) and text.endswith((".yaml", ".yml", ".json"))):
        with open(job, encoding="utf-8") as f:
            text = f.read()
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if len(docs) == 1 and isinstance(docs[0], str) and "\n" not in text:
        raise FileNotFoundError(f"{text!r} is neither a file nor a TrainingJob's YAML")
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValueError(f"want one TrainingJob document, got {len(docs)}")
    return docs[0]


def _training_job(obj: dict[str, Any]) -> dict[str, Any]:
    """obj with this API's apiVersion and kind where it names none; ValueError when it names others."""
    obj.setdefault("apiVersion", API_VERSION)
    obj.setdefault("kind", KIND)
    if obj["apiVersion"] != API_VERSION or obj["kind"] != KIND:
        raise ValueError(f"not a TrainingJob: apiVersion {obj['apiVersion']!r}, kind {obj['kind']!r}")
    return obj


def _selector(selector: str | Mapping[str, str] | None) -> str:
    if selector is None:
        return ""
    if isinstance(selector, str):
        return selector
    return ",".join(f"{k}={v}" for k, v in selector.items())


def _json(resp: Any) -> dict[str, Any]:
    import json

    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Splits a byte stream into lines, each cut to MAX_LOG_LINE bytes, holding at most that much."""
    buf = bytearray()
    skipping = False
    for chunk in chunks:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            part = chunk[start:] if nl < 0 else chunk[start:nl]
            if not skipping:
                room = MAX_LOG_LINE - len(buf)
                buf += part[:room]
                if len(part) > room:
                    skipping = True
            if nl < 0:
                break
            yield buf.decode("utf-8", "replace")
            buf.clear()
            skipping = False
            start = nl + 1
    if buf:
        yield buf.decode("utf-8", "replace")


class _Bar:
    """A tqdm bar over the job's epochs (its percentage when it reports no epochs)."""

    def __init__(self, name: str):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            log.warning("show_progress needs tqdm (pip install tqdm); waiting without a bar")
            self._bar = None
            return
        self._bar = tqdm(total=100, desc=name, unit="%")

    def update(self, job: TrainingJob) -> None:
        if self._bar is None:
            return
        total, n = (job.total_epochs, job.epoch) if job.total_epochs else (100, _percent(job.progress))
        if self._bar.total != total:
            self._bar.total = total
            self._bar.unit = "epoch" if job.total_epochs else "%"
        self._bar.n = min(n, total)
        post = {"state": job.state}
        if job.metrics.loss is not None:
            post["loss"] = f"{job.metrics.loss:.4g}"
        if job.eta:
            post["eta"] = job.eta
        self._bar.set_postfix(post, refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _percent(progress: str) -> int:
    try:
        return int(progress.rstrip("%"))
    except ValueError:
        return 0
