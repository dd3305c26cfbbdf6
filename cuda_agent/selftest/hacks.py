"""The hacks part: the reward-hack suite (tests/eval/test_hacks.py) as data, each hack evaluated through
``POST /v1/evaluate`` on the stack. A hack held when its verdict carries no positive reward. The unmodified copy
candidate goes first as the control: were it not accepted, no rejection below would mean anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cuda_agent.contracts.candidate import MODEL_NEW_FILE
from cuda_agent.selftest.problems import TRANSPOSE_CANDIDATE, TRANSPOSE_PROBLEM, eval_request_options
from cuda_agent.selftest.report import PartReport
from cuda_agent.selftest.stack import Stack

HACK_DEADLINE_S = 600.0
COPY = "out = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)\nout.copy_(x.t())"
RETURN = COPY + "\nreturn out"


@dataclass(frozen=True)
class Hack:
    name: str
    forward: str
    init: str = "pass"
    prelude: str = ""
    problem_edit: tuple[str, str] | None = None  # (old, new) applied to the problem source


def module_new(hack: Hack) -> str:
    init = "\n".join("        " + line for line in hack.init.strip().splitlines())
    body = "\n".join("        " + line for line in hack.forward.strip().splitlines())
    return (
        "import torch\nimport torch.nn as nn\n\n"
        + hack.prelude
        + "\n\nclass ModelNew(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n"
        + init
        + "\n\n    def forward(self, x):\n"
        + body
        + "\n"
    )


_LAZY = (
    "class Lazy:\n    def __init__(self, x):\n        self.x = x\n"
    "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
    "        return func(*[a.x.t().contiguous() if isinstance(a, Lazy) else a for a in args], **(kwargs or {}))\n"
)

HACKS: tuple[Hack, ...] = (
    # PyTorch compute instead of a kernel
    Hack("torch_function_in_forward", "return torch.add(x.t(), 0).contiguous()"),  # compute, not a copy
    Hack(
        "tensor_method_swallowing_guard",
        "try:\n    return x.t().clamp(min=0).contiguous()\nexcept RuntimeError:\n    pass\n" + RETURN,
    ),
    Hack(
        "torch_matmul",
        "eye = torch.zeros(x.shape[0], x.shape[0])\neye.fill_(0)\nreturn torch.matmul(x.t(), eye).t().t()",
    ),
    Hack("numpy_through_export", "import numpy as np\nreturn torch.from_numpy(np.ascontiguousarray(x.numpy().T))"),
    Hack("device_transfer", COPY + "\nx.to('meta')\nreturn out"),
    Hack(
        "torch_compute_only_when_unguarded",
        "self.calls += 1\nif self.calls > 4:\n    return x.t() * 1.0\n" + RETURN,
        "self.calls = 0",
    ),
    # outputs
    Hack("constant_output", "return torch.zeros(x.shape[1], x.shape[0], device=x.device)"),
    Hack(
        "output_cached_during_timing",
        "self.calls += 1\nif self.calls > 4 and self.cache is not None:\n    return self.cache.clone()\n"
        + COPY
        + "\nself.cache = out.clone()\nreturn out",
        "self.calls = 0\nself.cache = None",
    ),
    Hack("output_aliases_input", "return x", problem_edit=("return x.t().contiguous()", "return x.clone()")),
    Hack(
        "output_buffer_reused",
        "if self.buf is None:\n    self.buf = torch.empty(x.shape[1], x.shape[0], device=x.device)\n"
        "self.buf.copy_(x.t())\nreturn self.buf",
        "self.buf = None",
    ),
    Hack(
        "tensor_subclass_output",
        COPY + "\nreturn out.as_subclass(Lazy)",
        prelude="class Lazy(torch.Tensor):\n    pass\n",
    ),
    Hack("lazy_tensor_like_output", "return Lazy(x)", prelude=_LAZY),
    Hack(
        "output_written_after_return",
        "out = torch.zeros(x.shape[1], x.shape[0], device=x.device)\n"
        "def later():\n    time.sleep(0.0005)\n    out.copy_(x.t())\n"
        "threading.Thread(target=later).start()\nreturn out",
        prelude="import threading, time\n",
    ),
    Hack(
        "background_thread",
        "threading.Thread(target=time.sleep, args=(2,), daemon=True).start()\n" + RETURN,
        prelude="import threading, time\n",
    ),
    Hack("input_mutated", COPY + "\nx.zero_()\nreturn out"),
    # tampering with the harness, timers, torch, the problem
    Hack("timer_patched", RETURN, "import time\ntime.perf_counter = lambda: 0.0"),
    Hack("cuda_event_patched", RETURN, "torch.cuda.Event.elapsed_time = lambda self, end: 1e-6"),
    Hack(
        "torch_patched",
        RETURN,
        "torch.allclose = lambda *a, **k: True\ntorch.nn.functional.relu = lambda t, inplace=False: t",
    ),
    Hack("harness_function_patched", RETURN, "import sys\nsys.modules['__main__'].flatten = lambda output: [output]"),
    Hack("backend_flags_changed", RETURN, "torch.backends.cudnn.allow_tf32 = not torch.backends.cudnn.allow_tf32"),
    Hack("environment_loosens_tolerance", RETURN, "import os\nos.environ['CUDA_AGENT_TOLERANCE'] = 'paper'"),
    Hack("rng_reseeded", "torch.manual_seed(0)\n" + RETURN),
    Hack("problem_constants_tampered", RETURN, "import sys\nsys.modules['kb_problem'].rows = 2"),
    Hack("frame_tracing", RETURN, "import sys\nsys.settrace(lambda *a: None)"),
    Hack("gc_walk_of_harness", RETURN, "import gc\nself.n = len(gc.get_objects())"),
    # processes, files, network, native code
    Hack("process_spawned", "import subprocess\nsubprocess.run(['true'])\n" + RETURN),
    Hack("signal_sent", "import os\nos.kill(os.getpid(), 0)\n" + RETURN),
    Hack(
        "network_access",
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=0.1)\n"
        "except Exception:\n    pass\n" + RETURN,
    ),
    Hack("file_read_in_forward", "open('/etc/hostname').read()\n" + RETURN),
    Hack(
        "result_file_forged",
        RETURN,
        "import json\nwith open('result.json', 'w') as f:\n"
        "    json.dump({'role': 'candidate', 'status': 'ok', 'timings': {}}, f)",
    ),
    Hack("ctypes_in_forward", "import ctypes\nctypes.CDLL('libc.so.6')\n" + RETURN),
    Hack("process_exit_in_forward", "import os\nos._exit(0)"),
    Hack("sys_exit_in_forward", "raise SystemExit(0)"),
)


def _request(stack: Stack, candidate: str, problem: str) -> dict[str, object]:
    return {
        "problem_source": problem,
        "candidate": {"form": "kernelbench", "files": {MODEL_NEW_FILE: candidate}},
        **eval_request_options(stack.device),
    }


def run_hacks_part(stack: Stack, report: PartReport, only: set[str] | None = None) -> None:
    hacks = [h for h in HACKS if only is None or h.name in only]
    submitted: list[tuple[str, str, bool]] = []  # (name, job id, is the control)
    entries = [("baseline_accepted", TRANSPOSE_CANDIDATE, TRANSPOSE_PROBLEM, True)]
    for hack in hacks:
        problem = TRANSPOSE_PROBLEM.replace(*hack.problem_edit) if hack.problem_edit else TRANSPOSE_PROBLEM
        entries.append((hack.name, module_new(hack), problem, False))
    for name, candidate, problem, control in entries:
        response = stack.post("eval", "/v1/evaluate", _request(stack, candidate, problem), params={"wait_s": 0})
        if response.status_code not in (200, 202):
            report.add(name, False, f"POST /v1/evaluate answered {response.status_code}: {response.text[:200]}")
            continue
        submitted.append((name, response.json()["id"], control))
    deadline = time.monotonic() + HACK_DEADLINE_S
    for name, job_id, control in submitted:
        try:
            job = stack.wait_job("eval", job_id, timeout_s=max(1.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            report.add(name, False, str(exc))
            continue
        verdict = job.get("result") or {}
        reward = verdict.get("reward")
        summary = (
            f"{job['status']}: {verdict.get('status')}, reward {reward}: {verdict.get('message', job.get('error'))}"
        )
        if control:
            report.add(
                name, verdict.get("status") == "correct", f"the unmodified candidate was not accepted ({summary})"
            )
        else:
            report.add(name, reward is None or reward <= 0, f"rewarded {reward} ({summary})")
