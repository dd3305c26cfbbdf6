"""The child's command loop: the job first (a warm child waits for it), then one command at a time until
``finish`` or a stop; the final report goes back over the channel and the process ends without teardown."""

from __future__ import annotations

import os
import sys
from typing import Any

from cuda_agent.eval.child import harness
from cuda_agent.eval.child.candidate import Candidate, Profiled, ProtocolBroken, warm_up
from cuda_agent.eval.child.channel import Channel, ChannelClosed
from cuda_agent.eval.child.harness import Stop
from cuda_agent.eval.child.protocol import (
    COMMANDS,
    CompareCommand,
    FinishCommand,
    JobCommand,
    ReleaseCommand,
    ShipCommand,
    SpotCommand,
    TimeCommand,
    TrialCommand,
)
from cuda_agent.eval.child.reference import Reference


def serve(role: Any, channel: Channel) -> int | None:
    """Commands until ``finish``; its nonce (None when the work stopped early)."""
    role.start()
    while True:
        message, fds = channel.recv()
        command = COMMANDS.validate_python(message)
        if isinstance(command, FinishCommand):
            return command.nonce
        if isinstance(command, TrialCommand):
            role.trial(command)
        elif isinstance(command, ShipCommand) and isinstance(role, Candidate):
            role.ship(command, fds)
        elif isinstance(command, TimeCommand):
            role.time_baselines(command) if isinstance(role, Reference) else role.time(command)
        elif isinstance(command, SpotCommand) and isinstance(role, Reference):
            role.spot(command)
        elif isinstance(command, CompareCommand) and isinstance(role, Reference):
            role.compare(command)
        elif isinstance(command, ReleaseCommand) and isinstance(role, Reference):
            role.release(command)
        else:
            raise ProtocolBroken(f"{command.op} is not a command for the {role.report.role}")


def main(argv: list[str]) -> int:
    channel = Channel.from_fd(int(argv[argv.index("--channel") + 1]))
    workdir = os.getcwd()
    phases = {"imported": harness.wall_time()}
    warm_up()
    phases["ready"] = harness.wall_time()
    try:
        message, _ = channel.recv()
    except ChannelClosed:
        return 0  # never given a job: the worker let this warm child go
    phases["go"] = harness.wall_time()
    job = JobCommand.model_validate(message)
    # Set before any candidate code runs: where its compiled artifact is (kernels dir, torch extensions).
    os.environ.update(job.env)
    roles = {"reference": Reference, "candidate": Candidate, "profile": Profiled}
    role = roles[job.role](job, channel, workdir)
    role.report.phases.update(phases)
    nonce = None
    try:
        nonce = serve(role, channel)
    except Stop:
        pass
    except ChannelClosed:
        os._exit(0)  # the parent is gone: nobody to report to
    except ProtocolBroken as exc:
        role.report.status, role.report.message = "runtime_error", f"protocol broken: {exc}"
    if isinstance(role, Candidate) and "candidate" not in role.report.timings:
        role.launches_per_trial()  # not timed (wrong outputs, say): its launches are still judged
    role.report.nonce = nonce
    role.peak_memory()
    role.phase_done("reported")
    channel.send(role.report.model_dump(mode="json"))
    # Skip interpreter teardown (seconds with torch loaded; the candidate's atexit hooks would run in it):
    # everything the parent needs is sent.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
