"""Orchestration: the pipeline declared once (declaration.py) and what runs it: Kubeflow, inline, DVC."""
