"""The Feast repository, built on the core: entities and feature views derived from the data contract
(:mod:`feature_repo.definitions`), the store's configuration (:mod:`feature_repo.config`, without
feast), the store opened through Feast (:mod:`feature_repo.store`) and the service's online features
(:mod:`feature_repo.online`)."""
