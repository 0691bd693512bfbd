"""CI/CD gates: checks that block a change or a model, run locally (``make gates``) and in CI.

``python -m ci_gates [GATE ...]`` runs them in order and prints one line per gate; see
docs/gates.md.
"""
