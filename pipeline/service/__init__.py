"""The service: the FastAPI app (`app`: the JSON API and the web UI), tokens and password users, alerts,
and the process that serves them with its background threads (`embedded`: `benchfarm serve` and `up`)."""
