"""Pipeline steps as plain typed functions; KFP components and CLI commands wrap them."""
