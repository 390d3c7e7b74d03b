"""Unit tests of the runner's settings: standard library only (no framework needed).

    python3 -m unittest discover -s runner/tests
"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from trainingjob_runner import settings  # noqa: E402


def config(tmp, **spec):
    path = os.path.join(tmp, "config.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


class LoadTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def test_hyperparameters_and_contract(self):
        path = config(self.tmp, model="ResNet18", dataset="cifar10", hyperparameters={
            "epochs": 3, "batchSize": 16, "learningRate": 0.1, "optimizer": "SGD", "warmupSteps": 5,
            "gradientAccumulationSteps": 2, "mixedPrecision": True, "additionalParams": {"samples": "100", "dataDir": "/data"}})
        s = settings.load({"TRAININGJOB_CONFIG": path, "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "DIST_BACKEND": "nccl",
                           "CHECKPOINT_DIR": "/ckpt/ns/a", "CHECKPOINT_FREQUENCY": "2", "RESUME_FROM": "/ckpt/ns/a/checkpoint-epoch-2"})
        got = (s.model, s.dataset, s.epochs, s.batch_size, s.learning_rate, s.optimizer, s.warmup_steps, s.grad_accum,
               s.mixed_precision, s.samples, s.data_dir, s.rank, s.world_size, s.backend, s.checkpoint_dir, s.checkpoint_every,
               s.resume_from, s.shape, s.classes)
        want = ("resnet18", "cifar10", 3, 16, 0.1, "sgd", 5, 2, True, 100, "/data", 1, 4, "nccl", "/ckpt/ns/a", 2,
                "/ckpt/ns/a/checkpoint-epoch-2", (3, 32, 32), 10)
        self.assertEqual(want, got)

    def test_defaults_from_env_only(self):
        s = settings.load({"MODEL_NAME": "mlp", "DATASET_NAME": "synthetic"})
        self.assertEqual(("mlp", "synthetic", 10, 64, 0.001, "adam", 0, 1, False, 0, 1, "gloo", ""),
                         (s.model, s.dataset, s.epochs, s.batch_size, s.learning_rate, s.optimizer, s.warmup_steps,
                          s.grad_accum, s.mixed_precision, s.rank, s.world_size, s.backend, s.checkpoint_dir))

    def test_rejections_name_what_is_supported(self):
        cases = [
            ({"MODEL_NAME": "gpt-9", "DATASET_NAME": "mnist"}, True, "unknown model 'gpt-9': the default runner trains cnn, mlp, mobilenet_v3_small, resnet18"),
            ({"MODEL_NAME": "cnn", "DATASET_NAME": "imagenet"}, True, "unknown dataset 'imagenet': the default runner reads cifar10, fakedata, fashion-mnist, mnist, synthetic"),
            ({"MODEL_NAME": "resnet18", "DATASET_NAME": "synthetic"}, False, "need torchvision"),
            ({"MODEL_NAME": "cnn", "DATASET_NAME": "synthetic", "CHECKPOINT_URI": "s3://b/ns/a"}, True, "pvc or nfs"),
            ({"MODEL_NAME": "cnn", "DATASET_NAME": "synthetic", "RANK": "x"}, True, "RANK must be a whole number"),
        ]
        for env, tv, want in cases:
            with self.subTest(env=env):
                with self.assertRaises(settings.SettingsError) as e:
                    settings.load(env, have_torchvision=tv)
                self.assertIn(want, str(e.exception))

    def test_unknown_optimizer(self):
        path = config(self.tmp, model="mlp", dataset="synthetic", hyperparameters={"optimizer": "lion"})
        with self.assertRaises(settings.SettingsError) as e:
            settings.load({"TRAININGJOB_CONFIG": path})
        self.assertIn("adam, adamw, sgd, rmsprop", str(e.exception))

    def test_describe_lists_everything(self):
        text = settings.describe()
        for name in list(settings.MODELS) + list(settings.DATASETS):
            self.assertIn(name, text)


if __name__ == "__main__":
    unittest.main()
