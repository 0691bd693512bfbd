"""A small model of Kueue's admission, run on the ClusterQueues the platform ships.

What it models (Kueue v0.19 semantics, simplified):
- A workload is a gang: ``pods`` identical pods, admitted together or not at all. Its quota is
  reserved for all pods at once, so a workload that does not fit holds nothing.
- Quota per (flavor, resource): a ClusterQueue may use its nominalQuota, plus up to its
  borrowingLimit of what other queues of the cohort leave unused; the cohort never uses more than
  the sum of its nominal quotas.
- Flavors are tried in the resource group's order, restricted to those the workload's node
  selector allows. Each flavor is rated: fits within nominal, fits by preempting, fits by borrowing,
  both; ``flavorFungibility.preference`` orders preemption against borrowing; ties keep group order.
- Preemption: ``reclaimWithinCohort`` (Any, or LowerPriority) evicts workloads of other queues
  that are borrowing in that flavor, only while the preempting queue stays within its nominal
  quota; ``withinClusterQueue: LowerPriority`` evicts lower-priority workloads of the same queue.
  Lowest priority and newest go first; a victim found unnecessary afterwards is spared. Evicted
  workloads are requeued.
- Queueing: BestEffortFIFO, higher priority first, then submission order.

Not modelled: cpu/memory quotas (one resource group per workload), lendingLimit,
borrowWithinCohort, fair sharing, hierarchical cohorts, admission checks, topology-aware scheduling,
and node-level fit (Kueue admits on quota; kube-scheduler then places pods).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mlops.errors import ManifestError

Key = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True)
class ClusterQueue:
    name: str
    cohort: str | None
    groups: tuple[tuple[frozenset[str], tuple[str, ...]], ...]  # (covered resources, flavors in order)
    nominal: dict[Key, int]
    borrowing_limit: dict[Key, float]
    reclaim_within_cohort: str = "Never"
    within_cluster_queue: str = "Never"
    preference: str = "BorrowingOverPreemption"


@dataclass(frozen=True)
class Workload:
    name: str
    queue: str
    pods: int
    per_pod: dict[str, int]
    priority: int = 0
    flavors: frozenset[str] | None = None  # what the node selector allows; None: any

    def total(self, resource: str) -> int:
        return self.pods * self.per_pod[resource]


@dataclass
class Admission:
    workload: Workload
    flavor: str
    order: int


@dataclass
class Cluster:
    """The cohort state: admitted workloads, pending ones, and what happened."""

    queues: dict[str, ClusterQueue]
    admitted: dict[str, Admission] = field(default_factory=dict)
    pending: list[tuple[int, Workload]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    _clock: int = 0

    def usage(self, queue: str, key: Key) -> int:
        flavor, resource = key
        return sum(a.workload.total(resource) for a in self.admitted.values()
                   if a.workload.queue == queue and a.flavor == flavor and resource in a.workload.per_pod)

    def _cohort(self, queue: str) -> list[str]:
        cohort = self.queues[queue].cohort
        return [queue] if cohort is None else [q.name for q in self.queues.values() if q.cohort == cohort]

    def _fits(self, workload: Workload, flavor: str, without: frozenset[str] = frozenset()) -> tuple[bool, bool]:
        """(fits, needs borrowing) for the workload on one flavor, ignoring the workloads in ``without``."""
        queue, cohort = self.queues[workload.queue], self._cohort(workload.queue)
        saved = {name: self.admitted.pop(name) for name in without}
        try:
            borrow = False
            for resource in workload.per_pod:
                key, need = (flavor, resource), workload.total(resource)
                nominal = queue.nominal.get(key, 0)
                used = self.usage(queue.name, key)
                cohort_free = sum(self.queues[q].nominal.get(key, 0) - self.usage(q, key) for q in cohort)
                if used + need > nominal + queue.borrowing_limit.get(key, 0) or need > cohort_free:
                    return False, False
                borrow = borrow or used + need > nominal
            return True, borrow
        finally:
            self.admitted.update(saved)

    def _victims(self, workload: Workload, flavor: str) -> list[str] | None:
        """The smallest greedy set of workloads whose eviction lets the workload fit, or None."""
        queue = self.queues[workload.queue]
        within_nominal = all(self.usage(queue.name, (flavor, resource)) + workload.total(resource)
                             <= queue.nominal.get((flavor, resource), 0) for resource in workload.per_pod)
        candidates = []
        for name, admission in self.admitted.items():
            other = admission.workload
            if admission.flavor != flavor or not set(other.per_pod) & set(workload.per_pod):
                continue
            lower = other.priority < workload.priority
            if other.queue == queue.name:
                if queue.within_cluster_queue == "LowerPriority" and lower:
                    candidates.append((1, other.priority, -admission.order, name))
            elif other.queue in self._cohort(queue.name) and within_nominal and (
                    queue.reclaim_within_cohort == "Any" or (queue.reclaim_within_cohort == "LowerPriority" and lower)):
                candidates.append((0, other.priority, -admission.order, name))
        chosen: list[str] = []
        for *_rank, name in sorted(candidates):
            victim = self.admitted[name].workload
            if victim.queue != queue.name and not self._borrowing(victim.queue, flavor, frozenset(chosen)):
                continue  # a queue back within its nominal quota keeps its workloads
            chosen.append(name)
            if self._fits(workload, flavor, frozenset(chosen))[0]:
                return [n for n in chosen if not self._fits(workload, flavor, frozenset(chosen) - {n})[0]]
        return None

    def _borrowing(self, queue: str, flavor: str, without: frozenset[str]) -> bool:
        saved = {name: self.admitted.pop(name) for name in without}
        try:
            return any(self.usage(queue, key) > nominal for key, nominal in self.queues[queue].nominal.items()
                       if key[0] == flavor)
        finally:
            self.admitted.update(saved)

    def _choose(self, workload: Workload) -> tuple[str, list[str]] | None:
        queue = self.queues[workload.queue]
        groups = [flavors for covered, flavors in queue.groups if set(workload.per_pod) <= covered]
        if not groups:
            raise ManifestError(f"{workload.name}: no single resource group of {queue.name} covers "
                                f"{sorted(workload.per_pod)} (the model checks one group per workload)")
        options = []
        for position, flavor in enumerate(groups[0]):
            if workload.flavors is not None and flavor not in workload.flavors:
                continue
            fits, borrow = self._fits(workload, flavor)
            victims = [] if fits else self._victims(workload, flavor)
            if victims is None:
                continue
            preempt = bool(victims)
            if not fits:
                borrow = self._fits(workload, flavor, frozenset(victims))[1]
            rank = (borrow, preempt) if queue.preference == "PreemptionOverBorrowing" else (preempt, borrow)
            options.append((rank, position, flavor, victims))
        if not options:
            return None
        _rank, _position, flavor, victims = min(options)
        return flavor, victims

    def submit(self, workload: Workload) -> None:
        self._clock += 1
        self.pending.append((self._clock, workload))
        self.schedule()

    def schedule(self) -> None:
        """Admit pending workloads (priority, then FIFO) until nothing changes."""
        for _cycle in range(100):
            changed = False
            for entry in sorted(self.pending, key=lambda e: (-e[1].priority, e[0])):
                choice = self._choose(entry[1])
                if choice is None:
                    continue
                flavor, victims = choice
                for name in victims:
                    evicted = self.admitted.pop(name)
                    self.events.append(f"preempted {name} ({evicted.workload.queue}) for {entry[1].name}")
                    self.pending.append((evicted.order, evicted.workload))
                self.pending.remove(entry)
                self.admitted[entry[1].name] = Admission(entry[1], flavor, entry[0])
                self.events.append(f"admitted {entry[1].name} on {flavor}")
                changed = True
                break
            if not changed:
                return
        raise RuntimeError("admission did not settle in 100 cycles")

    def pending_names(self) -> list[str]:
        return [workload.name for _order, workload in self.pending]


def _quantity(value: Any) -> float:
    text = str(value)
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def cluster_queues(objects: list[dict[str, Any]]) -> dict[str, ClusterQueue]:
    """The ClusterQueues of a built manifest set, as the model reads them."""
    queues = {}
    for obj in objects:
        if obj.get("kind") != "ClusterQueue":
            continue
        spec = obj["spec"]
        nominal: dict[Key, int] = {}
        borrowing: dict[Key, float] = {}
        groups = []
        for group in spec.get("resourceGroups", []):
            groups.append((frozenset(group["coveredResources"]), tuple(f["name"] for f in group["flavors"])))
            for flavor in group["flavors"]:
                for resource in flavor["resources"]:
                    key = (flavor["name"], resource["name"])
                    nominal[key] = int(_quantity(resource["nominalQuota"]))
                    limit = resource.get("borrowingLimit")
                    borrowing[key] = math.inf if limit is None else _quantity(limit)
        preemption = spec.get("preemption", {})
        queues[obj["metadata"]["name"]] = ClusterQueue(
            name=obj["metadata"]["name"], cohort=spec.get("cohortName"), groups=tuple(groups), nominal=nominal,
            borrowing_limit=borrowing, reclaim_within_cohort=preemption.get("reclaimWithinCohort", "Never"),
            within_cluster_queue=preemption.get("withinClusterQueue", "Never"),
            preference=spec.get("flavorFungibility", {}).get("preference", "BorrowingOverPreemption"))
    return queues
