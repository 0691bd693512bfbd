"""Micro-batching: which jobs share a batch, and how one job's failure or cancellation stays its own."""

from __future__ import annotations

import asyncio

import pytest

from serving.batching import TurnBatcher

pytestmark = pytest.mark.unit


class Recorder:
    """A process function that records each batch and answers a job with its double (or its error)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    async def __call__(self, jobs: list[int]) -> list[int | Exception]:
        self.batches.append(jobs)
        return [ValueError(f"job {job} is negative") if job < 0 else 2 * job for job in jobs]


async def _turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def test_jobs_submitted_within_the_turns_share_one_batch_and_later_ones_start_the_next() -> None:
    process = Recorder()
    batcher = TurnBatcher(process, turns=3)

    async def late(job: int, after: int) -> int:
        await _turns(after)
        return await batcher.submit(job)

    async def scenario() -> list[int]:
        return list(await asyncio.gather(batcher.submit(1), batcher.submit(2), late(3, after=1), late(4, after=8)))

    assert asyncio.run(scenario()) == [2, 4, 6, 8]
    assert process.batches == [[1, 2, 3], [4]]


def test_one_jobs_error_fails_only_its_own_request() -> None:
    process = Recorder()
    batcher = TurnBatcher(process)

    async def scenario() -> list[int | BaseException]:
        return list(await asyncio.gather(batcher.submit(5), batcher.submit(-1), batcher.submit(7),
                                         return_exceptions=True))

    first, failed, last = asyncio.run(scenario())
    assert (first, last) == (10, 14)
    assert isinstance(failed, ValueError)
    assert str(failed) == "job -1 is negative"
    assert process.batches == [[5, -1, 7]]


def test_a_failing_batch_fails_every_job_of_it() -> None:
    async def broken(jobs: list[int]) -> list[int | Exception]:
        raise RuntimeError("store down")

    batcher: TurnBatcher[int, int] = TurnBatcher(broken)

    async def scenario() -> list[int | BaseException]:
        return list(await asyncio.gather(batcher.submit(1), batcher.submit(2), return_exceptions=True))

    assert [str(e) for e in asyncio.run(scenario())] == ["store down", "store down"]


def test_a_cancelled_request_leaves_the_others_answered() -> None:
    process = Recorder()
    batcher = TurnBatcher(process, turns=2)

    async def scenario() -> int:
        cancelled = asyncio.ensure_future(batcher.submit(1))
        kept = asyncio.ensure_future(batcher.submit(2))
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return await kept

    assert asyncio.run(scenario()) == 4
    assert process.batches == [[1, 2]]
