from __future__ import annotations

from tuner.host.devices import GpuHygiene
from tuner.host.partitions import PartitionPool


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
    assert b.devices == (2, 3) and pool.acquire(2) is None


def test_mixed_trial_sizes_pack_first_fit() -> None:
    pool = PartitionPool("gpu", list(range(8)))
    a = pool.acquire(4)
    assert a.devices == (0, 1, 2, 3) and a.env() == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert pool.acquire(8) is None  # a tp=8 trial waits until the whole box is free
    b = pool.acquire(4)
    assert b.devices == (4, 5, 6, 7) and b.port_base != a.port_base
    pool.release(a)
    pool.release(b)
    assert pool.acquire(8).devices == tuple(range(8))


def test_cpu_partition_pins_its_cores() -> None:
    pool = PartitionPool("cpu", [0, 1])
    p = pool.acquire(1)
    assert p.wrap(["llama-server"]) == ["taskset", "--cpu-list", "0", "llama-server"] and p.env() == {}
