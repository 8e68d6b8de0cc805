"""The verdict of a whole ``verify`` / ``pit`` command, and what a user does with it.

:func:`judge` turns the runs' rows (``runs.csv``, :mod:`harness.verify.verdicts`) into one :class:`Outcome`:

* the verdict (:mod:`harness.core.verdict`): **lossy** if a run fails its role for any reason but a missing
  certificate (a sampler under test lossy, a lossless control lossy, the reference sampler inefficient, a buggy
  control certified), else **inconclusive** if a run that must be certified is not or a buggy control was neither
  caught nor certified (the power at this size is not shown), else **certified**;
* ``reasons``: the runs behind a verdict other than certified, one short phrase each;
* ``losses`` (lossy): for each lossy run that should not be, the estimated loss with its interval and where it is
  (scenario, test, the tokens that carry it: :func:`carriers`);
* ``needs`` and ``advice`` (inconclusive): for each run not certified, the sequences at which a lossless sampler
  of its law certifies with probability >= 1 - :data:`harness.verify.verdicts.PLANNED_RATE`
  (:func:`harness.verify.verdicts.certify_size`), the option that sizes it, and the command that draws them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pandas as pd

from harness.core.verdict import combine
from harness.verify.realmodel import REAL_MODEL_SCENARIO
from harness.verify.runs import MUST_BE_CAUGHT, UNDER_TEST, RunSet, RunSpec
from harness.verify.verdicts import PLANNED_RATE, Certifier, certify_size, gof_law, standing

__all__ = ["Outcome", "Need", "Cell", "END", "judge", "command_verdict", "carriers", "top_cells", "loss_estimate",
           "tally", "unexpected_losses"]

_VERDICT_OF = {"ok": "certified", "inconclusive": "inconclusive", "failed": "lossy"}


@dataclass(frozen=True)
class Need:
    """A run not certified: ``needed`` sequences (per prompt on the exact pair for the real-model scenario)
    against ``drawn``; ``option`` and ``value`` the command-line option that sizes it and its new value (None:
    no option does; ``note`` says what does)."""

    run: str
    scenario: str
    drawn: int
    needed: int
    option: Optional[str] = None
    value: Optional[int] = None
    note: str = ""


@dataclass(frozen=True)
class Outcome:
    """The command's verdict (certified / lossy / inconclusive) and the lines that explain it."""

    verdict: str
    reasons: tuple = ()
    tally: str = ""  # the reasons counted by kind (:func:`tally`)
    losses: tuple = ()
    needs: tuple = ()
    command: Optional[str] = None  # the command line that draws what ``needs`` asks (None: none can)
    advice: tuple = field(default_factory=tuple)


def command_verdict(verdicts: pd.DataFrame) -> str:
    """certified / lossy / inconclusive from the rows of ``runs.csv`` (no rows: inconclusive)."""
    return combine(_VERDICT_OF[standing(v)] for v in verdicts.itertuples())


def _kind(v) -> str:
    """What keeps one run from its role, as counted in the headline: 'failed', 'buggy control not caught',
    'run not certified', 'lossless control lossy', 'lossy run under test' or 'run not as its role requires'."""
    if isinstance(v.error, str) and v.error:
        return "failed"
    if v.role in MUST_BE_CAUGHT:
        return "buggy control not caught"
    if standing(v) == "inconclusive":
        return "run not certified"
    if v.role == "lossless" and str(v.verdict).startswith("lossy"):
        return "lossless control lossy"
    return "lossy run under test" if str(v.verdict).startswith("lossy") else "run not as its role requires"


def _reason(v) -> str:
    """Why one run is not as its role requires, in a few words."""
    where, kind = f"{v.run} on {v.scenario}", _kind(v)
    if kind == "failed":
        return f"{where} failed ({v.error[:80]})"
    if kind == "buggy control not caught":
        return f"buggy control {where} not caught ({v.verdict})"
    if kind == "run not certified":
        return f"{where} not certified (largest bound / ε: {v.cert_worst})"
    who = "lossless control " if v.role == "lossless" else ""
    caught = f" (rejected by {v.caught_by})" if isinstance(v.caught_by, str) and v.caught_by else ""
    return f"{who}{where} {v.verdict}{caught}"


def tally(verdicts: pd.DataFrame) -> str:
    """'1 buggy control not caught, 2 runs not certified': the runs keeping the command from PASS, by kind."""
    kinds = [_kind(v) for v in verdicts.itertuples() if standing(v) != "ok"]
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    return ", ".join(f"{n} {k.replace('run ', 'runs ', 1) if n > 1 and k.startswith('run ') else k}"
                     for k, n in counts.items())


def loss_estimate(v) -> str:
    """The estimated loss of a lossy run: the plug-in TV of the law whose confidence interval lies highest, with
    that interval (``runs.csv``'s ``tv_best*``, :func:`harness.verify.verdicts._tv_summary`)."""
    if not (isinstance(v.tv_best, float) and math.isfinite(v.tv_best)):
        return "no TV estimate (no goodness-of-fit test of an exact law)"
    return (f"TV ≈ {v.tv_best:.3g} [{v.tv_best_lower:.3g}, {v.tv_best_upper:.3g}] (confidence "
            f"{v.cert_confidence:g}) on {v.tv_best_test}")


