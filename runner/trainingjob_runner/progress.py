"""Expose a training run's progress to the trainingjob-operator, standard library only.

The first process of every worker pod (LOCAL_RANK 0, or no LOCAL_RANK) serves the Prometheus text format
on METRICS_PORT (default 8080), bound to POD_IP when set (Open MPI's and MPICH's local ranks count too); the operator scrapes rank 0's into the
TrainingJob's status and its own metrics, and reads every pod's once when the run stalls, to name the one
that is behind. The other processes of a pod (torchrun's local ranks) do nothing, so every process calls
the same code:

    from trainingjob_progress import Progress   # or, in the runner package: from trainingjob_runner.progress import Progress

    progress = Progress(total_epochs=10)
    for epoch in range(1, 11):
        loss, accuracy = train_one_epoch()
        progress.report(epoch=epoch, loss=loss, accuracy=accuracy)

The series are the ones the example trainer exposes (see the README's "Progress" section):
training_epoch, training_epochs_total, training_step, training_steps_total, training_loss,
training_accuracy, training_learning_rate, training_samples_per_second; custom values passed to
report() as keyword arguments become training_<name>.
"""

import http.server
import math
import os
import re
import sys
import threading

__all__ = ["Progress"]

_KNOWN = {
    "epoch": ("training_epoch", "Epochs completed."),
    "total_epochs": ("training_epochs_total", "Epochs the run will train."),
    "step": ("training_step", "Optimizer steps completed."),
    "total_steps": ("training_steps_total", "Optimizer steps the run will take."),
    "loss": ("training_loss", "Training loss after the last epoch."),
    "accuracy": ("training_accuracy", "Training accuracy, 0 to 1."),
    "learning_rate": ("training_learning_rate", "Current learning rate."),
    "samples_per_second": ("training_samples_per_second", "Samples processed per second, all ranks."),
}
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

# A process's rank within its pod, as torchrun, Open MPI and MPICH set it: only the pod's first serves.
_LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


class Progress:
    """Progress of a run; serves /metrics from each pod's first process."""

    def __init__(self, total_epochs=None, total_steps=None, port=None, host=None, rank=None):
        self.rank = int(os.environ.get("RANK", "0") if rank is None else rank)
        self._values = {}
        self._lock = threading.Lock()
        self._server = None
        if total_epochs is not None:
            self._set("total_epochs", total_epochs)
        if total_steps is not None:
            self._set("total_steps", total_steps)
        if any(os.environ.get(v, "0") != "0" for v in _LOCAL_RANK_VARS):
            return  # the pod's first process serves its endpoint
        port = int(os.environ.get("METRICS_PORT", "8080") if port is None else port)
        host = os.environ.get("POD_IP", "") if host is None else host
        try:
            self._server = http.server.ThreadingHTTPServer((host, port), self._handler())
        except OSError as e:  # another process of the pod serves it (a launcher this helper does not know)
            print("trainingjob_progress: not serving progress on %s:%d: %s" % (host, port, e), file=sys.stderr)
            return
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def address(self):
        """(host, port) the endpoint listens on, or None in a pod's other processes."""
        return self._server.server_address if self._server else None

    def report(self, **values):
        """Record the latest values: epoch, total_epochs, step, total_steps, loss, accuracy,
        learning_rate, samples_per_second, or any other name (exposed as training_<name>)."""
        for key, value in values.items():
            if value is not None:
                self._set(key, value)

    def close(self):
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def _set(self, key, value):
        if not _NAME.match(key):
            raise ValueError("invalid metric name %r" % key)
        value = float(value)
        if math.isnan(value):
            return
        with self._lock:
            self._values[key] = value

    def render(self):
        """The Prometheus text exposition of the current values."""
        with self._lock:
            items = sorted(self._values.items())
        lines = []
        for key, value in items:
            name, doc = _KNOWN.get(key, ("training_" + key, "Custom training value %s." % key))
            lines += ["# HELP %s %s" % (name, doc), "# TYPE %s gauge" % name, "%s %r" % (name, value)]
        return "\n".join(lines) + "\n"

    def _handler(self):
        progress = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = progress.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        return Handler
