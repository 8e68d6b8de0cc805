""":func:`assert_lossless`: the verdict as a test outcome, for a user's own test suite.

    certified     returns the :class:`harness.api.result.Verification`
    lossy         raises :class:`Lossy` (an AssertionError) naming the scenario, the estimated loss with its
                  interval, where it is (test, position) and the tokens that carry it
    inconclusive  ``on_inconclusive="raise"`` (default): raises :class:`Inconclusive` (an AssertionError too,
                  but a different class: catch it apart from :class:`Lossy`), saying how many draws would
                  certify; ``"skip"`` / ``"xfail"``: ``pytest.skip`` / ``pytest.xfail`` with that message (when
                  pytest is importable; otherwise :class:`Inconclusive`)

Both exceptions are AssertionErrors because both mean "losslessness was not shown": a test suite must not
pass on either.  A lossy verdict is a finding about the sampler; an inconclusive one is about the size of
the run (more draws, or a looser ε, decide it).
"""
from __future__ import annotations

from typing import Literal, Union

from harness.api.result import Verification
from harness.api.sampler import verify_sampler
from harness.core.options import check_option
from harness.verify.runs import UNDER_TEST

__all__ = ["assert_lossless", "Lossy", "Inconclusive", "ControlsFailed"]

OnInconclusive = Literal["raise", "skip", "xfail"]


class Lossy(AssertionError):
    """The sampler was judged lossy: a loss test rejected (family-wise false-alarm rate ≤ ``family_alpha``).
    ``result``: the :class:`Verification`."""

    def __init__(self, message: str, result: Verification):
        super().__init__(message)
        self.result = result


class Inconclusive(AssertionError):
    """Nothing rejected, but not every TV bound fell below its ε: the run was too small to certify.
    ``result``: the :class:`Verification` (its ``certify_draws`` says how many draws would)."""

    def __init__(self, message: str, result: Verification):
        super().__init__(message)
        self.result = result


class ControlsFailed(AssertionError):
    """With ``controls=True``: a bug control was not caught or a lossless control not certified; the battery
    itself did not behave, so the sampler's verdict is not trusted."""

    def __init__(self, message: str, result: Verification):
        super().__init__(message)
        self.result = result


def assert_lossless(fn_or_result, *, on_inconclusive: OnInconclusive = "raise", **kwargs) -> Verification:
    """Assert that a sampler is lossless: return its certified :class:`Verification`, else raise.

    ``fn_or_result``: a sampler (then ``kwargs`` go to :func:`harness.api.verify_sampler`: scenarios, epsilon,
    budget_s, draws, ...) or a :class:`Verification` already computed.  Raises :class:`Lossy` for lossy,
    :class:`Inconclusive` (or skips / xfails, per ``on_inconclusive``) for inconclusive, :class:`ControlsFailed`
    when controls ran and misbehaved; all three are AssertionErrors.
    """
    check_option(on_inconclusive in ("raise", "skip", "xfail"), "on_inconclusive", on_inconclusive,
                 "'raise', 'skip' or 'xfail'")
    res = fn_or_result if isinstance(fn_or_result, Verification) else verify_sampler(fn_or_result, **kwargs)
    _check_controls(res)
    if res.verdict == "lossy":
        raise Lossy(_lossy_message(res), res)
    if res.verdict == "inconclusive":
        _inconclusive(res, on_inconclusive)
    return res


def _check_controls(res: Verification) -> None:
    ctl = res.runs[~res.runs.role.isin(UNDER_TEST)]
    bad = ctl[~ctl.passed.astype(bool)]
    if len(bad):
        names = ", ".join(f"{r.run} ({r.role}, {r.verdict})" for r in bad.head(5).itertuples())
        raise ControlsFailed(f"{len(bad)} bug control(s) did not behave as their role requires: {names}; the "
                             "battery's verdict on the sampler is not trusted", res)


def _lossy_message(res: Verification) -> str:
    loss = f": {res.tv_hat}" if res.tv_hat is not None else ""
    alpha = res.meta.get("config", {}).get("family_alpha", "family_alpha")
    return (f"{res.sampler or 'the sampler'} is lossy{loss}; rejected by {res.caught_by or 'a loss test'} "
            f"(interval at simultaneous confidence {res.confidence:g}; family-wise false-alarm rate <= {alpha}; "
            f"{res.draws:,} draws per scenario, seed {res.seed})")


def _inconclusive(res: Verification, how: str) -> None:
    need = (f"; about {res.certify_draws:,} draws per scenario would certify a lossless sampler (draws="
            f"{res.certify_draws})") if res.certify_draws else ""
    msg = f"{res.sampler or 'the sampler'}: {res.headline()}{need}"
    if how != "raise":
        try:
            import pytest
        except ImportError:
            pytest = None
        if pytest is not None:
            (pytest.skip if how == "skip" else pytest.xfail)(msg)
    raise Inconclusive(msg, res)
