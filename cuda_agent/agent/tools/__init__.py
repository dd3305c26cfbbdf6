"""The agent's tools, as OpenAI function-calling tools.

Each tool returns text the model can act on. Mistakes of the model (bad arguments, missing files, a path
outside the workspace) raise ``ToolError`` and go back to it as an error text; they never end the rollout.
Tools reach the environment only through the ``ToolHost`` protocol.
"""

from cuda_agent.agent.tools.base import INFRA_NOTE, Tool, ToolError, ToolHost, ToolRegistry, truncate
from cuda_agent.agent.tools.files import EditFileTool, GlobTool, GrepTool, ReadFileTool, WriteFileTool
from cuda_agent.agent.tools.kernel import CompileTool, ProfileTool, VerifyTool, format_compile, format_eval
from cuda_agent.agent.tools.session import FinishTool, TodoWriteTool
from cuda_agent.agent.tools.shell import BashTool


def default_tools() -> ToolRegistry:
    return ToolRegistry(
        [
            BashTool(),
            ReadFileTool(),
            WriteFileTool(),
            EditFileTool(),
            GlobTool(),
            GrepTool(),
            TodoWriteTool(),
            CompileTool(),
            VerifyTool(),
            ProfileTool(),
            FinishTool(),
        ]
    )


__all__ = [
    "INFRA_NOTE",
    "BashTool",
    "CompileTool",
    "EditFileTool",
    "FinishTool",
    "GlobTool",
    "GrepTool",
    "ProfileTool",
    "ReadFileTool",
    "TodoWriteTool",
    "Tool",
    "ToolError",
    "ToolHost",
    "ToolRegistry",
    "VerifyTool",
    "WriteFileTool",
    "default_tools",
    "format_compile",
    "format_eval",
    "truncate",
]
