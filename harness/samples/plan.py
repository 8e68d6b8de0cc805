"""The tests of ``verify-samples``: scored mode, two-sample mode, and independence across completions.

Every function returns :class:`harness.verify.battery.TestSpec` s; the command puts all of them in ONE family,
evaluates each at the Bonferroni level and adjusts by Holm (:mod:`harness.verify.family`), so the
family-wise false-alarm rate is ``--alpha`` and each row states the deviation it detects with the
run's power (``min_detectable``; NaN where a test has no planner: the deterministic checks, which
cannot fire under H0, and the duplicate tests, whose power against a shared stream is ~1 once two
completions of a prompt share it).

Scored mode (the target's scores, :mod:`harness.samples.scoring`):
    pit            sequential randomized PIT: pooled, per position, consecutive pairs
                   (:func:`harness.verify.battery.plan_pit_value_tests`, reused as ``pit``/``verify`` run them)
    support        tokens the warped target law gives probability 0 (impossible under H0: p = 0)
    ending         completions that end before max_new_tokens without the EOS token while the recorded
                   controls apply no stop string (truncation the controls do not explain: p = 0); completions
                   the engine ended early against the requested controls (``early_stop``: e.g. an EOS it
                   applied when asked to ignore EOS) form their own row, ``early_stops`` (every mode: p = 0)
    numerics       engine-reported logprobs against the scorer's (not a loss test: |Δ| > tol means the
                   scorer is not scoring the engine's law; blocks a certificate)
    loglik         the log-likelihood martingale (harness/stats/loglik.py: M, V, Q per completion from the scores)
Two-sample mode (no model; both files' tokens):
    tokens         per position, homogeneity of the token law (an "ended" cell for completions already
                   over; cells pooled from the pooled sample only: :func:`harness.stats.chi2_homogeneity`)
    lengths        homogeneity of the completion lengths
    ngram          homogeneity of the first bigram (x_0, x_1); KS of each completion's distinct-bigram share
    logprobs       KS and AD of each completion's mean engine logprob (when both files carry them)
Independence (both modes): duplicate completions of one prompt beyond what the law allows (a shared
random stream, a file holding its completions twice), wherever they sit in the file
(:mod:`harness.stats.collisions`: scored, against the target's probability of each completion; two-sample,
against the pooled files relabelled at random), and the PIT values of paired completions of one prompt at the same position (scored: a
χ² on the grid of (U_i,t, U_j,t), iid uniform under H0) or the share of positions where they agree
(two-sample: KS of one value per pair against the baseline's).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

import numpy as np

from harness import stats
from harness.stats import collisions
from harness.verify.battery import TestRow, TestSpec, plan_pit_value_tests
from harness.samples.format import SampleRecord

__all__ = ["plan_scored", "plan_two_sample", "early_stopped", "early_stop_spec", "early_stop_finding", "prompt_groups", "completion_pairs", "position_cells", "check_row",
           "loglik_terms"]

NAN = float("nan")


def check_row(statistic: float, method: str, **extra):
    """A deterministic check (cannot fire under H0): p = 0 when ``statistic`` > 0, else 1."""
    def ev(alpha, power, delta):
        return TestRow(statistic=float(statistic), pvalue=0.0 if statistic > 0 else 1.0, method=method, **extra)
    return ev


def prompt_groups(records: list[SampleRecord]) -> dict[str, list[int]]:
    """prompt_id -> row indices, in file order."""
    g = defaultdict(list)
    for i, r in enumerate(records):
        g[r.prompt_id].append(i)
    return dict(g)


def completion_pairs(records: list[SampleRecord]) -> list[tuple[int, int]]:
    """Disjoint pairs of completions of one prompt (rows 0-1, 2-3, ... of each group, in file order)."""
    out = []
    for rows in prompt_groups(records).values():
        out += [(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
    return out


def _completion_keys(records: list[SampleRecord]) -> list[tuple]:
    """(prompt token ids, output token ids) of each record: completions of one prompt are grouped by the
    prompt's tokens (not its id), wherever they sit in the file."""
    return [(r.prompt_ids, r.output_ids) for r in records]


