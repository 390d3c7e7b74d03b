"""The default runner: `python -m trainingjob_runner` trains spec.model on spec.dataset with
spec.hyperparameters, speaking the TrainingJob contract (DDP over env://, progress series on rank 0,
checkpoints in CHECKPOINT_DIR, resume from RESUME_FROM or the newest complete checkpoint). It is the
entrypoint of the operator's default PyTorch image, so the minimal TrainingJob (model, dataset,
numWorkers) really trains. `python -m trainingjob_runner --list` prints what it supports; an unknown name
exits with code 2 and says so (the TrainingJob fails at once with that message).
"""

import sys

from trainingjob_runner import settings as settings_mod


def main(argv):
    if "--list" in argv:
        print(settings_mod.describe())
        return 0
    try:
        import torchvision  # noqa: F401
        have_tv = True
    except ImportError:
        have_tv = False
    try:
        s = settings_mod.load(have_torchvision=have_tv)
    except settings_mod.SettingsError as e:
        print("trainingjob-runner: %s" % e, file=sys.stderr, flush=True)
        return 2
    from trainingjob_runner import train
    return train.run(s)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
