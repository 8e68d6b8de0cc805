"""Dependence between the completions of a sample file: the stage of ``verify-samples`` that can see it.

The certificate bounds each position's *marginal* token law; it assumes the N completions are independent
draws given their prompt and controls (H0 here).  A file that breaks that assumption — completions copied
under new request ids, the ``n`` completions of one request drawn from one seed, rows that share a random
stream — can have exactly the target's marginals while holding far less information than N draws, and the
certificate's stated confidence is then false.  Two tests, run on every file in every mode, each at
``level / 2`` (Bonferroni; ``level`` = ``--dependence-alpha``, default :data:`LEVEL` = 1e-3):

``duplicates``  completions that repeat an earlier completion of the same prompt (grouped by the prompt's
    tokens, anywhere in the file), against the probability the law gives a repeat.  Exact mode: the
    law's probability of each completion, exact (a Markov target: the whole completion; an enumerated
    target: its first J tokens, the part whose joint law is enumerated — a duplicate whole completion
    repeats its J-prefix too); scored mode: the target's score of each completion.  Both run
    :func:`harness.stats.collisions.repeat_test`'s e-process (a mixture likelihood ratio of "repeats at
    K times the H0 rate", p = 1/sup E by Ville's inequality: valid at any file size, no approximation),
    computed here vectorised (:func:`repeat_walk`, :func:`repeat_pvalue`) so the planner can re-run it.
    Two-sample mode (no law): identical pairs within the file against the pooled files relabelled at
    random (:func:`harness.stats.collisions.within_collision_test`, a Chernoff bound; no planner).
``siblings``    agreement of *designated pairs*: completions that share a (non-null) seed, the ``-n<i>``
    completions of one request (vLLM's ``n > 1`` ids), else neighbours in file order (the rows of one
    batch), paired disjointly in that priority.  Statistic: the positions where the two completions hold
    the same token, summed over the pairs.  Under H0 the completions of one prompt are exchangeable, so
    the statistic's null law is that of the completions permuted at random within each prompt: a Monte
    Carlo permutation test with Besag & Clifford's (1991) sequential stopping (stop after :data:`H`
    permutations at or above the observed value, p = H / r; else p = (e + 1) / (R + 1) after
    R = :func:`resamples` permutations, the fewest whose smallest p reaches the test's level): exact level
    in every mode, no model needed.

Planner, stated on every run (what the file's size lets the stage see with probability :data:`POWER`):

* duplicates: the share ``f`` of completions that are copies of an earlier completion of their prompt
  (under new ids, at random places) detected with probability 0.95 — simulated on the file's own walk
  (the H0 probability of a repeat at each step as observed; each step turned into a repeat with
  probability f; :data:`PLAN_SIMS` simulations per f on a log grid; the smallest f reaching 0.95);
* siblings: the share ``rho`` of designated pairs that share one random stream (identical completions)
  detected with probability 0.95 — normal approximation of the permutation law (its mean and standard
  deviation from the permutations drawn): rho = (z_(1-level/2) + z_0.95) sd / (pairs * (L - a)), L the
  mean positions compared per pair, a the mean agreement of a permuted pair.

A finding (either p <= its level) makes the verdict *lossy* (exit 1): the file is not N independent draws
of the target law, which is what H0 and the certificate claim (docs/engines.md argues the choice).
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

from harness.stats.collisions import within_collision_test

__all__ = ["LEVEL", "POWER", "DependenceResult", "TestResult", "check", "apply", "exact_completion_log_probs",
           "designated_pairs", "sibling_test", "copy_walk", "copy_pvalue", "duplicate_test", "resamples"]

LEVEL = 1e-3  # false-alarm rate of the whole stage per file (two tests at LEVEL / 2 each, Bonferroni)
POWER = 0.95  # the planner's detection probability
H = 20  # Besag-Clifford: stop after H permutations at or above the observed statistic
PLAN_SIMS = 20  # simulations per copy share in the duplicates planner (detected in >= 19 of 20)
PLAN_GRID = tuple(10.0 ** (e / 4) for e in range(-20, 1))  # copy shares f the planner tries, 1e-5 .. 1
COPY_SHARES = tuple(2.0 ** -e for e in range(1, 21))  # the f of the copy e-process's mixture, 1/2 .. 2^-20
_STEM = re.compile(r"^(.*)-n\d+$")  # vLLM's ids of the n completions of one request: "<rid>-n<c>"


@dataclass(frozen=True)
class TestResult:
    """One test of the stage: ``statistic`` observed, ``expected`` under H0, ``pvalue``, ``level`` its share of
    the stage's false-alarm rate, ``detects`` the planner's figure (NaN: no planner), ``what`` the sentence."""

    name: str
    statistic: float
    expected: float
    pvalue: float
    level: float
    detects: float
    n: int
    what: str
    method: str

    @property
    def found(self) -> bool:
        return self.pvalue <= self.level


@dataclass(frozen=True)
class DependenceResult:
    level: float
    tests: tuple

    @property
    def finding(self) -> Optional[str]:
        """The sentence naming what was found (None: nothing)."""
        hits = [t.what + f"; p = {t.pvalue:.2g} <= {t.level:.2g}" for t in self.tests if t.found]
        return ("dependent completions: " + "; ".join(hits)) if hits else None

    def line(self) -> str:
        """The console line: the finding, or what the stage would have seen at this size."""
        if self.finding:
            return f"{self.finding} (stage false-alarm rate {self.level:g})"
        plan = "; ".join(f"{t.name}: {_plan_text(t)}" for t in self.tests)
        return f"dependence: none found at {self.level:g} ({plan})"

    def to_json(self) -> dict:
        return {"level": self.level, "finding": self.finding, "line": self.line(),
                "tests": [{k: getattr(t, k) for k in ("name", "statistic", "expected", "pvalue", "level", "detects",
                                                      "n", "what", "method")} for t in self.tests]}


def _plan_text(t: TestResult) -> str:
    if not math.isfinite(t.detects):
        return f"p = {t.pvalue:.2g}, no planner"
    unit = "of completions copied" if t.name == "duplicates" else "of designated pairs sharing a stream"
    if t.detects > 1:
        return f"p = {t.pvalue:.2g}; at this size no share {unit} is detected with probability {POWER:g}"
    return f"p = {t.pvalue:.2g}; detects {100 * t.detects:.3g} % {unit} with probability {POWER:g}"


# ------------------------------------------------------------------------------------------------ duplicates
def _cumcount(a: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries hold the same value."""
    order = np.argsort(a, kind="stable")
    sa = a[order]
    idx = np.arange(a.size)
    start = np.maximum.accumulate(np.where(np.r_[True, sa[1:] != sa[:-1]], idx, 0))
    out = np.empty(a.size, np.int64)
    out[order] = idx - start
    return out


