"""The statistics of the verification battery: tests, their planners, bounds and error budget.

Notation (declared once)
------------------------
* ``P`` — the exact target law (probabilities ``probs``); ``Q`` — the law of the sampler under test;
  ``Q̂`` — the empirical law of ``n`` draws (``counts / n``).
* ``TV(Q, P) = ½ Σ |Q − P|``; ``w² = Σ (Q − P)² / P`` (Cohen's effect size, ``w² ≥ 4 TV²`` by
  Cauchy–Schwarz); Kolmogorov distance ``sup |F_Q − F_P|`` (≤ TV).
* ``alpha`` — the false-alarm rate of *one* test (split a family budget with :func:`split_budget`);
  ``power`` — the wanted probability of rejecting when the deviation is at least the planned one
  (``beta = 1 − power``).

Every test returns a small frozen dataclass with ``statistic``, ``pvalue`` and named extras, in
scipy's manner, and carries its *planning* figure: the smallest deviation it detects with
probability ``power`` at level ``alpha`` and its sample size.  Each test has two planners —
deviation for ``n`` and ``n`` for a deviation — that ``tests/stats/test_stats.py`` checks against each
other.  Randomness is injected (``numpy.random.Generator`` / ``torch.Generator`` or integer seeds).

What scipy provides is taken from scipy (χ², noncentral χ², KS, exact binomial test and its
Clopper–Pearson interval, ``optimize.brentq``); what it does not is written here and tested: pooling,
the planners, the TV bounds, Holm, the Anderson–Darling limiting law's tail below 0.001 and the
two-sample midrank A².

Modules (``from harness import stats`` keeps every public name of the first nine)
-------
    common      defaults (alpha 1e-4, power 0.99), argument checks      results    the frozen results
    chi2        χ² / G goodness of fit, homogeneity, their planners      continuous KS, AD, DKW planners
    pit         randomized PIT and its tests                             bounds     TV and Kolmogorov bounds
    binomial    acceptance counts, Clopper–Pearson                       multiple   Holm, budgets, false alarms
    vonneumann  the von Neumann sampler's verification
    eprocess    anytime-valid mixture e-processes     loglik  whole-sequence log-likelihood tests
    lagged      lagged PIT pairs and joints
    search      the planners' one integer search (smallest n: exponential, then bisection)
    crossu      the χ²-type (cross U-statistic + Bernstein) finite-sample TV bound, width ~ k^(1/4)/√n
    collisions  identical completions anywhere in a sample (scored e-process, two-sample Chernoff bound)
    rbtv        token TV of one generation step from the engine's own prefixes (Rao–Blackwellised marginal)
    worstevent  the plug-in TV plus one event's exact binomial deviation: a finite-sample TV bound on any number of cells

Contents
--------
* χ² / G goodness of fit with cells pooled from the expected probabilities alone, asymptotic or
  Monte Carlo null (:func:`chi2_gof`, :func:`pool_cells`, :func:`chi2_null_statistics`);
  planners :func:`chi2_min_detectable_tv`, :func:`chi2_n_for_tv` (noncentral χ²).
* Two-sample χ² homogeneity (:func:`chi2_homogeneity`) and its planners.
* Kolmogorov–Smirnov and Anderson–Darling, one- and two-sample (:func:`ks_1samp`, :func:`ks_2samp`,
  :func:`ad_1samp`, :func:`ad_2samp`); DKW planners.
* Randomized PIT (:func:`randomized_pit`, :func:`pit_from_probs`) and its tests: pooled, per position,
  consecutive pairs (:func:`pit_pair_test`).
* Certified upper confidence bounds on TV (:func:`tv_upper_bound`, :func:`tv_upper_bound_ncx2`) and on
  the Kolmogorov distance of PIT values (:func:`kolmogorov_upper_bound`).
* Exact binomial test of an acceptance count (:func:`binomial_test`) and its planners (the accepted-length
  histogram is a :func:`chi2_gof` against its exact law).
* Multiple testing (:func:`holm`, hand-written: scipy has none; :func:`split_budget`) and a simulator of
  any test's false-alarm rate (:func:`false_alarm_rate`).  Benjamini–Hochberg is
  ``scipy.stats.false_discovery_control``.
* The von Neumann sampler's verification (:func:`verify_von_neumann`).


May import: :mod:`harness.core` (and ``specimpl.errors``).
"""
from harness.stats.common import *  # noqa: F401,F403
from harness.stats.results import *  # noqa: F401,F403
from harness.stats.chi2 import *  # noqa: F401,F403
from harness.stats.continuous import *  # noqa: F401,F403
from harness.stats.pit import *  # noqa: F401,F403
from harness.stats.bounds import *  # noqa: F401,F403
from harness.stats.crossu import *  # noqa: F401,F403
from harness.stats.events import *  # noqa: F401,F403
from harness.stats.worstevent import *  # noqa: F401,F403
from harness.stats.rbtv import *  # noqa: F401,F403
from harness.stats.binomial import *  # noqa: F401,F403
from harness.stats.multiple import *  # noqa: F401,F403
from harness.stats.vonneumann import *  # noqa: F401,F403
from harness.stats.common import DEFAULT_ALPHA, DEFAULT_MIN_EXPECTED, DEFAULT_POWER  # noqa: F401
