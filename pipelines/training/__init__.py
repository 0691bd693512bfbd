"""Training internals: the train step, its entry point under torchrun, checkpoints, tracking, `mlops train`."""
