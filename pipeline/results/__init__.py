"""The results store: models, migrations, ingestion, comparison, and the service."""
