"""The timing loop of the evaluation child, and the statistics the parent makes of its samples.

Every timed call gets fresh inputs (the base inputs scaled by a factor in [0.99, 1) drawn from a seed), so a
candidate cannot cache outputs keyed on pointers or values. On the GPU the L2 flush and a busy-wait kernel are
queued before the start event: the interval measures the device as in a steady stream of calls, not how long the
host took to reach the first launch. After each timed call the loop hands control to ``after_call`` (the
candidate's lockstep with the parent: whether this call's output is checked is decided only then).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from cuda_agent.contracts.eval import TimingStats
from cuda_agent.eval.child.protocol import ChildTimings

# Captured at import, before any candidate code exists.
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_cuda_sync = torch.cuda.synchronize
_external_stream = torch.cuda.ExternalStream
_default_stream = torch.cuda.default_stream
_gpu_sleep = torch.cuda._sleep
_is_floating = torch.Tensor.is_floating_point
_clone = torch.Tensor.clone

# GPU cycles of busy-wait queued before each timed call: ~0.5 ms at the H200's 1.98 GHz. The host needs ~50 us to
# reach a candidate's first launch on a quiet machine and twice that when its CPUs are contended; with 50 us of
# busy-wait the excess leaked into the event times (medians of one kernel 5% apart between evaluations).
PREFILL_CYCLES = 1_000_000
MIN_TRIALS = 10
# Substrings of kernel names that belong to PyTorch or vendor libraries; any other kernel counts as the
# candidate's own (custom-kernel share of GPU time, and which kernels the profiler reports on).
LIBRARY_KERNEL_MARKERS = (
    "at::native",
    "at_cuda_detail",
    "cublas",
    "cudnn",
    "nvjet",
    "xmma",
    "gemv",
    "sgemm",
    "hgemm",
    "cutlass_80",
    "cutlass_90",
    "triton_",
    "Memcpy",
)

Call = Callable[[list[Any]], Any]


def scales(scale_seed: int, calls: int) -> list[float]:
    """Per-call factors of the timed inputs; the parent computes the same list to tell the reference a call's."""
    rng = random.Random(scale_seed)
    return [1.0 - 0.01 * rng.random() for _ in range(calls)]


def scaled(base: list[Any], scale: float) -> list[Any]:
    """A fresh buffer with fresh contents per call defeats output caching keyed on pointers or values."""
    return [(x * scale if _is_floating(x) else _clone(x)) if isinstance(x, torch.Tensor) else x for x in base]


