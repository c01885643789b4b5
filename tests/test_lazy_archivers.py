"""bz2 and lzma loaded on first use (gpumix/cli/lazy_archivers.py; issue 13: the dashboard's RSS): shutil, which
argparse, tempfile and ctypes.util import, finds them as before, and its bz2 and xz archives are made and read
back with the real modules, loaded then. In a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CODE = """
import gpumix.cli.lazy_archivers
import argparse, json, os, sys
argparse.ArgumentParser().add_argument("--x")  # its help formatter imports shutil
before = {name: type(sys.modules[name]).__name__ for name in ("bz2", "lzma")}
import shutil, tarfile, tempfile  # tarfile imports them too, and reads no name of them as it loads
formats = sorted(name for name, _ in shutil.get_archive_formats())
folder = tempfile.mkdtemp()
os.mkdir(os.path.join(folder, "root"))
with open(os.path.join(folder, "root", "f.txt"), "w") as file:
    file.write("gpumix" * 100)
read = {}
for kind in ("bztar", "xztar"):
    archive = shutil.make_archive(os.path.join(folder, kind), kind, os.path.join(folder, "root"))
    with tarfile.open(archive) as tar:
        read[kind] = tar.extractfile("./f.txt").read().decode()[:12]
after = {name: type(sys.modules[name]).__name__ for name in ("bz2", "lzma")}
print(json.dumps({"before": before, "formats": formats, "read": read, "after": after}))
"""


def test_shutil_makes_and_reads_bz2_and_xz_archives_with_the_real_modules_loaded_on_use() -> None:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(CODE)], capture_output=True, text=True, cwd="/",
                            timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["before"] == {"bz2": "StandInModule", "lzma": "StandInModule"}
    assert {"bztar", "xztar", "gztar", "zip"} <= set(outcome["formats"])
    assert outcome["read"] == {"bztar": "gpumixgpumix", "xztar": "gpumixgpumix"}
    assert outcome["after"] == {"bz2": "module", "lzma": "module"}
