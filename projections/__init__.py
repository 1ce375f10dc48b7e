"""The functional core: pure folds of log records into immutable projections.

Nothing in this package reads a clock, touches a file or draws a random number:
time arrives in records (``ts``) or as a ``now`` argument.
"""

if __name__ != "snerd.projections":  # one import name per module (README, "Repository layout")
    raise ImportError(
        f"import snerd.projections, not {__name__}: one module under two names would be two "
        "modules, with two different copies of every class in it"
    )

from snerd.projections.delta import Delta
from snerd.projections.replay import bulk_fold
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
    "bulk_fold",
    "empty",
    "fold",
]
