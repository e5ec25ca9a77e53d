"""Where job events come from when no controller pushes them: storage notifications, the reconciling sweep,
controller pollers (Iris, Ray) and push adapters (Kubernetes LogEntries via a Cloud Logging sink).

Every source turns what it saw into a `JobEvent` *hint* for `job-events`; the pipeline's claim keys, not the
events, decide what runs (docs/events.md). Modules here are pure over the ports: wire shapes are pydantic models,
clients take their HTTP transport as an argument, and nothing here imports the runtime or an adapter.
"""
