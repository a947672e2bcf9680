"""Scheduling: a sequential order per computation (memory-aware) and CUDA stream assignment."""

from .sequential import (
    ALGORITHMS,
    candidate_orders,
    candidate_schedules,
    schedule_module,
    store_schedule,
)
from .streams import StreamAssignment, assign_streams

__all__ = ["ALGORITHMS", "StreamAssignment", "assign_streams", "candidate_orders",
           "candidate_schedules", "schedule_module", "store_schedule"]