END = "end"  # the symbol after EOS (or past the sequence's end), the last of the law's n_symbols


@dataclass(frozen=True)
class Cell:
    """One cell of a gof test: its tokens (ids; :data:`END` for the padding after EOS), the run's observed share
    and the exact probability."""

    tokens: tuple
    observed: float
    expected: float

    def __str__(self) -> str:
        name = ", ".join(str(t) for t in self.tokens)
        one = len(self.tokens) == 1
        return (f"{'token' if one else 'tokens'} {name if one else f'({name})'}: observed {100 * self.observed:.3g} % "
                f"vs exact {100 * self.expected:.3g} %")


def _counts(r: RunSpec, name: str, arg: str) -> Optional[np.ndarray]:
    """The run's tallies behind the gof test ``name[arg]`` ('position', '2'; 'pair', '0'; 'joint', 'a:b'): the
    same its test used (:func:`harness.verify.battery.plan_tests`); None for a window it does not keep."""
    acc = r.acc
    if name == "position":
        return acc.counts[int(arg)]
    if name == "pair":
        return acc.pairs[int(arg)]
    a = int(arg.split(":")[0])
    lg = acc.lagged
    if a == 0:
        return acc.joint
    if 1 <= a <= acc.windows.shape[0]:
        return acc.windows[a - 1]
    return lg.tail_joint if lg is not None and a == lg.tail_offset else None


def top_cells(r: RunSpec, test: str, top: int = 3) -> list:
    """The ``top`` cells (:class:`Cell`) of ``r``'s gof test ``test`` ('position[2]', 'pair[0]', 'joint[a:b]': as
    ``runs.csv``'s ``tv_best_test``) whose observed share departs most from the exact law (its law:
    :func:`harness.verify.verdicts.gof_law`), largest first; [] when the run drew nothing or the counts are not kept."""
    if r.acc is None or r.acc.n <= 0:
        return []
    name, _, arg = test.rstrip("]").partition("[")
    counts = _counts(r, name, arg)
    if counts is None:
        return []
    joint = name == "joint"
    law_of = gof_law(r.acc.law, r.acc.joint_tokens)
    P = np.asarray(law_of(test if joint else name, -1 if joint else int(arg)), np.float64).ravel()  # (cells,)
    q = np.asarray(counts, dtype=np.float64).ravel() / max(float(np.sum(counts)), 1.0)  # (cells,)
    W = r.acc.law.n_symbols
    J = {"position": 1, "pair": 2}.get(name) or int(arg.split(":")[1]) - int(arg.split(":")[0])  # tokens per cell
    cells = np.argsort(-np.abs(q - P), kind="stable")[:top]
    return [Cell(tuple(END if int(t) == W - 1 else int(t) for t in np.unravel_index(int(c), (W,) * J)),
                 float(q[c]), float(P[c])) for c in cells]


def carriers(r: RunSpec, test: str, top: int = 3) -> str:
    """The cells of ``r``'s law ``test`` whose observed share departs most from the exact one (:func:`top_cells`),
    in words: 'tokens (3, end): observed 14.1 % vs exact 9.8 %; ...' ('' when none)."""
    return "; ".join(str(c) for c in top_cells(r, test, top))


