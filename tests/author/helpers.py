"""Run the author's C++ back end directly: plan, emit, build with g++, call the launchers through ctypes and
compare with the reference on real inputs. Fast enough for unit tests (no sandbox, no evaluation children)."""

from __future__ import annotations

import ctypes
import subprocess
import types
from pathlib import Path

import torch

from cuda_agent.author import Variant, capture_problem, plan_graph
from cuda_agent.author.emit import emit_source


def run_cpu(source: str, tmp: Path) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(ours, reference) outputs of one call on seeded inputs."""
    plan = plan_graph(capture_problem(source))
    (tmp / "k.cpp").write_text(emit_source(plan, "cpu", Variant()))
    subprocess.run(
        ["g++", "-O1", "-fopenmp", "-shared", "-fPIC", "-o", str(tmp / "k.so"), str(tmp / "k.cpp")],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(tmp / "k.so"))
    module = types.ModuleType("author_test_problem")
    exec(compile(source, "model.py", "exec"), module.__dict__)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        ref = model(*inputs)
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    buffers = {n.name: t.contiguous() for n, t in zip(plan.graph.inputs, tensors, strict=True)}
    buffers |= {p.name: state[p.attrs["qualname"]].detach().contiguous() for p in plan.graph.params}
    for name, node in plan.buffers.items():
        buffers.setdefault(name, torch.empty(node.shape, dtype=getattr(torch, node.dtype)))
    for kernel in plan.kernels:
        args = [ctypes.c_void_p(buffers[b].data_ptr()) for b in [*kernel.reads, *kernel.writes]]
        getattr(lib, kernel.name)(*args)
    return [buffers[o] for o in plan.outputs], refs