def _duplicates_scored(records, scores):
    """Repeats of whole completions of one prompt anywhere in the file, against the target's probability
    of each completion (:func:`harness.stats.collisions.repeat_test`: anytime-valid, exact level)."""
    log_p = np.where(scores.present, scores.logp, 0.0).sum(1)  # (N,) log P(completion) under the target
    keys = _completion_keys(records)
    r = collisions.repeat_test([k[0] for k in keys], [k[1] for k in keys], log_p.tolist())

    def ev(alpha, power, delta):
        return TestRow(statistic=r.statistic, pvalue=r.pvalue, expected=r.expected, observed=r.statistic,
                       n=float(r.n), method=r.method)
    return ev


def _cross_pit(u, present, pairs, m_max: int = 16):
    a = [(i, j) for i, j in pairs]
    if not a:
        return None
    I = np.array([i for i, _ in a])
    J = np.array([j for _, j in a])
    both = present[I] & present[J]  # (P, T)
    x, y = u[I][both], u[J][both]
    n = x.size
    if n < 8:
        return None
    m = stats.pit_pair_bins(n, m_max)
    cell = np.minimum((x * m).astype(np.int64), m - 1) * m + np.minimum((y * m).astype(np.int64), m - 1)
    table = np.bincount(cell, minlength=m * m)

    def ev(alpha, power, delta):
        r = stats.chi2_gof(table, np.full(m * m, 1.0 / (m * m)), alpha=alpha, power=power)
        return TestRow(statistic=r.statistic, pvalue=r.pvalue, min_detectable=r.min_detectable_tv,
                       min_detectable_unit=f"TV on the {m}x{m} grid of paired PIT values", method=r.method,
                       df=float(r.df), n=float(r.n), cells=float(r.n_cells), tv_hat=r.tv_hat)
    return ev


def _logprob_agreement(records, scores, tol: float):
    rows = [i for i, r in enumerate(records) if r.logprobs is not None and r.output_ids]
    if not rows:
        return None, None
    d = np.concatenate([np.abs(np.asarray(records[i].logprobs) - scores.logp[i, :len(records[i].output_ids)])
                        for i in rows])
    d = np.where(np.isfinite(d), d, np.inf)
    summary = {"rows": len(rows), "tokens": int(d.size), "max_abs_diff": float(d.max()),
               "mean_abs_diff": float(d.mean()), "tolerance": tol}
    return check_row(float(d.max() > tol), f"engine logprobs vs scorer: max |diff| {d.max():.3g} "
                     f"(mean {d.mean():.3g}) over {d.size} tokens, tolerance {tol:g} (the scorer's are of the "
                     "warped law; an engine reporting raw-model logprobs differs at T != 1 or under top-k/top-p)",
                     expected=tol, observed=float(d.max()), n=float(d.size)), summary


