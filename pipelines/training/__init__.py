"""Training internals: the trainer, its entry point (alone or under torchrun), checkpoints, ranks, tracking,
the ONNX export, hyper-parameter search and ``mlops train``. The pipeline's train and export tasks and
``mlops train`` call the same functions here, so both leave the same model file."""
