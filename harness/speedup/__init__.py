"""Does it pay?  Speedup of speculative decoding: modelled, measured, and the configuration to run.

    alpha           ``python -m harness alpha``: acceptance of every draft variant on the shipped pair
    costmodel       does it pay, with which k: the per-round cost model and its fit to profiles
    costmodel_tree  the same for block and tree verification
    profiler        per-call timing of target and draft forwards and of the sampler's own logic
    synthetic       models with set, calibrated costs
    tune            ``python -m harness tune``: the algorithm and k per batch size for a pair on a machine
    tune_engine     ``tune --acceptance``: k per batch from an engine's own acceptance counters and rates
    engine_acceptance  the engine's per-position acceptance counters (vLLM metrics, per-request JSONL, CSV, JSON)
    sweep/          ``python -m harness sweep``: suites, cells, stored tables
    report/         ``python -m harness report``: figures and tables from stored results only
    roofline/       T(n, B, L) from a model's shape and a hardware file; fidelity to published points
    membound/       the memory-bound pair: a widened target and its weight-streaming kernel

May import: :mod:`harness.laws`, :mod:`harness.stats`, :mod:`harness.core` (and ``specimpl``); never
:mod:`harness.verify` or :mod:`harness.samples`.
"""
