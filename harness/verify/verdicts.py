"""Verdicts: one row per run (``runs.csv``), judged from the Holm-adjusted table of tests.

The verdict of a run is three-valued (issue 10):

* **lossy** — one of its loss tests rejects after Holm;
* **certified** — nothing rejects *and* every upper confidence bound of the run lies below its tolerance ε
  (:mod:`harness.verify.epsilon`): TV(sampler, target) of the marginal at each position, of each consecutive
  pair and of every window of J tokens (J = N: the whole output law) (exact-law runs: finite-sample bounds only, :func:`harness.verify.battery.tv_interval`), or
  (real-model runs) the token TV of the marginal at each of the first J positions, each pair and every W-window on
  the exact transformer pair, per prompt (:mod:`harness.verify.exactmodel`: the sequence the independent unit).  All bounds of the command
  hold simultaneously with confidence ``tv_confidence`` (Bonferroni-split): an interval-inclusion equivalence
  test at that confidence;
* **inconclusive** — neither; ``certify_draws`` then says how many sequences would certify a lossless
  sampler (the bound planners :func:`harness.verify.battery.tv_interval_n_for`,
  computed for every certifiable run).

Whether that passes depends on the role (:mod:`harness.verify.runs`): a buggy control must be lossy; the
sampler under test, the reference samplers and the lossless controls must be *certified* (inconclusive does
not pass: a gate that did not certify exits 1, as a lossy one); the reference sampler must also match the
exact acceptance law (a rejected acceptance test makes it *inefficient* or *over-accepting*); a peer is
reported, not judged.  The von Neumann sampler has no bound: it stays two-valued (lossy / lossless).
:class:`RunVerdict` is the row, its measurements grouped in parts (TV, PIT, acceptance, certificate, cost) and
flattened by :meth:`RunVerdict.to_row` to the columns of ``runs.csv``; fields a kind of run does not report
stay NaN / None / "".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

import numpy as np
import pandas as pd

from harness.verify.battery import tv_interval_inconclusive, tv_interval_inconclusive_normal, tv_interval_n_for
from harness.verify.cost import COST_COLUMNS, CostPart, cost_part, baseline_cpu
from harness.core.forkmap import fork_map
from harness.verify.exactmodel import EXACT_FAMILY, exact_model_law, prompt_of_family
from harness.verify.realmodel import REAL_MODEL_SCENARIO
from harness.verify.epsilon import Epsilons, epsilons_for
from harness.verify.runs import MUST_BE_CAUGHT, RealRun, RunSet, RunSpec, VonNeumannRun

__all__ = ["RunVerdict", "TVPart", "PITPart", "AcceptancePart", "CertificatePart", "RUN_COLUMNS", "Certifier", "certifier_for", "exact_verdict", "real_verdict",
           "von_neumann_verdict", "verdict_table", "passes", "standing", "certify_size", "PLANNED_RATE", "gof_law",
           "plan_run", "inconclusive_bound", "GROWTH", "MAX_GROWTH"]

NAN = math.nan


@dataclass(frozen=True)
class TVPart:
    """TV(sampler, target) of an exact-law run: the worst position (estimate, where, bounds), the largest
    per-position upper bound and detectable TV, the J-windows (each field: its largest over the windows), and the most certain of all
    gof tests (``tv_best*``: the largest certified lower bound)."""

    tv_position_max: float = NAN
    tv_position_max_at: Optional[int] = None
    tv_position_lower: float = NAN
    tv_position_upper: float = NAN
    tv_position_upper_max: float = NAN
    tv_joint: float = NAN
    tv_joint_lower: float = NAN
    tv_joint_upper: float = NAN
    mde_position_tv: float = NAN
    tv_best: float = NAN
    tv_best_lower: float = NAN
    tv_best_upper: float = NAN
    tv_best_test: str = ""


@dataclass(frozen=True)
class PITPart:
    """The real-model tests of a run: the pooled PIT KS test (and its DKW Kolmogorov bound), the worst
    position and the pair grid."""

    pit_ks: float = NAN
    pit_ks_p: float = NAN
    pit_ks_p_adjusted: float = NAN
    pit_ks_detectable: float = NAN
    pit_kolmogorov_upper: float = NAN
    pit_position_worst: Optional[int] = None
    pit_position_min_p: float = NAN
    pit_position_min_p_adjusted: float = NAN
    pit_position_detectable: float = NAN
    pit_pairs_tv_hat: float = NAN
    pit_pairs_min_p: float = NAN
    pit_pairs_min_p_adjusted: float = NAN
    pit_pairs_detectable: float = NAN
    pit_pairs_cells: Optional[int] = None


@dataclass(frozen=True)
class AcceptancePart:
    """The measured acceptance rate and, for von Neumann, the expected one (1/M)."""

    acceptance: Optional[float] = NAN
    expected_acceptance: float = NAN


@dataclass(frozen=True)
class CertificatePart:
    """The certificate: its outcome, the tolerances ε, the simultaneous confidence, the bound closest to
    its ε, the method and the draws that would certify a lossless sampler."""

    certificate: str = ""  # certified | inconclusive | lossy ("" : no certificate for this kind of run)
    epsilon_position: float = NAN
    epsilon_pair: float = NAN
    epsilon_joint: float = NAN
    epsilon_real: float = NAN
    tv_pair_upper_max: float = NAN
    cert_confidence: float = NAN  # 1 - delta: every bound of the command holds simultaneously with it
    cert_worst: str = ""  # the bound closest to (or over) its tolerance: 'test[pos] bound / eps'
    cert_worst_ratio: float = NAN  # that bound / its eps (< 1: certified)
    cert_method: str = ""
    certify_draws: float = NAN  # sequences at which a lossless sampler's expected bounds all fall below eps (about
                                # half of lossless runs of that size certify)
    cert_scope: str = ""  # the laws bounded, in words: 'TV <= e for the marginal at each position, ...'
    cert_strongest: str = ""  # the broadest law whose bounds all lie below their eps (whole output > every
                              # J-window > each pair > each position marginal), in words; 'none' if no level holds
    cert_inconclusive_rate: float = NAN  # upper bound on P(inconclusive | lossless sampler) at this run's size:
                                         # the sum over its bounds of P(bound >= eps) (battery.tv_interval_inconclusive)
    cert_inconclusive_normal: float = NAN  # the same by the normal approximation (the planning figure;
                                           # battery.tv_interval_inconclusive_normal)
    cert_worst_bound: float = NAN  # the bound of cert_worst (TV of the level it names)


# The columns of runs.csv, in order (the order they had when RunVerdict was one flat record of 55 fields);
# each is a field of RunVerdict itself or of exactly one of its parts.
RUN_COLUMNS = (
    "run", "role", "scenario", "sequences", "tokens", "wall_s", "error", "n_rejected", "min_p_adjusted",
    "min_pvalue", "tv_position_max", "tv_position_max_at", "tv_position_lower", "tv_position_upper",
    "min_p_adjusted_loss", "tv_position_upper_max", "tv_joint", "tv_joint_lower", "tv_joint_upper",
    "mde_position_tv", "efficiency", "tv_best", "tv_best_lower", "tv_best_upper", "tv_best_test", "verdict",
    "passed", "caught_by", "acceptance", "pit_ks", "pit_ks_p", "pit_ks_p_adjusted", "pit_ks_detectable",
    "pit_kolmogorov_upper", "pit_position_worst", "pit_position_min_p", "pit_position_min_p_adjusted",
    "pit_position_detectable", "pit_pairs_tv_hat", "pit_pairs_min_p", "pit_pairs_min_p_adjusted",
    "pit_pairs_detectable", "pit_pairs_cells", "expected_acceptance", "certificate", "epsilon_position",
    "epsilon_pair", "epsilon_joint", "epsilon_real", "tv_pair_upper_max", "cert_confidence", "cert_worst",
    "cert_worst_ratio", "cert_method", "certify_draws", "cert_scope", "cert_strongest", "cert_inconclusive_rate",
    "cert_inconclusive_normal",
    "cert_worst_bound", *COST_COLUMNS,  # issue 42: what the certificate costs (harness.verify.cost)
)
PARTS = ("tv", "pit", "accept", "cert", "cost")  # the RunVerdict fields holding a part


@dataclass(frozen=True)
class RunVerdict:
    """One row of ``runs.csv``: who the run is and its outcome, with its measurements in parts: ``tv``
    (:class:`TVPart`, exact-law runs), ``pit`` (:class:`PITPart`, real-model runs), ``accept``
    (:class:`AcceptancePart`), ``cert`` (:class:`CertificatePart`) and ``cost``
    (:class:`harness.verify.cost.CostPart`).  :meth:`to_row` flattens it to the
    columns :data:`RUN_COLUMNS`."""

    run: str
    role: str
    scenario: str
    sequences: int
    tokens: int
    wall_s: float
    error: Optional[str] = None
    n_rejected: Optional[int] = None
    min_p_adjusted: float = NAN
    min_pvalue: float = NAN
    min_p_adjusted_loss: float = NAN
    efficiency: str = ""
    verdict: str = ""
    passed: bool = False
    caught_by: str = ""
    tv: TVPart = field(default_factory=TVPart)
    pit: PITPart = field(default_factory=PITPart)
    accept: AcceptancePart = field(default_factory=AcceptancePart)
    cert: CertificatePart = field(default_factory=CertificatePart)
    cost: CostPart = field(default_factory=CostPart)

    def to_row(self) -> dict:
        """The row of ``runs.csv``: every column of :data:`RUN_COLUMNS`, in order."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in PARTS}
        for part in PARTS:
            flat.update(vars(getattr(self, part)))
        return {c: flat[c] for c in RUN_COLUMNS}


