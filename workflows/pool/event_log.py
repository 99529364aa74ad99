"""The pool's events: kept by the reconciler shell for every kind (`workflows/reconciler/events.py`)."""

from devicepool.workflows.reconciler.events import LIMIT, EventType, PoolEvent, PoolEvents, record

__all__ = ["LIMIT", "EventType", "PoolEvent", "PoolEvents", "record"]
