"""What the default runner trains, read from the TrainingJob contract: standard library only, so that it is
unit-tested without a framework (runner/tests).

The operator mounts config.json at TRAININGJOB_CONFIG (model, dataset, hyperparameters) and sets the
worker environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*, DIST_BACKEND, METRICS_PORT, CHECKPOINT_*,
RESUME_FROM); see the README's "Environment contract".
"""

import json
import os
from dataclasses import dataclass, field

# The built-in set. Models: name -> (kind, needs torchvision). Datasets: name -> (input shape, classes,
# needs torchvision, downloads).
MODELS = {
    "mlp": "a 2-layer perceptron",
    "cnn": "a small 2-conv network (MNIST-sized inputs or larger)",
    "resnet18": "torchvision's ResNet-18",
    "resnet34": "torchvision's ResNet-34",
    "resnet50": "torchvision's ResNet-50",
    "mobilenet_v3_small": "torchvision's MobileNetV3-Small",
}
TORCHVISION_MODELS = {"resnet18", "resnet34", "resnet50", "mobilenet_v3_small"}

DATASETS = {
    # name: (channels, height, width, classes)
    "synthetic": (1, 28, 28, 10),
    "fakedata": (3, 32, 32, 10),
    "mnist": (1, 28, 28, 10),
    "fashion-mnist": (1, 28, 28, 10),
    "cifar10": (3, 32, 32, 10),
}
TORCHVISION_DATASETS = {"fakedata", "mnist", "fashion-mnist", "cifar10"}
DOWNLOADED_DATASETS = {"mnist", "fashion-mnist", "cifar10"}

OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")


class SettingsError(ValueError):
    """The job asks for something the runner cannot do; the message says what is supported."""


@dataclass
class Settings:
    model: str
    dataset: str
    epochs: int = 10
    batch_size: int = 64
    learning_rate: float = 0.001
    optimizer: str = "adam"
    warmup_steps: int = 0
    grad_accum: int = 1
    mixed_precision: bool = False
    samples: int = 4096
    data_dir: str = "/tmp/trainingjob-data"
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = "gloo"
    checkpoint_dir: str = ""
    checkpoint_every: int = 1
    resume_from: str = ""
    extra: dict = field(default_factory=dict)
    # Delivered inputs (MODEL_DIR, DATASET_DIR): the weights to fine-tune from, the dataset's directory and
    # its format ("tensors": data.pt; "imagefolder": a directory per class), and the shape and classes
    # read from the data once loaded.
    weights: str = ""
    dataset_dir: str = ""
    dataset_format: str = ""
    loaded_shape: tuple = None
    loaded_classes: int = 0

    @property
    def shape(self):
        return self.loaded_shape or DATASETS[self.dataset][:3]

    @property
    def classes(self):
        return self.loaded_classes or DATASETS[self.dataset][3]


# MODEL_FILE names, in MODEL_DIR, the architecture of the weights in WEIGHTS_FILE (a state_dict saved with
# torch.save): {"architecture": "resnet18"}.
MODEL_FILE = "trainingjob-model.json"
WEIGHTS_FILE = "model.pt"
TENSORS_FILE = "data.pt"

HF_HINT = ("to fine-tune a Hugging Face model, name it as spec.model: hf://ORG/NAME (the operator fetches it to MODEL_DIR) and "
           "run your own script with spec.image and spec.command, loading it with AutoModel.from_pretrained(os.environ['MODEL_DIR'])")


def _model_from_dir(model_dir):
    """The architecture MODEL_DIR's weights are for, and the weights' path."""
    spec = os.path.join(model_dir, MODEL_FILE)
    if not os.path.exists(spec):
        if os.path.exists(os.path.join(model_dir, "config.json")):
            raise SettingsError("MODEL_DIR %s holds a Hugging Face model (config.json): the default runner trains %s; %s" % (model_dir, _names(MODELS), HF_HINT))
        raise SettingsError("MODEL_DIR %s has no %s naming the architecture (one of %s) of its %s" % (model_dir, MODEL_FILE, _names(MODELS), WEIGHTS_FILE))
    with open(spec) as f:
        arch = str(json.load(f).get("architecture", "")).strip().lower()
    if arch not in MODELS:
        raise SettingsError("%s names architecture %r: the default runner trains %s" % (spec, arch, _names(MODELS)))
    weights = os.path.join(model_dir, WEIGHTS_FILE)
    if not os.path.exists(weights):
        raise SettingsError("MODEL_DIR %s has no %s (a state_dict of %s saved with torch.save)" % (model_dir, WEIGHTS_FILE, arch))
    return arch, weights


def _dataset_format(dataset_dir):
    """How DATASET_DIR holds the data: tensors (data.pt) or an ImageFolder tree (a directory per class)."""
    if os.path.exists(os.path.join(dataset_dir, TENSORS_FILE)):
        return "tensors"
    if any(os.path.isdir(os.path.join(dataset_dir, d)) and not d.startswith(".") for d in os.listdir(dataset_dir)):
        return "imagefolder"
    raise SettingsError("DATASET_DIR %s holds neither %s ({'x': images N x C x H x W, 'y': labels N}) nor a directory of images per class" % (dataset_dir, TENSORS_FILE))


