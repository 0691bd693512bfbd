"""On the ClusterQueues the prod overlay ships, a 2-node gang job is admitted whole
or not at all, and a team under its nominal share takes back GPUs others borrowed (Kueue admission
model in infra/kueue_sim.py; quota only, not node placement)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.kueue_sim import Cluster, ClusterQueue, Workload, cluster_queues
from mlops.errors import ManifestError

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
H100 = frozenset({"h100-80gb"})
TRAINING, RESEARCH = 100, 10


@pytest.fixture
def queues(built: dict[str, list[dict[str, Any]]]) -> dict[str, ClusterQueue]:
    return cluster_queues(built["prod"])


def job(name: str, queue: str, pods: int, gpus: int = 8, priority: int = TRAINING,
        flavors: frozenset[str] | None = H100) -> Workload:
    return Workload(name, f"team-{queue}", pods, {GPU: gpus}, priority, flavors)


def h100_in_use(cluster: Cluster) -> int:
    return sum(cluster.usage(queue, ("h100-80gb", GPU)) for queue in cluster.queues)


def test_the_shipped_queues_share_one_cohort_and_all_h100s(queues: dict[str, ClusterQueue]) -> None:
    assert set(queues) == {"team-fraud", "team-vision", "team-research"}
    assert {queue.cohort for queue in queues.values()} == {"gpu-platform"}
    assert sum(queue.nominal[("h100-80gb", GPU)] for queue in queues.values()) == 32


def test_a_gang_that_does_not_fit_holds_nothing(queues: dict[str, ClusterQueue]) -> None:
    cluster = Cluster(queues)
    cluster.submit(job("fraud-gang", "fraud", pods=2))                        # 16: fraud's nominal
    cluster.submit(job("vision-a", "vision", pods=1, gpus=4))                 # 4 of vision's 12
    cluster.submit(job("research-a", "research", pods=1, gpus=4, priority=RESEARCH))  # research's 4
    assert h100_in_use(cluster) == 24
    # 8 H100s are free and one 8-GPU pod of the vision gang would fit, but the gang needs 16:
    # nothing of it is admitted, nothing is reserved, and vision (above its share) preempts no one.
    cluster.submit(job("vision-gang", "vision", pods=2))
    assert cluster.pending_names() == ["vision-gang"]
    assert h100_in_use(cluster) == 24
    assert not any(event.startswith("preempted") for event in cluster.events)
    # So the free 8 still go to the next job that fits whole.
    cluster.submit(job("vision-single", "vision", pods=1))
    assert cluster.admitted["vision-single"].flavor == "h100-80gb"
    assert h100_in_use(cluster) == 32
    assert cluster.pending_names() == ["vision-gang"]


def test_a_gang_that_fits_is_admitted_whole_by_borrowing(queues: dict[str, ClusterQueue]) -> None:
    cluster = Cluster(queues)
    cluster.submit(job("vision-gang", "vision", pods=2))   # 16 > nominal 12: borrows 4 from the idle cohort
    assert cluster.admitted["vision-gang"].workload.total(GPU) == 16
    assert cluster.usage("team-vision", ("h100-80gb", GPU)) == 16


def test_a_team_under_its_share_reclaims_borrowed_gpus(queues: dict[str, ClusterQueue]) -> None:
    cluster = Cluster(queues)
    for name in ("research-1", "research-2"):
        cluster.submit(job(name, "research", pods=1, priority=RESEARCH, flavors=None))
    cluster.submit(job("vision-gang", "vision", pods=2))
    assert h100_in_use(cluster) == 32
    assert cluster.pending_names() == []
    # Fraud uses none of its 16 H100s; its 2-node gang takes them back from the borrowers.
    cluster.submit(job("fraud-gang", "fraud", pods=2, flavors=None))
    assert cluster.admitted["fraud-gang"].flavor == "h100-80gb"  # its own share, not borrowed A100s
    preempted = [event for event in cluster.events if event.startswith("preempted")]
    assert preempted == ["preempted research-2 (team-research) for fraud-gang",
                         "preempted research-1 (team-research) for fraud-gang"]
    assert cluster.usage("team-fraud", ("h100-80gb", GPU)) == 16
    # Vision borrowed only 4 and keeps its gang; the evicted research jobs are requeued, one fits on A100.
    assert "vision-gang" in cluster.admitted
    assert cluster.admitted["research-1"].flavor == "a100-80gb"
    assert cluster.pending_names() == ["research-2"]


def test_research_never_preempts(queues: dict[str, ClusterQueue]) -> None:
    cluster = Cluster(queues)
    cluster.submit(job("fraud-big", "fraud", pods=3))      # 24: borrows 8
    cluster.submit(job("vision-gang", "vision", pods=1))   # 8 within nominal: cohort now full
    cluster.submit(job("research-small", "research", pods=1, gpus=4, priority=RESEARCH))
    assert cluster.pending_names() == ["research-small"]
    assert not any(event.startswith("preempted") for event in cluster.events)


def test_the_model_names_what_it_does_not_cover(queues: dict[str, ClusterQueue]) -> None:
    cluster = Cluster(queues)
    with pytest.raises(ManifestError, match="no single resource group of team-fraud covers"):
        cluster.submit(Workload("mixed", "team-fraud", 1, {GPU: 1, "cpu": 4}))
