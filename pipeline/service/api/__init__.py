"""The JSON API under /api/v1: request dependencies (`deps`), response schemas (`schemas`), one router
per resource (`routes`). `pipeline.service.app` mounts them."""
