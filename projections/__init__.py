"""The functional core: pure folds of log records into immutable projections.

Nothing in this package reads a clock, touches a file or draws a random number:
time arrives in records (``ts``) or as a ``now`` argument.
"""

from snerd.projections.delta import Delta
from snerd.projections.state import DeadLetter, QueueState, advance, apply, empty, fold
from snerd.projections.task import ACTIVE, BLOCKED, DELAYED, READY, Claim, Task

__all__ = [
    "ACTIVE",
    "BLOCKED",
    "DELAYED",
    "READY",
    "Claim",
    "DeadLetter",
    "Delta",
    "QueueState",
    "Task",
    "advance",
    "apply",
    "empty",
    "fold",
]
