"""A hub whose stderr nobody reads keeps serving: its log lines wait in a bounded queue on a thread of
their own (a soak froze a hub whose stderr pipe was full: the event loop blocked in a log write)."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from gpumix.hub.client import HubClient
from gpumix.wire import protocol

TOOL = [sys.executable, "-m", "gpumix.cli.main"]
F_SETPIPE_SZ = 1031  # Linux: shrink the pipe so a few dozen log lines fill it


def test_a_full_stderr_pipe_never_stops_the_hub(tmp_path: Path) -> None:
    socket_path = str(tmp_path / "hub.sock")
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 4096)
    hub = subprocess.Popen([*TOOL, "hub", "--sim", "mixed-10", "--socket", socket_path, "--interval", "0.2"],
                           stdout=subprocess.PIPE, stderr=write_end, text=True,
                           env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)})
    os.close(write_end)  # the hub holds the only write end; nobody reads `read_end` until the end
    client = HubClient(socket_path, timeout_s=5)
    try:
        assert "listening on" in hub.stdout.readline()
        for rank in range(200):  # each rank's out-of-range values log a line: ~20 KB, 5x the pipe
            with socket.socket(socket.AF_UNIX) as agent:
                agent.connect(socket_path)  # blocking: waits for room in the listen backlog
                agent.settimeout(5)
                agent.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": rank, "pid": 1000 + rank,
                                               "job": "noisy " + "x" * 60}))
                agent.sendall(protocol.encode({"type": "step", "step": 1, "step_time_s": 0.1, "samples": 1e30,
                                               "loss": 1e300, "comm_s": -5.0}))
                agent.sendall(protocol.encode({"type": "bye"}))
        snapshot = client.snapshot()
        assert snapshot is not None, client.last_error  # timed out while the hub sat in a log write
        assert sum(1 for r in snapshot["ranks"] if r["job"].startswith("noisy")) > 0
    finally:
        client.close()
        hub.terminate()
        drain = threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(read_end, 65536), b"")])
        drain.start()  # until the hub's end closes: it may write a last line on its way out
        hub.wait(30)
        drain.join(10)
        os.close(read_end)
