"""What gpumix-top's own start leaves unloaded after its first paint (issue 13: the dashboard's RSS), through
tui/main.py's real path in a pseudo-terminal: the stand-ins it installs (typing_extensions; bz2 and lzma; Rich's table, panel,
padding and tree and Textual's CSS help texts, for errors and debugging; textual.pilot, which App.run imports for
an auto-pilot the monitor never has, with its headless driver) and the views not yet opened."""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# gpumix-top's own main() in its own order, the app patched as it loads (no import ahead of main's) to quit once
# its first snapshot is drawn, writing what is loaded then
FIRST_PAINT = """
import importlib.util, json, sys  # not importlib.abc: it loads importlib.resources, tempfile and shutil
out = sys.argv[1]

class PatchTheApp:  # a meta path finder
    def find_spec(self, name, path=None, target=None):
        if name != "gpumix.tui.app":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            draw = module.GpumixApp.render_snapshot

            def render_snapshot(self, snapshot):
                draw(self, snapshot)
                if not getattr(self, "dumped", False):
                    self.dumped = True
                    kinds = {name: type(module).__name__ for name, module in sys.modules.items()}
                    open(out, "w").write(json.dumps(kinds))
                    self.exit()

            module.GpumixApp.render_snapshot = render_snapshot

        spec.loader.exec_module = patched
        return spec

sys.meta_path.insert(0, PatchTheApp())
from gpumix.tui.main import main
sys.argv = ["gpumix-top", *sys.argv[2:]]
sys.exit(main())
"""


def modules_at_first_paint(tmp_path: Path, args: list[str]) -> dict[str, str]:
    out = tmp_path / "modules.json"
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "GPUMIX_HUB": "/nonexistent/hub.sock"}  # never a user's hub
    process = subprocess.Popen([sys.executable, "-c", FIRST_PAINT, str(out), *args], stdin=slave, stdout=slave,
                               stderr=slave, env=env, start_new_session=True, close_fds=True, cwd="/")
    os.close(slave)
    output = bytearray()
    try:
        deadline = time.monotonic() + 90
        while process.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    break
        assert process.wait(timeout=20) == 0 and out.exists(), bytes(output[-2000:])
        return json.loads(out.read_text())  # type: ignore[no-any-return]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


def test_the_first_paint_leaves_the_pilot_typing_extensions_and_the_views_unloaded(tmp_path: Path) -> None:
    kinds = modules_at_first_paint(tmp_path, ["--sim", str(REPO / "benchmarks" / "rig_1gpu.toml"), "--interval", "1"])
    assert "gpumix.tui.gpu_table" in kinds  # the dashboard did draw
    stand_ins = ("textual.pilot", "typing_extensions", "rich.table", "rich.panel", "rich.padding", "rich.tree",
                 "textual.css._help_text", "textual.css._help_renderables", "textual.canvas")
    assert {name: kinds.get(name) for name in stand_ins} == dict.fromkeys(stand_ins, "StandInModule")
    assert kinds.get("asyncio.sslproto") == "SslProtoStandIn"  # gpumix/cli/asyncio_without_ssl.py
    assert kinds.get("bz2") == kinds.get("lzma") == "StandInModule"  # shutil's archivers, before the hub's paths
    assert "_hashlib" not in kinds  # OpenSSL: the simulator's noise takes random's own SHA-512 (gpumix/sim/machine.py)
    assert not [name for name in kinds if name.startswith("rich._unicode_data.unicode")]  # gpumix/cli/lazy_cell_table.py
    assert not {"textual.drivers.headless_driver", "rich.box", "textual._box_drawing", "gpumix.tui.screens",
                "gpumix.tui.ranks_screen", "gpumix.tui.advice_screens"} & set(kinds)
