"""The evaluation child: ``python -m cuda_agent.eval.child --channel FD`` inside its sandbox.

- ``protocol``: the messages, one command at a time from the parent, one reply each (pydantic-validated).
- ``channel``: the Unix socket they travel on, bounded, with file descriptors passed alongside (SCM_RIGHTS).
- ``shared``: the shared output buffer the reference creates and the candidate writes.
- ``harness``: what both roles share (functions captured before any candidate code, inputs made from seeds).
- ``reference`` / ``candidate``: the two roles; ``main``: the command loop.
"""

from cuda_agent.eval.child.candidate import warm_up

__all__ = ["warm_up"]