def loglik_terms(scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per completion, the log-likelihood martingale's M = Σ_t [log p_t(x_t) + H(p_t)], its conditional
    variance V = Σ_t Var_{p_t}(log p_t) and Q = Σ_t (increment)² (:func:`harness.stats.loglik.martingale_test`),
    from the scorer's (N, T) arrays (NaN after a row's end: those terms are absent)."""
    inc = scores.logp + scores.entropy  # (N, T) martingale increments (-inf: a token the law cannot draw)
    sq = np.where(np.isfinite(inc), inc * inc, 0.0)  # (N, T) as harness.stats.loglik.martingale_terms
    return np.nansum(inc, axis=1), np.nansum(scores.var_logp, axis=1), sq.sum(axis=1)


def early_stopped(records: list[SampleRecord]) -> list[int]:
    """Rows the engine ended before max_new_tokens against the requested controls: the records with ``early_stop``
    (the producer saw the engine stop although the request let no token end it).  Other short completions
    (finish_reason 'stop' without it) stay ``unexplained_ends``."""
    return [i for i, r in enumerate(records) if r.early_stop is not None]


def early_stop_finding(records: list[SampleRecord]) -> Optional[str]:
    """One sentence stating the early stops of ``records`` as a violation of the requested controls (None: none)."""
    rows = early_stopped(records)
    if not rows:
        return None
    toks = sorted({records[i].output_ids[-1] for i in rows if records[i].output_ids})
    T = records[rows[0]].controls.max_new_tokens
    return (f"{len(rows)} of {len(records)} completions stopped early (fewer than max_new_tokens = {T} tokens; last "
            f"token(s) {toks}) although the requested controls let no token end a completion (EOS ignored, no stop "
            "string): the engine did not apply the requested controls, so its output is not the requested law "
            "(lossy with respect to it)")


def early_stop_spec(records: list[SampleRecord]) -> Optional[TestSpec]:
    """The ``ending/early_stops`` row (a deterministic rejection) when any completion stopped early against the
    requested controls; None otherwise (the family is unchanged for a file without early stops)."""
    finding = early_stop_finding(records)
    if finding is None:
        return None
    return TestSpec("ending", "early_stops", None, True, check_row(float(len(early_stopped(records))), finding))


def plan_scored(records: list[SampleRecord], scores, eos_token_id: Optional[int],
                logprob_tol: float) -> tuple[list[TestSpec], list[str], Optional[dict]]:
    """(tests, notes, engine-logprob agreement summary) of scored mode, independence included."""
    specs = plan_pit_value_tests(scores.u, loglik=loglik_terms(scores)) if scores.u.shape[1] >= 2 else []
    notes = [] if specs else ["pit: outputs shorter than 2 tokens, no PIT tests"]
    specs.append(TestSpec("support", "impossible_tokens", None, True,
                          check_row(float(scores.impossible.sum()), "tokens of probability 0 under the warped "
                                    "target law (float64 warp of the scorer's logits)")))
    early = set(early_stopped(records))
    bad_end = sum(1 for i, r in enumerate(records) if i not in early and (r.finish_reason == "stop" or
                  (r.finish_reason == "eos" and eos_token_id is not None and r.output_ids[-1] != eos_token_id)))
    specs.append(TestSpec("ending", "unexplained_ends", None, True,
                          check_row(float(bad_end), f"completions ending early with neither EOS ({eos_token_id}) "
                                    "nor a recorded stop string")))
    if early:
        specs.append(early_stop_spec(records))
    agree, summary = _logprob_agreement(records, scores, logprob_tol)
    if agree is not None:
        specs.append(TestSpec("numerics", "engine_logprobs", None, False, agree))
    else:
        notes.append("numerics: the samples carry no engine logprobs; no agreement test")
    if len(records) >= 2:
        specs.append(TestSpec("independence", "duplicates", None, True, _duplicates_scored(records, scores)))
    cross = _cross_pit(scores.u, scores.present, completion_pairs(records))
    if cross is not None:
        specs.append(TestSpec("independence", "paired_completions_pit", None, True, cross))
    else:
        notes.append("independence: fewer than 2 completions per prompt; no paired-completion PIT test")
    return specs, notes, summary


# -------------------------------------------------------------------------------------- two-sample
def position_cells(records: list[SampleRecord], T: int, ended: int) -> np.ndarray:
    """(N, T) the token at each position, ``ended`` after a completion's end."""
    out = np.full((len(records), T), ended, dtype=np.int64)
    for i, r in enumerate(records):
        out[i, :len(r.output_ids)] = r.output_ids[:T]
    return out


