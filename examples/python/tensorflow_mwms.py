"""TensorFlow MultiWorkerMirroredStrategy under the TrainingJob environment contract (framework: tensorflow).

The strategy reads TF_CONFIG (every worker's host:port and this worker's index) by itself. Every worker
fits a small Keras model on a synthetic regression set (the strategy shards it and all-reduces the
gradients). Worker 0 (the chief) reports progress with trainingjob_progress and writes
checkpoint-epoch-<N>/model.weights.h5 then _COMPLETE into CHECKPOINT_DIR (the other workers write theirs
to a scratch directory, as the strategy requires every worker to save); every worker resumes from
RESUME_FROM. With TRAININGJOB_CHECKPOINT_ON_SIGTERM=1 (checkpoint.onPreemption) the chief answers SIGTERM at
the next batch's end with checkpoint-epoch-<E>-step-<S>/weights.npz (its weights read locally: saving through
the strategy would wait for the other workers) and exits 143; a run resumed from one skips the batches it
holds. At the end every worker prints its weights' checksum: equal everywhere.

Not run on this project's CI machines (no TensorFlow there): see the README's "Frameworks" table.
"""

import json
import os
import signal
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainingjob_progress import Progress  # noqa: E402


class Preemption(tf.keras.callbacks.Callback):
    """The chief, TRAININGJOB_CHECKPOINT_ON_SIGTERM=1: SIGTERM is noted; at the next batch's end the weights
    are written as checkpoint-epoch-<E>-step-<S> (after E epochs, at global step S) and the process exits."""

    def __init__(self, chief, epochs_done, steps, skipped):
        super().__init__()
        self.epoch, self.steps, self.skipped, self.requested = epochs_done, steps, skipped, False
        if chief and os.environ.get("CHECKPOINT_DIR") and os.environ.get("TRAININGJOB_CHECKPOINT_ON_SIGTERM") == "1":
            signal.signal(signal.SIGTERM, self._request)

    def _request(self, *_):
        self.requested = True

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if not self.requested:
            return
        step = self.epoch * self.steps + self.skipped + batch + 1
        path = os.path.join(os.environ["CHECKPOINT_DIR"], "checkpoint-epoch-%d-step-%d" % (self.epoch, step))
        os.makedirs(path, exist_ok=True)
        np.savez(os.path.join(path, "weights.npz"), *self.model.get_weights())
        with open(os.path.join(path, "_COMPLETE"), "w") as f:
            json.dump({"epoch": self.epoch, "step": step, "time": time.time()}, f)
        print("SIGTERM: checkpoint %s written at preemption (epoch %d, step %d)" % (path, self.epoch + 1, step), flush=True)
        os._exit(143)  # not sys.exit: the strategy's teardown would wait for the other workers


def resume(model):
    """(epochs done, global step) of RESUME_FROM, its weights loaded; (0, 0) without it."""
    src = os.environ.get("RESUME_FROM", "")
    if not src:
        return 0, 0
    with open(os.path.join(src, "_COMPLETE")) as f:
        marker = json.load(f)
    if os.path.exists(os.path.join(src, "weights.npz")):  # written at preemption
        saved = np.load(os.path.join(src, "weights.npz"))
        model.set_weights([saved["arr_%d" % i] for i in range(len(saved.files))])
    else:
        model.load_weights(os.path.join(src, "model.weights.h5"))
    print("resumed from %s (epoch %d, step %d)" % (src, marker["epoch"], marker.get("step", 0)), flush=True)
    return marker["epoch"], marker.get("step", 0)


def main():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    rank, world = int(task["index"]), strategy.num_replicas_in_sync
    chief = rank == 0
    epochs = int(os.environ.get("EPOCHS", "5"))
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4096, 8)).astype("float32")
    y = (x @ np.arange(1.0, 9.0) - 2.0).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    start, resume_step = resume(model)
    progress = Progress(total_epochs=epochs, rank=rank)
    every = int(os.environ.get("CHECKPOINT_FREQUENCY", "1") or 1)

    class Report(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            done = epoch + 1
            progress.report(epoch=done, loss=logs["loss"])
            if chief:
                print("epoch %d/%d loss=%.6f" % (done, epochs, logs["loss"]), flush=True)
            if os.environ.get("CHECKPOINT_DIR") and (done % every == 0 or done == epochs):
                # Every worker saves (the strategy's collectives need all of them); only the chief's copy counts.
                root = os.environ["CHECKPOINT_DIR"] if chief else tempfile.mkdtemp()
                path = os.path.join(root, "checkpoint-epoch-%d" % done)
                os.makedirs(path, exist_ok=True)
                self.model.save_weights(os.path.join(path, "model.weights.h5"))
                if chief:
                    with open(os.path.join(path, "_COMPLETE"), "w") as f:
                        json.dump({"epoch": done, "time": time.time()}, f)

    steps = len(data)
    skip = max(0, resume_step - start * steps)  # the batches of the first epoch a preemption checkpoint holds
    if skip and start < epochs:  # that epoch alone, without them
        model.fit(data.skip(skip), epochs=start + 1, initial_epoch=start, verbose=0,
                  callbacks=[Report(), Preemption(chief, start, steps, skip)])
        start += 1
    model.fit(data, epochs=epochs, initial_epoch=start, verbose=0, callbacks=[Report(), Preemption(chief, start, steps, 0)])
    checksum = float(sum(np.sum(w) for w in model.get_weights()))
    print("rank %d of %d checksum %.6f" % (rank, world, checksum), flush=True)
    progress.close()


if __name__ == "__main__":
    main()
