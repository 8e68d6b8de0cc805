"""`python -m harness <command>`: verify, pit, alpha, calibrate, sweep, report.

Each command lives in its own module, which provides ``add_arguments(parser)`` and ``run(args) -> int``.
"""
from __future__ import annotations

import argparse
import importlib

COMMANDS = {
    "verify": ("harness.verify", "prove a sampler lossless on a set of scenarios (the battery)"),
    "pit": ("harness.verify.pit", "the real-model battery (sequential randomized PIT on the shipped tiny "
                                  "transformers pair): reference, real-model bugs, HF assisted generation"),
    "alpha": ("harness.alpha", "acceptance of every draft variant on the shipped tiny transformers pair"),
    "calibrate": ("harness.calibrate", "measure the battery's false-alarm rate over many seeds"),
    "sweep": ("harness.sweep", "speedup as a function of alpha, c and k: cost model and measured runs"),
    "report": ("harness.report", "draw figures and tables from stored results"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    mods = {}
    for name, (modname, help_) in COMMANDS.items():
        mods[name] = importlib.import_module(modname)
        mods[name].add_arguments(sub.add_parser(name, help=help_))
    args = parser.parse_args(argv)
    return int(mods[args.command].run(args) or 0)
