"""The Feast repository: entities and feature views derived from the data contract."""
