"""Where the shipped experiment files live, how a TOML file is read and overlaid, and how seeds are derived.

The default scenario files (``harness/configs/verify/*.toml``) and sweep files
(``harness/configs/sweep/*.toml``) are package data: they are found through the installed package,
never through the location of a source checkout, so ``pip install .`` followed by ``python -m harness``
from any directory works.  Outputs go under the current directory, to ``runs/<command>/<name>-<hash>``
(:mod:`harness.core.outdir`) unless ``--out`` says otherwise; ``results/`` (:data:`RESULTS`) is where the
committed reference results are read from, and written only by an explicit ``--out``.

One reader (:func:`read_toml`), one overlay rule (:func:`overlay`) and one seed derivation
(:func:`derive_seed`) serve every subcommand.
"""
from __future__ import annotations

import copy
import tomllib
import zlib
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np

from harness.core.errors import UsageError

__all__ = ["CONFIGS", "VERIFY_DIR", "SWEEP_DIR", "RESULTS", "read_toml", "overlay", "derive_seed"]

CONFIGS = Path(str(resources.files("harness") / "configs"))
VERIFY_DIR = CONFIGS / "verify"
SWEEP_DIR = CONFIGS / "sweep"
RESULTS = Path("results")  # relative: the committed results of the directory the command runs in (read by default)


def read_toml(path, what: str = "file") -> dict:
    """Parse ``path``; a missing file or invalid TOML is a :class:`harness.core.errors.UsageError` (a
    ``ValueError``) naming ``what`` and the path."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{what} {str(path)!r} does not exist")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{what} {str(path)!r} is not valid TOML: {e}") from None


def overlay(base: dict, over: dict, *, strict: bool = False, where: str = "", source: Optional[str] = None) -> dict:
    """``base`` with ``over`` laid on it, tables merged key by key (``over`` wins).

    With ``strict`` every key of ``over`` must exist in ``base``; an unknown key raises a
    :class:`harness.core.errors.UsageError` (a ``ValueError``) naming the ``source`` file, the key (with its
    dotted path ``where``) and the keys known there.
    """
    out = copy.deepcopy(base)
    for key, v in over.items():
        if strict and key not in base:
            src = f"{source}: " if source else ""
            raise UsageError(f"{src}key `{where}{key}` is not a known setting; known: {sorted(base)}")
        if isinstance(v, dict) and isinstance(out.get(key), dict):
            out[key] = overlay(out[key], v, strict=strict, where=f"{where}{key}.", source=source)
        else:
            out[key] = copy.deepcopy(v)
    return out


def derive_seed(*parts) -> int:
    """A 63-bit seed from a run seed and any labels (ints used as they are, other parts by CRC-32 of str)."""
    words = [p if isinstance(p, int) else zlib.crc32(str(p).encode()) for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))
