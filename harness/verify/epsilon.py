"""The tolerances ε a certificate is stated for: TV(sampler, target) ≤ ε per position, per consecutive pair,
on the joint of the first J tokens, and the real-model certificate's token TV on the exact transformer pair
(:mod:`harness.verify.exactmodel`): ``real`` at each position, ``real_pair`` on each pair, ``real_joint`` on every
window of W tokens.

Where they come from, later sources winning key by key:

1. default.toml ``[run]``: ``epsilon_position``, ``epsilon_pair``, ``epsilon_joint``, ``epsilon_real``,
   ``epsilon_real_pair``, ``epsilon_real_joint``;
2. a scenario file's own top-level ``epsilon_position`` / ``epsilon_pair`` / ``epsilon_joint`` (e.g. power.toml);
3. the command line, ``--epsilon``: one number (the per-position ε) or ``KEY=VALUE`` pairs, comma-separated or
   repeated (``--epsilon 1e-3``, ``--epsilon position=1e-3,joint=0.03``, ``--epsilon real=0.05``); it applies to
   every scenario of the run.

A run is *certified* when no loss test rejects and every TV upper confidence bound of it lies below its ε
(:mod:`harness.verify.verdicts`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from harness.core.errors import UsageError
from harness.core.limits import EPSILON_WHY, MIN_EPSILON

__all__ = ["EPSILON_KEYS", "REAL_KEYS", "Epsilons", "parse_epsilon_option", "epsilons_for", "run_epsilons"]

EPSILON_KEYS = ("position", "pair", "joint", "real", "real_pair", "real_joint")  # real*: token TV on the exact pair
REAL_KEYS = {"position": "real", "pair": "real_pair", "joint": "real_joint"}  # exact-pair test -> its key
SCENARIO_KEYS = ("position", "pair", "joint")         # the ones a scenario file may override


@dataclass(frozen=True)
class Epsilons:
    """The tolerances of one scenario's certificate (see the module docstring)."""

    position: float
    pair: float
    joint: float
    real: float
    real_pair: float
    real_joint: float

    def scaled(self, factor: float) -> "Epsilons":
        """These tolerances times ``factor`` (each at most 1)."""
        return Epsilons(*(min(1.0, x * factor) for x in (self.position, self.pair, self.joint, self.real,
                                                          self.real_pair, self.real_joint)))

    def for_test(self, test: str) -> float:
        """ε of a gof test named ``test`` (position, pair, joint[0:J])."""
        return self.joint if test.startswith("joint") else getattr(self, test)

    def for_real_test(self, test: str) -> float:
        """ε of an exact-pair test of the real-model certificate named ``test`` (position, pair, joint[s:s+W])."""
        return getattr(self, REAL_KEYS["joint" if test.startswith("joint") else test])


def _value(option: str, key: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not MIN_EPSILON <= v <= 1:  # NaN fails too
        raise UsageError(f"`{option}` must give {key} a number in [{MIN_EPSILON:g}, 1] ({EPSILON_WHY}); got {text!r}")
    return v


def parse_epsilon_option(values: Optional[Iterable[str]], option: str = "--epsilon") -> dict:
    """``--epsilon`` values -> {key: ε}.  One bare number sets ``position``; otherwise KEY=VALUE pairs with
    KEY in :data:`EPSILON_KEYS`.  UsageError (exit 2) naming the option for anything else."""
    out: dict = {}
    for raw in values or ():
        for part in str(raw).split(","):
            part = part.strip()
            if "=" in part:
                key, _, text = part.partition("=")
                key = key.strip()
                if key not in EPSILON_KEYS:
                    raise UsageError(f"`{option}` keys must be one of {', '.join(EPSILON_KEYS)}; got {part!r}")
            else:
                key, text = "position", part
            if key in out:
                raise UsageError(f"`{option}` sets {key} more than once; got {list(values)}")
            out[key] = _value(option, key, text.strip())
    return out


def run_epsilons(settings) -> dict:
    """default.toml's ``[run]`` ε with the command line's laid over them (key -> ε)."""
    base = dict(getattr(settings, "epsilon", {}) or {})
    return {**base, **(getattr(settings, "epsilon_override", {}) or {})}


def epsilons_for(settings, scenario=None) -> Epsilons:
    """The :class:`Epsilons` of ``scenario`` (None: the run's): [run], then the scenario file (with ``settings.full``
    its ``full_epsilon_*`` over its ``epsilon_*``), then the command line."""
    eps = dict(getattr(settings, "epsilon", {}) or {})
    raw = getattr(scenario, "raw", None) or {}
    eps.update({k: float(raw[f"epsilon_{k}"]) for k in SCENARIO_KEYS if f"epsilon_{k}" in raw})
    if getattr(settings, "full", False):  # the --full run: the scenario's full_epsilon_* over its epsilon_*
        eps.update({k: float(raw[f"full_epsilon_{k}"]) for k in SCENARIO_KEYS if f"full_epsilon_{k}" in raw})
    eps.update(getattr(settings, "epsilon_override", {}) or {})
    missing = [k for k in EPSILON_KEYS if k not in eps]
    if missing:
        raise UsageError(f"default.toml: [run] lacks epsilon_{missing[0]} (the certificate's tolerance)")
    return Epsilons(**{k: float(eps[k]) for k in EPSILON_KEYS})
