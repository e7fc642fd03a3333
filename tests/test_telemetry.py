"""Telemetry arithmetic on synthetic samples (no GPU, no RAPL here: the real NVML path runs on the
H200, scripts/h200-telemetry.sh), RAPL read from a stand-in sysfs file, and a real trial on this
machine, which measures no energy: it must say so and carry no number."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import tiny_space, worker_core
from tuner.app.prepare import validate
from tuner.base.level import Level
from tuner.host import telemetry
from tuner.host.partitions import make_partitions
from tuner.host.telemetry import Sample, level_metrics, summarize_levels


def _two_gpus(start: float, seconds: float, *, counter: bool = True) -> list[Sample]:
    """Two devices at 400 W and 450 W, sampled every 0.1 s; energy counters in joules."""
    samples = []
    for i in range(int(seconds * 10) + 1):
        t = start + i / 10
        for device, watts in ((0, 400.0), (1, 450.0)):
            samples.append(
                Sample(
                    t=t,
                    device=device,
                    power_w=watts,
                    energy_j=(1000.0 + watts * (t - start)) if counter else None,
                    sm_util=90.0,
                    mem_bw_util=60.0,
                    mem_used_mib=120_000.0 + device,
                    temp_c=60.0 + device,
                    sm_clock_mhz=1980.0 - 10 * device,
                    throttled=(i % 4 == 0),
                )
            )
    return samples


def test_a_windows_power_energy_and_tokens_per_joule() -> None:
    samples = _two_gpus(100.0, 20.0)
    m = level_metrics(samples, 102.0, 112.0, tokens=85_000.0, concurrency=128)
    assert m["power_w"] == pytest.approx(850.0) and m["power_w_p99"] == pytest.approx(850.0)
    assert m["energy_j"] == pytest.approx(8500.0)  # the counters' delta over the 10 s window
    assert m["tokens_per_joule"] == pytest.approx(10.0)
    assert m["watts_per_request"] == pytest.approx(850.0 / 128)
    assert (m["sm_util"], m["mem_bw_util"], m["mem_used_mib_max"], m["temp_c_max"], m["sm_clock_mhz_min"]) == (
        90.0,
        60.0,
        120_001.0,
        61.0,
        1970.0,
    )
    assert m["samples"] == 100 and m["throttled"] == pytest.approx(0.25)


def test_without_an_energy_counter_power_is_integrated() -> None:
    m = level_metrics(_two_gpus(0.0, 20.0, counter=False), 2.0, 12.0, tokens=85_000.0, concurrency=4)
    assert m["energy_j"] == pytest.approx(8500.0) and m["tokens_per_joule"] == pytest.approx(10.0)


def test_no_samples_in_a_window_gives_no_numbers() -> None:
    assert level_metrics(_two_gpus(0.0, 5.0), 50.0, 60.0, tokens=1.0, concurrency=1) == {}


def test_levels_are_named_and_the_target_level_is_the_headline() -> None:
    samples = _two_gpus(0.0, 30.0)
    levels = {
        "32": Level(window_at=(1.0, 11.0), output_tokens=34_000),
        "128": Level(window_at=(15.0, 25.0), output_tokens=85_000),
    }
    flat, per_level = summarize_levels(samples, levels, target=128)
    assert flat["tokens_per_joule@32"] == pytest.approx(4.0) and flat["tokens_per_joule"] == pytest.approx(10.0)
    assert set(per_level) == {"32", "128"}


def test_rapl_counters_give_power_and_energy(tmp_path: Path) -> None:
    counter = tmp_path / "intel-rapl:0" / "energy_uj"
    counter.parent.mkdir()
    counter.write_text("1000000\n")
    read, why = telemetry._rapl_reader(str(tmp_path / "intel-rapl:*" / "energy_uj"))
    assert read is not None and why == ""
    first = read()
    counter.write_text("51000000\n")  # +50 J
    second = read()
    assert first[0].power_w is None and second[0].energy_j == pytest.approx(51.0)
    assert second[0].power_w == pytest.approx(50.0 / (second[0].t - first[0].t))


def test_no_rapl_is_said_not_guessed(tmp_path: Path) -> None:
    read, why = telemetry._rapl_reader(str(tmp_path / "nothing-*" / "energy_uj"))
    assert read is None and "no RAPL" in why


@pytest.mark.integration
@pytest.mark.one_core
def test_a_real_trial_records_what_this_machine_measures(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    from tuner.serving.trial import run_trial

    space = validate(tiny_space(), "tiny.yaml")
    [partition] = make_partitions("cpu", [worker_core()], 1)
    outcome = run_trial(space, {"ctx-size": 2048}, tmp_path / "t", partition)
    [sampled] = [r for r in outcome.probes if r.probe == "telemetry"]
    expected = telemetry.for_partition("cpu", [0])
    assert sampled.details["source"] == expected.source
    if expected.reader is None:  # this machine: no RAPL, so no number at all
        assert sampled.metrics == {} and sampled.details["source"].startswith("none: ")
    else:
        assert sampled.metrics["energy_j"] > 0 and sampled.metrics["samples"] >= 1
