"""cachemigrate: migrate transformers modeling code from tuple KV caches to the Cache API."""

__version__ = "0.2.0"
