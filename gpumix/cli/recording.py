"""The command-line side of recording, export and Prometheus (`gpumix hub`, `gpumix export`, `gpumix-top`).

The recorder (sqlite3 and its schema) loads when a flag is used, not to build the parsers: a one-shot
attached to a running hub never records (issue 13)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gpumix.cli.common import fail

if TYPE_CHECKING:
    from gpumix.record.recorder import Recorder


def size_arg(text: str) -> int:
    from gpumix.record.recorder import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_record_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--record", metavar="FILE", help="record samples, rank metrics and events to an SQLite file")
    parser.add_argument("--record-max-size", type=size_arg, metavar="SIZE",
                        help="the recording's size budget; older data is thinned past it (default 512M)")


def resolve_record_flags(prog: str, args: argparse.Namespace) -> None:
    """--record-max-size without --record is refused, not dropped; the default size fills in."""
    if args.record_max_size is not None and not args.record:
        fail(prog, "--record-max-size needs --record FILE")
    if args.record and args.record_max_size is None:  # sqlite3 and the recorder load only to record (~2 MB)
        from gpumix.record.recorder import DEFAULT_MAX_BYTES

        args.record_max_size = DEFAULT_MAX_BYTES


def add_prometheus_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus", metavar="[HOST:]PORT",
                        help="serve /metrics (dcgm-exporter names) on HOST:PORT (default host 127.0.0.1)")
    parser.add_argument("--prometheus-public", action="store_true",
                        help="allow --prometheus on a non-loopback address (no authentication)")


def add_export_parser(commands: Any) -> None:
    export = commands.add_parser("export", help="a recording's tables as CSV or Parquet files")
    export.add_argument("recording", metavar="FILE")
    target = export.add_mutually_exclusive_group(required=True)
    target.add_argument("--csv", metavar="OUTDIR", help="write gpu_samples.csv, rank_metrics.csv, events.csv")
    target.add_argument("--parquet", metavar="OUTDIR", help="the same as Parquet (needs pyarrow: gpumix-top[parquet])")


def run_export(prog: str, args: argparse.Namespace) -> int:
    from gpumix.record.export import export_csv, export_parquet, parquet_available
    from gpumix.record.recorder import RecordingError

    if args.parquet and not parquet_available():
        fail(prog, "--parquet needs pyarrow: pip install 'gpumix-top[parquet]' (or use --csv)")
    try:
        counts = export_parquet(args.recording, args.parquet) if args.parquet else export_csv(args.recording, args.csv)
    except (RecordingError, OSError) as error:
        fail(prog, str(error))
    print(", ".join(f"{table}: {count} rows" for table, count in counts.items()))
    return 0


def start_recording(prog: str, args: argparse.Namespace, hub: Any) -> Recorder | None:
    """A recorder on `hub` when --record was given; a one-line error if the file cannot be used."""
    if not getattr(args, "record", None):
        return None
    from gpumix.record.recorder import Recorder, RecordingError

    try:
        return Recorder(args.record, max_bytes=args.record_max_size).attach(hub)
    except (RecordingError, OSError) as error:
        fail(prog, str(error))


def check_prometheus(prog: str, args: argparse.Namespace) -> tuple[str, int] | None:
    """Parse --prometheus before anything starts: a refused address is one line, nothing else runs."""
    if not getattr(args, "prometheus", None):
        if getattr(args, "prometheus_public", False):
            fail(prog, "--prometheus-public needs --prometheus")
        return None
    from gpumix.record.prometheus import ListenError, parse_listen

    try:
        return parse_listen(args.prometheus, public=args.prometheus_public)
    except ListenError as error:
        fail(prog, str(error))


def start_prometheus(prog: str, address: tuple[str, int] | None, hub: Any) -> Any:
    if address is None:
        return None
    from gpumix.record.prometheus import MetricsServer

    try:
        server = MetricsServer(hub, *address)
    except OSError as error:
        fail(prog, f"--prometheus {address[0]}:{address[1]}: {error.strerror or error}")
    print(f"{prog}: metrics on {server.url}", file=sys.stderr, flush=True)
    return server
