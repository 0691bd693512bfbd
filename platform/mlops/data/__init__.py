"""Raw data: the synthetic transaction generator and ingestion into immutable snapshots."""
