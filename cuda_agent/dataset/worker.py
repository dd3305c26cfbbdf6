"""A sandboxed filter worker: ``python -m cuda_agent.dataset.worker JOB.json RESULTS.jsonl``.

It imports torch (and warms up torch.compile) once, then forks one child per problem so that the seconds of
start-up are paid per worker, not per problem, while a problem that hangs, crashes or exhausts memory still takes
only its own child with it. Forking is safe here because the worker never initializes CUDA or an OpenMP pool
before forking (one thread, a CPU-only warm-up); each child initializes its device itself. A verdict is appended
to RESULTS as soon as it is known, so a worker killed at its wall clock still leaves the verdicts it reached.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from pathlib import Path

from cuda_agent.dataset.filters import FilterOptions, ProblemVerdict, check_problem, harness_failure


def _warm_up(options: FilterOptions) -> None:
    """Import inductor's modules before forking, so that each child does not import them again."""
    import torch

    torch.set_num_threads(1)
    if not options.compile:
        return
    if options.device == "cuda":
        # A compile, even of a CPU function, may query the CUDA device (inductor asks what triton can target), which
        # would initialize CUDA here and make every child's CUDA fail; importing the modules is what saves the time.
        import torch._inductor.compile_fx
    else:
        torch.compile(lambda x: x * 2.0 + 1.0, backend=options.compile_backend)(torch.ones(4))
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        raise RuntimeError("the filter worker initialized CUDA before forking; its children could not use the GPU")


def _in_child(code: str, options: FilterOptions, write_fd: int) -> None:
    try:
        payload = check_problem(code, options).model_dump_json().encode()
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(0)  # never run the parent's cleanup (or its loop) in the child


def _verdict_of_child(code: str, options: FilterOptions) -> ProblemVerdict:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _in_child(code, options, write_fd)
    os.close(write_fd)
    deadline = time.monotonic() + options.timeout_s
    chunks: list[bytes] = []
    timed_out = False
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([pipe], [], [], left)
            if ready:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return harness_failure(code, f"checks did not finish within {options.timeout_s:.0f} s")
    if not chunks:
        if os.WIFSIGNALED(status):
            return harness_failure(code, f"checks crashed: signal {signal.Signals(os.WTERMSIG(status)).name}")
        return harness_failure(code, f"checks exited with status {os.waitstatus_to_exitcode(status)} and no verdict")
    return ProblemVerdict.model_validate_json(b"".join(chunks))


def main(job_path: str, results_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    options = FilterOptions.model_validate(job["options"])
    _warm_up(options)
    with open(results_path, "a") as results:
        for key, code in job["problems"]:
            verdict = _verdict_of_child(code, options)
            results.write(json.dumps({"key": key, "verdict": verdict.model_dump(mode="json")}) + "\n")
            results.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
