"""The model: an MLP over standardized numeric inputs and per-column categorical embeddings.

Preprocessing that must match at serving time (log1p, standardization) lives in the module as
buffers, so it is exported into the ONNX graph with the weights. String -> index encoding uses the
contract's category lists, with index 0 reserved for unknown values, so training and serving agree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import nn

from mlops.contract import DataContract

UNKNOWN_INDEX = 0
_STD_FLOOR = 1e-6
_SCALER_CHUNK_ROWS = 1 << 18


def fit_vocabularies(contract: DataContract) -> dict[str, list[str]]:
    """Vocabulary per categorical model input, taken from the contract (not from the data)."""
    vocabs: dict[str, list[str]] = {}
    for name in contract.model_inputs.categorical:
        categories = contract.column(name).categories
        if categories is None:  # the contract validator already forbids this; narrows the type
            raise ValueError(f"categorical model input {name!r} has no categories")
        vocabs[name] = list(categories)
    return vocabs


def encode(
    frame: pd.DataFrame, contract: DataContract, vocabs: dict[str, list[str]]
) -> tuple[np.ndarray, np.ndarray]:
    """Raw frame -> (numeric float32 [N, k] in contract order, category indices int64 [N, c])."""
    numeric = frame[contract.numeric_inputs].to_numpy(dtype=np.float32)
    columns: list[np.ndarray] = []
    for name in contract.model_inputs.categorical:
        # Index i+1 for the i-th category; anything else (unseen, missing) maps to UNKNOWN_INDEX.
        lookup = {value: i + 1 for i, value in enumerate(vocabs[name])}
        values = frame[name]
        if isinstance(values.dtype, pd.CategoricalDtype):  # as training reads splits: one lookup per category
            per_category = np.array([*(lookup.get(str(c), UNKNOWN_INDEX) for c in values.cat.categories),
                                     UNKNOWN_INDEX], np.int64)  # code -1, a missing value, indexes the last
            columns.append(per_category[values.cat.codes.to_numpy()])
        else:
            columns.append(values.astype(str).map(lookup).fillna(UNKNOWN_INDEX).to_numpy(np.int64))
    categorical = np.stack(columns, axis=1) if columns else np.zeros((len(frame), 0), np.int64)
    return np.ascontiguousarray(numeric), np.ascontiguousarray(categorical)


def _embedding_dim(cardinality: int) -> int:
    # Small vocabularies need few dimensions; cap keeps the model tiny and quick to export.
    return int(min(8, max(2, round(1.6 * cardinality**0.56))))


class TabularMLP(nn.Module):
    """MLP scoring one row; ``forward`` gives the calibrated probability of a positive, ``logits`` the raw score."""

    mean: torch.Tensor
    std: torch.Tensor
    log_mask: torch.Tensor
    calibration: torch.Tensor

    def __init__(
        self,
        log1p_mask: list[bool],
        cardinalities: list[int],
        hidden: tuple[int, ...] = (64, 32),
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        n_numeric = len(log1p_mask)
        self.register_buffer("log_mask", torch.tensor(log1p_mask, dtype=torch.bool))
        self.register_buffer("mean", torch.zeros(n_numeric))
        self.register_buffer("std", torch.ones(n_numeric))
        # Platt scaling (scale, bias) on the logit, fitted on validation after training; identity until then.
        self.register_buffer("calibration", torch.tensor([1.0, 0.0]))
        # +1 row per table for the unknown index 0.
        tables = [nn.Embedding(c + 1, _embedding_dim(c + 1)) for c in cardinalities]
        self.embeddings = nn.ModuleList(tables)
        width = n_numeric + sum(t.embedding_dim for t in tables)
        layers: list[nn.Module] = []
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    @classmethod
    def for_contract(
        cls, contract: DataContract, vocabs: dict[str, list[str]], hidden: tuple[int, ...] = (64, 32),
        dropout: float = 0.1,
    ) -> TabularMLP:
        cardinalities = [len(vocabs[n]) for n in contract.model_inputs.categorical]
        return cls(contract.log1p_mask, cardinalities, hidden=hidden, dropout=dropout)

    def _transform(self, numeric: torch.Tensor) -> torch.Tensor:
        return torch.where(self.log_mask, torch.log1p(torch.clamp(numeric, min=0.0)), numeric)

    @torch.no_grad()
    def fit_scaler(self, numeric: np.ndarray) -> None:
        """Fit the standardization buffers on training inputs (after log1p).

        Two passes over chunks in float64 (the mean, then the squared deviations from it): memory stays
        a chunk's whatever the training set's size, and no variance is lost to cancellation.
        """
        chunks = [slice(start, start + _SCALER_CHUNK_ROWS) for start in range(0, len(numeric), _SCALER_CHUNK_ROWS)]
        device = self.mean.device

        def transformed(rows: slice) -> torch.Tensor:
            return self._transform(torch.as_tensor(numeric[rows], dtype=torch.float32, device=device)).double()

        zeros = torch.zeros(len(self.mean), dtype=torch.float64, device=device)
        mean = sum((transformed(rows).sum(dim=0) for rows in chunks), zeros) / len(numeric)
        squares = sum((((transformed(rows) - mean) ** 2).sum(dim=0) for rows in chunks), zeros)
        self.mean.copy_(mean.float())
        self.std.copy_((squares / len(numeric)).sqrt().float().clamp(min=_STD_FLOOR))

    def logits(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        """Raw score [N]; training uses this with BCEWithLogitsLoss for numerical stability."""
        scaled = (self._transform(numeric) - self.mean) / self.std
        parts = [scaled] + [emb(categorical[:, i]) for i, emb in enumerate(self.embeddings)]
        out: torch.Tensor = self.mlp(torch.cat(parts, dim=1))
        return out.squeeze(1)

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        """Calibrated probability: the served score (calibration travels into the ONNX graph)."""
        return torch.sigmoid(self.logits(numeric, categorical) * self.calibration[0] + self.calibration[1])

    @torch.no_grad()
    def predict_proba(self, numeric: np.ndarray, categorical: np.ndarray) -> np.ndarray:
        """Probabilities for encoded arrays, in eval mode on the model's device."""
        device = self.mean.device
        was_training = self.training
        self.eval()
        try:
            probs = self(torch.as_tensor(numeric, device=device), torch.as_tensor(categorical, device=device))
        finally:
            self.train(was_training)
        result: np.ndarray = probs.cpu().numpy()
        return result