def _check_columns() -> None:
    """Each column of runs.csv comes from exactly one field (checked at import: a part may not drop or
    duplicate a column)."""
    names = [f.name for f in fields(RunVerdict) if f.name not in PARTS]
    names += [f.name for part in (TVPart, PITPart, AcceptancePart, CertificatePart, CostPart) for f in fields(part)]
    if sorted(names) != sorted(RUN_COLUMNS):
        raise AssertionError(f"RunVerdict's fields {sorted(names)} are not the columns of runs.csv {sorted(RUN_COLUMNS)}")


_check_columns()


def passes(role: str, lossy: bool, inefficient: bool = False, certified: Optional[bool] = None) -> bool:
    """Whether a run with this outcome passes in this role (``certified`` None: a run without a certificate,
    judged on lossy alone)."""
    if role in MUST_BE_CAUGHT:
        return lossy
    if role == "peer":
        return True
    ok = not lossy and (certified is None or certified)
    return ok and not (role == "reference" and inefficient)


INEFFICIENT = ("inefficient", "over-accepting")  # efficiencies that fail the reference sampler


def standing(v) -> str:
    """How a row of ``runs.csv`` stands against its role: ``ok`` (passes), ``inconclusive`` (it fails only for want
    of a certificate: nothing rejected, an error-free run that would pass if certified; or a buggy control that
    was neither caught nor certified: the battery's power at this size is not shown, nothing was found lossy) or
    ``failed`` (a buggy control *certified* lossless is the battery's failure: failed)."""
    if bool(v.passed):
        return "ok"
    if isinstance(v.error, str) and v.error or v.certificate != "inconclusive":
        return "failed"
    if v.role in MUST_BE_CAUGHT:
        return "inconclusive"
    return "inconclusive" if passes(v.role, False, v.efficiency in INEFFICIENT, certified=True) else "failed"


