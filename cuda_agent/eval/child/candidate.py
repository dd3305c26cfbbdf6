"""The candidate role: runs ModelNew under the guards, in lockstep with the parent.

Everything the harness calls after the candidate loads was captured at import time, before any candidate code
existed, and the captures are verified after every phase (guards.Snapshot). The candidate process never holds a
secret ahead of its use: each trial's seed arrives once the model exists, and a timed call's output is shipped to
the reference (through the shared buffer) only if the parent asks for it after the call returned.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.autograd.profiler

from cuda_agent.contracts.candidate import EXTENSION_DIR_ENV, EXTENSION_MODULE, MODEL_NEW_FILE
from cuda_agent.eval import extensions, guards, timing
from cuda_agent.eval.child import harness
from cuda_agent.eval.child.channel import Channel
from cuda_agent.eval.child.harness import Stop, classify, flatten, make_inputs, meta_of, signature
from cuda_agent.eval.child.protocol import (
    COMMANDS,
    Called,
    JobCommand,
    NextCommand,
    Ran,
    Ready,
    ShipCommand,
    Shipped,
    TimeCommand,
    TrialCommand,
)
from cuda_agent.eval.child.shared import SharedBuffer
from cuda_agent.problem import ProblemError, load_candidate
from cuda_agent.settings import get_settings

_profile = torch.autograd.profiler.profile
# Composite names the profiler shows for allowed operations.
_PROFILER_ALLOWED = guards.ALLOWED_ATEN_OPS | {
    "reshape",
    "to",
    "flatten",
    "expand_as",
    "reshape_as",
    "item",
    "is_nonzero",
    "swapaxes",
    "lift",
    "type_as",
    "empty_strided",
}


def _preload_extension() -> None:
    """A workdir-form candidate's compiled module, imported (and hooked) before model_new.py imports it by name;
    a module that fails to load is the candidate's error."""
    directory = os.environ.get(EXTENSION_DIR_ENV)
    if directory is None:
        return
    try:
        extensions.preload(directory, EXTENSION_MODULE)
    except ImportError as exc:
        raise ProblemError(f"{EXTENSION_MODULE} failed to load: {exc}") from None


class ProtocolBroken(Exception):
    """The parent sent a command out of turn: never from a working parent, so the child stops."""


