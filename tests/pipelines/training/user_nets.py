"""Networks a data scientist names by import path in a test (``user_nets:Wide``): the torch family's
contract, kept and broken."""

from __future__ import annotations

import torch
from torch import nn


class Wide(nn.Module):
    """Embeddings for the categories beside the (already standardized) numeric inputs, then one hidden layer."""

    def __init__(self, n_numeric: int, cardinalities: list[int], hidden: int = 32, embedding_dim: int = 4) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, embedding_dim) for c in cardinalities)
        width = n_numeric + embedding_dim * len(cardinalities)
        self.layers = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        parts = [numeric, *(table(categorical[:, i]) for i, table in enumerate(self.embeddings))]
        out: torch.Tensor = self.layers(torch.cat(parts, dim=1))
        return out.squeeze(1)


class TwoLogits(Wide):
    """Answers two scores per row: not the contract's one logit."""

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        one = super().forward(numeric, categorical)
        return torch.stack([one, -one], dim=1)


class NotAModule:
    """A plain class: the torch family trains torch modules only."""
