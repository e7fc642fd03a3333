"""What the hardware did while a trial served: power, energy, utilization, memory, temperature,
clocks, sampled in a thread during the probes and summarized per load level's window.

GPU partitions read NVML (nvidia-ml-py); CPU partitions read RAPL energy counters
(/sys/class/powercap) where the kernel exposes them and they are readable, else nothing: a
trial never carries a made-up number (``telemetry_source`` says which, or why none).

Per level C (``telemetry.<metric>@C``; the target level's also without ``@C``):
``power_w`` (mean over the window, summed over the partition's devices), ``power_w_p99``,
``energy_j`` (the energy counter's delta where the device has one, else power integrated),
``tokens_per_joule`` (output tokens in the window / energy), ``watts_per_request`` (power / C),
``sm_util``, ``mem_bw_util`` (percent, mean over devices and samples), ``mem_used_mib_max``,
``temp_c_max``, ``sm_clock_mhz_min``, ``throttled`` (share of samples with a clock-limiting
reason other than idle), ``samples``.
"""

from __future__ import annotations

import glob
import logging
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Self

from tuner.base.level import Level
from tuner.base.stats import percentiles

__all__ = ["LEVEL_METRICS", "Sample", "Telemetry", "for_partition", "level_metrics", "summarize_levels"]

logger = logging.getLogger(__name__)

LEVEL_METRICS = (
    "power_w",
    "power_w_p99",
    "energy_j",
    "tokens_per_joule",
    "watts_per_request",
    "sm_util",
    "mem_bw_util",
    "mem_used_mib_max",
    "temp_c_max",
    "sm_clock_mhz_min",
    "throttled",
    "samples",
)


@dataclass(frozen=True)
class Sample:
    """One reading of one device at ``t`` (time.perf_counter). None: the device does not say."""

    t: float
    device: int
    power_w: float | None = None
    energy_j: float | None = None  # cumulative counter
    sm_util: float | None = None
    mem_bw_util: float | None = None
    mem_used_mib: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    throttled: bool | None = None


Reader = Callable[[], list[Sample]]


class Telemetry:
    """``with Telemetry(reader, source) as tel: ...`` samples every ``interval`` seconds."""

    def __init__(self, reader: Reader | None, source: str, *, interval: float = 0.2) -> None:
        self.reader = reader
        self.source = source
        self.interval = interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        if self.reader is not None:
            self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        assert self.reader is not None
        while not self._stop.is_set():
            try:
                self.samples.extend(self.reader())
            except Exception:
                logger.debug("telemetry read failed", exc_info=True)
            self._stop.wait(self.interval)


def level_metrics(samples: Sequence[Sample], start: float, end: float, *, tokens: float, concurrency: int) -> dict[str, float]:
    """The window ``[start, end)``'s figures (see the module doc); {} without samples in it."""
    inside = [s for s in samples if start <= s.t < end]
    if not inside:
        return {}
    devices = sorted({s.device for s in inside})
    ticks = sorted({s.t for s in inside})
    metrics: dict[str, float] = {"samples": float(len(ticks))}
    power_by_tick = _per_tick(inside, "power_w", sum)
    if power_by_tick:
        metrics["power_w"] = statistics.fmean(power_by_tick)
        if (p99 := percentiles(power_by_tick, (99,))[99]) is not None:
            metrics["power_w_p99"] = p99
        metrics["watts_per_request"] = metrics["power_w"] / max(1, concurrency)
    energy = _counter_delta(samples, devices, start, end)
    if energy is None and power_by_tick and len(ticks) > 1:
        energy = metrics["power_w"] * (end - start)  # no counter: mean power over the window
    if energy:
        metrics["energy_j"] = energy
        metrics["tokens_per_joule"] = tokens / energy
    for name, key, how in (
        ("sm_util", "sm_util", statistics.fmean),
        ("mem_bw_util", "mem_bw_util", statistics.fmean),
        ("mem_used_mib_max", "mem_used_mib", max),
        ("temp_c_max", "temp_c", max),
        ("sm_clock_mhz_min", "sm_clock_mhz", min),
    ):
        values = [getattr(s, key) for s in inside if getattr(s, key) is not None]
        if values:
            metrics[name] = float(how(values))
    flags = [s.throttled for s in inside if s.throttled is not None]
    if flags:
        metrics["throttled"] = sum(flags) / len(flags)
    return metrics


