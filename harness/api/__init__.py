"""The Python API for a user's own test suite: ``from harness import assert_lossless, verify_sampler, verify_samples``.

    harness/api/sampler.py   :func:`verify_sampler`: the ``verify`` battery on a sampler callable, sized by the planner
    harness/api/samples.py   :func:`verify_samples`: ``verify-samples`` on an engine's sample file
    harness/api/asserts.py   :func:`assert_lossless` and its exceptions :class:`Lossy`, :class:`Inconclusive`
    harness/api/result.py    :class:`Verification` (what :func:`verify_sampler` returns) and :class:`Loss`

docs/api.md is the guide; examples/test_my_sampler.py a pytest file to copy.

May import: :mod:`harness.verify`, :mod:`harness.samples`, :mod:`harness.laws`, :mod:`harness.core` (the top of the
layers; only :mod:`harness` itself imports it, lazily).
"""
from harness.api.asserts import ControlsFailed, Inconclusive, Lossy, assert_lossless
from harness.api.result import VERDICTS, Loss, Verdict, Verification
from harness.api.samples import SamplesVerification, verify_samples
from harness.api.sampler import verify_sampler

__all__ = ["assert_lossless", "verify_sampler", "verify_samples", "Verification", "SamplesVerification", "Loss",
           "Verdict", "VERDICTS", "Lossy", "Inconclusive", "ControlsFailed"]
