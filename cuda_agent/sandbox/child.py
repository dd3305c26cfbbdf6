"""``run_python_child``: one of our own modules run on tenant code in the sandbox, its answer read back as text.

Describing a problem and authoring kernels for it both trace the tenant's ``Model`` and ``get_inputs``: that code
runs in a sandboxed child (no network, no GPU, bounded memory and time), never in a worker. The child writes its
answer to one file; the file is the tenant code's to plant a link or FIFO at, so it is read with ``safefs``
(never followed, bounded).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from cuda_agent import safefs
from cuda_agent.sandbox.bwrap import SandboxLimits, SandboxSpec, run_sandboxed

ANSWER_FILE = "answer.json"
# Importing torch reserves far more address space than it uses; resident memory is what the quota bounds.
CHILD_ADDRESS_SPACE_BYTES = 16 * 1024**3
CHILD_MEMORY_BYTES = 4 * 1024**3
MAX_ANSWER_BYTES = 64 * 1024**2


class ChildFailed(RuntimeError):
    """The child gave no answer; the message says why (a limit, a timeout, its exit code and last stderr line)."""


def run_python_child(module: str, stdin: bytes, *, timeout_s: float, memory_bytes: int = CHILD_MEMORY_BYTES) -> str:
    """Run ``python -P -m module ANSWER`` sandboxed with ``stdin``; the text it wrote to ANSWER."""
    with tempfile.TemporaryDirectory(prefix="child-") as scratch:
        root = Path(scratch)
        result = run_sandboxed(
            SandboxSpec(
                argv=[sys.executable, "-P", "-m", module, str(root / ANSWER_FILE)],
                cwd=root,
                writable_paths=[root],
                stdin=stdin,
                limits=SandboxLimits(
                    wall_time_s=timeout_s,
                    cpu_time_s=int(timeout_s),
                    address_space_bytes=CHILD_ADDRESS_SPACE_BYTES,
                    memory_bytes=memory_bytes,
                ),
            )
        )
        if result.ok and safefs.exists(root, ANSWER_FILE):
            try:
                return safefs.read_text(root, ANSWER_FILE, MAX_ANSWER_BYTES)
            except safefs.UnsafePath as exc:
                raise ChildFailed(f"unusable answer: {str(exc).rsplit(': ', 1)[-1]}") from None
        why = result.sandbox_error or result.limit_exceeded or ("timed out" if result.timed_out else "")
        tail = result.stderr.strip().splitlines()[-1:] if result.stderr else []
        raise ChildFailed(f"{why or f'exit code {result.exit_code}'} {' '.join(tail)}".strip())
