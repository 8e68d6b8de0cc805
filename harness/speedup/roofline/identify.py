"""Which target-only figures identify which of the hardware's free fields: the calibration rule, and its refusals.

The roofline's free fields (:data:`harness.speedup.roofline.model.FITTABLE`) are fitted only to target-only step
times (``calibrate`` / a ``[pool]`` of published.toml, ``--target-only-rates``).  A field the figures do not
identify is refused before anything is fitted, naming the term and the figures that would identify it:

    field(s) fitted                            identified by
    eff_bandwidth                              one step time (a batch-1 decoding step reads the weights)
    overhead_per_layer_s  or  overhead_s       one step time, with the bandwidth's efficiency as the hardware
    (alone)                                    file gives it (tensor parallel's all-reduces, eager launches)
    a fixed step cost beside the weight read   step times at two or more batch sizes whose bytes differ (a
    (overhead_per_layer_s or overhead_s with   mixture's expert reads, a long context's KV cache) or of two or
    eff_bandwidth: term "per-layer fixed")     more models on the same machine and engine
    step_per_request_s (term "per-request      step times at two or more batch sizes (concurrencies): it is the
    step cost")                                slope of the step time in B beyond the roofline's KV and compute;
                                               with a fixed cost and eff_bandwidth as well, three or more
    eff_compute                                a step time where the forward is compute-bound (checked below)

Counting is necessary, not sufficient: two batch sizes of a dense model at a short context change the step's
bytes by a few per cent, so its weight read and a fixed cost move the step times in proportion.  After the fit
:func:`check_separated` takes the sensitivities of the log step times to each fitted field (a column per field,
scaled to unit length) and refuses when the smallest singular value is below :data:`SEPARATION` (two fields whose
columns have cosine c give sqrt(1 - |c|)), naming the pair of fields the figures do not tell apart.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from harness.speedup.roofline.model import FITTABLE, ConfigError, Roofline, run_step_seconds

__all__ = ["FIXED", "TERM_WORDS", "SEPARATION", "check_figures", "check_separated", "sensitivities"]

FIXED = ("eff_bandwidth", "overhead_s", "overhead_per_layer_s")  # move every step of one model by about as much
TERM_WORDS = {
    "eff_bandwidth": "eff_bandwidth (the weight read's share of the datasheet bandwidth)",
    "eff_compute": "eff_compute (the matmuls' share of the datasheet peak)",
    "overhead_s": "overhead_s (a fixed cost per forward call)",
    "overhead_per_layer_s": "overhead_per_layer_s (a fixed cost per decoder layer and call: launches, all-reduces, "
                            "a mixture's dispatch)",
    "step_per_request_s": "step_per_request_s (the engine's step cost per running request: scheduling, sampling, "
                          "output processing)",
}
SEPARATION = 0.05  # smallest singular value of the unit-scaled sensitivities (cosine 0.9975 between two fields)


def _figures(points: list) -> str:
    models = sorted({p[0].name for p in points})
    batches = sorted({int(p[2]) for p in points})
    return f"{len(points)} target-only step time(s) of {len(models)} model(s) {models} at batch(es) {batches}"


def check_figures(where: str, points: list, fit) -> None:
    """Refuse (ConfigError) a ``fit`` that the target-only ``points`` ((shape, n, B, L, seconds[, run]) tuples)
    cannot identify by their count: which term, which figures are given, which are missing."""
    fit = tuple(fit)
    bad = [f for f in fit if f not in FITTABLE]
    if bad or not fit:
        raise ConfigError(f"{where}: the fields to fit must be a non-empty list of {list(FITTABLE)}; got {list(fit)}")
    given = _figures(points)
    batches = {(p[0].name, int(p[2])) for p in points}
    per_model = max(sum(1 for m, _ in batches if m == name) for name in {m for m, _ in batches}) if batches else 0
    models = len({p[0].name for p in points})
    fixed = [f for f in fit if f in FIXED]
    if "step_per_request_s" in fit:
        need = 2 + (len(fixed) >= 2 and models < 2)
        if per_model < need:
            raise ConfigError(f"{where}: the term {TERM_WORDS['step_per_request_s']} is identified by target-only step "
                              f"times at {need} or more batch sizes (concurrencies) of one model (its slope in the "
                              f"batch{', beside ' + ' and '.join(fixed) if len(fixed) >= 2 else ''}); given {given}: "
                              f"add target-only rates at other concurrencies, or do not fit it")
    if len(fixed) >= 2 and per_model < 2 and models < 2:
        raise ConfigError(f"{where}: {' and '.join(TERM_WORDS[f] for f in fixed)} together (a fixed step cost beside "
                          f"the weight read) are identified by target-only step times at two or more batch sizes whose "
                          f"bytes differ (a mixture's expert reads, a long context's KV cache) or of two or more models "
                          f"on the same machine; given {given}: fit one of them, or add those figures")
    if len(points) < len(fit):
        raise ConfigError(f"{where}: {len(fit)} fields {list(fit)} cannot be fitted to {given}")


def sensitivities(hw, points: list, fit) -> np.ndarray:
    """(points, fields): d log T_i / d field_j at ``hw`` (central differences), each column scaled to unit length
    (a column that is all zero stays zero)."""
    cols = []
    for f in fit:
        v = float(getattr(hw, f))
        h = 1e-4 * max(abs(v), 1e-3 if f.startswith("eff") else 1e-4)
        up, dn = replace(hw, **{f: v + h}), replace(hw, **{f: max(v - h, 0.0)})
        t = lambda x: np.log([run_step_seconds(Roofline(p[0], x), *p[1:4], *p[5:6]) for p in points])  # noqa: E731
        cols.append((t(up) - t(dn)) / (v + h - max(v - h, 0.0)))
    j = np.column_stack(cols)  # (points, fields)
    norm = np.linalg.norm(j, axis=0)
    return j / np.where(norm > 0, norm, 1.0)


def check_separated(where: str, hw, points: list, fit) -> float:
    """Refuse (ConfigError) a fitted ``hw`` whose ``fit`` fields the ``points`` do not tell apart: the smallest
    singular value of :func:`sensitivities` below :data:`SEPARATION`, naming the two fields whose columns are
    closest to parallel.  Returns that singular value (1.0 for one field that moves the step times)."""
    fit = tuple(fit)
    j = sensitivities(hw, points, fit)  # (points, fields)
    zero = [f for f, c in zip(fit, j.T) if not np.any(c)]
    if zero:
        raise ConfigError(f"{where}: {TERM_WORDS[zero[0]]} does not move any of the {_figures(points)}: "
                          f"they do not identify it")
    if len(fit) < 2:
        return 1.0
    smin = float(np.linalg.svd(j, compute_uv=False).min())
    if smin < SEPARATION:
        cos = np.abs(j.T @ j) - np.eye(len(fit))
        a, b = np.unravel_index(int(np.argmax(cos)), cos.shape)
        raise ConfigError(f"{where}: the {_figures(points)} do not separate {TERM_WORDS[fit[a]]} from "
                          f"{TERM_WORDS[fit[b]]} (their effects on the step times have cosine {cos[a, b]:.4f}; "
                          f"smallest singular value {smin:.3g} < {SEPARATION}): add step times where the step's bytes, "
                          f"FLOPs or batch differ more, or fit fewer fields")
    return smin