def _rows_of(table: pd.DataFrame, run: str, scenario: str) -> pd.DataFrame:
    return table[(table.run == run) & (table.scenario == scenario)]


def _caught_by(loss: pd.DataFrame) -> tuple[int, str]:
    """(number of rejected loss tests, the first four as 'family.test[position]', most significant first)."""
    rej = loss[loss.reject].sort_values("p_adjusted")
    caught = [f"{f}.{t}" + (f"[{p}]" if p >= 0 else "") for f, t, p in zip(rej.family, rej.test, rej.position)]
    return len(caught), ", ".join(caught[:4]) + (f" (+{len(caught) - 4})" if len(caught) > 4 else "")


def _min(col: pd.Series) -> float:
    return float(col.min()) if len(col) else NAN


def _max(col: pd.Series) -> float:
    return float(col.max()) if len(col) else NAN


def _efficiency(acc: pd.DataFrame) -> str:
    """'' (as exact), 'inefficient', 'over-accepting' or 'acceptance not instrumented' from the run's
    acceptance tests."""
    rejected = acc[acc.reject]
    if len(rejected):
        return "inefficient" if (rejected.direction < 0).any() else "over-accepting"
    return "acceptance not instrumented" if len(acc) == 0 else ""


def _tv_summary(sub: pd.DataFrame) -> dict:
    """The TV fields of an exact-law run from its gof tests."""
    gof = sub[sub.family == "gof"]
    out = {}
    if len(gof):  # the most clearly non-zero TV: largest certified lower bound (ties: largest estimate)
        best = gof.sort_values(["tv_lower", "tv_hat"], ascending=False).iloc[0]
        out.update(tv_best=float(best.tv_hat), tv_best_lower=float(best.tv_lower), tv_best_upper=float(best.tv_upper),
                   tv_best_test=f"{best.test}" + (f"[{int(best.position)}]" if best.position >= 0 else ""))
    pos = gof[gof.test == "position"]
    joint = gof[gof.test.str.startswith("joint")]
    worst = pos.loc[pos.tv_hat.idxmax()] if len(pos) else None
    out.update(tv_position_max=float(worst.tv_hat) if worst is not None else NAN,
               tv_position_max_at=int(worst.position) if worst is not None else -1,
               tv_position_lower=float(worst.tv_lower) if worst is not None else NAN,
               tv_position_upper=float(worst.tv_upper) if worst is not None else NAN,
               tv_position_upper_max=_max(pos.tv_upper),
               tv_joint=_max(joint.tv_hat), tv_joint_lower=_max(joint.tv_lower),
               tv_joint_upper=_max(joint.tv_upper),  # the J-windows: the largest of each
               mde_position_tv=_max(pos.min_detectable))
    return out


