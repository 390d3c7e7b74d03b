"""Typed views of a TrainingJob and its events, read from the API server's JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: States in which a TrainingJob has ended.
TERMINAL_STATES = ("Completed", "Failed")


def parse_time(v: Any) -> datetime | None:
    """Reads an RFC 3339 time as the API server writes it ("2026-12-02T09:00:00Z", micro-times too)."""
    if isinstance(v, datetime):
        return v
    if not isinstance(v, str) or not v:
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None


def _float(v: Any) -> float | None:
    """A finite float from a number or a numeric string; None otherwise."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class Condition:
    """One of status.conditions."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


@dataclass(frozen=True)
class Metrics:
    """status.metrics: what rank 0 reported last; custom holds every other named metric (eval-logloss...)."""

    loss: float | None = None
    accuracy: float | None = None
    learning_rate: float | None = None
    throughput: float | None = None
    gpu_utilization: float | None = None
    epoch: int = 0
    custom: dict[str, float] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        """The value of a metric by name: loss, accuracy, learningRate, throughput, or a custom one."""
        known = {"loss": self.loss, "accuracy": self.accuracy, "learningRate": self.learning_rate,
                 "learning_rate": self.learning_rate, "throughput": self.throughput,
                 "gpuUtilization": self.gpu_utilization}
        if name in known and known[name] is not None:
            return known[name]
        return self.custom.get(name)


@dataclass(frozen=True)
class Goodput:
    """status.goodput: where the job's wall time went (docs/goodput.md)."""

    percent: str = ""
    productive_seconds: float = 0.0
    badput_seconds: dict[str, float] = field(default_factory=dict)
    unknown_seconds: float = 0.0
    gpu_seconds: float = 0.0
    productive_gpu_seconds: float = 0.0

    @property
    def wall_seconds(self) -> float:
        """The wall time accounted so far: productive, every badput and the unknown."""
        return self.productive_seconds + sum(self.badput_seconds.values()) + self.unknown_seconds


@dataclass(frozen=True)
class TrainingJob:
    """A TrainingJob as the API server last showed it. raw is the whole object."""

    name: str
    namespace: str
    uid: str
    state: str
    reason: str
    message: str
    progress: str
    epoch: int
    total_epochs: int
    step: int
    eta: str
    metrics: Metrics
    goodput: Goodput | None
    restarts: int
    attempt: int
    conditions: list[Condition]
    created: datetime | None
    started: datetime | None
    finished: datetime | None
    labels: dict[str, str]
    num_workers: int
    hyperparameters: dict[str, Any]
    resource_version: str
    raw: dict[str, Any] = field(repr=False)

    @property
    def done(self) -> bool:
        """Whether the job has ended (Completed or Failed)."""
        return self.state in TERMINAL_STATES

    @property
    def settled(self) -> bool:
        """Whether the status is final: a job that runs, or one whose end the StatusController has settled
        (progress made to agree with how it ended; ProgressReported says RunEnded) or that never reported any."""
        c = self.condition("ProgressReported")
        return not self.done or c is None or c.reason == "RunEnded"

    @property
    def suspended(self) -> bool:
        """Whether the job's spec asks for it to be suspended."""
        return bool(_dict(self.raw.get("spec")).get("suspend"))

    def condition(self, type_: str) -> Condition | None:
        """The condition of that type, if the status has it."""
        return next((c for c in self.conditions if c.type == type_), None)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> TrainingJob:
        meta, spec, st = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
        conds = [Condition(type=str(c.get("type", "")), status=str(c.get("status", "")), reason=str(c.get("reason", "")),
                           message=str(c.get("message", "")),
                           last_transition_time=parse_time(c.get("lastTransitionTime")))
                 for c in st.get("conditions") or [] if isinstance(c, dict)]
        state = str(st.get("state") or "")
        # The reason and message are those of the condition named for the state (Failed's says why).
        own = next((c for c in conds if c.type == state and c.status == "True"), None)
        reason, message = (own.reason, own.message) if own else ("", "")
        if state == "Failed" and st.get("failureReason"):
            message = message or str(st["failureReason"])
        m = _dict(st.get("metrics"))
        custom = {str(k): f for k, v in _dict(m.get("custom")).items() if (f := _float(v)) is not None}
        metrics = Metrics(loss=_float(m.get("loss")), accuracy=_float(m.get("accuracy")),
                          learning_rate=_float(m.get("learningRate")), throughput=_float(m.get("throughput")),
                          gpu_utilization=_float(m.get("gpuUtilization")), epoch=_int(m.get("epoch")), custom=custom)
        g = st.get("goodput")
        goodput = None
        if isinstance(g, dict):
            goodput = Goodput(percent=str(g.get("percent") or ""), productive_seconds=_float(g.get("productiveSeconds")) or 0.0,
                              badput_seconds={str(k): f for k, v in _dict(g.get("badputSeconds")).items()
                                              if (f := _float(v)) is not None},
                              unknown_seconds=_float(g.get("unknownSeconds")) or 0.0,
                              gpu_seconds=_float(g.get("gpuSeconds")) or 0.0,
                              productive_gpu_seconds=_float(g.get("productiveGPUSeconds")) or 0.0)
        return cls(
            name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")), uid=str(meta.get("uid", "")),
            state=state, reason=reason, message=message, progress=str(st.get("progress") or ""),
            epoch=_int(st.get("currentEpoch")), total_epochs=_int(st.get("totalEpochs")), step=_int(st.get("currentStep")),
            eta=str(st.get("eta") or ""), metrics=metrics, goodput=goodput, restarts=_int(st.get("restartCount")),
            attempt=_int(st.get("attempt")), conditions=conds, created=parse_time(meta.get("creationTimestamp")),
            started=parse_time(st.get("startTime")), finished=parse_time(st.get("completionTime")),
            labels={str(k): str(v) for k, v in _dict(meta.get("labels")).items()}, num_workers=_int(spec.get("numWorkers")),
            hyperparameters=dict(_dict(spec.get("hyperparameters"))),
            resource_version=str(meta.get("resourceVersion", "")), raw=obj)


@dataclass(frozen=True)
class Event:
    """A Kubernetes event about a TrainingJob."""

    type: str
    reason: str
    message: str
    count: int
    first_time: datetime | None
    last_time: datetime | None
    source: str

    @classmethod
    def from_dict(cls, e: dict[str, Any]) -> Event:
        src = _dict(e.get("source")).get("component") or e.get("reportingComponent") or ""
        first = parse_time(e.get("firstTimestamp")) or parse_time(e.get("eventTime"))
        last = parse_time(e.get("lastTimestamp")) or first
        return cls(type=str(e.get("type") or ""), reason=str(e.get("reason") or ""), message=str(e.get("message") or ""),
                   count=_int(e.get("count")) or 1, first_time=first, last_time=last, source=str(src))
