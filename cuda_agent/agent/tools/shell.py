"""The bash tool: one command in a sandbox whose only writable directory is the workspace, with no network."""

from __future__ import annotations

from typing import Any, ClassVar

from cuda_agent.agent.tools.base import INFRA_NOTE, Tool, ToolHost, string_param, truncate
from cuda_agent.settings import get_settings


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a bash command in the workspace inside a sandbox: the workspace is the only writable directory, "
        "there is no network, the call is time-limited and long output is truncated. Returns exit code, stdout, stderr."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": string_param("The command line to run with bash -c.")},
        "required": ["command"],
    }

    def run(self, host: ToolHost, args: dict[str, Any]) -> str:
        from cuda_agent.sandbox import SandboxLimits, SandboxSpec, run_sandboxed

        cfg, settings, root = host.config, get_settings(), host.workspace.root
        # The disk quota covers the whole workspace (all files together), the memory quota all the command's
        # processes (tmpfs included).
        disk, memory = settings.agent_bash_disk_bytes, settings.agent_bash_memory_bytes
        spec = SandboxSpec(
            argv=["/bin/bash", "-c", args["command"]],
            cwd=root,
            writable_paths=[root],
            # Added to the sandbox's minimal environment; nothing of ours (API keys, database URLs) is passed.
            env={"CUDA_HOME": str(settings.cuda_home), "HOME": str(root)},
            gpu=False,
            network=False,
            limits=SandboxLimits(
                wall_time_s=cfg.bash_timeout_s,
                cpu_time_s=int(cfg.bash_timeout_s * 2),
                address_space_bytes=8 * 1024**3,
                max_processes=256,
                max_file_bytes=256 * 1024**2,
                max_output_bytes=cfg.tool_output_chars * 4,
                disk_bytes=disk,
                memory_bytes=memory,
            ),
        )
        result = run_sandboxed(spec)
        if result.sandbox_error:
            return f"bash: the sandbox failed to start{INFRA_NOTE}: {result.sandbox_error}"
        half = cfg.tool_output_chars // 2
        parts = [f"exit code: {result.exit_code}" + (f" (killed by signal {result.signal})" if result.signal else "")]
        if result.timed_out:
            parts.append(f"timed out after {cfg.bash_timeout_s:g} s")
        if result.limit_exceeded == "disk":
            parts.append(f"killed: the workspace passed its disk quota ({disk // 2**20} MiB); delete files")
        elif result.limit_exceeded == "memory":
            parts.append(f"killed: the command passed its memory quota ({memory // 2**20} MiB)")
        parts.append("stdout:\n" + truncate(_text(result.stdout), half))
        parts.append("stderr:\n" + truncate(_text(result.stderr), half))
        return "\n".join(parts)


def _text(data: str | bytes) -> str:
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