def summarize_levels(
    samples: Sequence[Sample], levels: Mapping[str, Level], target: int
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Flat metrics (``name@C``, and the target level's without ``@C``) and per-level figures,
    from the load probe's levels (their ``window_at`` and output token counts)."""
    flat: dict[str, float] = {}
    per_level: dict[str, dict[str, float]] = {}
    for level, summary in levels.items():
        window = summary.window_at
        if not window:
            continue
        figures = level_metrics(samples, window[0], window[1], tokens=float(summary.output_tokens or 0), concurrency=int(level))
        per_level[level] = figures
        flat.update({f"{k}@{level}": v for k, v in figures.items()})
        if int(level) == target:
            flat.update(figures)
    return flat, per_level


def trace(samples: Sequence[Sample], *, points: int = 600) -> list[list[float]]:
    """[t, watts summed over devices] for a plot, at most ``points`` of them."""
    by_tick = sorted({s.t for s in samples})
    step = max(1, len(by_tick) // points)
    power: dict[float, float] = {}
    for s in samples:
        if s.power_w is not None:
            power[s.t] = power.get(s.t, 0.0) + s.power_w
    return [[round(t, 3), round(power[t], 1)] for t in by_tick[::step] if t in power]


def for_partition(kind: str, devices: Sequence[int]) -> Telemetry:
    """The sampler a partition's hardware offers (NVML for GPUs, RAPL for CPUs), else none, said so."""
    if kind == "gpu":
        reader, why = _nvml_reader(list(devices))
        return Telemetry(reader, "nvml" if reader else f"none: {why}")
    reader, why = _rapl_reader()
    return Telemetry(reader, "rapl (whole package: every process on the socket)" if reader else f"none: {why}")


def _nvml_reader(devices: list[int]) -> tuple[Reader | None, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML: {exc}"
    handles = {d: pynvml.nvmlDeviceGetHandleByIndex(d) for d in devices}
    idle = getattr(pynvml, "nvmlClocksEventReasonGpuIdle", getattr(pynvml, "nvmlClocksThrottleReasonGpuIdle", 1))

    def optional(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except pynvml.NVMLError:
            return None

    def read() -> list[Sample]:
        now = time.perf_counter()
        found = []
        for d, h in handles.items():
            util = optional(partial(pynvml.nvmlDeviceGetUtilizationRates, h))
            mem = optional(partial(pynvml.nvmlDeviceGetMemoryInfo, h))
            mw = optional(partial(pynvml.nvmlDeviceGetPowerUsage, h))
            mj = optional(partial(pynvml.nvmlDeviceGetTotalEnergyConsumption, h))
            reasons = optional(partial(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h))
            temp = optional(partial(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU))
            clock = optional(partial(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM))
            found.append(
                Sample(
                    t=now,
                    device=d,
                    power_w=mw / 1000.0 if mw is not None else None,
                    energy_j=mj / 1000.0 if mj is not None else None,
                    sm_util=float(util.gpu) if util is not None else None,
                    mem_bw_util=float(util.memory) if util is not None else None,
                    mem_used_mib=mem.used / 2**20 if mem is not None else None,
                    temp_c=float(temp) if temp is not None else None,
                    sm_clock_mhz=float(clock) if clock is not None else None,
                    throttled=bool(reasons & ~idle) if reasons is not None else None,
                )
            )
        return found

    return read, ""


RAPL = "/sys/class/powercap/intel-rapl:*/energy_uj"


def _rapl_reader(pattern: str = RAPL) -> tuple[Reader | None, str]:
    paths = sorted(p for p in glob.glob(pattern) if p.count(":") == 1)  # packages, not their sub-domains
    if not paths:
        return None, "no RAPL energy counter on this machine (/sys/class/powercap)"
    try:
        for p in paths:
            with open(p) as f:
                int(f.read())
    except (OSError, ValueError) as exc:
        return None, f"RAPL not readable: {exc}"
    last: dict[int, tuple[float, float]] = {}

    def read() -> list[Sample]:
        now = time.perf_counter()
        found = []
        for i, p in enumerate(paths):
            with open(p) as f:
                joules = int(f.read()) / 1e6
            before = last.get(i)
            last[i] = (now, joules)
            watts = (joules - before[1]) / (now - before[0]) if before and joules >= before[1] and now > before[0] else None
            found.append(Sample(t=now, device=i, power_w=watts, energy_j=joules))
        return found

    return read, ""


def _per_tick(samples: Sequence[Sample], key: str, how: Callable[[list[float]], float]) -> list[float]:
    ticks: dict[float, list[float]] = {}
    for s in samples:
        if (value := getattr(s, key)) is not None:
            ticks.setdefault(s.t, []).append(value)
    return [how(v) for _, v in sorted(ticks.items())]


def _counter_delta(samples: Sequence[Sample], devices: Sequence[int], start: float, end: float) -> float | None:
    """Energy from the cumulative counters, interpolated at the window's edges, summed over devices."""
    total = 0.0
    for d in devices:
        points = [(s.t, s.energy_j) for s in samples if s.device == d and s.energy_j is not None]
        at_start, at_end = _at(points, start), _at(points, end)
        if at_start is None or at_end is None or at_end < at_start:
            return None
        total += at_end - at_start
    return total


def _at(points: list[tuple[float, float]], t: float) -> float | None:
    before = [p for p in points if p[0] <= t]
    after = [p for p in points if p[0] >= t]
    if not before or not after:
        return None
    (t0, e0), (t1, e1) = before[-1], after[0]
    return e0 if t1 == t0 else e0 + (e1 - e0) * (t - t0) / (t1 - t0)
