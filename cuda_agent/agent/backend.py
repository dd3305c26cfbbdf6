"""How the environment reaches compilation, verification and profiling.

The environment only knows this protocol. The default backend calls the library functions in this process;
the job layer supplies one that goes through the services' queues, so a rollout worker needs no GPU.
"""

from __future__ import annotations

from typing import Protocol

from cuda_agent.contracts.eval import ProfileRequest, ProfileResult
from cuda_agent.verify import VerifyBackend


class ToolBackend(VerifyBackend, Protocol):
    def profile(self, request: ProfileRequest) -> ProfileResult: ...
