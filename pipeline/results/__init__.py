"""Results: the store that results flow into (`store`: models, migrations, ingest, queries, the
comparison and its history's analysis) and the pure statistics it applies (`analysis`)."""