@dataclass(frozen=True)
class Certifier:
    """What a certificate is judged with: the tolerances of each scenario (``epsilons``: scenario name ->
    :class:`harness.verify.epsilon.Epsilons`; ``default`` for the real-model scenario and any other), the
    miss probability ``delta`` of each bound and the command's simultaneous confidence ``confidence``."""

    epsilons: dict
    default: Epsilons
    delta: float
    confidence: float
    control_scale: float = 1.0  # control-sized runs (:func:`control_sized`) are certified at ε x this
    planned: dict = field(default_factory=dict, compare=False)  # (scenario, test, position, ε) -> draws, a cache
    rates: dict = field(default_factory=dict, compare=False)  # (scenario, test, position, ε, n, share) -> the bound
    normals: dict = field(default_factory=dict, compare=False)  # the same key -> the normal approximation

    def draws_for(self, scenario: str, test: str, position: int, eps: float, probs) -> int:
        """Sequences at which a lossless sampler's expected bound of this test reaches ``eps``
        (:func:`harness.verify.battery.tv_interval_n_for`), computed once per scenario, test and ε."""
        key = (scenario, test, position, eps)
        if key not in self.planned:
            self.planned[key] = tv_interval_n_for(probs(), eps, self.delta)
        return self.planned[key]

    def inconclusive_for(self, scenario: str, test: str, position: int, eps: float, n: int, probs,
                         share: float = 1.0, normal: bool = True) -> tuple:
        """(upper bound, normal approximation) of P(this bound >= ``eps``) for ``n`` draws of a lossless sampler
        (:func:`harness.verify.battery.tv_interval_inconclusive`, ``..._normal``) with the bound at ``share`` x δ,
        once per scenario, test, ε, n and share; ``normal=False``: the bound alone, the approximation NaN (the
        planners' searches read only the bound, and the approximation simulates 200 count vectors)."""
        key = (scenario, test, position, eps, n, share)
        delta = self.delta * share
        if key not in self.rates:
            self.rates[key] = tv_interval_inconclusive(probs(), n, delta, eps)
        if normal and key not in self.normals:
            self.normals[key] = tv_interval_inconclusive_normal(probs(), n, delta, eps)
        return self.rates[key], self.normals[key] if normal else NAN

    def of(self, scenario: str, control_sized: bool = False) -> Epsilons:
        eps = self.epsilons.get(scenario, self.default)
        return eps.scaled(self.control_scale) if control_sized else eps


def control_sized(r: RunSpec) -> bool:
    """Runs drawn at the controls' size (``control_draws`` / the [algorithms] sizes), not at the sampler
    under test's: the lossless controls and the block / tree reference runs.  Their certificates are
    stated at ``control_epsilon_scale`` x the tolerances (default.toml), and say so."""
    return r.role == "lossless" or (r.role == "reference" and r.label != "reference")


def _outcome(lossy: bool, certified: bool) -> str:
    return "lossy" if lossy else ("certified" if certified else "inconclusive")


def gof_law(law, J: int):
    """test name, position -> the exact law a gof test of this run is against: ``position`` (the marginal at
    ``pos``), ``pair`` (the pair at ``pos``, ``pos`` + 1), ``joint[a:b]`` (the window [a, b)); used by the planners
    (:func:`certify_size`, :mod:`harness.verify.sizing`) and by :func:`harness.verify.outcome.top_cells`."""
    def law_of(test: str, pos: int):
        if test == "position":
            return law.marginals()[pos]
        if test == "pair":
            return law.pair_marginals()[pos]
        a, b = (int(x) for x in test[len("joint["):-1].split(":"))  # joint[a:b]: the window [a, b)
        return law.joint_at(a, b - a)
    return law_of


def _window_words(J: int, N: int, n_windows: int) -> str:
    return f"the whole output law (all {N} tokens)" if J >= N else f"every window of {J} tokens ({n_windows} windows)"


def _scope(eps: Epsilons, J: int, N: int, gof: pd.DataFrame) -> tuple[str, str]:
    """(the certificate's laws in words, the broadest level whose bounds all lie below their ε)."""
    n_win = int(gof.test.str.startswith("joint").sum())
    levels = [("position", f"{eps.position:g} for the marginal at each position"),
              ("pair", f"{eps.pair:g} for each consecutive pair")]
    if n_win:
        levels.append(("joint", f"{eps.joint:g} for {_window_words(J, N, n_win)}"))
    scope = "TV ≤ " + ", ≤ ".join(w for _, w in levels)
    kind = gof.test.where(~gof.test.str.startswith("joint"), "joint")
    earned = [w for k, w in levels if (kind == k).any() and bool(np.all(gof.tv_upper[kind == k] /
                                                                       eps.for_test(k) < 1))]
    return scope, ("TV ≤ " + earned[-1] if earned else "none")


def _bounds_of(r: RunSpec, sub: pd.DataFrame, c: Certifier) -> tuple[pd.DataFrame, Epsilons, np.ndarray]:
    """(the run's gof rows, its tolerances, each row's ε)."""
    gof = sub[sub.family == "gof"]
    eps = c.of(r.scenario.name, control_sized(r))
    return gof, eps, np.array([eps.for_test(t) for t in gof.test], dtype=np.float64)


