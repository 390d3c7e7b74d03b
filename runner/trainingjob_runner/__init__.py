"""The TrainingJob default runner (python -m trainingjob_runner) and its progress helper."""
