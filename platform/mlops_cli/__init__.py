"""The ``mlops`` command line: the top layer, built on the core (mlops) and on pipelines/, serving/,
monitoring/ and feature_repo/, which never import it."""
