"""`python -m harness <command>`: verify, calibrate, sweep, report."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("verify", "calibrate", "sweep", "report"):
        sub.add_parser(name, help=f"{name} (not built yet)")
    args, _ = parser.parse_known_args(argv)
    print(f"`python -m harness {args.command}` is not built yet", file=sys.stderr)
    return 2
