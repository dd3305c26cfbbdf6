"""Evaluation: verdicts, timings and rewards of candidates (``evaluate``), and kernel profiles
(``profile_candidate``). The child process entry point is ``cuda_agent.eval.child``."""

from cuda_agent.eval.evaluate import evaluate
from cuda_agent.eval.profile import profile_candidate

__all__ = ["evaluate", "profile_candidate"]
