"""The service: the FastAPI app (`app`: the JSON API and the web UI), tokens and password users, alerts,
the GitHub webhook (`github_webhook`), the background loops run by the app's lifespan (`runtime`), and
the process that serves them (`embedded`: `benchfarm serve` and `up`)."""
