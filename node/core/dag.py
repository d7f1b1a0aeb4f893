"""Derived views of a job's task DAG, computed from the (frozen) JobSpec and memoized.

Nothing here is stored in State: a snapshot restore or a replay recomputes the same views.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache

from gnomon.node.core.model import JobSpec, TaskSpec


@dataclass(frozen=True, slots=True)
class Graph:
    """Read-only adjacency of one JobSpec. Never mutate the dicts: they are shared."""

    tasks: dict[str, TaskSpec]
    deps: dict[str, tuple[str, ...]]
    dependents: dict[str, tuple[str, ...]]
    # Topological order (dependencies first), ties broken by spec order.
    order: tuple[str, ...]
    rank: dict[str, int]

    def descendants(self, name: str) -> tuple[str, ...]:
        """Every task that transitively depends on `name`, in topological order."""
        seen: dict[str, None] = {}
        stack = list(self.dependents.get(name, ()))
        while stack:
            current = stack.pop()
            if current not in seen:
                seen[current] = None
                stack.extend(self.dependents[current])
        return tuple(sorted(seen, key=self.rank.__getitem__))


@lru_cache(maxsize=1024)
def graph(spec: JobSpec) -> Graph:
    """The adjacency of `spec` (a pure function of its value, hence safe to memoize)."""
    tasks = {task.name: task for task in spec.tasks}
    deps = {task.name: tuple(dict.fromkeys(task.depends_on)) for task in spec.tasks}
    dependents: dict[str, list[str]] = {name: [] for name in tasks}
    for name, names in deps.items():
        for dep in names:
            if dep in dependents:
                dependents[dep].append(name)
    order = _topological_order(deps, dependents)
    return Graph(
        tasks=tasks,
        deps=deps,
        dependents={name: tuple(names) for name, names in dependents.items()},
        order=order,
        rank={name: index for index, name in enumerate(order)},
    )


def _topological_order(
    deps: dict[str, tuple[str, ...]], dependents: dict[str, list[str]]
) -> tuple[str, ...]:
    # Kahn's algorithm, always taking the earliest task in spec order that is free.
    names = list(deps)
    position = {name: index for index, name in enumerate(names)}
    missing = {name: sum(1 for dep in task_deps if dep in deps) for name, task_deps in deps.items()}
    free = [position[name] for name, count in missing.items() if count == 0]
    heapq.heapify(free)
    order: dict[str, None] = {}
    while free:
        current = names[heapq.heappop(free)]
        order[current] = None
        for child in dependents[current]:
            missing[child] -= 1
            if missing[child] == 0:
                heapq.heappush(free, position[child])
    # A cyclic spec is rejected before it is stored; stay total anyway.
    return tuple(order) + tuple(name for name in names if name not in order)
