"""Errors the client raises. Every one is a TrainingJobError."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class TrainingJobError(Exception):
    """The base of every error this package raises."""


@dataclass
class Cause:
    """One cause of an API refusal: the field it names, as the API server wrote it."""

    field: str
    message: str
    reason: str = ""


class ApiError(TrainingJobError):
    """The API server refused a request; message is its own message, unchanged.

    status is the HTTP status, reason the Status reason (Invalid, Forbidden, AlreadyExists...), causes the
    fields it names (for an admission refusal: ``spec.hyperparameters.learningRate``...).
    """

    def __init__(self, status: int, reason: str, message: str, causes: list[Cause] | None = None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes or []

    @property
    def fields(self) -> list[str]:
        """The fields the refusal names, in its order."""
        return [c.field for c in self.causes if c.field]


class InvalidTrainingJob(ApiError):
    """The API server rejected the TrainingJob at admission (schema, CEL rule or admission policy)."""


class AlreadyExists(ApiError):
    """A TrainingJob of that name exists already."""


class NotFound(ApiError):
    """The TrainingJob does not exist."""


class NamespaceNotFound(ApiError):
    """The namespace does not exist."""


class CRDNotInstalled(TrainingJobError):
    """The cluster has no TrainingJob resource: the operator's CRD is not installed."""


class ClusterUnreachable(TrainingJobError):
    """The API server could not be reached."""


class JobFailed(TrainingJobError):
    """A TrainingJob ended in a state other than the one awaited; job is its last view."""

    def __init__(self, job: Any):
        self.job = job
        detail = job.message or job.reason or "no message"
        super().__init__(f"TrainingJob {job.namespace}/{job.name} is {job.state}: {detail}")


class JobDeleted(TrainingJobError):
    """The TrainingJob was deleted while it was awaited."""


class WaitTimeout(TrainingJobError, TimeoutError):
    """wait() ran out of time; job is the last view seen."""

    def __init__(self, job: Any, timeout: float):
        self.job = job
        state = job.state if job is not None else "unknown"
        super().__init__(f"TrainingJob not in the awaited state after {timeout:g} s (state {state or 'none yet'})")


@dataclass
class _Status:
    status: int
    reason: str
    message: str
    causes: list[Cause] = field(default_factory=list)
    kind: str = ""
    name: str = ""


def _parse_status(status: int, reason: str, body: Any) -> _Status:
    """Reads a metav1.Status body; a body that is not one keeps the HTTP reason."""
    st = _Status(status=status, reason=reason or "", message=str(body or reason or ""))
    try:
        doc = json.loads(body) if isinstance(body, (str, bytes)) else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("kind") != "Status":
        return st
    st.reason = str(doc.get("reason") or st.reason)
    st.message = str(doc.get("message") or st.message)
    details = doc.get("details") or {}
    if isinstance(details, dict):
        st.kind = str(details.get("kind") or "")
        st.name = str(details.get("name") or "")
        for c in details.get("causes") or []:
            if isinstance(c, dict):
                st.causes.append(Cause(field=str(c.get("field") or ""), message=str(c.get("message") or ""),
                                       reason=str(c.get("reason") or "")))
    return st


def from_api_exception(exc: Any, resource: str = "trainingjobs") -> TrainingJobError:
    """Turns a kubernetes.client ApiException into the error that says what happened."""
    st = _parse_status(int(getattr(exc, "status", 0) or 0), str(getattr(exc, "reason", "") or ""),
                       getattr(exc, "body", None))
    if st.status == 404:
        if st.kind == "namespaces":
            return NamespaceNotFound(st.status, st.reason, st.message, st.causes)
        if st.kind == resource and st.name:
            return NotFound(st.status, st.reason, st.message, st.causes)
        return CRDNotInstalled(
            "the cluster has no TrainingJob resource (ml.example.com/v1 trainingjobs): install the operator's "
            f"CRD (kubectl apply -k deploy/); the API server said: {st.message}")
    if st.status == 422 or st.reason == "Invalid":
        return InvalidTrainingJob(st.status, st.reason, st.message, st.causes)
    if st.status == 409 and st.reason == "AlreadyExists":
        return AlreadyExists(st.status, st.reason, st.message, st.causes)
    return ApiError(st.status, st.reason, st.message, st.causes)
