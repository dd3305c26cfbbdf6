"""`python -m cuda_agent.train STAGE --config CONFIG.json --run-dir DIR`: one stage as a process, what torchrun
(and a k8s Job) launches. Exit status 0 when the stage finished, 1 when it failed (status.json says why)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import get_args

from cuda_agent.contracts.train import RunState, TrainConfig, TrainStage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuda_agent.train", description=__doc__)
    parser.add_argument("stage", choices=get_args(TrainStage))
    parser.add_argument("--config", type=Path, required=True, help="A TrainConfig as JSON.")
    parser.add_argument(
        "--run-dir", type=Path, required=True, help="Created if absent; resumed if it has a checkpoint."
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from cuda_agent.train.run import run_stage  # after argument parsing: --help never loads torch

    config = TrainConfig.model_validate_json(args.config.read_text())
    status = run_stage(args.stage, config, args.run_dir)
    import torch.distributed as torch_dist

    code = 0 if status.state is RunState.FINISHED else 1
    print(status.model_dump_json(), flush=True)
    if torch_dist.is_initialized():
        # Under torchrun: the ranks end together (none tears its connections down while another still writes its
        # checkpoint), the process group ends before the interpreter does, and the process leaves without the
        # interpreter's teardown. Left to it, a rank could abort ("terminate called without an active exception":
        # a thread of the communication library destroyed still joinable), rarely but after its work was done.
        torch_dist.barrier()
        torch_dist.destroy_process_group()
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
