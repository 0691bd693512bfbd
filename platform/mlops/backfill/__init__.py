"""Columnar feature backfills: every transaction's window and time features, computed in bulk."""