def _planned(r: RunSpec, gof: pd.DataFrame, e: np.ndarray, c: Certifier, scale: Optional[float] = None,
             normal: bool = True) -> tuple:
    """(draws that certify, P(inconclusive) bound, its normal approximation) of a lossless sampler of ``r``'s law
    at ``scale`` x the sequences drawn (None: the run's own size): the bound planners of every gof row, the rates
    summed over them (``normal=False``: the approximation NaN, not computed).  At its own size, a run of --stop-at-need (``r.stop``) is inconclusive only if it is not
    certified at its cap, where its bounds are at the cap's share of δ: its rates are those (not the fixed-n rates
    at the size it stopped at)."""
    law_of = gof_law(r.acc.law, r.acc.joint_tokens)
    stop, share = getattr(r, "stop", None), 1.0
    if scale is None and stop is not None:
        scale, share = stop.looks.cap / r.acc.n, float(stop.looks.deltas[-1])  # the cap and its share of δ
    scale = 1.0 if scale is None else scale
    keys = list(zip(gof.test, gof.position.astype(int), e.astype(float),
                    np.maximum(2, np.round(gof.n.to_numpy(np.float64) * scale)).astype(int)))
    draws = float(max(c.draws_for(r.scenario.name, t, p, x, lambda t=t, p=p: law_of(t, p)) for t, p, x, _ in keys))
    rates = np.array([c.inconclusive_for(r.scenario.name, t, p, x, n, lambda t=t, p=p: law_of(t, p), share, normal)
                      for t, p, x, n in keys])
    return (draws, *(min(1.0, float(v)) if v == v else NAN for v in rates.sum(0)))  # normal=False: NaN


PLANNED_RATE = 0.05  # certify_size: the P(inconclusive | lossless) a suggested size is planned to
GROWTH = 1.15  # plan_run: the step of the search above the half-certify size
MAX_GROWTH = 64.0  # plan_run: the search stops at this multiple of the half-certify size (its rate says so)


def plan_run(r: RunSpec, table: pd.DataFrame, c: Certifier, rate: float = PLANNED_RATE) -> tuple[float, float, float]:
    """(half-certify sequences, planned sequences, the rigorous P(inconclusive) bound there) of a lossless sampler of
    exact-law run ``r``'s law: the planner's ``certify_draws`` (every expected bound at its ε: about half certify),
    then steps of :data:`GROWTH` until the rigorous bound on P(inconclusive), summed over the run's bounds
    (:func:`harness.verify.battery.tv_interval_inconclusive`; the normal approximation understates the tail: on the
    tiny scenario's first position at 4,321 sequences it gives 6e-4 where 2,000 simulated runs give 9e-3 and the
    bound 1e-2), is at most ``rate``, at most :data:`MAX_GROWTH` x (NaN: no gof rows).  The one planner of a size:
    the command's advice (:func:`certify_size`) and the Python API's (:mod:`harness.verify.sizing`)."""
    gof, _, e = _bounds_of(r, _rows_of(table, r.label, r.scenario.name), c)
    if not len(gof) or r.acc is None or r.acc.n == 0:
        return NAN, NAN, NAN
    half = math.ceil(_planned(r, gof, e, c, normal=False)[0])
    n, r_n = half, inconclusive_bound(r, table, c, half)
    while r_n > rate and n < MAX_GROWTH * half:
        n = math.ceil(n * GROWTH)
        r_n = inconclusive_bound(r, table, c, n)
    return float(half), float(n), r_n


def inconclusive_bound(r: RunSpec, table: pd.DataFrame, c: Certifier, n: int) -> float:
    """The rigorous bound on P(inconclusive | lossless sampler) of exact-law run ``r`` at ``n`` sequences: summed
    over its bounds (``runs.csv``'s ``cert_inconclusive_rate`` at the run's own size); NaN without gof rows."""
    gof, _, e = _bounds_of(r, _rows_of(table, r.label, r.scenario.name), c)
    if not len(gof) or r.acc is None or r.acc.n == 0:
        return NAN
    return _planned(r, gof, e, c, n / r.acc.n, normal=False)[1]


def certify_size(r: RunSpec, table: pd.DataFrame, c: Certifier, rate: float = PLANNED_RATE) -> float:
    """Sequences at which a lossless sampler of ``r``'s law ends certified with probability >= 1 - ``rate`` by the
    rigorous bound (:func:`plan_run`; NaN: no gof rows)."""
    return plan_run(r, table, c, rate)[1]


