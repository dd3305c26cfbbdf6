"""The reference role: runs only the problem's Model (never candidate code), keeps its outputs on the device,
and compares the candidate's outputs, which arrive in a shared buffer it owns, against them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from cuda_agent.eval import compare, memory, timing
from cuda_agent.eval.child import harness
from cuda_agent.eval.child.channel import Channel
from cuda_agent.eval.child.harness import Stop, classify, flatten, make_inputs, signature
from cuda_agent.eval.child.protocol import (
    CompareCommand,
    Compared,
    JobCommand,
    OutputMeta,
    Outputs,
    Ready,
    ReleaseCommand,
    SpotCommand,
    TimeCommand,
    Timed,
    TrialCommand,
)
from cuda_agent.eval.child.shared import SharedBuffer

_ALIGN = 256
# How much slower than the float32 call a float64 run of the reference may be guessed at: float64 arithmetic runs at
# half the rate of float32 on the H200's CUDA cores and far under its TF32 tensor cores, and moves twice the bytes.
FLOAT64_SLOWDOWN = 30.0


class Reference(harness.ChildRole):
    def __init__(self, job: JobCommand, channel: Channel, workdir: str) -> None:
        super().__init__(job.device, job.memory_fraction, "reference")
        self.job, self.channel, self.workdir = job, channel, workdir
        self.kept: list[torch.Tensor | None] = []
        self.layout: list[OutputMeta | None] = []
        self.buffer: SharedBuffer | None = None
        self.base: tuple[int, list[Any]] | None = None
        # The kept outputs' inputs made again (for the float64 second opinion) and the call's time.
        self.replay: Callable[[], list[Any]] | None = None
        self.call_ms = 0.0

    def start(self) -> None:
        self.setup_device()
        self.problem, init_inputs = self.load_problem(self.workdir)
        ready = Ready()
        try:
            ready.plan = memory.plan_trial(self.problem, init_inputs)
            host_limit = None if self.kind == "cuda" else memory.CPU_ADDRESS_SPACE
            ready.plan.free_bytes = memory.free_memory(self.kind, self.memory_fraction, host_limit)
        except Exception as exc:  # no meta implementation for some op: go on without a plan
            ready.plan_note = f"no memory plan (meta pass failed: {classify(exc)[1]})"
        self.phase_done("planned")
        try:
            harness.manual_seed(harness.INIT_SEED)
            with harness.default_device(self.device):
                self.model = self.problem.model_cls(*init_inputs)
            if isinstance(self.model, torch.nn.Module):
                self.model = self.model.to(self.device)
        except Exception as exc:
            self.fail("problem_error", f"Model(*get_init_inputs()) raised {classify(exc)[1]}")
        self.phase_done("init")
        self.channel.send(ready.model_dump(mode="json"))

    def call(self, inputs: list[Any]) -> Any:
        with harness.no_grad(), _exact_fp32():
            return self.model(*inputs)

    def run_and_keep(self, inputs: list[Any]) -> None:
        """One call; its outputs (contiguous, for chunked comparison) are kept and their layout sent."""
        self.kept = []
        try:
            started = harness.perf_counter()
            values = flatten(self.call(inputs))
            self.sync()
            call_ms = self.call_ms = (harness.perf_counter() - started) * 1e3
            self.report.output_aliases_input |= _aliases(values, inputs)
            del inputs
            self.kept = [v.contiguous() if type(v) is torch.Tensor else None for v in values]
            del values
            degenerate = compare.degenerate_reason(self.kept, self.job.tolerance)
            fingerprint = compare.fingerprint(self.kept)
        except Stop:
            raise
        except Exception as exc:
            self.fail("problem_error", f"reference Model.forward raised {classify(exc)[1]}")
        metas, offset = harness.meta_of(self.kept), 0
        for meta, value in zip(metas, self.kept, strict=True):
            if meta is not None and value is not None:
                meta.offset = offset
                offset += -(-value.numel() * value.element_size() // _ALIGN) * _ALIGN
        self.layout = metas
        new = self.buffer is None or self.buffer.nbytes < offset
        if new:
            self.drop_buffer()
            self.buffer = SharedBuffer.create(self.kind, offset)
        assert self.buffer is not None
        reply = Outputs(
            layout=metas,
            nbytes=self.buffer.nbytes,
            new_buffer=new,
            call_ms=call_ms,
            input_signature=self.signature,
            degenerate=degenerate,
            fingerprint=fingerprint,
        )
        self.channel.send(reply.model_dump(mode="json"), [self.buffer.fd] if new else None)

    def trial(self, command: TrialCommand) -> None:
        try:
            inputs = make_inputs(self.problem, command.seed, self.device)
        except Exception as exc:
            self.fail("problem_error", str(exc))
        self.signature = signature(inputs)
        self.replay = lambda: make_inputs(self.problem, command.seed, self.device)
        self.run_and_keep(inputs)
        self.report.trials_run += 1
        self.phase_done(f"trial{command.index}")

    def spot(self, command: SpotCommand) -> None:
        """The output of a timed call: the same base inputs and per-call factor the candidate used."""
        if self.base is None or self.base[0] != command.base_seed:
            self.base = None  # the old base goes before the new one is made
            self.base = (command.base_seed, make_inputs(self.problem, command.base_seed, self.device))
        factor = timing.scales(command.scale_seed, command.call + 1)[command.call]
        self.signature = signature(self.base[1])
        base = self.base[1]
        self.replay = lambda: timing.scaled(base, factor)
        self.run_and_keep(self.replay())

    def compare(self, command: CompareCommand) -> None:
        assert self.buffer is not None
        cand = [
            None if m is None else self.buffer.view(m.offset, tuple(m.shape), getattr(torch, m.dtype.split(".")[1]))
            for m in self.layout
        ]
        result = compare.compare_outputs(cand, self.kept, self.job.tolerance)
        note = ""
        if not result.passed and compare.exact_candidates(self.kept):
            exact = self.exact_outputs(command.exact_budget_s)
            if isinstance(exact, str):
                note = f"no float64 second opinion: {exact}"
            else:
                result = compare.compare_outputs(cand, self.kept, self.job.tolerance, exact)
                note = "judged against a float64 run of the reference too"
                del exact
            if self.kind == "cuda":  # the float64 run's blocks, cached here, would crowd the candidate's process
                torch.cuda.empty_cache()
        reply = Compared(
            passed=result.passed,
            failures=result.failures[:8],
            max_abs_error=result.max_abs_error,
            fingerprint=compare.fingerprint(cand),
            note=note,
        )
        del cand
        self.release(ReleaseCommand())
        self.channel.send(reply.model_dump(mode="json"))

    def exact_outputs(self, budget_s: float) -> list[torch.Tensor | None] | str:
        """The kept outputs computed again in float64 (the model's floating parameters and inputs, and tensors it
        makes, in float64), from the same inputs; or why there are none. Outputs that are not floating point, or
        whose shape the float64 run changes, get None."""
        if self.replay is None or not isinstance(self.model, torch.nn.Module):
            return "the reference is not an nn.Module"
        if self.call_ms / 1e3 * FLOAT64_SLOWDOWN > budget_s:
            return f"a float64 run of a {self.call_ms:.0f} ms call would not fit the {budget_s:.0f} s step"
        saved = torch.get_default_dtype()
        try:
            inputs = [harness.to(x, torch.float64) if _real(x) else x for x in self.replay()]
            model = copy.deepcopy(self.model).to(torch.float64)
            torch.set_default_dtype(torch.float64)
            with harness.no_grad():
                values = flatten(model(*inputs))
            del model, inputs
            self.sync()
        except Stop:
            raise
        except Exception as exc:  # an op without float64 support, or no room for a float64 copy
            return f"the float64 run raised {classify(exc)[1]}"
        finally:
            torch.set_default_dtype(saved)
        if len(values) != len(self.kept):
            return f"the float64 run returned {len(values)} outputs, not {len(self.kept)}"
        return [
            v if _real(v) and r is not None and v.shape == r.shape else None
            for v, r in zip(values, self.kept, strict=True)
        ]

    def release(self, _: ReleaseCommand) -> None:
        self.kept = []

    def time_baselines(self, command: TimeCommand) -> None:
        """Eager and torch.compile timed like the candidate, on the GPU alone (the parent holds the candidate)."""
        self.release(ReleaseCommand())
        self.base = None
        base = make_inputs(self.problem, command.base_seed, self.device)
        timer = timing.Timer(self.kind == "cuda")
        for name in command.baselines:
            try:
                target = self.model if name == "eager" else torch.compile(self.model)

                def call(inputs: list[Any], target: Any = target) -> Any:
                    with harness.no_grad():
                        return target(*inputs)

                call(base)  # the first compiled call compiles; keep it out of the timed-like warmups
                self.report.timings[name] = timer.run(
                    call, base, command.scale_seed, self.job.warmup, self.job.trials, self.job.budget_s
                )
            except Exception as exc:
                self.report.baseline_notes[name] = f"{name} baseline unavailable: {classify(exc)[1]}"
        self.phase_done("baselines")
        self.channel.send(Timed().model_dump(mode="json"))

    def drop_buffer(self) -> None:
        if self.buffer is not None:
            self.buffer.close()
            self.buffer = None


@contextmanager
def _exact_fp32() -> Iterator[None]:
    """The reference's outputs in full fp32. PyTorch lets cuDNN convolutions round through TF32 by default, which
    alone (about 1e-3 relative) exceeds the kernelbench fp32 tolerance: an exact candidate would fail against it.
    The baselines keep the defaults when timed, since that is what users run."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = cudnn.allow_tf32, matmul.allow_tf32
    cudnn.allow_tf32 = matmul.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = saved


def _real(value: Any) -> bool:
    return type(value) is torch.Tensor and harness.is_floating(value)


def _aliases(outputs: list[Any], inputs: list[Any]) -> bool:
    storages = {harness.storage(x).data_ptr() for x in inputs if isinstance(x, torch.Tensor) and x.numel()}
    return any(harness.storage(t).data_ptr() in storages for t in outputs if isinstance(t, torch.Tensor) and t.numel())
