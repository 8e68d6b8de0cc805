"""`python -m harness <command>`: verify, pit, alpha, calibrate, sweep, report, numerics, tune, sample, verify-samples,
samples-dedupe, models.

Each command lives in its own module, which provides ``add_arguments(parser)`` and ``run(args) -> int``
(0 ok, 1 lossy, 4 inconclusive; :mod:`harness.core.verdict`).  :func:`main` is the one place where exceptions become exit statuses
(:mod:`harness.core.errors`): a :class:`~harness.core.errors.UsageError` is 2 (one line), a
:class:`~harness.core.errors.SamplerError` or any other failure 3 (one or two lines, the traceback in
``<out>/error.log``), Ctrl-C 130.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
import textwrap
import traceback
from pathlib import Path
from typing import Optional

from harness.core.errors import (EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, SamplerError, UsageError,
                            sigint_flag)
from harness.core.lifeline import die_with_parent
from harness.core.outlock import abandon_all, held_outputs
from harness.core.owner import claim, is_owned, needs_owner, owned_main, tell_owner

__all__ = ["main", "COMMANDS", "write_error_log"]

COMMANDS = {
    "verify": ("harness.verify.cli", "prove a sampler lossless on a set of scenarios (the battery)"),
    "pit": ("harness.verify.pit", "the real-model battery (sequential randomized PIT on the shipped tiny "
                                  "transformers pair): reference, real-model bugs, HF assisted generation"),
    "alpha": ("harness.speedup.alpha", "acceptance of every draft variant on the shipped tiny transformers pair"),
    "calibrate": ("harness.verify.calibrate", "measure the battery's false-alarm rate over many seeds"),
    "sweep": ("harness.speedup.sweep.cli", "speedup as a function of alpha, c and k: cost model and measured runs"),
    "report": ("harness.speedup.report.cli", "draw figures and tables from stored results"),
    "numerics": ("harness.verify.numerics_floor", "the numerics floor: exact TV of sampling arithmetic in float32 / "
                                           "bfloat16 / float16 against float64"),
    "tune": ("harness.speedup.tune", "choose the algorithm and k per batch size for a pair on a machine (roofline or profiled)"),
    "sample": ("harness.samples.sample_cli", "write an engine sample file (ours, transformers, an OpenAI-compatible "
                                             "endpoint)"),
    "verify-samples": ("harness.samples.verify_cli", "verify an engine from its samples: scored by the target or "
                                                     "against a baseline file; certified / lossy / inconclusive"),
    "samples-dedupe": ("harness.samples.dedupe_cli", "repair a sample file holding a request id twice (keeps the "
                                                     "first of each)"),
    "models": ("harness.core.models", "the shipped models' short names (tiny, exact, exact-markov, ...): paths and "
                                      "what each is"),
}

EPILOG = "exit status (every command):\n" + "\n".join(f"  {code:<4d} {what}" for code, what in EXIT_CODES.items())


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and every option's default shown: ``(default: ...)`` appended where the help
    does not already name its default and the option has one (not None, not a flag's False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("default" in text or default is None or default is False or default == argparse.SUPPRESS
                or not action.option_strings or isinstance(action, argparse._HelpAction)):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error reported on one line (exit 2)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())}\n")


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    description = textwrap.fill(f"`python -m harness <command>`: {', '.join(COMMANDS)}.  `<command> --help`: its "
                                "options.", 88, break_on_hyphens=False, break_long_words=False)  # names kept whole
    parser = _Parser(prog="python -m harness", description=description, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>", title="commands")
    mods = {}
    for name, (modname, help_) in COMMANDS.items():
        mods[name] = importlib.import_module(modname)
        sp = sub.add_parser(name, help=help_, description=help_, epilog=EPILOG, formatter_class=HelpFormatter)
        mods[name].add_arguments(sp)
        for action in sp._actions:  # an option without help text still shows its default
            if action.help is None and action.option_strings and action.default not in (None, False):
                action.help = "default: %(default)s"
    return parser, mods


def main(argv=None) -> int:
    """``python -m harness``: the command's exit status.  Run as a program (``argv`` None), a command that runs a
    plug-in sampler runs as the child of a parent that owns its exit status (:mod:`harness.core.owner`)."""
    if argv is None and needs_owner(sys.argv[1:]):
        return owned_main(sys.argv[1:])
    if is_owned():
        claim()
        die_with_parent(os.getppid())
    status = _main(argv)
    tell_owner(status)
    return status


def _main(argv=None) -> int:
    quiet_libraries()  # before the command modules are imported (and transformers with them)
    parser, mods = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    prog = f"python -m harness {args.command}"
    args._argv = argv[argv.index(args.command) + 1:]  # the command's own options, for the rerun it may suggest
    # (private: not an option, so not part of the default output folder's key, harness.core.outdir)
    with sigint_flag(), held_outputs():
        try:
            return int(mods[args.command].run(args) or 0)
        except UsageError as e:
            abandon_all()  # an output folder claimed before the error, still empty, is removed
            print(f"{prog}: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print(f"\n{prog}: interrupted; what was saved so far is kept (run the same command again to resume)",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        except SamplerError as e:
            log = write_error_log(_out_dir(args), f"{prog}: {e.summary}\n\n{e.details or traceback.format_exc()}")
            print(f"{prog}: failed: {e.summary}; full traceback in {log}", file=sys.stderr)
            return EXIT_FAILED
        except Exception as e:  # noqa: BLE001 - any other failure: summarised, traceback to the log, status 3
            log = write_error_log(_out_dir(args), traceback.format_exc())
            first = " ".join(str(e).split())[:300]
            print(f"{prog}: failed: {type(e).__name__}: {first}; full traceback in {log}", file=sys.stderr)
            return EXIT_FAILED


def quiet_libraries() -> None:
    """Silence third-party noise on our paths, keep our own output and warnings: transformers' "Loading weights"
    bars (huggingface_hub's switch, which transformers reads when it is imported, here and in worker processes,
    which inherit it; our own bars stay, ``--no-progress`` turns those off) and the one deprecation transformers
    logs for every ``generate`` call given a generation config and arguments (:class:`_DropDeprecation`).  Other
    transformers warnings still print."""
    logger = logging.getLogger(_DropDeprecation.LOGGER)  # the logger transformers.get_logger(__name__) returns
    if not any(isinstance(f, _DropDeprecation) for f in logger.filters):
        logger.addFilter(_DropDeprecation())
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # a user's HF_HUB_DISABLE_PROGRESS_BARS=0 keeps them
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


class _DropDeprecation(logging.Filter):
    """Drops transformers' "Passing `generation_config` together with generation-related arguments ... is
    deprecated" record (logged by transformers.generation.utils; about transformers' API, nothing a user of the
    harness acts on); every other record passes."""

    LOGGER = "transformers.generation.utils"
    MESSAGES = ("Passing `generation_config` together with generation-related arguments",)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(m in text for m in self.MESSAGES)


def _out_dir(args) -> Optional[Path]:
    """The folder the command writes to (``--out``, or the parent of an ``--out`` file), if any."""
    out = getattr(args, "failure_dir", None) or getattr(args, "out", None)
    if out is None:
        return None
    out = Path(out)
    return out.parent if out.suffix and not out.is_dir() else out


def write_error_log(folder: Optional[Path], text: str) -> Path:
    """Write ``text`` to ``folder/error.log`` (or, when that cannot be written, a temporary file); its path."""
    if folder is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "error.log"
            path.write_text(text)
            return path
        except OSError:
            pass
    fd, name = tempfile.mkstemp(prefix="harness-error-", suffix=".log")
    with open(fd, "w") as f:
        f.write(text)
    return Path(name)