def _compact(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts of ``a`` and ``b`` over the values either holds (labels from the pooled sample only)."""
    vals, inv = np.unique(np.concatenate([a, b]), return_inverse=True)
    return np.bincount(inv[:a.size], minlength=vals.size), np.bincount(inv[a.size:], minlength=vals.size)


def _homog(a_vals, b_vals, unit: str):
    ca, cb = _compact(np.asarray(a_vals), np.asarray(b_vals))

    def ev(alpha, power, delta):
        if ca.sum() == 0 or cb.sum() == 0:
            return _no_data(ca.sum(), cb.sum())
        if ca.size < 2:
            return TestRow(statistic=0.0, pvalue=1.0, n=float(ca.sum()), cells=1.0,
                           method="one value in both samples (nothing to compare)")
        r = stats.chi2_homogeneity(ca, cb, alpha=alpha, power=power)
        return TestRow(statistic=r.statistic, pvalue=r.pvalue, min_detectable=r.min_detectable_tv,
                       min_detectable_unit=unit, method=r.method, df=float(r.df), n=float(r.n_a),
                       cells=float(r.n_cells), tv_hat=r.tv_hat)
    return ev


def _no_data(n_a, n_b) -> TestRow:
    """A two-sample test with an empty arm: no evidence, no rejection (p = 1)."""
    return TestRow(statistic=0.0, pvalue=1.0, n=float(n_a),
                   method=f"no data in one arm ({int(n_a)} vs {int(n_b)} values): nothing to compare")


def _two_sample_continuous(x, y, which: str):
    def ev(alpha, power, delta):
        if len(x) == 0 or len(y) == 0:
            return _no_data(len(x), len(y))
        r = (stats.ks_2samp if which == "ks" else stats.ad_2samp)(x, y, alpha=alpha, power=power)
        return TestRow(statistic=r.statistic, pvalue=r.pvalue, min_detectable=r.min_detectable_distance,
                       min_detectable_unit="Kolmogorov distance", method=r.method, n=float(len(x)))
    return ev


def _distinct_bigram_share(r: SampleRecord) -> float:
    o = r.output_ids
    if len(o) < 2:
        return 1.0
    return len(set(zip(o[:-1], o[1:]))) / (len(o) - 1)


def _duplicates_two_sample(a, b):
    """Identical completions of one prompt within the file under test, anywhere in it, against the pooled
    files relabelled at random (:func:`harness.stats.collisions.within_collision_test`); prompts missing
    from either file carry no evidence (a test without data in one arm does not reject)."""
    r = collisions.within_collision_test(_completion_keys(a), _completion_keys(b))

    def ev(alpha, power, delta):
        return TestRow(statistic=r.statistic, pvalue=r.pvalue, observed=r.statistic, expected=r.expected,
                       n=float(r.n), method=r.method)
    return ev


def _match_share(cells: np.ndarray, pairs) -> list[float]:
    """Per pair of completions of one prompt, the share of positions where both hold the same cell (one
    value per pair: pairs are independent, positions within a pair are not)."""
    return [float((cells[i] == cells[j]).mean()) for i, j in pairs]


def _check_same_prompts(a, b) -> None:
    def multiset(rs):
        c = defaultdict(int)
        for r in rs:
            c[r.prompt_ids] += 1
        return c
    ca, cb = multiset(a), multiset(b)
    if set(ca) != set(cb):
        raise ValueError(f"`--baseline` must hold the same prompts as `--samples`; {len(set(ca) ^ set(cb))} "
                         "prompt(s) appear in only one of them")


def plan_two_sample(a: list[SampleRecord], b: list[SampleRecord], T: int, vocab_size: int) -> tuple[list[TestSpec], list[str]]:
    """(tests, notes) of two-sample mode, independence included; ``a`` under test, ``b`` the baseline."""
    _check_same_prompts(a, b)
    notes = []
    if any(sum(1 for r in a if r.prompt_ids == p) != sum(1 for r in b if r.prompt_ids == p)
           for p in {r.prompt_ids for r in a}):
        notes.append("the two files hold different numbers of completions per prompt: their position laws are "
                     "different mixtures over prompts, so a rejection may reflect the prompt mix")
    ca, cb = position_cells(a, T, vocab_size), position_cells(b, T, vocab_size)
    specs = [TestSpec("tokens", "position", t, True, _homog(ca[:, t], cb[:, t], "TV of the position's token law"))
             for t in range(T)]
    if early_stop_spec(a) is not None:
        specs.append(early_stop_spec(a))
    if early_stopped(b):
        notes.append(f"the baseline: {early_stop_finding(b)}")
    specs.append(TestSpec("lengths", "length", None, True, _homog([len(r.output_ids) for r in a],
                                                                  [len(r.output_ids) for r in b], "TV of lengths")))
    if T >= 2:
        big = vocab_size + 1
        specs.append(TestSpec("ngram", "first_bigram", None, True,
                              _homog(ca[:, 0] * big + ca[:, 1], cb[:, 0] * big + cb[:, 1], "TV of (x_0, x_1)")))
    specs.append(TestSpec("ngram", "distinct_bigram_share", None, True, _two_sample_continuous(
        [_distinct_bigram_share(r) for r in a], [_distinct_bigram_share(r) for r in b], "ks")))
    if all(r.logprobs is not None and r.output_ids for r in a + b):
        x = [float(np.mean(r.logprobs)) for r in a]
        y = [float(np.mean(r.logprobs)) for r in b]
        specs += [TestSpec("logprobs", "mean_logprob_ks", None, True, _two_sample_continuous(x, y, "ks")),
                  TestSpec("logprobs", "mean_logprob_ad", None, True, _two_sample_continuous(x, y, "ad"))]
    else:
        notes.append("logprobs: not carried by every completion of both files; no KS/AD on logprobs")
    specs.append(TestSpec("independence", "duplicates", None, True, _duplicates_two_sample(a, b)))
    ma, mb = _match_share(ca, completion_pairs(a)), _match_share(cb, completion_pairs(b))
    if ma and mb:
        specs.append(TestSpec("independence", "paired_completions_agreement", None, True,
                              _two_sample_continuous(ma, mb, "ks")))
    else:
        notes.append("independence: fewer than 2 completions per prompt; no paired-completion agreement test")
    return specs, notes

