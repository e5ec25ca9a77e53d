"""Job-state controller adapters (ports/controllers.py): one module per controller, one HTTP client, the registry."""
