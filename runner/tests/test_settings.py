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


class InputsTest(unittest.TestCase):
    """MODEL_DIR and DATASET_DIR (sources the operator delivered): the architecture and weights, the
    dataset's format, and what a model the runner cannot train is told."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.model, self.data = os.path.join(self.tmp, "model"), os.path.join(self.tmp, "data")
        os.makedirs(self.model)
        os.makedirs(self.data)

    def write(self, path, content="x"):
        with open(path, "w") as f:
            f.write(content)

    def test_weights_and_tensors(self):
        self.write(os.path.join(self.model, settings.MODEL_FILE), json.dumps({"architecture": "CNN"}))
        self.write(os.path.join(self.model, settings.WEIGHTS_FILE))
        self.write(os.path.join(self.data, settings.TENSORS_FILE))
        s = settings.load({"MODEL_NAME": "s3://models/cnn", "DATASET_NAME": "pvc://coco/x", "MODEL_DIR": self.model, "DATASET_DIR": self.data})
        self.assertEqual(("cnn", os.path.join(self.model, "model.pt"), self.data, "tensors"), (s.model, s.weights, s.dataset_dir, s.dataset_format))

    def test_imagefolder(self):
        os.makedirs(os.path.join(self.data, "cat"))
        s = settings.load({"MODEL_NAME": "mlp", "DATASET_NAME": "pvc://pets", "DATASET_DIR": self.data})
        self.assertEqual(("mlp", "", "imagefolder"), (s.model, s.weights, s.dataset_format))
        with self.assertRaises(settings.SettingsError) as e:
            settings.load({"MODEL_NAME": "mlp", "DATASET_NAME": "pvc://pets", "DATASET_DIR": self.data}, have_torchvision=False)
        self.assertIn("needs torchvision", str(e.exception))

    def test_rejections(self):
        hf = os.path.join(self.tmp, "bert")
        os.makedirs(hf)
        self.write(os.path.join(hf, "config.json"), "{}")
        cases = [
            ({"MODEL_NAME": "bert-base-uncased", "DATASET_NAME": "squad"}, "hf://ORG/NAME"),
            ({"MODEL_NAME": "hf://google-bert/bert-base-uncased", "DATASET_NAME": "mnist", "MODEL_DIR": hf}, "holds a Hugging Face model (config.json)"),
            ({"MODEL_NAME": "s3://m/x", "DATASET_NAME": "mnist", "MODEL_DIR": self.model}, "has no trainingjob-model.json"),
            ({"MODEL_NAME": "mlp", "DATASET_NAME": "s3://d/x", "DATASET_DIR": self.data}, "holds neither data.pt"),
        ]
        for env, want in cases:
            with self.subTest(env=env):
                with self.assertRaises(settings.SettingsError) as e:
                    settings.load(env)
                self.assertIn(want, str(e.exception))