def _ids(groups, values) -> tuple[np.ndarray, np.ndarray]:
    """(group id, (group, value) id) per completion, as integers."""
    gi, vi = {}, {}
    g = np.fromiter((gi.setdefault(x, len(gi)) for x in groups), np.int64)
    v = np.fromiter((vi.setdefault((x, y), len(vi)) for x, y in zip(groups, values)), np.int64)
    return g, v


def _walk(gid: np.ndarray, vid: np.ndarray, lp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`copy_walk` on integer ids (vectorised)."""
    k, c = _cumcount(gid), _cumcount(vid)  # earlier completions of the group; earlier equal ones
    step = k > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.where(c > 0, np.log(np.maximum(c, 1)) - np.log(np.maximum(k, 1)) - lp, -np.inf)
        w = np.where(c == 0, np.exp(lp), 0.0)  # a new value adds its probability to the group's seen mass
        order = np.argsort(gid, kind="stable")
        excl = np.cumsum(w[order]) - w[order]  # mass seen before each completion, running over the groups in turn
        sg = gid[order]
        first = np.maximum.accumulate(np.where(np.r_[True, sg[1:] != sg[:-1]], np.arange(gid.size), 0))
        seen = np.empty(gid.size)
        seen[order] = excl - excl[first]
        log_pi = np.log(np.clip(seen, 0.0, 1.0))
    return log_ratio[step], log_pi[step], (c > 0)[step]


def copy_walk(groups, values, log_probs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over each completion after the first of its group, in file order: log ratio_j = log c_j - log (j - 1) -
    log P(x_j) (c_j the earlier completions of the group equal to x_j, j - 1 all earlier ones; -inf when c_j = 0),
    log pi_j (the H0 probability that x_j repeats an earlier value: the mass of the distinct values seen) and
    repeat_j (c_j > 0)."""
    gid, vid = _ids(list(groups), list(values))
    return _walk(gid, vid, np.asarray(log_probs, dtype=np.float64))


def copy_pvalue(log_ratio: np.ndarray) -> float:
    """p = min(1, 1 / sup E), E the average over f in :data:`COPY_SHARES` of the products of the likelihood ratios
    (1 - f) + f ratio_j of "each completion is, with probability f, a copy of a uniformly random earlier completion
    of its prompt" against H0: each product is a non-negative martingale of mean 1 under H0 (the ratio's H0 mean is
    sum_x c_x / (j - 1) = 1), so is their average, and Ville's inequality makes p valid at any file size."""
    if not len(log_ratio):
        return 1.0
    f = np.asarray(COPY_SHARES)[None, :]  # (1, F)
    with np.errstate(over="ignore"):
        step = np.logaddexp(np.log1p(-f), np.log(f) + log_ratio[:, None])  # (S, F) log((1 - f) + f ratio)
    path = logsumexp(np.cumsum(step, axis=0), axis=1) - math.log(f.size)
    return float(min(1.0, math.exp(-max(0.0, float(np.max(path))))))


def _with_copies(gid: np.ndarray, vid: np.ndarray, lp: np.ndarray, f: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """(vid, lp) with each completion after the first of its prompt replaced, with probability f, by a copy of a
    uniformly random earlier completion of the prompt (the planner's alternative; a copy of a copy copies its
    source: pointers followed to the root)."""
    k = _cumcount(gid)
    order = np.argsort(gid, kind="stable")
    pos = np.empty(gid.size, np.int64)
    pos[order] = np.arange(gid.size)
    copy = (k > 0) & (rng.random(gid.size) < f)
    src = order[pos - k + np.floor(rng.random(gid.size) * np.maximum(k, 1)).astype(np.int64)]  # an earlier one
    root = np.where(copy, src, np.arange(gid.size))
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    return vid[root], lp[root]


def _plan_copies(keys: list, log_probs, level: float, seed: int = 0) -> float:
    """The smallest copy share f of :data:`PLAN_GRID` whose copies, inserted into this file at random places, give
    p <= level in >= :data:`POWER` of :data:`PLAN_SIMS` simulations (bisection over the grid, detection taken as
    increasing in f); inf: not even f = 1."""
    rng = np.random.default_rng(seed)
    gid, vid = _ids([k[0] for k in keys], [k[1] for k in keys])
    lp = np.asarray(log_probs, dtype=np.float64)

    def detects(f: float) -> bool:
        hits = 0
        for s in range(PLAN_SIMS):
            v, l = _with_copies(gid, vid, lp, f, rng)
            hits += copy_pvalue(_walk(gid, v, l)[0]) <= level
            if hits >= POWER * PLAN_SIMS or hits + PLAN_SIMS - s - 1 < POWER * PLAN_SIMS:
                break
        return hits >= POWER * PLAN_SIMS
    lo, hi = 0, len(PLAN_GRID) - 1
    if not detects(PLAN_GRID[hi]):
        return math.inf
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if detects(PLAN_GRID[mid]) else (mid + 1, hi)
    return PLAN_GRID[lo]


def duplicate_test(keys: list, log_probs: list, level: float, plan: bool = True) -> TestResult:
    """Copies of completions of one prompt (``keys``: (prompt, value) per completion, in file order) against the
    law's log-probability of each value (natural log): :func:`copy_pvalue` on :func:`copy_walk`."""
    log_ratio, log_pi, rep = copy_walk([k[0] for k in keys], [k[1] for k in keys], log_probs)
    p = copy_pvalue(log_ratio)
    expected = float(np.exp(log_pi).sum())
    n = len(keys)
    what = (f"{int(rep.sum()):,} of {n:,} completions repeat an earlier completion of the same prompt; "
            f"{expected:.4g} expected under independence")
    return TestResult("duplicates", float(rep.sum()), expected, p, level,
                      _plan_copies(keys, log_probs, level) if plan else math.nan, n, what,
                      f"likelihood-ratio e-process of 'a share f of completions copy an earlier one', mixed over "
                      f"f in {{2^-1..2^-{len(COPY_SHARES)}}}, p = 1/sup E (Ville); H0 probabilities from the law")


def duplicate_test_two_sample(a_keys: list, b_keys: list, level: float) -> TestResult:
    """Identical pairs within the file against the pooled files relabelled (no law; no planner)."""
    r = within_collision_test(a_keys, b_keys)
    what = (f"{int(r.statistic):,} identical pairs among the completions of one prompt; {r.expected:.3g} expected "
            "when the two files' completions are relabelled at random")
    return TestResult("duplicates", r.statistic, r.expected, r.pvalue, level, math.nan, len(a_keys), what, r.method)


def exact_completion_log_probs(laws, rows: np.ndarray, toks: np.ndarray) -> tuple[list, np.ndarray]:
    """(values, log P(value)) per completion under an exact law (:class:`harness.samples.exact.ExactLaws`): a Markov
    law, the whole completion (chain rule from its pair and position laws); an enumerated one, the first J tokens
    (its J-window's joint law)."""
    V, N = laws.vocab_size, len(toks)
    with np.errstate(divide="ignore"):
        if laws.kind == "markov":
            T = toks.shape[1]
            lp = np.log(laws.marginals[rows, 0, toks[:, 0]])  # (N,)
            for t in range(T - 1):
                lp += (np.log(laws.pairs[rows, t, toks[:, t] * V + toks[:, t + 1]])
                       - np.log(laws.marginals[rows, t, toks[:, t]]))
            return [tuple(x) for x in toks.tolist()], lp
        J = laws.window
        code = np.zeros(N, np.int64)
        for t in range(J):
            code = code * V + toks[:, t]
        return [tuple(x) for x in toks[:, :J].tolist()], np.log(laws.windows[0][rows, code])


# ------------------------------------------------------------------------------------------------ siblings
def designated_pairs(records) -> tuple[list, dict]:
    """Disjoint pairs of row indices, in priority: completions sharing a non-null seed, the ``-n<i>`` completions
    of one request, neighbours in file order; and how many pairs each rule gave."""
    used, pairs, counts = set(), [], {}

    def take(groups: dict, name: str):
        k = 0
        for rows in groups.values():
            free = [i for i in rows if i not in used]
            for a, b in zip(free[0::2], free[1::2]):
                pairs.append((a, b)), used.update((a, b))
                k += 1
        counts[name] = k
    seeds, stems = defaultdict(list), defaultdict(list)
    for i, r in enumerate(records):
        if r.controls.seed is not None:
            seeds[r.controls.seed].append(i)
        m = _STEM.match(r.request_id)
        if m:
            stems[m.group(1)].append(i)
    take(seeds, "same seed")
    take(stems, "same request")
    take({0: list(range(len(records)))}, "file neighbours")  # the free rows in file order, paired as they come
    return pairs, counts


def resamples(level: float) -> int:
    """R: the fewest permutations whose smallest p-value, 1 / (R + 1), is <= ``level``."""
    return max(H, math.ceil(1 / level) - 1)


def _agreement(toks: np.ndarray, a: np.ndarray, b: np.ndarray, perm: np.ndarray) -> int:
    """Positions where rows perm[a] and perm[b] hold the same token (pad -1 never agrees)."""
    x, y = toks[perm[a]], toks[perm[b]]  # (m, T) each
    return int(((x == y) & (x >= 0)).sum())


def sibling_test(records, level: float, seed: int = 0) -> TestResult:
    """The designated pairs' agreement against within-prompt permutations (module docstring)."""
    pairs, counts = designated_pairs(records)
    n = len(records)
    T = max((len(r.output_ids) for r in records), default=0)
    toks = np.full((n, max(T, 1)), -1, np.int64)
    for i, r in enumerate(records):
        toks[i, :len(r.output_ids)] = r.output_ids
    if not pairs or T == 0:
        return TestResult("siblings", 0.0, 0.0, 1.0, level, math.nan, 0, "no pair of completions to compare",
                          "none")
    a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    ident = np.arange(n)
    obs = _agreement(toks, a, b, ident)
    index: dict = {}
    group = np.array([index.setdefault(r.prompt_ids, len(index)) for r in records])
    order0 = np.argsort(group, kind="stable")
    rng = np.random.default_rng(seed)
    R, sims, e = resamples(level), [], 0
    while len(sims) < R and e < H:
        perm = np.empty(n, np.int64)
        perm[order0] = np.lexsort((rng.random(n), group))  # a random permutation within each prompt
        sims.append(_agreement(toks, a, b, perm))
        e += sims[-1] >= obs
    p = e / len(sims) if e >= H else (e + 1) / (R + 1)
    mu, sd = float(np.mean(sims)), float(np.std(sims, ddof=1)) if len(sims) > 1 else 0.0
    L = float(np.minimum((toks[a] >= 0).sum(1), (toks[b] >= 0).sum(1)).mean())  # positions compared per pair
    m = len(pairs)
    z = norm.isf(level) + norm.isf(1 - POWER)
    rho = z * sd / (m * (L - mu / m)) if L > mu / m else math.inf
    rules = ", ".join(f"{k} {v:,}" for k, v in counts.items() if v)
    what = (f"{m:,} designated pairs of completions ({rules}) agree at {obs:,} positions; {mu:.4g} expected when "
            f"completions are permuted within each prompt (sd {sd:.3g}, z = {(obs - mu) / sd if sd else math.inf:.3g})")
    return TestResult("siblings", float(obs), mu, float(p), level, float(rho), m, what,
                      f"within-prompt permutation test, Besag-Clifford sequential (h = {H}, at most {R} "
                      f"permutations; {len(sims)} drawn)")


# ------------------------------------------------------------------------------------------------ the stage
def check(records, level: float = LEVEL, *, keys=None, log_probs=None, baseline_keys=None,
          plan: bool = True) -> DependenceResult:
    """Both tests at ``level / 2``: duplicates against the law (``keys`` (prompt, value) and ``log_probs`` per
    record: exact or scored mode) or against the baseline (``baseline_keys``: two-sample mode), and siblings."""
    each = level / 2
    if keys is None:
        keys = [(r.prompt_ids, r.output_ids) for r in records]
    if log_probs is not None:
        dup = duplicate_test(keys, list(map(float, log_probs)), each, plan)
    else:
        dup = duplicate_test_two_sample(keys, baseline_keys or [], each)
    return DependenceResult(level, (dup, sibling_test(records, each)))


def apply(certificate, dep: DependenceResult):
    """The certificate with a dependence finding: *lossy* (unchanged when nothing was found).  The finding is the
    first reason of a file whose marginals passed, and comes after the marginal tests' reasons of a file already
    lossy (the duplicates test reads the target's law, so a lossy law can set it off too: the marginals say more)."""
    if dep.finding is None:
        return certificate
    reasons = ((*certificate.reasons, dep.finding) if certificate.verdict == "lossy" else (dep.finding,))
    return replace(certificate, verdict="lossy", reasons=reasons)
