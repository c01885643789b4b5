"""gpumix.agent: the in-rank training agent. Two lines in a training script:

    import gpumix.agent
    agent = gpumix.agent.start()            # rank, world and GPU from the launcher
    for batch in loader:
        with agent.step(samples=len(batch)) as step:
            loss = train_step(batch)
            step.loss = loss                 # a tensor is fine: read later, no sync

Importing it stays light (no textual, plotext or pynvml), and nothing it does
can raise into, block or grow inside the training loop.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading

from gpumix.agent.core import Agent, StepRecord

__all__ = ["Agent", "StepRecord", "start", "get", "stop"]

log = logging.getLogger("gpumix.agent")
_agent: Agent | None = None
_lock = threading.Lock()


def _address() -> str:
    from gpumix.wire.paths import default_hub_address

    return default_hub_address()


def start(job: str | None = None, hub: str | None = None, cuda_device: int | None = None,
          gpu_uuid: str | None = None) -> Agent:
    """Start (once per process) and return the agent. GPUMIX_DISABLE=1 turns it off."""
    global _agent
    with _lock:
        if _agent is None:
            address = hub or os.environ.get("GPUMIX_HUB")
            if address is None:
                try:
                    address = _address()
                except OSError as error:  # no runtime dir we may use: run unmonitored
                    log.warning("gpumix agent: no hub address (%s); metrics are not sent", error)
                    address = "/nonexistent/gpumix-hub.sock"
            if os.environ.get("GPUMIX_DISABLE") == "1":
                address = "/nonexistent/gpumix-hub.sock"
            _agent = Agent(address, job=job, cuda_device=cuda_device, gpu_uuid=gpu_uuid)
            atexit.register(_agent.close)
        return _agent


def get() -> Agent | None:
    return _agent


def stop() -> None:
    global _agent
    with _lock:
        if _agent is not None:
            _agent.close()
            atexit.unregister(_agent.close)  # nothing left to send: nothing keeps the closed agent alive
            _agent = None
