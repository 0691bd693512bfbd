"""A data scientist's own ``torch.nn.Module`` inside the platform's preprocessing and calibration.

The contract a user module meets (docs/own-model.md, "The torch family"):

- it is importable where the pipeline runs and named ``package.module:Class`` (or ``package.module.Class``);
- it is constructed as ``Class(n_numeric, cardinalities, **params)``: ``n_numeric`` numeric inputs, and
  per categorical input (contract order) its number of indices, unknown included (``nn.Embedding(c, d)``
  takes it as it is); ``params`` are ``MLOPS_MODEL_PARAMS`` less ``module``;
- ``forward(numeric, categorical)`` takes float32 [N, n_numeric], already log1p'd where the contract says
  and standardized on the train split, and int64 [N, c] category indices (c may be 0), and returns the
  raw score (a logit) as [N] (or [N, 1]); no sigmoid: the platform's loss and calibration take logits;
- it exports with ``torch.onnx.export(dynamo=True)`` (plain tensor operations do).

:class:`UserNetwork` is a :class:`~mlops.model.TabularMLP` whose layers are the user's: the MLP's
standardization buffers, its Platt calibration buffer, its ``forward`` and ``predict_proba`` come with the
class (unchanged, so the platform loop, the export and the parity check treat both alike); only
``logits`` differs.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.model import TabularMLP

_PROBE_ROWS = 2


def import_module_class(path: str) -> type[nn.Module]:
    """``package.module:Class`` or ``package.module.Class`` -> the class; a one-line ConfigError otherwise."""
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"torch module {path!r} does not import: {exc}", field="model_params") from exc
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        raise ConfigError(f"torch module {path!r} is not a torch.nn.Module subclass", field="model_params")
    return found


def cardinalities(contract: DataContract, vocabs: dict[str, list[str]]) -> list[int]:
    """Per categorical input, the indices it takes: its categories plus the unknown index 0."""
    return [len(vocabs[name]) + 1 for name in contract.model_inputs.categorical]


class UserNetwork(TabularMLP):
    """The platform's preprocessing and calibration around ``net``, the user's module."""

    def __init__(self, net: nn.Module, log1p_mask: list[bool]) -> None:
        # TabularMLP's own layers are not wanted: build the module and the same buffers, in the same order.
        nn.Module.__init__(self)
        n_numeric = len(log1p_mask)
        self.register_buffer("log_mask", torch.tensor(log1p_mask, dtype=torch.bool))
        self.register_buffer("mean", torch.zeros(n_numeric))
        self.register_buffer("std", torch.ones(n_numeric))
        self.register_buffer("calibration", torch.tensor([1.0, 0.0]))
        self.net = net

    @classmethod
    def build(cls, path: str, params: dict[str, Any], contract: DataContract,
              vocabs: dict[str, list[str]]) -> UserNetwork:
        """The user's module at ``path`` constructed with ``params``; a one-line ConfigError where it refuses."""
        module_class = import_module_class(path)
        try:
            net = module_class(len(contract.numeric_inputs), cardinalities(contract, vocabs), **params)
        except (TypeError, ValueError) as exc:
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"torch module {path!r} refused its params {params}: {first_line}",
                              field="model_params") from exc
        return cls(net, contract.log1p_mask)

    def logits(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        scaled = (self._transform(numeric) - self.mean) / self.std
        out: torch.Tensor = self.net(scaled, categorical)
        return out.reshape(-1)

    @torch.no_grad()
    def probe(self, path: str, n_categorical: int) -> None:
        """One forward pass on a small batch before training (of a throwaway instance: it is left in eval
        mode): a module that fails it stops in one line, not minutes later in the first epoch."""
        numeric = torch.zeros(_PROBE_ROWS, len(self.mean))
        categorical = torch.zeros(_PROBE_ROWS, n_categorical, dtype=torch.int64)
        try:
            out = self.net.eval()(numeric, categorical)
        except (RuntimeError, TypeError, ValueError, IndexError) as exc:
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"torch module {path!r} fails forward(numeric, categorical): {first_line}",
                              field="model_params") from exc
        if not isinstance(out, torch.Tensor) or tuple(out.shape) not in ((_PROBE_ROWS,), (_PROBE_ROWS, 1)):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ConfigError(f"torch module {path!r} answers {shape} for {_PROBE_ROWS} rows; forward must "
                              f"return one logit per row, [N] or [N, 1]", field="model_params")