def unexpected_losses(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs.csv`` found lossy that must not be: the runs under test, then the lossless controls (a
    buggy control is meant to be lossy; a peer is reported, not judged)."""
    judged = ~verdicts.role.isin(MUST_BE_CAUGHT + ("peer",))
    lossy = verdicts[judged & verdicts.verdict.astype(str).str.startswith("lossy")]
    return lossy.sort_values("role", key=lambda r: ~r.isin(UNDER_TEST), kind="stable")


def _loss_lines(rs: RunSet, verdicts: pd.DataFrame) -> tuple:
    """For each run found lossy that must not be (:func:`unexpected_losses`): its loss and where it is."""
    runs = {(r.label, r.scenario.name): r for r in rs.runs}
    lines = []
    for v in unexpected_losses(verdicts).itertuples():
        r = runs.get((v.run, v.scenario))
        located = r is not None and isinstance(v.tv_best_test, str) and bool(v.tv_best_test)
        where = carriers(r, v.tv_best_test) if located else ""
        lines.append(f"{v.run} on {v.scenario}: loss {loss_estimate(v)}" + (f"; {where}" if where else ""))
    return tuple(lines)


def _option_of(r: RunSpec, config: dict, needed: int) -> tuple[Optional[str], Optional[int], str]:
    """(option, its new value, note) that draws ``needed`` sequences for exact-law run ``r``: ``--draws`` for the
    sampler under test, ``--control-draws`` for a lossless control; a block / tree run is sized by default.toml's
    ``[algorithms]``, which those options only cap (the note says so when more is needed)."""
    lossless = r.role == "lossless"
    option = "--control-draws" if lossless else "--draws"
    current = int(config.get("control_draws" if lossless else "draws") or r.draws)
    cap = None
    if r.algorithm != "chain" or (r.role in UNDER_TEST and r.label != config.get("sampler")):
        algos = (config.get("algorithms") or {}).get("settings") or {}
        cap = algos.get(("full_" if config.get("full") else "") + ("control_draws" if lossless else "draws"))
    base = current if cap is None else min(cap, current)  # what the run's size was taken from
    share = r.draws / max(base, 1)  # the scenario's weight (as rounded)
    if cap is not None and needed > cap * share:
        return None, None, (f"more than default.toml's [algorithms] {'control_' if lossless else ''}draws "
                            f"({cap:,}) give: raise it there (a copy, with --scenario-dir)")
    return option, max(current, math.ceil(needed / share)), ""


def _needs(rs: RunSet, table: pd.DataFrame, verdicts: pd.DataFrame, certifier: Certifier, config: dict) -> tuple:
    """A :class:`Need` per run not certified for want of draws."""
    runs = {(r.label, r.scenario.name): r for r in rs.runs}
    real = {rr.label: rr for rr in rs.real_runs}
    out = []
    for v in verdicts.itertuples():
        if standing(v) != "inconclusive" or v.role in MUST_BE_CAUGHT:  # a control not caught: no size certifies it
            continue
        if v.scenario == REAL_MODEL_SCENARIO:
            out.append(_real_need(v, real.get(v.run), config))
            continue
        r = runs[(v.run, v.scenario)]
        needed = certify_size(r, table, certifier)
        if not math.isfinite(needed):
            continue
        option, value, note = _option_of(r, config, int(needed))
        out.append(Need(v.run, v.scenario, int(r.acc.n), int(needed), option, value, note))
    return tuple(out)


def _real_need(v, rr, config: dict) -> Need:
    """The real-model scenario: sequences per prompt on the exact pair (the planner's ``certify_draws``, where a
    lossless sampler's expected bounds reach ε)."""
    drawn = int(rr.exact_drawn) if rr is not None else 0
    needed = int(v.certify_draws) if isinstance(v.certify_draws, float) and math.isfinite(v.certify_draws) else 0
    if not needed:
        return Need(v.run, v.scenario, drawn, 0, note="no planner figure: the run drew nothing on the exact pair "
                                                      "(its [real_model.exact] sizes, or pit --exact-sequences)")
    if config.get("command") == "pit" and v.role in UNDER_TEST:
        return Need(v.run, v.scenario, drawn, needed, "--exact-sequences", needed)
    where = "[real_model.exact.controls]" if v.role not in UNDER_TEST else "[real_model.exact] n_sequences"
    return Need(v.run, v.scenario, drawn, needed, note=f"sequences per prompt on the exact pair: set {where} in "
                                                          "default.toml (a copy, with --scenario-dir)")


def _advice(needs: tuple, rerun: Optional[Callable[[dict], str]]) -> tuple[Optional[str], tuple]:
    """(the command that draws what ``needs`` asks, the lines saying so)."""
    lines = []
    options: dict = {}
    for n in needs:
        unit = "sequences per prompt on the exact pair" if n.scenario == REAL_MODEL_SCENARIO else "sequences"
        size = (f"~{n.needed:,} {unit} certify a lossless sampler with probability ≥ {1 - PLANNED_RATE:g} "
                f"(the bound on P(inconclusive))" if n.scenario != REAL_MODEL_SCENARIO else
                f"~{n.needed:,} {unit}: a lossless sampler's expected bounds reach ε there (planner)" if n.needed else
                "")
        how = f"{n.option} {n.value:,}" if n.option else n.note
        lines.append(f"{n.run} on {n.scenario}: drew {n.drawn:,}; " + "; ".join(x for x in (size, how) if x))
        if n.option:
            options[n.option] = max(options.get(n.option, 0), int(n.value))
    command = rerun(options) if rerun is not None and options else None
    return command, tuple(lines)


def judge(rs: RunSet, table: pd.DataFrame, verdicts: pd.DataFrame, certifier: Certifier, config: dict,
          rerun: Optional[Callable[[dict], str]] = None) -> Outcome:
    """The command's :class:`Outcome`; ``rerun`` (options -> command line) writes the command that draws what an
    inconclusive run needs (None: the options are named, no command)."""
    verdict = command_verdict(verdicts)
    reasons = tuple(_reason(v) for v in verdicts.itertuples() if standing(v) != "ok")
    if verdict == "lossy":
        return Outcome(verdict, reasons, tally(verdicts), losses=_loss_lines(rs, verdicts))
    if verdict == "inconclusive":
        needs = _needs(rs, table, verdicts, certifier, config)
        command, advice = _advice(needs, rerun)
        return Outcome(verdict, reasons, tally(verdicts), needs=needs, command=command, advice=advice)
    return Outcome(verdict)
