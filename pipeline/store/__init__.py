"""The results store: models, migrations, ingestion (also other tools' formats), the read queries,
comparison, compile statistics, triage and the history analysis that runs on every ingest."""
