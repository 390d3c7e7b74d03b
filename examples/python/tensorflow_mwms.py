"""TensorFlow MultiWorkerMirroredStrategy under the TrainingJob environment contract (framework: tensorflow).

The strategy reads TF_CONFIG (every worker's host:port and this worker's index) by itself. Every worker
fits a small Keras model on a synthetic regression set (the strategy shards it and all-reduces the
gradients). Worker 0 (the chief) reports progress with trainingjob_progress and writes
checkpoint-epoch-<N>/model.weights.h5 then _COMPLETE into CHECKPOINT_DIR (the other workers write theirs
to a scratch directory, as the strategy requires every worker to save); every worker resumes from
RESUME_FROM. At the end every worker prints its weights' checksum: equal everywhere.

Not run on this project's CI machines (no TensorFlow there): see the README's "Frameworks" table.
"""

import json
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainingjob_progress import Progress  # noqa: E402


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
    start = 0
    if os.environ.get("RESUME_FROM"):
        model.load_weights(os.path.join(os.environ["RESUME_FROM"], "model.weights.h5"))
        with open(os.path.join(os.environ["RESUME_FROM"], "_COMPLETE")) as f:
            start = json.load(f)["epoch"]
        print("resumed from %s (epoch %d)" % (os.environ["RESUME_FROM"], start), flush=True)
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

    model.fit(data, epochs=epochs, initial_epoch=start, verbose=0, callbacks=[Report()])
    checksum = float(sum(np.sum(w) for w in model.get_weights()))
    print("rank %d of %d checksum %.6f" % (rank, world, checksum), flush=True)
    progress.close()


if __name__ == "__main__":
    main()