def _exact_certificate(r: RunSpec, sub: pd.DataFrame, lossy: bool, c: Certifier) -> dict:
    """The certificate fields of an exact-law run from its gof rows (finite-sample TV bounds); a lossy run gets
    no planning figures (certify_draws, P(inconclusive))."""
    gof, eps, e = _bounds_of(r, sub, c)
    if not len(gof):
        return {}
    ratio = gof.tv_upper.to_numpy(np.float64) / e
    i = int(np.argmax(ratio))
    row = gof.iloc[i]
    certified = not lossy and bool(np.all(ratio < 1))
    draws = rate = normal = NAN
    if r.role not in MUST_BE_CAUGHT and not lossy:  # the draws that certify a lossless sampler here
        draws, rate, normal = _planned(r, gof, e, c)
    methods = sorted({str(m).split(" (")[0].replace("finite-sample: ", "") for m in gof.tv_method})
    pair = gof[gof.test == "pair"]
    scope, strongest = _scope(eps, r.acc.joint_tokens if r.acc else 0, r.acc.law.N if r.acc else 0, gof)
    return dict(certificate=_outcome(lossy, certified), epsilon_position=eps.position, epsilon_pair=eps.pair,
                epsilon_joint=eps.joint, tv_pair_upper_max=_max(pair.tv_upper), cert_confidence=c.confidence,
                cert_worst=f"{row.test}" + (f"[{int(row.position)}]" if row.position >= 0 else "") +
                f" {row.tv_upper:.3g} / {e[i]:g}", cert_worst_ratio=float(ratio[i]), cert_worst_bound=float(row.tv_upper),
                cert_method="finite-sample TV bounds: " + ", ".join(methods), certify_draws=draws,
                cert_scope=scope, cert_strongest="none (lossy)" if lossy else strongest,
                cert_inconclusive_rate=rate, cert_inconclusive_normal=normal)


def exact_verdict(r: RunSpec, table: pd.DataFrame, certifier: Optional[Certifier] = None,
                  baseline: tuple[float, int] = (0.0, 0)) -> RunVerdict:
    """The verdict of an exact-law run (``certifier`` None: two-valued, lossy / lossless, no certificate);
    ``baseline``: (CPU seconds, sequences) of the target-only baseline the run owns (:func:`harness.verify.cost.baseline_cpu`)."""
    who = dict(run=r.label, role=r.role, scenario=r.scenario.name, sequences=r.acc.n if r.acc else 0,
               tokens=r.tokens, wall_s=r.wall_s, error=r.error)
    if r.error is not None:
        return RunVerdict(**who, verdict=f"error: {r.error}", passed=False, n_rejected=0, tv=TVPart(tv_position_max_at=-1),
                          cost=_exact_cost(r, {}, baseline))
    sub = _rows_of(table, r.label, r.scenario.name)
    loss = sub[sub.loss_test]
    lossy = bool(loss.reject.any())
    eff = _efficiency(sub[~sub.loss_test])
    n_rejected, caught_by = _caught_by(loss)
    cert = _exact_certificate(r, sub, lossy, certifier) if certifier is not None else {}
    outcome = cert.get("certificate") or ("lossy" if lossy else "lossless")
    certified = None if not cert else outcome == "certified"
    return RunVerdict(**who, verdict=outcome + (f", {eff}" if eff else ""),
                      passed=passes(r.role, lossy, inefficient=eff in INEFFICIENT,
                                    certified=certified),
                      caught_by=caught_by, n_rejected=n_rejected, min_p_adjusted=_min(sub.p_adjusted),
                      min_pvalue=_min(sub.pvalue), min_p_adjusted_loss=_min(loss.p_adjusted),
                      efficiency=eff or "as exact", tv=TVPart(**_tv_summary(sub)), cert=CertificatePart(**cert),
                      cost=_exact_cost(r, cert, baseline))


def _exact_cost(r: RunSpec, cert: dict, baseline: tuple[float, int]) -> CostPart:
    """The cost of an exact-law run (:mod:`harness.verify.cost`): its CPU seconds per sequence plus its baseline's."""
    n = r.acc.n if r.acc is not None else 0
    base_s, base_n = baseline
    per = (r.cpu_s / n if n > 0 else NAN) + (base_s / base_n if base_n > 0 else 0.0)
    return cost_part(cert.get("certificate", ""), r.cpu_s, cert.get("cert_worst_bound", NAN),
                     cert.get("certify_draws", NAN), n, per, base_s)


def _real_scope(eps: Epsilons, ex: pd.DataFrame, J: int, W: int, P: int) -> tuple[str, str]:
    """(the real-model certificate's laws in words, the broadest level whose bounds all lie below their ε)."""
    n = int(ex.n.min())
    levels = [("position", f"{eps.real:g} for the marginal at each of the first {J} positions"),
              ("pair", f"{eps.real_pair:g} for each consecutive pair"),
              ("joint", f"{eps.real_joint:g} for every window of {W} tokens")]
    where = f", after each of {P} prompts ({n:,} sequences each), on the exact transformer pair"
    kind = ex.test.where(~ex.test.str.startswith("joint"), "joint")
    earned = [w for k, w in levels if (kind == k).any() and bool(np.all(
        ex.tv_upper[kind == k] / eps.for_real_test(k) < 1))]
    return "token TV ≤ " + ", ≤ ".join(w for _, w in levels) + where, \
        ("token TV ≤ " + earned[-1] + where if earned else "none")


