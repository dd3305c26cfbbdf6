"""The embedded kernel author: capture (aten graph on the meta device) -> plan (fusion groups) -> emit (CUDA or
C++/OpenMP + model_new.py) -> search (variants). Driven by the `heuristic` policy through the agent's tools."""

from cuda_agent.author.capture import capture_problem, trace_module
from cuda_agent.author.emit import Variant, candidate_files
from cuda_agent.author.ir import Graph, Node, OpKind, Unsupported
from cuda_agent.author.plan import Plan, plan_graph
from cuda_agent.author.search import Authored, Search, author_problem, author_sandboxed

__all__ = [
    "Authored",
    "Graph",
    "Node",
    "OpKind",
    "Plan",
    "Search",
    "Unsupported",
    "Variant",
    "author_problem",
    "author_sandboxed",
    "candidate_files",
    "capture_problem",
    "plan_graph",
    "trace_module",
]
