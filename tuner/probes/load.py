"""Load probe: streamed OpenAI-compatible requests at a sweep of concurrency levels.

Every request carries a prompt the server has not seen, of exactly the asked length (see
``_prompts``); throughput is counted in a steady-state window with a batch-means CI (``_window``).

Token counts come from the server's ``usage`` (``stream_options.include_usage``); the client's
own count of streamed content chunks is kept beside it and a mismatch over 1 % is flagged.
Failed requests are counted as errors and excluded from every latency.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from tuner.base import progress
from tuner.base.level import Level
from tuner.base.records import Capacity, ProbeResult
from tuner.base.stats import Trend, batch_means, percentiles, trend
from tuner.engines import counter_total
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._drain import drain
from tuner.probes._prompts import FixedSource, PromptMaker, Source, Vocabulary, WorkloadSource, one_token_words
from tuner.probes._senders import CEILING, Plan, Senders, arrival_offsets, client_cores, senders_for, with_prompt
from tuner.probes._stream import RequestRecord, request_body, stop_clients, stream_request
from tuner.probes._tokens import Tokenizer, filler_words
from tuner.space.schema import LoadProbeSpec, SloTargets
from tuner.workload import Segment, Session, Turn, Workload

__all__ = [
    "PER_GPU",
    "PER_GPU_METRICS",
    "LoadProbe",
    "RequestRecord",
    "Window",
    "per_gpu",
    "request_body",
    "stop_clients",
    "stream_request",
]

logger = logging.getLogger(__name__)

LATENCIES = ("ttft", "tpot", "itl", "e2e")
PCTS = (50, 90, 99)
LEVEL_METRICS = (
    "output_tok_s",
    "output_tok_s_ci",
    "window_s",
    "cache_hit_rate",
    "total_tok_s",
    "req_s",
    "error_rate",
    "errors",
    *(f"{lat}_p{p}" for lat in LATENCIES for p in PCTS),
)
MAX_ERROR_RATE = 0.5
STEP_MAX_S = 10.0  # a window that may end early (a long run whose slice broke) looks at least this often
MIN_BATCHES = 5  # a CI from fewer sub-windows (t of 1-3 dof, or an accidental zero spread) never ends a level early
SATURATION_GAIN = 0.05


@dataclass(frozen=True)
class Window:
    """How long one level measures: at least ``least`` seconds, at most ``most``. Past ``least`` it
    goes on while the throughput CI is wider than the spec's target or ``more(figures)`` says so
    (an open loop whose growth is undecided); ``enough(figures)`` ends it early (a long run one of
    whose slices broke the SLO already). Both see :meth:`LoadProbe.figures_so_far`. Without
    ``ci``, the throughput CI asks for no more time (a hold: its length is what is asked)."""

    least: float
    most: float
    more: Callable[[dict[str, Any]], bool] | None = None
    enough: Callable[[dict[str, Any]], bool] | None = None
    ci: bool = True


class LoadProbe(Probe):
    """Closed loop at constant concurrency, measured in a steady-state window.

    Each level runs ``concurrency`` clients that send a new request the moment their last one
    ends; their first requests are staggered in length so the clients desynchronize. The window
    opens once every client has finished ``warmup`` requests (at least one full wave: the ramp's
    burst of prefills is behind), lasts ``duration`` and is extended until the
    95 % CI of output tok/s is within ``ci_target`` of the mean or ``max_duration`` is reached.
    Then the clients stop and requests still in flight are cancelled: the drain is never counted.
    """

    name = "load"
    spec: LoadProbeSpec

    def __init__(self, spec: LoadProbeSpec) -> None:
        super().__init__(spec)
        self._requests = itertools.count()  # never reset: a probe run twice on one server sends new prompts
        self._asked_prompt: int | None = None
        self._open: tuple[float, int, Any, Any] | None = None  # the open-loop level running: (rate, seed, its Level, schedule)
        self._idle_s: float | None = None  # a 1-token request's time on the idle server (prompts())
        self._source: Source | None = None  # what prompts() made: the levels' sessions and texts
        self._done_slices: dict[tuple[float, float], dict[str, Any]] = {}  # a running window's whole slices, once settled

    @classmethod
    def metric_names(cls, spec: LoadProbeSpec) -> set[str]:
        names = {f"{m}@{c}" for m in LEVEL_METRICS for c in spec.concurrency}
        names |= set(LEVEL_METRICS) | {"token_mismatch", "output_tok_s_ci_rel"}
        return names

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    async def _run(self, server: ServerHandle) -> ProbeResult:
        spec = self.spec
        levels = sorted(set(spec.concurrency))
        limits = httpx.Limits(max_connections=max(levels) + 4, max_keepalive_connections=max(levels) + 4)
        timeout = httpx.Timeout(spec.request_timeout, connect=10.0)
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
            prompts = await self.prompts(client, server)
            results: dict[int, dict[str, Any]] = {}
            stop_reason = "completed"
            for level in levels:
                progress.report(f"load: {level} concurrent clients, window {spec.duration:g}-{spec.max_duration:g}s")
                results[level] = await self.level(client, server, prompts, level)
                stop_reason = _stop_reason(results, level, spec.target_concurrency)
                if stop_reason != "completed":
                    break
        return self._result(results, stop_reason)

    async def prompts(self, client: httpx.AsyncClient, server: ServerHandle) -> Source:
        """Session ``i`` and each turn's prompt (:class:`~tuner.probes._prompts.Source`): the
        space's workload, or the fixed shape: one request, its prompt fresh (never seen by the
        server) and of the asked length."""
        if self.spec.dataset:
            return FixedSource(_dataset_prompts(self.spec.dataset), None, self.spec.output_tokens)
        tokenizer = Tokenizer(client, server.url, server.model, server.headers)
        vocabulary = await one_token_words(tokenizer)
        if self.spec.workload is not None:
            self._source = await self._workload_source(client, server, tokenizer, vocabulary)
            return self._source
        maker = PromptMaker(vocabulary, self.spec.prompt_tokens, prefix_tokens=self.spec.prefix_tokens)
        probe = maker.make(-1)
        url, body, headers = self._request(server, probe)
        rec = await stream_request(client, url, {**body, "max_tokens": 1}, headers, cached_field=server.cached_tokens_field)
        self._idle_s = rec.e2e if rec.ok else None
        if rec.prompt_tokens is None:
            logger.warning("the server reports no usage.prompt_tokens: prompt lengths are not checked (%s)", rec.error)
            maker.calibrate(maker.body_words, await tokenizer.count(probe))
        else:
            maker.calibrate(maker.sent_words, rec.prompt_tokens)
        logger.debug("prompts: %d words + %d tokens of overhead = %d", maker.body_words, maker.overhead, maker.asked)
        self._asked_prompt = maker.asked
        return FixedSource(maker.make, maker.asked, self.spec.output_tokens)

    async def _workload_source(
        self, client: httpx.AsyncClient, server: ServerHandle, tokenizer: Tokenizer, vocabulary: Vocabulary
    ) -> WorkloadSource:
        """The workload's prompts, their server-side overhead (BOS, a chat template) read from one
        request of 64 one-token words."""
        assert self.spec.workload is not None
        source = WorkloadSource(Workload(self.spec.workload), vocabulary)
        text = source.text(Session(-1, "calibration", (Turn((Segment("calibration", 64),), 1),)), 0)
        url, body, headers = self._request(server, text, 1)
        rec = await stream_request(client, url, body, headers, cached_field=server.cached_tokens_field)
        self._idle_s = rec.e2e if rec.ok else None
        counted = rec.prompt_tokens if rec.prompt_tokens is not None else await tokenizer.count(text)
        source.overhead = max(0, counted - 64)
        self._asked_prompt = None
        return source

    async def settle(self, client: httpx.AsyncClient, server: ServerHandle) -> dict[str, Any]:
        """Wait until ``server`` has nothing in flight (:func:`~tuner.probes._drain.drain`): a level
        starts on a drained server. What it found is stored with the level."""

        async def ping() -> float | None:
            url, body, headers = self._request(server, f"{next(self._requests)} ping")
            rec = await stream_request(client, url, {**body, "max_tokens": 1}, headers)
            return rec.e2e if rec.ok else None

        return await drain(client, server, ping, idle_s=self._idle_s, bound=max(self.spec.request_timeout, 30.0))

    def _template(self, server: ServerHandle, output: int | None = None) -> tuple[str, dict[str, Any], dict[str, str]]:
        """(url, body without its prompt, headers) of every request of a level (``output``
        tokens, default the spec's)."""
        path = "chat/completions" if self.spec.api == "chat" else "completions"
        return (
            f"{server.url}/v1/{path}",
            {"model": server.model, **request_body(output or self.spec.output_tokens, self.spec.request)},
            server.headers,
        )

    def _request(
        self, server: ServerHandle, prompt: str, output: int | None = None
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        url, body, headers = self._template(server, output)
        return url, with_prompt(body, self.spec.api, prompt), headers

    async def level(
        self,
        client: httpx.AsyncClient,
        server: ServerHandle,
        source: Source,
        concurrency: int,
        *,
        slice_s: float | None = None,
        window: Window | None = None,
    ) -> dict[str, Any]:
        """One closed-loop level (see the class); ``slice_s``: also the figures of each slice of
        the window that long (``slices``), as a long confirmation run reports them per minute;
        ``window``: how long it measures, where not the spec's ``duration`` to ``max_duration``."""
        spec = self.spec
        records: list[RequestRecord] = []
        skipped: list[RequestRecord] = []  # longer than the server's context: counted, never sent
        finished = [0] * concurrency
        warmed = asyncio.Event()
        stopping = asyncio.Event()

        async def client_loop(slot: int) -> None:
            # The first request of client i asks for (i+1)/C of its output: the clients finish it
            # spread over one request's lifetime, so the loop runs desynchronized, as real traffic
            # does, instead of in waves of C prefills then C decodes (which no window smooths).
            # A client runs one session after another, each turn after the last one's end and its
            # think time (the fixed shape: sessions of one request).
            first = True
            while not stopping.is_set():
                session = source.session(next(self._requests))
                for k, turn in enumerate(session.turns):
                    if k and turn.think_s > 0 and await _stopped_within(stopping, turn.think_s):
                        return
                    if stopping.is_set():
                        return
                    output = max(1, -(-turn.output * (slot + 1) // concurrency)) if first else turn.output
                    first = False
                    rec = _record(session, k, turn, output, time.perf_counter())
                    if over_context(server, turn):
                        skipped.append(rec)
                        if len(skipped) >= SKIPPED_MAX and len(skipped) > len(records):
                            logger.warning("load: the workload's requests are longer than the server's context: not sent")
                            return
                        await asyncio.sleep(0)
                        break  # the rest of the session is longer still
                    records.append(rec)
                    url, body, headers = self._request(server, source.text(session, k), output)
                    try:
                        await stream_request(client, url, body, headers, rec=rec, cached_field=server.cached_tokens_field)
                    except asyncio.CancelledError:
                        rec.cancelled = True
                        raise
                    finished[slot] += 1
                    if min(finished) >= max(1, spec.warmup):
                        warmed.set()

        counters = await prefix_cache_counters(client, server)
        began = time.perf_counter()
        tasks = [asyncio.create_task(client_loop(i)) for i in range(concurrency)]

        async def stop() -> None:
            stopping.set()
            await stop_clients(tasks, grace=spec.request_timeout)

        late = f"level {concurrency}: warmup did not complete a full wave in time; measuring anyway"
        summary = await self._window(records, stop, warmed, late, slice_s=slice_s, window=window)
        summary["warmup_s"] = summary["window_at"][0] - began
        summary["over_context"] = len(skipped)
        after = await prefix_cache_counters(client, server)
        if summary["cache_hit_rate"] is None and counters and after and after[0] > counters[0]:
            summary["cache_hit_rate"] = (after[1] - counters[1]) / (after[0] - counters[0])  # the level, warmup included
            summary["cache_hit_rate_source"] = "/metrics"
        return summary

    async def rate_level(
        self,
        senders: Senders,
        server: ServerHandle,
        source: Source,
        rate: float,
        seed: int = 0,
        *,
        cores: int | None = None,
        slice_s: float | None = None,
        window: Window | None = None,
    ) -> dict[str, Any]:
        """Open loop: sessions (the fixed shape: requests) arrive as a Poisson process of ``rate``
        per second (a trace: at its own times, scaled to that rate), each on its own
        (no client waits for another, so a server that falls behind queues them), as production
        traffic and ``vllm bench serve --request-rate`` do. The arrival times are fixed from
        ``seed`` before the level starts and sent by ``senders`` (processes of their own, as many
        as the rate needs: :mod:`tuner.probes._senders`); TTFT counts from the scheduled arrival.
        The window opens once ``warmup`` requests have ended and is measured as a closed-loop
        level's. At most :func:`in_flight_cap` requests are at the server at once; later arrivals
        wait on their sender, as in a gateway's queue, their wait part of their TTFT. Beside the
        closed loop's figures the level stores what was asked and what was delivered
        (:func:`open_loop_figures`): ``client_bound`` when the senders fell short of the schedule.
        ``cores``: the client cores to plan senders for (default: those this process may use);
        ``slice_s``: also each slice's figures (``slices``), the open loop's delivery and backlog
        among them; ``window``: how long it measures (its ``more`` and ``enough`` see
        :meth:`figures_so_far`), where not the spec's ``duration`` to ``max_duration``."""
        spec = self.spec
        records: list[RequestRecord] = []
        ended = [0]
        warmed = asyncio.Event()

        def on_end() -> None:
            ended[0] += 1
            if ended[0] >= max(1, spec.warmup):
                warmed.set()

        first = next(self._requests)
        prompt_tokens, output_tokens, turns = shape(source, first) if spec.workload is not None else (
            spec.prompt_tokens, spec.output_tokens, 1.0)  # fmt: skip
        cap = in_flight_cap(server.capacity, round(prompt_tokens + output_tokens))
        cores = cores or client_cores()
        count, enough = senders_for(rate * turns, round(output_tokens), cores)
        if not enough:
            logger.warning(
                "open loop: %d client core(s) cannot send %.3g requests/s of %d-token streams (one core sends about %.0f/s); "
                "the level records what was sent",
                cores, rate * turns, output_tokens, CEILING.rate(round(output_tokens)),
            )  # fmt: skip
        url, body, headers = self._template(server)
        context = server.capacity.context_per_request if server.capacity is not None else None
        plan = Plan(
            rate, seed, 0.0, url, body, spec.api, headers, source, first, -(-cap // count), spec.request_timeout,
            server.cached_tokens_field, context=context - server.context_slack if context is not None else None,
        )  # fmt: skip
        level = await senders.start(plan, count, records, on_end)
        late = f"rate {rate:.3g}/s: no request ended in time; measuring anyway"

        def schedule() -> Iterator[float]:
            return source.arrivals(rate, seed, first)

        self._open = (rate, seed, level, schedule)
        try:
            summary = await self._window(
                records, lambda: level.stop(spec.request_timeout), warmed, late, slice_s=slice_s, window=window
            )
        finally:
            self._open = None
        self._requests = itertools.count(first + level.arrivals + 1)
        start, end = summary["window_at"]
        summary.update(
            warmup_s=start - level.t0,
            in_flight_cap=cap,
            senders=count,
            client_cores=cores,
            sender_failures=level.failed,
            **open_loop_figures(records, start, end, rate, seed, level.t0, schedule()),
        )
        return summary

    async def _window(
        self,
        records: list[RequestRecord],
        stop: Callable[[], Awaitable[None]],
        warmed: asyncio.Event,
        late: str,
        *,
        slice_s: float | None = None,
        window: Window | None = None,
    ) -> dict[str, Any]:
        """A level's window, closed or open loop: wait for ``warmed`` (``late`` is logged when it
        takes longer than the warm-up may), measure (:meth:`_measure`), ``stop`` the level's
        clients, and summarize (with ``slice_s``: each slice of the window that long too, in
        ``slices``). ``window_at`` is in perf_counter time: telemetry slices by it."""
        spec = self.spec
        try:
            try:
                await asyncio.wait_for(warmed.wait(), timeout=spec.request_timeout * max(1, spec.warmup))
            except TimeoutError:
                logger.warning(late)
            start = time.perf_counter()
            end, ci = await self._measure(records, start, window or Window(spec.duration, spec.max_duration), slice_s)
        finally:
            await stop()
        if isinstance(self._source, WorkloadSource):
            mark_reusable(records, self._source)
        summary = summarize(records, start, end, spec.batches, spec.output_tokens, self._asked_prompt)
        summary.update(ci_target_met=ci, window_at=[start, end])
        if slice_s:
            summary["slices"] = [self._slice(records, a, b) for a, b in _slices(start, end, slice_s)]
        return summary

    async def _measure(
        self, records: list[RequestRecord], start: float, window: Window, slice_s: float | None = None
    ) -> tuple[float, bool]:
        """Wait out the window (at least ``window.least``), extending it until the CI target is met
        and ``window.more`` asks for no more time, or to ``window.most``; ``window.enough`` ends it
        at once (it sees the whole ``slice_s`` slices so far too). Returns (end, whether the CI
        target was met)."""
        spec = self.spec
        step = min(max(window.least / 4, 0.5), STEP_MAX_S)
        end = start + (min(step, window.least) if window.enough is not None else window.least)
        while True:
            await asyncio.sleep(max(0.0, end - time.perf_counter()))
            now = time.perf_counter()
            if window.enough is not None and window.enough(self.figures_so_far(records, start, now, slice_s)):
                return now, False
            if now - start < window.least:  # looking early only for ``enough``
                end = min(now + step, start + window.least)
                continue
            rates = batch_means(
                [(r.stamps, r.tokens_per_chunk) for r in records], start, now, batch_count(records, now - start, spec.batches)
            )
            rel = rates.relative_half_width
            done = [r for r in records if r.ended is not None and start <= r.ended < now]
            errors = sum(1 for r in done if not r.ok)
            if done and errors / len(done) > MAX_ERROR_RATE and errors >= 2:
                return now, False  # failing, not slow: no point in measuring longer
            enough = len([r for r in done if r.ok]) >= (spec.requests or 0) and len(rates.rates) >= MIN_BATCHES
            met = (rel is not None and rel <= spec.ci_target and enough) or not window.ci
            if met and (window.more is None or not window.more(self.figures_so_far(records, start, now))):
                return now, True
            if now - start >= window.most:
                return now, met
            end = min(now + step, start + window.most)

    def figures_so_far(
        self, records: list[RequestRecord], start: float, now: float, slice_s: float | None = None
    ) -> dict[str, Any]:
        """A running level's figures over ``[start, now)``: the summary, and an open loop's
        delivery and growth (what a :class:`Window`'s ``more`` and ``enough`` judge); with
        ``slice_s``, also each whole slice of that length ended :data:`SLICE_SETTLE_S` ago or more
        (``slices``, with ``from_s``), as the window's end will report it: what a cut run keeps
        of its minutes."""
        spec = self.spec
        figures = summarize(records, start, now, spec.batches, spec.output_tokens, self._asked_prompt)
        if self._open is not None:
            rate, seed, level, schedule = self._open
            figures.update(open_loop_figures(records, start, now, rate, seed, level.t0, schedule()))
        if slice_s:
            figures["slices"] = [self._whole_slice(records, start, a, slice_s) for a in _whole_slices(start, now, slice_s)]
        return figures

    def _whole_slice(self, records: list[RequestRecord], start: float, a: float, slice_s: float) -> dict[str, Any]:
        """A running window's whole slice ``[a, a + slice_s)``, worked out once (its figures are
        settled: what ended in it ended, what waited at its end waited)."""
        if (a, slice_s) not in self._done_slices:
            self._done_slices[(a, slice_s)] = {**self._slice(records, a, a + slice_s), "from_s": a - start}
        return self._done_slices[(a, slice_s)]

    def _slice(self, records: list[RequestRecord], a: float, b: float) -> dict[str, Any]:
        """One slice ``[a, b)`` of a window: its figures (:data:`SLICE_FIGURES`), and a running
        open loop's delivery and growth in it."""
        part = {**_slice_figures(summarize(records, a, b, 2, self.spec.output_tokens, self._asked_prompt)), "window_at": [a, b]}
        if self._open is not None:
            rate, seed, level, schedule = self._open
            part.update(open_loop_figures(records, a, b, rate, seed, level.t0, schedule()))
        return part

    def _result(self, levels: dict[int, dict[str, Any]], stop_reason: str) -> ProbeResult:
        metrics: dict[str, float] = {}
        for level, summary in levels.items():
            metrics.update({f"{m}@{level}": summary[m] for m in LEVEL_METRICS if summary.get(m) is not None})
        target = levels.get(self.spec.target_concurrency)
        if target is not None:
            metrics.update({m: target[m] for m in LEVEL_METRICS if target.get(m) is not None})
            if target["output_tok_s"] > 0 and target.get("output_tok_s_ci") is not None:
                metrics["output_tok_s_ci_rel"] = target["output_tok_s_ci"] / target["output_tok_s"]
        mismatch = any(s["token_mismatch"] for s in levels.values())
        metrics["token_mismatch"] = float(mismatch)
        details = {"levels": {str(k): Level.of(v).to_dict() for k, v in levels.items()}, "stop_reason": stop_reason}
        return ProbeResult(self.name, metrics, details)


PER_GPU_METRICS = ("output_tok_s_per_gpu", "output_tok_s_per_gpu_ci")
# per probe: (metric, its per-GPU name); the SLO probe's goodput is a throughput too
PER_GPU: dict[str, tuple[tuple[str, str], ...]] = {
    "load": (("output_tok_s", "output_tok_s_per_gpu"), ("output_tok_s_ci", "output_tok_s_per_gpu_ci")),
    "slo": (("goodput", "goodput_per_gpu"), ("goodput_ci", "goodput_per_gpu_ci")),
}


def per_gpu(result: ProbeResult, gpus: int) -> ProbeResult:
    """``result`` with its throughput (the load probe's target level, the SLO probe's goodput; and
    their CIs) divided by the partition's GPUs; other probes' results unchanged.

    Where the trial size is a parameter (tp 1 and 2, tp 4 and 8), a config on more GPUs serves
    more per server but the node holds fewer of them: per GPU is what the node delivers when it
    is filled with replicas of the config, the figure that ranks such configs."""
    pairs = PER_GPU.get(result.probe, ())
    if gpus < 1 or not pairs or pairs[0][0] not in result.metrics:
        return result
    added = {per: result.metrics[m] / gpus for m, per in pairs if m in result.metrics}
    return replace(result, metrics={**result.metrics, **added}, details={**result.details, "gpus": gpus})


def summarize(
    records: list[RequestRecord],
    start: float,
    end: float,
    batches: int,
    expected_output: int,
    asked_prompt: int | None = None,
) -> dict[str, Any]:
    """Level figures over the window ``[start, end)``.

    Output tokens count where their stream stamps fall (batch means over ``batches`` sub-windows
    give the CI). Requests count where they ended: only those that ended inside the window give
    latencies (with their sample counts) and the error rate; cancelled requests (in flight when the
    window closed) never count as errors.

    Past saturation the requests that end in a window are the early ones; those still waiting for
    their first token when it closes are the slow ones. ``waiting`` counts them and
    ``ttft_p99_censored`` is the p99 over the ended requests' TTFTs and the waits so far of the
    waiting ones: a lower bound of the true p99, which an SLO check must not let pass."""
    window = batch_means(
        [(r.stamps, r.tokens_per_chunk) for r in records], start, end, batch_count(records, end - start, batches)
    )
    seconds = max(end - start, 1e-9)
    ended = [r for r in records if not r.cancelled and _ended_in(r, start, end)]
    ok = [r for r in ended if r.ok]
    errors = [r for r in ended if not r.ok]
    out_tokens = sum(r.completion_tokens if r.completion_tokens is not None else r.chunks for r in ok)
    prefilled = [r for r in records if r.ttft is not None and start <= r.started + r.ttft < end]
    in_tokens = sum(r.prompt_tokens or asked_prompt or 0 for r in prefilled)
    client_tokens = sum(r.chunks for r in ok)
    summary: dict[str, Any] = {
        "window_s": window.seconds,
        "batches": len(window.rates),
        "requests": len(ended),
        "errors": float(len(errors)),
        "error_rate": len(errors) / len(ended) if ended else 0.0,
        "first_error": errors[0].error if errors else None,
        "first_error_at_s": (errors[0].ended or errors[0].started) - start if errors else None,
        "output_tokens": out_tokens,
        "prompt_tokens": in_tokens,
        "client_output_tokens": client_tokens,
        "usage_reported": all(r.completion_tokens is not None for r in ok),
        "token_mismatch": bool(out_tokens) and abs(client_tokens - out_tokens) / out_tokens > 0.01,
        "short_outputs": sum(1 for r in ok if (r.completion_tokens or r.chunks) < (r.asked_output or expected_output)),
        "output_tok_s": window.mean,
        "output_tok_s_ci": window.half_width,
        "batch_rates": list(window.rates),
        "total_tok_s": window.mean + in_tokens / seconds,
        "req_s": len(ok) / seconds,
        **_prompt_figures(ok, asked_prompt),
    }
    samples = {
        "ttft": [r.ttft for r in ok if r.ttft is not None],
        "e2e": [r.e2e for r in ok if r.e2e is not None],
        "itl": [g for r in ok for g in r.gaps],
        "tpot": [
            (r.e2e - r.ttft) / (n - 1)
            for r in ok
            if r.e2e is not None and r.ttft is not None and (n := (r.completion_tokens or r.chunks)) > 1
        ],
    }
    for name, values in samples.items():
        summary[f"{name}_n"] = len(values)
        for p, value in percentiles(values, PCTS).items():
            summary[f"{name}_p{p}"] = value
    waits = [end - r.started for r in records if r.started < end and _waiting_at(r, end)]
    summary["waiting"] = len(waits)
    summary["ttft_p99_censored"] = percentiles(samples["ttft"] + waits, [99])[99] if waits else summary["ttft_p99"]
    return summary


DELIVERED_MIN = 0.97  # an open-loop level whose senders sent less of its schedule is client-bound
LATE_FLOOR = 1  # ... unless no more than this many of its due arrivals were missing (see short_of_schedule)
SEND_LAG_MAX = 0.05  # s: so is one whose sends ran this late at p99 (a loop uniformly late still sends the count)
GROWTH_BATCHES = (4, 10)  # sub-windows of the growth's trend: at least 4 (2 dof), at most 10, each >= 2 lifetimes
GROWTH_MIN_ARRIVALS = 20  # a window with fewer has no trend worth fitting (the count's change stands in)
RAMP_QUANTILE = 0.99  # the growth's trend starts this quantile of the window's request lifetimes after the level did


def open_loop_figures(
    records: list[RequestRecord], start: float, end: float, rate: float, seed: int, t0: float, schedule: Iterable[float] = ()
) -> dict[str, Any]:
    """What an open-loop level asked for and what it delivered, over the window ``[start, end)``.

    ``offered_rate``: the arrivals the schedule (``schedule``'s offsets from ``t0``, else the
    Poisson draw of ``rate`` from ``seed``) put in the window, per second (a session's later turns
    are no scheduled arrivals: they follow its own pace; they count in the system from their
    send); ``achieved_rate``: the requests the senders delivered
    in it: a request's bytes written (:attr:`RequestRecord.sent`) less any wait at the in-flight
    cap, which is the server's queue, not the client's; one still waiting there, when it got to
    the cap (``at_gate``). ``achieved_over_offered``: the share of the arrivals due in the window
    that were delivered by its end (plus :data:`SEND_LAG_MAX`), ``send_lag_*`` the seconds
    from a scheduled arrival to that moment. ``client_bound``: the senders fell short of the
    schedule (:func:`short_of_schedule`: the load was not offered);
    ``client_late``: a send lag p99 over :data:`SEND_LAG_MAX` (:func:`client_verdict` says what
    each means for the level's verdict). ``completion_rate``: requests that ended in the window,
    per second. ``in_system_mean`` and ``in_system_max``: requests in the system (arrived, not
    ended) over the window, at 11 even points and at its fullest (just after an arrival).

    ``growth``: how fast requests in the system (arrived, not ended: arrivals minus completions)
    grew over the window, per second, the least-squares trend of their batch means
    (:func:`~tuner.base.stats.trend`), with its 95 % half-width ``growth_ci`` (a window shorter than 4
    batches of 2 request lifetimes, or of fewer than :data:`GROWTH_MIN_ARRIVALS` arrivals: the
    count's change over the window, within twice the spread of two Poisson counts;
    ``growth_batches`` 0). The trend starts ``growth_from_s`` into the window: at the level's start
    plus the p99 of its requests' lifetimes (at most half the window), where a count that climbed
    from a drained server's 0 has done climbing; from the window's start, a 10-s level of a stable
    queue whose lifetimes spread as an engine's do (lognormal, sigma 1) broke on growth in 42 % of
    simulated levels, from there in 6 % (scripts/growth_ramp_sim.py); ``backlog_growth`` the
    count's change from the window's start to its end. Whether a growth breaks the SLO depends on
    the SLO and how long the load must hold (:meth:`~tuner.space.schema.SloTargets.critical_growth`)."""
    seconds = max(end - start, 1e-9)
    due = []  # scheduled arrival times up to the window's end
    for offset in schedule or arrival_offsets(rate, seed):
        if t0 + offset >= end:
            break
        due.append(t0 + offset)
    scheduled = sum(1 for t in due if t >= start)
    sent = [(r, at) for r in records if not r.turn and (at := delivered_at(r)) is not None and start <= at < end]
    due = sorted(due + [r.started for r in records if r.turn and r.started < end])  # later turns: in from their send
    lags = [at - r.started for r, at in sent]
    ends = sorted(r.ended for r in records if r.ended is not None)

    def in_system(t: float) -> int:
        return bisect.bisect_left(due, t) - bisect.bisect_left(ends, t)

    lives = sorted(r.e2e for r in records if r.ok and r.e2e and start <= (r.ended or 0) < end)
    life = lives[len(lives) // 2] if lives else seconds
    low, high = GROWTH_BATCHES
    ended = bisect.bisect_left(ends, end) - bisect.bisect_left(ends, start)
    # a level starts on a drained server: its count climbs from 0 for as long as its longest
    # requests live (the window opens when the first one ends), and that climb is no queue growing
    ramp = lives[int(RAMP_QUANTILE * (len(lives) - 1))] if lives else 0.0
    since = min(max(start, t0 + ramp), start + seconds / 2)
    span = end - since
    if span >= 2 * low * life and scheduled >= GROWTH_MIN_ARRIVALS:
        growth = trend(in_system, since, end, min(high, int(span / (2 * life))))
    else:  # too short for a trend of independent batches: the count's change, with two Poisson counts' spread
        counted = (
            bisect.bisect_left(due, end)
            - bisect.bisect_left(due, since)
            + bisect.bisect_left(ends, end)
            - bisect.bisect_left(ends, since)
        )
        growth = Trend((in_system(end) - in_system(since)) / span, 2 * math.sqrt(counted + 1) / span, 0, span)
    # delivery: of the arrivals due in the window, those released by its end (and a send's
    # tolerated lag past it); counted by send time, one arrival due at the window's end and sent
    # 3 ms after it read as 5 of 6 (83 %) at 1 request/s in a 6-s window, and "client-bound"
    kept = sum(
        1
        for r in records
        if not r.turn and start <= r.started < end and (at := delivered_at(r)) is not None and at < end + SEND_LAG_MAX
    )
    delivered = kept / scheduled if scheduled else 1.0
    points = [start + seconds * k / 10 for k in range(11)]
    figures: dict[str, Any] = {
        "rate": rate,
        "offered_rate": scheduled / seconds,
        "achieved_rate": len(sent) / seconds,
        "achieved_over_offered": delivered,
        "client_bound": short_of_schedule(scheduled, kept),
        "client_late": bool(lags) and _p99(lags) > SEND_LAG_MAX,
        "completion_rate": ended / seconds,
        "backlog_growth": float(in_system(end) - in_system(start)),
        "growth": growth.slope if growth else None,
        "growth_ci": growth.half_width if growth else None,
        "growth_batches": growth.batches if growth else 0,
        "growth_from_s": since - start,
        "in_system_mean": sum(in_system(t) for t in points) / len(points),
        "in_system_max": max(
            bisect.bisect_right(due, t) - bisect.bisect_right(ends, t) for t in (start, *(t for t in due if start <= t < end))
        ),
        "send_lag_max": max(lags) if lags else None,
    }
    figures.update({f"send_lag_p{p}": v for p, v in percentiles(lags, (50, 99)).items()})
    return figures


def short_of_schedule(scheduled: int, kept: int) -> bool:
    """Whether senders that released ``kept`` of the ``scheduled`` arrivals due in a window did not
    offer its load: more of them missing than :data:`DELIVERED_MIN` allows (3 %), and more than
    :data:`LATE_FLOOR`. Without the floor, a window of fewer than 34 arrivals allowed none late:
    one request held up by a scheduling hiccup on a shared core made a 4-s level of 28 arrivals
    "client-bound" at 96.4 % (the real open-loop SLO test, .ci/run idle at bdbe390), while one
    request more or less in such a window is within its Poisson count's own spread."""
    missing = scheduled - kept
    return missing > LATE_FLOOR and missing > (1 - DELIVERED_MIN) * scheduled


def delivered_at(rec: RequestRecord) -> float | None:
    """When the client delivered a request to the server: its bytes written, less its wait at the
    open loop's in-flight cap (the server's queue, held on the client); one still waiting there,
    when it got to it; None: not sent (yet)."""
    if rec.sent is not None:
        return rec.sent - (rec.queued or 0.0)
    return rec.at_gate if rec.queued is None else None


def client_verdict(level: Mapping[str, Any], broken: Sequence[str], targets: SloTargets | None = None) -> str | None:
    """Why an open-loop level's verdict is the client's, not the server's (None: it is the
    server's). Senders that fell short of the schedule (:func:`short_of_schedule`) did not offer the
    load: the level says nothing either way. Senders that ran late (``client_late``) did offer it,
    and TTFT counts from the scheduled arrival, so a level that held the SLO despite the lag holds
    it; one that broke it may have broken on the client's lag, so that break is not the server's,
    unless it stands with the lag taken off every latency (``targets`` given): a queue that grows
    (the lag sends fewer, never more) or a TTFT p99 of seconds is the server's, not 63 ms of a busy
    client's (on an H100, SGLang's 88 requests/s held a minute: 1,017 requests waiting, TTFT p99
    11.3 s, sends 63 ms late at p99; SGLang's own bench at 92/s: TTFT p99 76 s)."""
    if level.get("client_bound"):
        return f"client-bound: the senders released {level.get('achieved_over_offered', 0):.1%} of the scheduled arrivals"
    if level.get("client_late") and broken:
        lag = level.get("send_lag_p99") or 0.0
        if targets is not None and targets.violated(_lag_taken_off(level, lag)):
            return None
        return (
            f"client-bound: sends ran {lag * 1000:.0f} ms late at p99 (> {SEND_LAG_MAX * 1000:.0f} ms) "
            "where the level broke the SLO"
        )
    return None


def _lag_taken_off(level: Mapping[str, Any], lag: float) -> dict[str, Any]:
    """A level's figures with a send lag taken off each latency (the most a client that late may
    have added to any of them)."""
    names = ("ttft_p99", "ttft_p99_censored", "itl_p99", "tpot_p99")
    return {**level, **{n: max(0.0, level[n] - lag) for n in names if level.get(n) is not None}}


def _p99(values: list[float]) -> float:
    return float(percentiles(values, [99])[99] or 0.0)


SLICE_FIGURES = ("output_tok_s", "requests", "ttft_p99", "itl_p99", "tpot_p99", "error_rate", "waiting", "ttft_p99_censored")


def _slice_figures(summary: dict[str, Any]) -> dict[str, Any]:
    return {m: summary.get(m) for m in SLICE_FIGURES}


SLICE_SETTLE_S = (
    5.0  # s: a whole slice is reported while its window runs once it ended this long ago (the senders' last records in)
)


def _whole_slices(start: float, now: float, step: float) -> list[float]:
    """The starts of the whole ``step``-second slices of a window begun at ``start`` that ended
    :data:`SLICE_SETTLE_S` before ``now`` or earlier."""
    return [start + k * step for k in range(max(0, int((now - SLICE_SETTLE_S - start) // step)))]


def _slices(start: float, end: float, step: float) -> list[tuple[float, float]]:
    """``[start, end)`` in slices of ``step`` seconds; a last one under half a step joins the one before."""
    bounds = [start]
    while bounds[-1] + step < end - step / 2:
        bounds.append(bounds[-1] + step)
    bounds.append(end)
    return list(itertools.pairwise(bounds))


def in_flight_cap(capacity: Capacity, tokens_per_request: int) -> int:
    """Open loop: the most requests sent to a server at once. Twice what the engine runs at once
    (its request limit, or what its KV pool holds at ``tokens_per_request``) and 8 more, so the
    engine's own queue is in the measurement; 1024 where it says neither. A llama-server under a
    memory cap (RLIMIT_AS) dies creating a thread for each connection ("Resource temporarily
    unavailable") long before such a queue tells the SLO anything it does not know already."""
    holds = [n for n in (capacity.max_running_requests, (capacity.kv_tokens or 0) // max(1, tokens_per_request)) if n]
    return min(2 * min(holds) + 8, 1024) if holds else 1024


def _waiting_at(rec: RequestRecord, t: float) -> bool:
    """No first token yet at ``t``, and not ended (failed) before it."""
    first_token = None if rec.ttft is None else rec.started + rec.ttft
    return (first_token is None or first_token >= t) and (rec.ended is None or rec.ended >= t)


async def prefix_cache_counters(client: httpx.AsyncClient, server: ServerHandle) -> tuple[float, float] | None:
    """(prefix-cache queries, hits) in tokens from /metrics, where the engine names its counters."""
    if server.prefix_cache_metrics is None:
        return None
    try:
        reply = await client.get(f"{server.url}/metrics", headers=server.headers, timeout=5.0)
    except httpx.HTTPError:
        return None
    if reply.status_code != 200:
        return None
    queries, hits = (counter_total(reply.text, name) for name in server.prefix_cache_metrics)
    return None if queries is None or hits is None else (queries, hits)


def batch_count(records: list[RequestRecord], seconds: float, cap: int) -> int:
    """Sub-windows at least one request lifetime (median E2E) wide, at most ``cap``, at least 2:
    narrower batches see the phases of single requests (a prefill stalls decode) and their rates
    are correlated, which makes a batch-means CI too wide or too narrow."""
    lifetimes = sorted(r.e2e for r in records if r.ok and r.e2e)
    if not lifetimes:
        return cap
    return max(2, min(cap, int(seconds / lifetimes[len(lifetimes) // 2])))


def shape(source: Source, first: int, sessions: int = 200) -> tuple[float, float, float]:
    """The mean prompt and output tokens of a request and the mean turns of a session, over the
    ``sessions`` from ``first`` (what sizes an open loop's senders and in-flight cap)."""
    drawn = [source.session(first + i) for i in range(sessions)]
    turns = [t for s in drawn for t in s.turns]
    return (
        sum(t.prompt_tokens for t in turns) / len(turns),
        sum(t.output for t in turns) / len(turns),
        len(turns) / len(drawn),
    )


SKIPPED_MAX = 1000  # a client that skipped this many requests over the context, and sent fewer, stops


def over_context(server: ServerHandle, turn: Turn) -> bool:
    """A request longer (prompt and output) than the server holds for one request: never sent,
    counted per level (``over_context``), as the config's limit, not an error of the server."""
    context = server.capacity.context_per_request if server.capacity is not None else None
    return context is not None and turn.prompt_tokens + turn.output > context - server.context_slack


def _record(session: Session, k: int, turn: Turn, output: int, started: float) -> RequestRecord:
    asked = turn.prompt_tokens if session.kind != "fixed" or turn.prompt_tokens else None
    return RequestRecord(
        ok=False, started=started, session=session.index, turn=k, asked_prompt=asked, asked_output=output
    )  # fmt: skip


async def _stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` (a session's think time) unless the level stops first: True if it did."""
    try:
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True


def _ended_in(rec: RequestRecord, start: float, end: float) -> bool:
    return rec.ended is not None and start <= rec.ended < end


def _prompt_figures(ok: list[RequestRecord], asked: int | None) -> dict[str, Any]:
    """How exact the prompt lengths were (against each request's own asked length, else
    ``asked``), their percentiles and the outputs' by the server's count, how much of the prompts
    the server served from its cache, and how much the workload let it (``cache_hit_allowed``:
    the leading segments an earlier request sent; per turn of a session too)."""
    counted = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    exact = [r.prompt_tokens == want for r in ok if r.prompt_tokens is not None and (want := r.asked_prompt or asked)]
    cached = [r for r in ok if r.cached_tokens is not None and r.prompt_tokens]
    outputs = [r.completion_tokens for r in ok if r.completion_tokens is not None]
    asked_in = [(r.prompt_tokens, r.asked_prompt) for r in ok if r.prompt_tokens is not None and r.asked_prompt]
    asked_out = [(r.completion_tokens, r.asked_output) for r in ok if r.completion_tokens is not None and r.asked_output]
    allowed = [(r.reusable, r.asked_prompt) for r in ok if r.reusable is not None and r.asked_prompt]
    figures: dict[str, Any] = {
        "prompt_tokens_min": min(counted) if counted else None,
        "prompt_tokens_max": max(counted) if counted else None,
        "prompt_tokens_exact": sum(exact) / len(exact) if exact else None,
        "prompt_tokens_over_asked": _share(asked_in),
        "output_tokens_over_asked": _share(asked_out),
        "cache_hit_rate": _share([(r.cached_tokens, r.prompt_tokens) for r in cached]),
        "cache_hit_allowed": _share(allowed),
        "cached_tokens": sum(r.cached_tokens or 0 for r in cached),
    }
    for name, values in (("prompt_tokens", counted), ("output_tokens", outputs)):
        figures.update({f"{name}_p{p}": v for p, v in percentiles([float(v) for v in values], PCTS).items()})
    turns = sorted({r.turn for r in cached if r.turn})
    if turns:  # sessions: the hit rate by turn (the first turn's is the system prompt's at most)
        by_turn = {t: [(r.cached_tokens, r.prompt_tokens) for r in cached if (r.turn or 0) == t] for t in [0, *turns]}
        figures["cache_hit_by_turn"] = {str(t): _share(pairs) for t, pairs in by_turn.items() if pairs}
    return figures


def _share(pairs: Sequence[tuple[int | None, int | None]]) -> float | None:
    """sum(part) / sum(whole) over the pairs (None: nothing to divide)."""
    whole = sum(w or 0 for _, w in pairs)
    return sum(p or 0 for p, _ in pairs) / whole if whole else None


def mark_reusable(records: Sequence[RequestRecord], source: Source) -> None:
    """Each request's :attr:`~RequestRecord.reusable`: the prompt tokens of its leading segments
    that a request sent before it sent too (in the order they were sent; a segment sent shorter
    before counts that far, then the chain stops)."""
    longest: dict[str, int] = {}
    sessions: dict[int, Session] = {}
    for rec in sorted((r for r in records if r.session is not None and r.sent is not None), key=lambda r: r.sent or 0.0):
        assert rec.session is not None
        session = sessions.get(rec.session) or sessions.setdefault(rec.session, source.session(rec.session))
        if session.kind == "fixed":
            continue
        turn = session.turns[rec.turn or 0]
        found = 0
        for segment in turn.segments:
            seen = longest.get(segment.id, 0)
            found += min(seen, segment.tokens)
            if seen < segment.tokens:
                break
        rec.reusable = found
        for segment in turn.segments:
            longest[segment.id] = max(longest.get(segment.id, 0), segment.tokens)


def _stop_reason(results: dict[int, dict[str, Any]], level: int, target: int) -> str:
    current = results[level]
    if current["error_rate"] > MAX_ERROR_RATE:
        return f"error rate {current['error_rate']:.0%} at concurrency {level} > {MAX_ERROR_RATE:.0%}"
    lower = [lv for lv in results if lv < level]
    if level < target or not lower:
        return "completed"
    prev = results[max(lower)]
    gain = current["output_tok_s"] / prev["output_tok_s"] - 1 if prev["output_tok_s"] else 1.0
    ttft_up = (current.get("ttft_p50") or 0) > (prev.get("ttft_p50") or 0)
    if level > target and gain < SATURATION_GAIN and ttft_up:
        return f"saturated at concurrency {level}: throughput +{gain:.1%} while TTFT p50 rose"
    return "completed"


def _dataset_prompts(path: str) -> Callable[[int], str]:
    """Prompts from a JSONL file ({"prompt": ...} or {"messages": [...]}), cycled; each carries a
    fresh random nonce first, so a prompt the dataset repeats is still new to the server's cache."""
    texts = []
    with open(path) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                text = row.get("prompt") or "\n".join(m.get("content", "") for m in row.get("messages", []))
                if text:
                    texts.append(text)
    if not texts:
        raise ValueError(f"{path}: no prompts (each line needs 'prompt' or 'messages')")
    return DatasetPrompts(tuple(texts))


@dataclass(frozen=True)
class DatasetPrompts:
    """The i-th prompt of a dataset, with its nonce (picklable: the open loop's senders make them)."""

    texts: tuple[str, ...]

    def __call__(self, i: int) -> str:
        return f"[{' '.join(filler_words(8, seed=i))}]\n{self.texts[i % len(self.texts)]}"
