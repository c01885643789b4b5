"""bz2 and lzma loaded on first use (issue 13: the dashboard's RSS, ~0.35 MB, most of it their shared libraries'
pages): shutil imports them as it loads, to offer its archive formats, and argparse's help formatter, tempfile (the
hub's socket folder, gpumix.wire.paths) and ctypes.util (pynvml) import shutil. gpumix-top makes no archive: a
stand-in for each (gpumix.cli.stand_in) answers shutil's `import bz2`, and any name read from it loads the real
module. Importing this module installs them; tui/main.py does, first thing in main(), before its argument parser
(a one-shot too: which mode runs is known only once the arguments are parsed, and none makes an archive).
"""

from __future__ import annotations

from importlib.util import find_spec

from gpumix.cli.stand_in import install_stand_in

ARCHIVERS = ("bz2", "lzma")
# only where the C module is there: a Python built without _bz2 has bz2.py, and shutil, finding no ImportError,
# would offer the format, which would then fail on use
INSTALLED = {name: find_spec(f"_{name}") is not None and install_stand_in(name, ()) for name in ARCHIVERS}