class Candidate(harness.ChildRole):
    def __init__(self, job: JobCommand, channel: Channel, workdir: str) -> None:
        super().__init__(job.device, job.memory_fraction, "candidate")
        self.job, self.channel, self.workdir = job, channel, workdir
        self.kept: list[Any] = []
        self.previous: list[Any] = []  # the last trial's outputs: a call returning them again reuses a buffer
        self.buffer: SharedBuffer | None = None
        self.launch_count: Callable[[], int] | None = None
        self.launches_before = 0

    # --- set-up -------------------------------------------------------------------------------------------
    def start(self) -> None:
        job = self.job
        self.setup_device()
        self.problem, init_inputs = self.load_problem(self.workdir)
        self.problem_state = _simple_globals(self.problem.module)
        self.guard = guards.ComputeGuard(enabled=not job.allow_torch_compute)
        warm_up()  # torch._dynamo re-wraps torch functions when imported: before the snapshot, not during forward
        watched = {
            "harness": harness,
            "candidate_role": sys.modules[__name__],
            "timing": timing,
            "guards": guards,
            "problem": self.problem.module,
        }
        # Launch counts prove a project-form kernel ran. A KernelBench-form extension may register torch.ops
        # instead of module functions, so its calls are only timed (custom-kernel share), never required.
        if job.project_form:
            from cuda_agent.kernels import launch_count, set_launch_hook

            self.launch_count = launch_count
            self.launch_hook: Callable[[Any], None] | None = set_launch_hook
            watched["cuda_agent.kernels"] = sys.modules["cuda_agent.kernels"]
        else:
            self.launch_count, self.launch_hook = None, extensions.install()
            watched["cuda_agent.eval.extensions"] = extensions
        self.snapshot = guards.Snapshot(extra=watched)
        self.audit = guards.AuditLog(
            protected_files=[],
            allowed_read_roots=_python_roots(),
            library_roots=[
                os.environ[v]
                for v in ("CUDA_AGENT_KERNELS_DIR", "TORCH_EXTENSIONS_DIR", EXTENSION_DIR_ENV)
                if v in os.environ
            ],
        )
        self.audit.install()
        self.timer = timing.Timer(self.kind == "cuda")
        self.phase_done("setup")
        with harness.open_file(os.path.join(self.workdir, MODEL_NEW_FILE)) as f:
            source = f.read()
        self.guarded(self.load_and_init, source, init_inputs)
        self.launches_before = self.launch_count() if self.launch_count else 0
        self.channel.send(Ready().model_dump(mode="json"))

    def load_and_init(self, source: str, init_inputs: list[Any]) -> None:
        with self.audit.running("load"):
            try:
                _preload_extension()
                model_new = load_candidate(source, name="kb_candidate", filename=MODEL_NEW_FILE)
            except ProblemError as exc:
                self.fail("candidate_error", str(exc))
        with self.audit.running("init"):
            harness.manual_seed(harness.INIT_SEED)
            with harness.default_device(self.device):
                model = model_new(*init_inputs)
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
            if self.job.load_reference_state:
                self.load_reference_state(model, init_inputs)
        self.model = model
        self.collect(harness.INIT_SEED)
        self.phase_done("init")

    def load_reference_state(self, model: Any, init_inputs: list[Any]) -> None:
        """The reference's weights, made as the reference child makes them (same seed, device), loaded into
        ModelNew; a mismatch is the candidate's error, naming the keys."""
        from cuda_agent.workdir.weights import WeightTransferError, transfer_state

        harness.manual_seed(harness.INIT_SEED)
        with harness.default_device(self.device):
            reference = self.problem.model_cls(*init_inputs)
        if isinstance(reference, torch.nn.Module):
            reference = reference.to(self.device)
        try:
            transfer_state(reference, model)
        except WeightTransferError as exc:
            self.fail("candidate_error", str(exc))

    def guarded(self, step: Callable[..., None], *args: Any) -> None:
        """Run a step that calls candidate code; its exceptions become the report's status."""
        try:
            step(*args)
        except (Stop, ProtocolBroken):
            raise
        except SystemExit as exc:
            self.add("early_exit", f"candidate called exit({exc.code}) inside the harness")
            self.fail("runtime_error", "candidate tried to exit the evaluation process")
        except guards.GuardViolation:
            self.collect(None)
            self.fail("ok", "stopped at the first forbidden PyTorch operation")
        except Exception as exc:
            self.collect(None)
            status, message = classify(exc)
            self.fail(status, f"{message}{_candidate_frame(exc, MODEL_NEW_FILE)}")

    def collect(self, expected_seed: int | None) -> None:
        for finding in self.snapshot.check(expected_seed) + self.audit.findings + self.guard.findings:
            self.add(*finding)
        if _simple_globals(self.problem.module) != self.problem_state:
            self.add("problem_tampered", "candidate changed the problem module's constants")

    def add(self, code: str, message: str) -> None:
        if (code, message) not in self.report.findings and len(self.report.findings) < 60:
            self.report.findings.append((code, message))

    def inputs(self, seed: int) -> list[Any]:
        try:
            values = make_inputs(self.problem, seed, self.device)
        except ProblemError as exc:
            self.fail("problem_error", str(exc))
        harness.manual_seed(harness.INIT_SEED)  # what the rng_reseeded check expects
        return values

    # --- correctness --------------------------------------------------------------------------------------
    def trial(self, command: TrialCommand) -> None:
        inputs = self.inputs(command.seed)
        self.guarded(self.guarded_call, inputs)
        self.collect(harness.INIT_SEED)
        self.report.trials_run += 1
        self.phase_done(f"trial{command.index}")
        reply = Ran(outputs=meta_of(self.kept), input_signature=signature(inputs))
        self.channel.send(reply.model_dump(mode="json"))

    def guarded_call(self, inputs: list[Any]) -> None:
        given = [harness.clone(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        self.kept = []
        threads = guards._active_threads()
        with harness.no_grad(), self.audit.running("forward"), self.guard.active():
            out = self.model(*given)
        values = flatten(out)
        # Copies ordered on the current stream see only work ordered before them: if they differ from the
        # output after a device-wide sync, the output was still being written when forward returned.
        early = [harness.clone(v) if type(v) is torch.Tensor else None for v in values]
        self.sync()
        if self.kind == "cpu":
            harness.sleep(0.002)  # a background thread writing the output gets caught in the act
        for finding in guards.output_findings(values, early, given, inputs, self.previous, threads):
            self.add(*finding)
        if any(f[0] == "output_not_plain_tensor" for f in self.report.findings):
            raise Stop
        for t in values:
            if type(t) is torch.Tensor and t.device.type != self.kind:
                self.fail("runtime_error", f"forward returned a tensor on {t.device}, expected {self.kind}")
        self.kept = self.previous = values

    # --- shipping outputs ---------------------------------------------------------------------------------
    def ship(self, command: ShipCommand, fds: list[int]) -> None:
        """Copy the kept outputs into the reference's buffer (device to device on the GPU)."""
        if command.new_buffer:
            if len(fds) != 1:
                raise ProtocolBroken("a new buffer without its descriptor")
            self.drop_buffer()
            self.buffer = SharedBuffer.attach(self.kind, fds[0], command.nbytes)
        assert self.buffer is not None
        metas = meta_of(self.kept)
        if [(m.shape, m.dtype) if m else None for m in metas] == [
            (m.shape, m.dtype) if m else None for m in command.layout
        ]:
            for meta, value in zip(command.layout, self.kept, strict=True):
                if meta is not None:
                    self.buffer.view(meta.offset, tuple(meta.shape), value.dtype).copy_(value)
            self.sync()
        self.kept = []
        self.channel.send(Shipped(outputs=metas).model_dump(mode="json"))

    def drop_buffer(self) -> None:
        if self.buffer is not None:
            self.buffer.close()
            self.buffer = None

    # --- timing -------------------------------------------------------------------------------------------
    def launches_per_trial(self) -> float | None:
        """Custom launches per correctness trial (project form; None otherwise): a candidate whose kernels never
        ran is found here, whether or not it is timed afterwards."""
        if self.launch_count is None:
            return None
        per_call = (self.launch_count() - self.launches_before) / max(self.report.trials_run, 1)
        self.report.launch_count = self.launch_count()
        if per_call == 0 and self.report.trials_run and not self.job.allow_torch_compute:
            self.add("no_custom_kernel", "ModelNew.forward launched no custom kernel")
        return per_call

    def time(self, command: TimeCommand) -> None:
        per_call = self.launches_per_trial()
        if self.report.findings:
            raise Stop  # nothing to time: the early report carries the findings
        base = self.inputs(command.base_seed)
        self.guarded(self.timed_calls, base, command, per_call)
        self.collect(harness.INIT_SEED)

    def call(self, inputs: list[Any]) -> Any:
        with harness.no_grad(), self.audit.running("forward"):
            return self.model(*inputs)

    def after_call(self, trial: int, out: Any, done: bool) -> None:
        """Lockstep with the parent after each timed call: it decides now whether this output is checked."""
        self.kept = flatten(out)
        self.channel.send(Called(trial=trial, done=done).model_dump(mode="json"))
        while True:
            message, fds = self.channel.recv()
            command = COMMANDS.validate_python(message)
            if isinstance(command, ShipCommand):
                self.ship(command, fds)
            elif isinstance(command, NextCommand):
                self.kept = []
                return
            else:
                raise ProtocolBroken(f"{command.op} during timing")

    def timed_calls(self, base: list[Any], command: TimeCommand, per_call_guarded: float | None) -> None:
        job = self.job
        launches_before = self.launch_count() if self.launch_count else 0
        timings = self.timer.run(
            self.call, base, command.scale_seed, job.warmup, job.trials, job.budget_s, self.after_call
        )
        self.report.timings["candidate"] = timings
        calls = job.warmup + len(timings.samples_ms)
        if self.launch_count is not None and per_call_guarded is not None:
            per_call = (self.launch_count() - launches_before) / max(calls, 1)
            self.report.launch_count = self.launch_count()
            if per_call < per_call_guarded:
                self.add("unguarded_behaviour_differs", "fewer custom launches per call when unguarded than guarded")
        if timings.method == "cuda_events":
            event, host = statistics.median(timings.samples_ms), statistics.median(timings.host_samples_ms)
            if host - event > max(0.2, event):
                self.add("work_escapes_timer", f"host time {host:.3f} ms vs event time {event:.3f} ms per call")
        self.phase_done("timing")
        self.profile_call(timing.scaled(base, 0.995))
        if self.launch_hook is not None and self.report.custom_kernel_time_share is None and self.kind == "cuda":
            share = timing.launcher_share(self.timer, self.call, timing.scaled(base, 0.995), self.launch_hook)
            if share is not None:
                self.report.custom_kernel_time_share = share
                self.report.custom_kernel_time_method = "launcher_events"
        self.phase_done("profiled")

    def profile_call(self, inputs: list[Any]) -> None:
        """One unguarded call under the autograd profiler (it does not import dynamo, which would re-wrap torch
        functions): no PyTorch compute may appear, and on GPU the share of kernel time spent in non-library
        (custom) kernels is measured."""
        cuda = self.kind == "cuda"
        with _profile(use_device="cuda" if cuda else None) as prof:
            self.call(inputs)
            self.sync()
        events = list(prof.function_events)
        if not self.job.allow_torch_compute:
            ops = {e.name for e in events if e.name.startswith("aten::")} - {f"aten::{n}" for n in _PROFILER_ALLOWED}
            if ops:
                self.add("torch_compute_unguarded", f"PyTorch ops ran while unguarded: {', '.join(sorted(ops)[:8])}")
        if not cuda:
            return
        kernels: dict[str, float] = {}
        for e in events:
            if e.device_type == torch.autograd.DeviceType.CUDA:  # type: ignore[attr-defined]
                kernels[e.name] = kernels.get(e.name, 0.0) + float(e.time_range.elapsed_us())
        self.report.kernels = {k[:200]: round(v, 3) for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])[:20]}
        total = sum(kernels.values())
        if total <= 0:
            return  # the profiler recorded no GPU activity at all: no evidence either way
        custom = sum(t for k, t in kernels.items() if not any(p in k for p in timing.LIBRARY_KERNEL_MARKERS))
        self.report.custom_kernel_time_share = custom / total
        self.report.custom_kernel_time_method = "profiler"
        if custom == 0 and not self.job.allow_torch_compute:
            self.add("no_custom_kernel", "the profiler saw no custom GPU kernel in ModelNew.forward")


