"""trainingjob: a Python client of trainingjob-operator's TrainingJobs, and hyperparameter search with Optuna.

    from trainingjob import Client
    c = Client()
    job = c.train(image="ghcr.io/trainingjob-operator/runner:v0.1.0", command=["python3", "train.py"],
                  num_workers=2, hyperparameters={"learning_rate": 1e-3, "epochs": 10})
    c.wait(job.name, show_progress=True)
"""

from .client import Client, hyperparameters
from .errors import (AlreadyExists, ApiError, Cause, ClusterUnreachable, CRDNotInstalled, InvalidTrainingJob,
                     JobDeleted, JobFailed, NamespaceNotFound, NotFound, TrainingJobError, WaitTimeout)
from .search import SearchResult, TrialRow, trial_spec
from .types import Condition, Event, Goodput, Metrics, TrainingJob

__all__ = ["AlreadyExists", "ApiError", "Cause", "Client", "ClusterUnreachable", "CRDNotInstalled", "Condition",
           "Event", "Goodput", "InvalidTrainingJob", "JobDeleted", "JobFailed", "Metrics", "NamespaceNotFound",
           "NotFound", "SearchResult", "TrainingJob", "TrainingJobError", "TrialRow", "WaitTimeout",
           "hyperparameters", "trial_spec"]
__version__ = "0.1.0"
