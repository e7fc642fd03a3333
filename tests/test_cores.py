"""Cores for GPU partitions: parsing sysfs cpulists, NUMA-local slices, server/client split."""

from __future__ import annotations

import pytest

from tuner.host.cores import device_cores, parse_cpulist, split_server_client
from tuner.host.partitions import PartitionPool, make_partitions


def test_cpulist_format() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_gpus_on_one_numa_node_share_its_cores_and_never_overlap() -> None:
    local = {0: list(range(0, 8)), 1: list(range(0, 8)), 2: list(range(8, 16)), 3: list(range(8, 16))}
    cores = device_cores([0, 1, 2, 3], allowed=range(16), locality=local.get)
    assert cores == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7), 2: (8, 9, 10, 11), 3: (12, 13, 14, 15)}


def test_without_locality_the_allowed_cores_are_split_in_device_order() -> None:
    cores = device_cores([0, 1], allowed=[2, 3, 4, 5, 6, 7], locality=lambda d: None)
    assert cores == {0: (2, 3, 4), 1: (5, 6, 7)}


def test_the_client_gets_its_own_cores() -> None:
    assert split_server_client(tuple(range(16))) == (tuple(range(12)), (12, 13, 14, 15))
    assert split_server_client((5,)) == ((5,), (5,))  # one core: nothing to split


def test_gpu_partitions_pin_their_server_and_cpu_partitions_stay_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.host.partitions

    monkeypatch.setattr(tuner.host.partitions, "device_cores", lambda devices: {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)})
    gpu = make_partitions("gpu", [0, 1], 1)
    assert (gpu[0].cpus, gpu[0].client_cpus, gpu[1].cpus, gpu[1].client_cpus) == ((0, 1, 2), (3,), (4, 5, 6), (7,))
    assert PartitionPool("gpu", [0, 1]).acquire(2).cpus == (0, 1, 2, 3, 4, 5)  # a tp-2 trial holds both GPUs' cores
    assert gpu[0].wrap(["srv"])[:2] == ["taskset", "--cpu-list"] and gpu[0].wrap(["srv"])[-1] == "srv"
    cpu = PartitionPool("cpu", [0, 1]).acquire(1)
    assert cpu is not None and cpu.cpus == () and cpu.wrap(["srv"]) == ["taskset", "--cpu-list", "0", "srv"]


def test_gpus_that_share_cores_pin_each_core_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight GPUs on a machine of two cores (a dry run on a laptop; a node whose GPUs list one NUMA
    node's cores each): a tp-4 partition's cores are listed once each, never `0,1,1`."""
    import tuner.host.partitions

    monkeypatch.setattr(tuner.host.partitions, "device_cores", lambda devices: {d: (0, 1) if d == 0 else (1,) for d in devices})
    [first, _] = make_partitions("gpu", list(range(8)), 4)
    assert first.cpus + first.client_cpus == (0, 1)
    assert first.wrap(["srv"])[:3] == ["taskset", "--cpu-list", "0"]
