"""How many ranks a launcher command starts, changed for a re-plan that leaves ranks out.

torchrun (`--nproc_per_node`, `--nproc-per-node`, also as `python -m torch.distributed.run`) and
the DeepSpeed launcher (`--num_gpus`, `--num-gpus`) name it on their own command line, before the
training script; anything after the script is the script's own and is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

PROCESS_COUNT_FLAGS = ("--nproc_per_node", "--nproc-per-node", "--num_gpus", "--num-gpus")


def with_process_count(command: Sequence[str], count: int) -> list[str] | None:
    """The command starting `count` processes per node, or None if it names no count we know."""
    result = list(command)
    found = False
    for i, part in enumerate(result):
        if part.endswith(".py"):  # the training script: its arguments follow
            break
        for flag in PROCESS_COUNT_FLAGS:
            if part == flag and i + 1 < len(result):
                result[i + 1] = str(count)
                found = True
            elif part.startswith(flag + "="):
                result[i] = f"{flag}={count}"
                found = True
    return result if found else None
