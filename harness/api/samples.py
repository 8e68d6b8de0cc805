""":func:`verify_samples`: is my engine's output the target's law?  ``verify-samples`` from Python.

The command's core (:func:`harness.samples.verify_cli.verify_samples`) on a sample file
(``specverify.samples/1``, written by ``python -m harness sample`` or your own producer), in one of its
three modes: scored (``target``: the target scores every output token), exact (``target`` and ``exact=True``:
the target's law enumerated in float64, for small-vocabulary models) or two-sample (``baseline``: a file of
the same prompts and controls with speculation off).  The verdict is the command's certificate
(:mod:`harness.samples.certificate`), with the same three words as :func:`harness.api.verify_sampler`.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import pandas as pd

from harness.api.result import Verdict
from harness.core.errors import UsageError
from harness.core.models import resolve_model
from harness.core.options import check_option
from harness.samples.report import write_report
from harness.core.outdir import claim_out
from harness.samples.verify_cli import add_arguments, advice, check_args, verify_samples as _verify_samples

__all__ = ["verify_samples", "SamplesVerification"]


@dataclass(frozen=True)
class SamplesVerification:
    """The outcome of :func:`verify_samples`: ``verdict`` (certified / lossy / inconclusive), ``epsilon`` (per
    position), ``confidence`` (simultaneous, of the per-position bounds), ``mode`` (scored, exact, two-sample),
    ``tests`` (the rows of ``tests.csv``), ``completions``, ``reasons`` (why not certified), ``certify_completions``
    (completions at which the bounds would certify; None when not planned), ``headline`` (the command's line),
    ``notes`` and ``info`` (what the report's meta.json holds), ``out`` (report folder or None)."""

    verdict: Verdict
    epsilon: float
    confidence: float
    mode: str
    tests: pd.DataFrame
    completions: int
    reasons: tuple
    certify_completions: Optional[int]
    headline: str
    notes: tuple = ()
    info: dict = field(default_factory=dict, repr=False)
    out: Optional[Path] = None

    @property
    def passed(self) -> bool:
        return self.verdict == "certified"

    def __str__(self) -> str:
        return f"verify-samples ({self.mode}, {self.completions:,} completions): {self.headline}"


def verify_samples(path: Union[str, Path], *, target: Optional[str] = None, epsilon: float = 0.05,
                   baseline: Optional[Union[str, Path]] = None, exact: bool = False, alpha: Optional[float] = None,
                   seed: int = 0, out: Optional[Union[str, Path]] = None, progress: bool = False) -> SamplesVerification:
    """Judge the sample file ``path`` against ``target`` (a model path or name) or against ``baseline``.

    path       the sample file under test
    target     scored mode: the target model that scores every output token (exclusive with ``baseline``): a
               model folder, a cached hub id or a shipped short name (``tiny``, ``exact``, ``exact-markov``, ...:
               ``python -m harness models`` lists them), as ``--target`` takes
    epsilon    tolerance of the per-position certificate (default 0.05)
    baseline   two-sample mode: a sample file of the same prompts and controls with speculation off
    exact      with ``target``: test against its exact law, enumerated in float64 (small-vocabulary models)
    alpha      family-wise false-alarm budget (default: default.toml's)
    seed       seed of the randomized PIT's uniforms
    out        report folder (tests.csv, summary.md, meta.json); None: nothing written
    progress   show progress bars

    Raises ValueError naming the argument (bad input, a file the command refuses), and
    :class:`harness.core.errors.SamplerError` when the target fails to score.
    """
    check_option(isinstance(epsilon, (int, float)) and 0 < epsilon < 1, "epsilon", epsilon, "a number in (0, 1)")
    check_option(alpha is None or (isinstance(alpha, (int, float)) and 0 < alpha < 1), "alpha", alpha,
                 "None or a number in (0, 1)")
    check_option(Path(path).is_file(), "path", str(path), "an existing sample file")
    if (target is None) == (baseline is None):
        raise ValueError(f"exactly one of `target` and `baseline` must be given; got target={target!r}, "
                         f"baseline={baseline!r}")
    if target is not None:  # a shipped short name -> its folder (ValueError naming `target` otherwise)
        target = resolve_model(target, "target")
    argv = ["--samples", str(path), "--epsilon", repr(float(epsilon)), "--seed", str(int(seed))]
    argv += ["--target", str(target)] if target is not None else ["--baseline", str(baseline)]
    argv += (["--exact"] if exact else []) + ([] if alpha is None else ["--alpha", repr(float(alpha))])
    argv += ([] if progress else ["--no-progress"]) + ([] if out is None else ["--out", str(out)])
    args = _parse(argv)
    check_args(args)  # the command's checks (UsageError, a ValueError, naming the option); resolves short names
    if out is not None:
        claim_out(args, "verify-samples", quiet=True)  # checked writable and locked, as the command does
    res = _verify_samples(args)
    if out is not None:
        write_report(Path(out), res, args, advice(res, args))  # summary.md as the command writes it
    cert = res.certificate
    return SamplesVerification(
        verdict=cert.verdict, epsilon=float(cert.epsilon), confidence=float(cert.confidence), mode=res.mode,
        tests=res.table.reset_index(drop=True), completions=int(cert.completions), reasons=tuple(cert.reasons),
        certify_completions=None if cert.bounds is None else int(cert.bounds.needed), headline=cert.headline(),
        notes=tuple(res.notes), info=dict(res.info), out=None if out is None else Path(out))


def _parse(argv: list) -> argparse.Namespace:
    """The command's options from ``argv`` (UsageError, a ValueError, on a value argparse refuses)."""
    ap = argparse.ArgumentParser(prog="verify_samples", add_help=False, exit_on_error=False)
    add_arguments(ap)
    try:
        return ap.parse_args(argv)
    except argparse.ArgumentError as e:
        raise UsageError(f"verify_samples: {e}") from None