class Profiled(harness.ChildRole):
    """Role ``profile``, under ncu: one warm-up call, then one call between cudaProfilerStart/Stop."""

    def __init__(self, job: JobCommand, channel: Channel, workdir: str) -> None:
        super().__init__(job.device, job.memory_fraction, "profile")
        self.job, self.channel, self.workdir = job, channel, workdir

    def start(self) -> None:
        self.setup_device()
        self.problem, self.init_inputs = self.load_problem(self.workdir)
        self.channel.send(Ready().model_dump(mode="json"))

    def trial(self, command: TrialCommand) -> None:
        inputs = make_inputs(self.problem, command.seed, self.device)
        with harness.open_file(os.path.join(self.workdir, MODEL_NEW_FILE)) as f:
            source = f.read()
        try:
            _preload_extension()
            model_new = load_candidate(source, name="kb_candidate", filename=MODEL_NEW_FILE)
            harness.manual_seed(harness.INIT_SEED)
            with harness.default_device(self.device):
                model = model_new(*self.init_inputs)
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
            with harness.no_grad():
                model(*inputs)
                self.sync()
                torch.cuda.profiler.start()  # type: ignore[no-untyped-call]
                model(*inputs)
                self.sync()
                torch.cuda.profiler.stop()  # type: ignore[no-untyped-call]
        except ProblemError as exc:
            self.fail("candidate_error", str(exc))
        except Exception as exc:
            self.fail(*classify(exc))
        self.phase_done("profile")
        self.channel.send(Ran(outputs=[], input_signature=signature(inputs)).model_dump(mode="json"))


def _simple_globals(module: Any) -> dict[str, str]:
    return {
        k: repr(v)
        for k, v in vars(module).items()
        if not k.startswith("__") and isinstance(v, int | float | str | tuple | list | bool)
    }


def _python_roots() -> list[str]:
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    roots |= {os.path.dirname(os.path.dirname(os.path.abspath(guards.__file__)))}
    roots |= {"/dev/nvidia", "/dev/null", "/dev/urandom", "/proc/self", "/sys", "/usr/lib"}
    roots.add(str(get_settings().cuda_home))  # the parent passes its CUDA_HOME into the sandbox
    return sorted(roots)


def _candidate_frame(exc: BaseException, filename: str) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return f" ({filename} line {frames[-1].lineno})" if frames else ""


def warm_up() -> None:
    """What a warm child does before its job exists: the imports every evaluation would otherwise wait for.
    Entering the guard modes the first time imports torch._dynamo; load_inline candidates import cpp_extension."""
    with guards.ComputeGuard(enabled=True).active():
        torch.empty(0)
    importlib.import_module("torch.utils.cpp_extension")
