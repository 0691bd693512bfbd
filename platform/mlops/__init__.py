"""The MLOps platform's shared core: settings, data contracts, data, registry, model export."""

__version__ = "0.1.0"