def _names(d):
    return ", ".join(sorted(d))


def _int(value, name, low=1):
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise SettingsError("%s must be a whole number, not %r" % (name, value))
    if v < low:
        raise SettingsError("%s must be at least %d, not %d" % (name, low, v))
    return v


def load(environ=None, have_torchvision=True):
    """Settings from the environment and config.json; raises SettingsError naming what is supported."""
    env = os.environ if environ is None else environ
    config = {}
    path = env.get("TRAININGJOB_CONFIG", "")
    if path and os.path.exists(path):
        with open(path) as f:
            config = json.load(f)
    model = (config.get("model") or env.get("MODEL_NAME", "")).strip().lower()
    dataset = (config.get("dataset") or env.get("DATASET_NAME", "")).strip().lower()
    weights, dataset_dir, dataset_format = "", env.get("DATASET_DIR", ""), ""
    if env.get("MODEL_DIR"):
        model, weights = _model_from_dir(env["MODEL_DIR"])
    if dataset_dir:
        dataset, dataset_format = "synthetic", _dataset_format(dataset_dir)  # the shape comes from the data
    if model not in MODELS:
        hint = "; " + HF_HINT if "/" in model or "bert" in model or "gpt" in model or "llama" in model else ""
        raise SettingsError("unknown model %r: the default runner trains %s (or set spec.image and spec.command to run your own script)%s" % (model, _names(MODELS), hint))
    if dataset not in DATASETS:
        raise SettingsError("unknown dataset %r: the default runner reads %s, or a source delivered at DATASET_DIR (or set spec.image and spec.command to run your own script)" % (dataset, _names(DATASETS)))
    if dataset_format == "imagefolder" and not have_torchvision:
        raise SettingsError("DATASET_DIR %s is a directory of images per class, which needs torchvision" % dataset_dir)
    if not have_torchvision and (model in TORCHVISION_MODELS or dataset in TORCHVISION_DATASETS):
        raise SettingsError("model %r / dataset %r need torchvision, which this image lacks: use mlp or cnn with synthetic" % (model, dataset))
    if env.get("CHECKPOINT_URI") and not env.get("CHECKPOINT_DIR"):
        raise SettingsError("the default runner writes checkpoints to a mounted volume (checkpoint.storage type pvc or nfs), not to %s" % env["CHECKPOINT_URI"])
    hp = config.get("hyperparameters") or {}
    extra = dict(hp.get("additionalParams") or {})
    s = Settings(model=model, dataset=dataset, extra=extra, weights=weights, dataset_dir=dataset_dir, dataset_format=dataset_format)
    s.epochs = _int(hp.get("epochs", s.epochs), "hyperparameters.epochs")
    s.batch_size = _int(hp.get("batchSize", s.batch_size), "hyperparameters.batchSize")
    s.learning_rate = float(hp.get("learningRate", s.learning_rate))
    s.optimizer = (hp.get("optimizer") or s.optimizer).lower()
    if s.optimizer not in OPTIMIZERS:
        raise SettingsError("unknown optimizer %r: the default runner uses %s" % (s.optimizer, ", ".join(OPTIMIZERS)))
    s.warmup_steps = _int(hp.get("warmupSteps", 0), "hyperparameters.warmupSteps", low=0)
    s.grad_accum = _int(hp.get("gradientAccumulationSteps", 1), "hyperparameters.gradientAccumulationSteps")
    s.mixed_precision = bool(hp.get("mixedPrecision", False))
    s.samples = _int(extra.get("samples", s.samples), "additionalParams.samples")
    s.data_dir = extra.get("dataDir", s.data_dir)
    s.rank = _int(env.get("RANK", "0"), "RANK", low=0)
    s.world_size = _int(env.get("WORLD_SIZE", "1"), "WORLD_SIZE")
    s.local_rank = _int(env.get("LOCAL_RANK", "0"), "LOCAL_RANK", low=0)
    s.backend = env.get("DIST_BACKEND", "gloo") or "gloo"
    s.checkpoint_dir = env.get("CHECKPOINT_DIR", "")
    s.checkpoint_every = _int(env.get("CHECKPOINT_FREQUENCY", "1") or "1", "CHECKPOINT_FREQUENCY")
    s.resume_from = env.get("RESUME_FROM", "")
    return s


def describe():
    """The supported set, for --list and the README."""
    lines = ["models:"] + ["  %-20s %s" % (k, MODELS[k]) for k in sorted(MODELS)]
    lines += ["datasets:"] + ["  %-20s %dx%dx%d, %d classes%s" % ((k,) + DATASETS[k] + (" (downloaded)" if k in DOWNLOADED_DATASETS else "",))
                              for k in sorted(DATASETS)]
    return "\n".join(lines)
