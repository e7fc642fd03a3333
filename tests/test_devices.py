from __future__ import annotations

from tuner.devices import GpuHygiene
from tuner.partitions import PartitionPool


def test_settle_waits_for_memory_to_return() -> None:
    readings = iter([{0: 100.0, 1: 100.0}, {0: 9000.0, 1: 100.0}, {0: 150.0, 1: 100.0}])
    hygiene = GpuHygiene([0, 1], reader=lambda ids: next(readings), timeout=5)
    assert hygiene.settle([0, 1]) == {}


def test_a_device_that_keeps_memory_is_reported() -> None:
    readings = iter([{0: 100.0}, {0: 5000.0}])  # baseline, then after the trial
    hygiene = GpuHygiene([0], reader=lambda ids: next(readings), timeout=0)
    assert hygiene.settle([0]) == {0: 4900.0}


def test_no_nvml_means_no_hygiene() -> None:
    assert GpuHygiene([0], reader=lambda ids: None).available is False


def test_quarantined_partition_is_not_handed_out() -> None:
    pool = PartitionPool("gpu", [0, 1, 2, 3])
    a = pool.acquire(2)
    pool.release(a)
    pool.quarantine(a)
    b = pool.acquire(2)
    assert b.devices == (2, 3) and pool.acquire(2) is None and pool.fits_ever(2) and not pool.fits_ever(4)
