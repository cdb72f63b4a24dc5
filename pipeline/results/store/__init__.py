"""The results store: models, migrations, ingestion (also other tools' formats), the read queries,
comparison, compile statistics, triage and the history analysis that runs on every ingest; the job
queue, runs, builds, bisections, accounts, deliveries and reports as stored. Its one door: outside
this package nothing imports its models or SQLAlchemy (an import-linter contract); the rest calls
its query and command functions, with sessions from `db.session_scope`."""
