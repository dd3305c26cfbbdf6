"""The agent library: a kernel-writing environment, its tools, the rollout loop, policies and trajectories."""

from cuda_agent.agent.backend import ToolBackend
from cuda_agent.agent.environment import KernelEnv, StepResult
from cuda_agent.agent.loop import LoopState, RolloutRunner, run_request, run_rollout
from cuda_agent.agent.policies import OpenAIPolicy, Policy, PolicyError, ReplayPolicy, create_policy, register_policy
from cuda_agent.agent.tools import Tool, ToolError, ToolRegistry, default_tools
from cuda_agent.agent.trajectory import read_jsonl, write_jsonl, write_parquet
from cuda_agent.agent.workspace import PathError, Workspace

__all__ = [
    "KernelEnv",
    "LoopState",
    "OpenAIPolicy",
    "PathError",
    "Policy",
    "PolicyError",
    "ReplayPolicy",
    "RolloutRunner",
    "StepResult",
    "Tool",
    "ToolBackend",
    "ToolError",
    "ToolRegistry",
    "Workspace",
    "create_policy",
    "default_tools",
    "read_jsonl",
    "register_policy",
    "run_request",
    "run_rollout",
    "write_jsonl",
    "write_parquet",
]