def _real_certificate(rr: RealRun, sub: pd.DataFrame, lossy: bool, c: Certifier, spec=None) -> dict:
    """The certificate of a real-model run: the finite-sample token-TV bounds of its tests on the exact transformer
    pair (:mod:`harness.verify.exactmodel`; per prompt: each of the first J positions, each pair, every W-window),
    the sequence the independent unit, so valid under any dependence between the tokens of one sequence.  A run
    without them (no ``[real_model.exact]``) is *inconclusive*: the tiny pair's PIT tests certify nothing."""
    ex = sub[sub.family.str.startswith(EXACT_FAMILY)]
    eps = c.of(REAL_MODEL_SCENARIO, control_sized(rr))
    if not len(ex):
        return dict(certificate=_outcome(lossy, False), epsilon_real=eps.real, cert_confidence=c.confidence,
                    cert_method="none: no draw on the exact pair ([real_model.exact]); the PIT tests of the tiny "
                                "pair certify nothing", cert_strongest="none (lossy)" if lossy else "none")
    e = np.array([eps.for_real_test(t) for t in ex.test])
    ratio = ex.tv_upper.to_numpy(np.float64) / e
    i = int(np.argmax(ratio))
    row = ex.iloc[i]
    prompt = ex.family.map(prompt_of_family).to_numpy()
    draws = rate = normal = NAN
    law = exact_model_law(spec.exact, spec.config) if spec is not None and spec.exact is not None else None
    if rr.role not in MUST_BE_CAUGHT and law is not None and not lossy:
        keys = list(zip(prompt, ex.test, ex.position.astype(int), e.astype(float), ex.n.astype(int)))
        draws = float(max(c.draws_for(f"{REAL_MODEL_SCENARIO}.p{p}", t, q, x, lambda p=p, t=t, q=q: law.of(t, p, q))
                          for p, t, q, x, _ in keys))
        stop = getattr(rr, "stop", None)  # stop at the need: inconclusive only if not certified at its cap
        cap, share = (stop.looks.cap, float(stop.looks.deltas[-1])) if stop is not None else (None, 1.0)
        rates = np.array([c.inconclusive_for(f"{REAL_MODEL_SCENARIO}.p{p}", t, q, x, cap or n,
                                             lambda p=p, t=t, q=q: law.of(t, p, q), share) for p, t, q, x, n in keys])
        rate, normal = (min(1.0, float(v)) for v in rates.sum(0))
    J = int(ex[ex.test == "position"].position.max()) + 1
    W = int(law.window) if law is not None else 0
    scope, strongest = _real_scope(eps, ex, J, W, int(len(set(prompt))))
    methods = sorted({str(m).split(" (")[0].replace("finite-sample: ", "") for m in ex.tv_method})
    floor = f"; float32 arithmetic accounts for ≤ {law.floor:.2g} of each ε" if law is not None else ""
    return dict(certificate=_outcome(lossy, not lossy and bool(np.all(ratio < 1))), epsilon_real=eps.real,
                tv_pair_upper_max=_max(ex[ex.test == "pair"].tv_upper), cert_confidence=c.confidence,
                cert_worst=f"p{prompt[i]}.{row.test}" + ("" if row.test.startswith("joint") else
                                                        f"[{int(row.position)}]") + f" {row.tv_upper:.3g} / {e[i]:g}",
                cert_worst_ratio=float(ratio[i]), cert_worst_bound=float(row.tv_upper), certify_draws=draws,
                cert_method="finite-sample token-TV bounds on the exact transformer pair, the sequence the "
                            "independent unit: " + ", ".join(methods) + floor,
                cert_scope=scope, cert_strongest="none (lossy)" if lossy else strongest,
                cert_inconclusive_rate=rate, cert_inconclusive_normal=normal)


def real_verdict(rr: RealRun, table: pd.DataFrame, certifier: Optional[Certifier] = None, spec=None) -> RunVerdict:
    """The verdict of a real-model run, with its PIT figures (``spec``: the run set's
    :class:`harness.verify.realmodel.RealModelSpec`, whose exact pair the certificate's planner uses)."""
    who = dict(run=rr.label, role=rr.role, scenario=REAL_MODEL_SCENARIO, sequences=rr.n_sequences, tokens=rr.tokens,
               wall_s=rr.wall_s, error=rr.error, n_rejected=0,
               accept=AcceptancePart(acceptance=rr.draw.acceptance_rate if rr.draw is not None else NAN))
    if rr.error is not None:
        return RunVerdict(**who, verdict=f"error: {rr.error}", passed=False, cost=_real_cost(rr, {}))
    sub = _rows_of(table, rr.label, REAL_MODEL_SCENARIO)
    lossy = bool(sub.reject.any())
    n_rejected, caught_by = _caught_by(sub)
    cert = _real_certificate(rr, sub, lossy, certifier, spec) if certifier is not None else {}
    outcome = cert.get("certificate") or ("lossy" if lossy else "lossless")
    ex = sub[sub.family.str.startswith(EXACT_FAMILY)]
    tv = TVPart(**_tv_summary(ex.assign(family="gof"))) if len(ex) else TVPart()
    return RunVerdict(**{**who, "n_rejected": n_rejected}, verdict=outcome, tv=tv,
                      passed=passes(rr.role, lossy, certified=None if not cert else outcome == "certified"),
                      caught_by=caught_by, min_p_adjusted=_min(sub.p_adjusted),
                      min_pvalue=_min(sub.pvalue), min_p_adjusted_loss=_min(sub.p_adjusted),
                      efficiency="acceptance law unknown (no exact law)",
                      pit=PITPart(**_pit_summary(sub[~sub.family.str.startswith(EXACT_FAMILY)])),
                      cert=CertificatePart(**cert), cost=_real_cost(rr, cert))


