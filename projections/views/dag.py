"""The DAG around one task: its ancestors, its descendants and their other parents.

Nodes carry a ``level`` for drawing (the root at 0, parents below zero, children
above). A parent that is nowhere to be found is shown as ``absent``, which the
dispatcher treats as completed (seed 003). ``finished`` looks up a recently finished
task's row (they left the projection), or None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from snerd.projections import events as ev
from snerd.projections.state import QueueState
from snerd.projections.views.status import state_of

DAG_LIMIT: Final = 200
"""Nodes at most; a larger DAG is cut and marked ``truncated``."""

Finished = Callable[[str], Mapping[str, Any] | None]
"""A recently finished task's row by id (with its ``state``), or None."""


def parents_of(state: QueueState, finished: Finished, task_id: str) -> tuple[str, ...]:
    """The DAG parents of any id the projection or ``finished`` knows, else ()."""
    task = state.tasks.get(task_id)
    if task is not None:
        return task.parents
    entry = state.dlq.get(task_id)
    if entry is not None:
        return entry.task.parents
    record = finished(task_id)
    if record is not None:
        return tuple(record.get(ev.F_TRIGGER_AFTER_IDS) or ())
    return ()


def children_of(state: QueueState, task_id: str) -> list[str]:
    """The live and dead-lettered tasks naming ``task_id`` as a parent, sorted."""
    kids = set(state.refs.get(task_id, ()))
    kids.update(e.key for e in state.dlq.values() if task_id in e.task.parents)
    return sorted(k for k in kids if k != task_id)


def ancestors(state: QueueState, finished: Finished, task_id: str) -> set[str]:
    """The task's parents, transitively, as far as the projection and ``finished`` know."""
    out: set[str] = set()
    frontier = [task_id]
    while frontier:
        for parent in parents_of(state, finished, frontier.pop()):
            if parent not in out and parent != task_id:
                out.add(parent)
                frontier.append(parent)
    return out


class _Graph:
    def __init__(self, state: QueueState, finished: Finished, now: float) -> None:
        self.state = state
        self.finished = finished
        self.now = now
        self.levels: dict[str, int] = {}
        self.edges: set[tuple[str, str]] = set()
        self.truncated = False

    def parents(self, task_id: str) -> tuple[str, ...]:
        return parents_of(self.state, self.finished, task_id)

    def place(self, task_id: str, level: int) -> bool:
        if task_id in self.levels:
            return False
        if len(self.levels) >= DAG_LIMIT:
            self.truncated = True
            return False
        self.levels[task_id] = level
        return True

    def walk_up(self, root: str) -> None:
        frontier = [root]
        while frontier:
            node = frontier.pop(0)
            for parent in self.parents(node):
                self.edges.add((parent, node))
                if self.place(parent, self.levels[node] - 1):
                    frontier.append(parent)

    def walk_down(self, root: str) -> None:
        frontier = [root]
        while frontier:
            node = frontier.pop(0)
            for child in children_of(self.state, node):
                self.edges.add((node, child))
                if self.place(child, self.levels[node] + 1):
                    frontier.append(child)
                for other in self.parents(child):  # fan-in: the child's other parents
                    self.edges.add((other, child))
                    self.place(other, self.levels[child] - 1)

    def node(self, task_id: str) -> dict[str, Any]:
        record = self.finished(task_id)
        task = self.state.tasks.get(task_id)
        entry = self.state.dlq.get(task_id)
        if task is not None:
            task_type: Any = task.type
        elif entry is not None:
            task_type = entry.task.type
        else:
            task_type = record.get(ev.F_TASK_TYPE) if record is not None else None
        return {
            "id": task_id,
            "type": task_type,
            "state": state_of(self.state, task_id, self.now, record),
            "level": self.levels[task_id],
        }


def dag_view(state: QueueState, root: str, *, finished: Finished, now: float) -> dict[str, Any]:
    """``{"root", "nodes": [{id, type, state, level}], "edges": [[parent, child]],
    "truncated"}``."""
    graph = _Graph(state, finished, now)
    graph.place(root, 0)
    graph.walk_up(root)
    graph.walk_down(root)
    nodes = sorted((graph.node(t) for t in graph.levels), key=lambda n: (n["level"], n["id"]))
    edges = sorted([p, c] for p, c in graph.edges if p in graph.levels and c in graph.levels)
    return {"root": root, "nodes": nodes, "edges": edges, "truncated": graph.truncated}
