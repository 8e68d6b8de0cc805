"""`python -m harness <command>`: verify, calibrate, sweep, report.

Each command lives in its own module, which provides ``add_arguments(parser)`` and ``run(args) -> int``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "verify": ("harness.verify", "prove a sampler lossless on a set of scenarios (the battery)"),
    "calibrate": ("harness.calibrate", "measure the battery's false-alarm rate over many seeds"),
    "sweep": ("harness.sweep", "speedup as a function of alpha, c and k: cost model and measured runs"),
    "report": ("harness.report", "draw figures and tables from stored results"),
}


def _load(modname):
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name == modname:
            return None
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    mods = {}
    for name, (modname, help_) in COMMANDS.items():
        mod = _load(modname)
        sp = sub.add_parser(name, help=help_ if mod else f"{help_} (not built yet)")
        if mod is not None and hasattr(mod, "add_arguments"):
            mod.add_arguments(sp)
        mods[name] = mod
    args = parser.parse_args(argv)
    mod = mods[args.command]
    if mod is None or not hasattr(mod, "run"):
        print(f"`python -m harness {args.command}` is not built yet", file=sys.stderr)
        return 2
    return int(mod.run(args) or 0)