def _real_cost(rr: RealRun, cert: dict) -> CostPart:
    """The cost of a real-model run (:mod:`harness.verify.cost`): its exact-pair CPU seconds per sequence per prompt
    (the certificate's draws; stopped at the need, the seconds of every shard that arrived before the stop, those
    beyond its look included; one still in flight then is not counted), the tiny pair's a fixed part."""
    n = rr.exact_drawn  # sequences per prompt the certificate reads (where a run stopped at the need stopped)
    per = rr.exact_cpu_s / n if n > 0 else NAN
    return cost_part(cert.get("certificate", ""), rr.cpu_s, cert.get("cert_worst_bound", NAN),
                     cert.get("certify_draws", NAN), n, per, fixed_s=rr.cpu_s - rr.exact_cpu_s)


def _pit_summary(sub: pd.DataFrame) -> dict:
    """The PIT fields of a real-model run from its tests."""
    pooled = sub[sub.test == "pooled"].iloc[0]
    pos = sub[sub.test == "position"]
    pairs = sub[sub.test.str.startswith("pairs")]
    worst = pos.loc[pos.pvalue.idxmin()]
    return dict(pit_ks=float(pooled.statistic), pit_ks_p=float(pooled.pvalue),
                pit_ks_p_adjusted=float(pooled.p_adjusted), pit_ks_detectable=float(pooled.min_detectable),
                pit_kolmogorov_upper=float(pooled.kolmogorov_upper), pit_position_worst=int(worst.position),
                pit_position_min_p=float(worst.pvalue), pit_position_min_p_adjusted=_min(pos.p_adjusted),
                pit_position_detectable=_max(pos.min_detectable), pit_pairs_tv_hat=_max(pairs.tv_hat),
                pit_pairs_min_p=_min(pairs.pvalue), pit_pairs_min_p_adjusted=_min(pairs.p_adjusted),
                pit_pairs_detectable=_max(pairs.min_detectable), pit_pairs_cells=int(pairs.cells.max()))


def von_neumann_verdict(v: VonNeumannRun, table: pd.DataFrame) -> RunVerdict:
    """The verdict of a von Neumann run: proposals as sequences, accepted points as tokens."""
    sub = _rows_of(table, v.label, v.scenario)
    lossy = bool(sub.reject.any())
    return RunVerdict(run=v.label, role=v.role, scenario=v.scenario, sequences=v.draw.proposed,
                      tokens=v.draw.accepted, wall_s=v.wall_s, verdict="lossy" if lossy else "lossless",
                      passed=passes(v.role, lossy), caught_by=", ".join(sub[sub.reject].test) if lossy else "",
                      min_p_adjusted=_min(sub.p_adjusted), efficiency="",
                      accept=AcceptancePart(acceptance=v.draw.acceptance, expected_acceptance=1.0 / v.M),
                      cost=CostPart(cpu_s=v.cpu_s))


def verdict_table(rs: RunSet, table: pd.DataFrame, certifier: Optional[Certifier] = None,
                  workers: int = 1) -> pd.DataFrame:
    """One :class:`RunVerdict` per run of ``rs`` (exact-law, real-model, von Neumann), as ``runs.csv``;
    ``certifier`` None: two-valued verdicts (lossy / lossless), no certificates.  ``workers``: processes
    judging the exact-law runs (:func:`harness.core.forkmap.fork_map`)."""
    owned = baseline_cpu(rs)  # index of a run -> the baseline it owns (its CPU seconds and sequences)
    rows = fork_map(lambda i: exact_verdict(rs.runs[i], table, certifier, owned.get(i, (0.0, 0))), len(rs.runs),
                    workers, chunksize=1) + \
        [real_verdict(rr, table, certifier, rs.real_model) for rr in rs.real_runs] + [von_neumann_verdict(v, table) for v in rs.vn]
    return pd.DataFrame([v.to_row() for v in rows], columns=list(RUN_COLUMNS))


def certifier_for(rs: RunSet, settings, delta: float) -> Certifier:
    """The :class:`Certifier` of a run set: each scenario's tolerances (:func:`harness.verify.epsilon.epsilons_for`),
    the bounds' miss probability ``delta`` each, and ``settings.tv_confidence``."""
    eps = {r.scenario.name: epsilons_for(settings, r.scenario) for r in rs.runs}
    stated = getattr(settings, "stated_confidence", None)  # a round of --until-certified (harness.verify.until)
    return Certifier(eps, epsilons_for(settings), float(delta), float(stated or settings.tv_confidence),
                     float(getattr(settings, "control_epsilon_scale", 1.0)))