class Timer:
    """CUDA events (or the host clock on CPU) around calls; ``flush`` is the L2 flush buffer (GPU only)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.flush: torch.Tensor | None = None
        if cuda:
            l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 * 1024**2)
            # Writing twice the L2 size evicts everything a previous call left cached.
            self.flush = torch.empty(2 * l2_bytes // 4, dtype=torch.float32, device="cuda")

    def prefill(self) -> None:
        """Queue the L2 flush and the busy-wait that precede every timed GPU call."""
        if self.flush is not None:
            self.flush.zero_()
        _gpu_sleep(PREFILL_CYCLES)  # type: ignore[no-untyped-call]

    def run(
        self,
        call: Call,
        base: list[Any],
        scale_seed: int,
        warmup: int,
        trials: int,
        budget_s: float,
        after_call: Callable[[int, Any, bool], None] | None = None,
    ) -> ChildTimings:
        """Warmups, then up to ``trials`` timed calls (at least MIN_TRIALS, then until ``budget_s``).

        Two end events on the GPU: one on the current stream as the call returns, one after a device-wide
        synchronize. The second adds the host's wake-up latency, which varies; the first misses work on other
        streams. The first counts unless the second ends later than that latency explains (calibrated on empty
        calls in this process): then the device had work left, and the device-wide end counts."""
        factors = scales(scale_seed, warmup + trials)
        samples: list[float] = []
        host: list[float] = []
        started = _perf_counter()
        events = [_Event(enable_timing=True) for _ in range(4)] if self.cuda else []  # type: ignore[no-untyped-call]
        latency = self.sync_latency(events) if events else 0.0
        for i in range(warmup + trials):
            inputs = scaled(base, factors[i])
            if events:
                pre, start, returned, end = events
                # The host clock starts once the GPU has reached `pre`: waiting for a GPU shared with other
                # processes is in neither clock.
                _event_record(pre)
                _cuda_sync()
                h0 = _perf_counter()
                self.prefill()
                _event_record(start)
                out = call(inputs)
                _event_record(returned)
                _cuda_sync()
                _event_record(end)
                _cuda_sync()
                h1 = _perf_counter()
                ms = _event_elapsed(start, returned)
                if _event_elapsed(returned, end) > latency:
                    ms = _event_elapsed(start, end)
                # The host clock of the call alone: less the flush and busy-wait it waited for.
                host_ms = (h1 - h0) * 1e3 - _event_elapsed(pre, start)
            else:
                h0 = _perf_counter()
                out = call(inputs)
                h1 = _perf_counter()
                ms = host_ms = (h1 - h0) * 1e3
            del inputs
            trial = i - warmup
            if trial < 0:
                continue
            samples.append(ms)
            host.append(host_ms)
            done = trial + 1 >= trials or (trial + 1 >= MIN_TRIALS and _perf_counter() - started > budget_s)
            if after_call is not None:
                after_call(trial, out, done)
            del out
            if done:
                break
        method = "cuda_events" if self.cuda else "perf_counter"
        return ChildTimings(method=method, samples_ms=samples, host_samples_ms=host)

    def sync_latency(self, events: list[Any]) -> float:
        """Upper bound (ms) of the gap a device-wide synchronize plus an event record adds after idle-stream
        work: the largest of 20 empty calls, with 50% margin. Side-stream work shorter than this is not seen."""
        _, start, returned, end = events
        gaps = []
        for _ in range(20):
            _event_record(start)
            _event_record(returned)
            _cuda_sync()
            _event_record(end)
            _cuda_sync()
            gaps.append(_event_elapsed(returned, end))
        return 1.5 * max(gaps) + 0.002


class LaunchTimer:
    """Launch hook for cuda_agent.kernels and extension modules (cuda_agent.eval.extensions): CUDA events on the
    launch's stream around every custom launch."""

    def __init__(self) -> None:
        self.pairs: list[tuple[Any, Any]] = []
        self.pending: Any = None

    def __call__(self, before: bool, stream: int | None) -> None:
        on = _external_stream(stream) if stream else _default_stream()  # type: ignore[no-untyped-call]
        event = _Event(enable_timing=True)  # type: ignore[no-untyped-call]
        _event_record(event, on)
        if before:
            self.pending = event
        elif self.pending is not None:
            self.pairs.append((self.pending, event))
            self.pending = None


def launcher_share(timer: Timer, call: Call, inputs: list[Any], set_hook: Callable[[Any], None]) -> float | None:
    """Share of one call's GPU time between the launcher's events around each custom launch (where the profiler
    sees no GPU activity: CUPTI gives no kernel records on some hosts); None when no hooked call ran."""
    launches = LaunchTimer()
    start, returned = _Event(enable_timing=True), _Event(enable_timing=True)  # type: ignore[no-untyped-call]
    timer.prefill()
    set_hook(launches)
    try:
        _event_record(start)
        call(inputs)
        _event_record(returned)
        _cuda_sync()
    finally:
        set_hook(None)
    # Up to the call's return on the current stream: an end event after a synchronize would add the host's
    # wake-up latency, comparable to a short kernel. Launches on other streams are capped by min(1, ...).
    whole = _event_elapsed(start, returned)
    custom = sum(_event_elapsed(a, b) for a, b in launches.pairs)
    return min(1.0, custom / whole) if whole > 0 and launches.pairs else None


def stats(timings: ChildTimings) -> TimingStats:
    samples = timings.samples_ms
    return TimingStats(
        median_ms=statistics.median(samples),
        mean_ms=statistics.fmean(samples),
        std_ms=statistics.pstdev(samples) if len(samples) > 1 else 0.0,
        min_ms=min(samples),
        max_ms=max(samples),
        trials=len(samples),
        samples_ms=[round(s, 6) for s in samples],
        host_samples_ms=[round(s, 6) for s in timings.host_samples_ms],
    )
