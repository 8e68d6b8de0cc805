"""Is it lossless?  `python -m harness verify`: prove a sampler lossless on a set of scenarios, with stated power.

    python -m harness verify                                   # reference sampler + all controls (make verify)
    python -m harness verify --sampler mypkg.mymod:my_generate # any sampler with the documented signature
    python -m harness verify --scenario base --draws 20000     # a quick look
    python -m harness verify --scenario real_model             # only the real-model scenario (+ its controls)

A *sampler* is any callable with the signature of :func:`specimpl.speculative_generate`::

    fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator) -> GenerationResult

Each scenario (``harness/configs/verify/*.toml``) draws ``draws × weight`` sequences from the sampler and
as many from target-only sampling, folds them into sufficient statistics, and runs the battery of
:mod:`harness.verify.battery`.  All tests of the whole run — every scenario, every control, the von Neumann
sampler — form ONE family: the family-wise false-alarm budget (``family_alpha``, 1e-4) is split over
them by Holm, and every test states the smallest deviation it detects with probability ``power`` at
its Bonferroni level.

The *real-model scenario* (``[real_model]`` in default.toml, on by default; ``--no-real-model``) runs
the sampler on the shipped tiny transformers pair and applies the sequential randomized-PIT tests
(pooled, per position, consecutive pairs; :func:`harness.verify.battery.plan_pit_value_tests`) to its output
scored by the target: no exact law is needed.  Its tests join the same family and the same Holm
adjustment; for the reference sampler its controls run too (a target KV cache that is not rolled back
after a rejection must be caught; a draft cache that is never rolled back, lossless, must pass).
``python -m harness pit`` runs the same tests, through the same family, on a larger real-model
catalogue.  The report (``results/verify/``) holds the table of tests, a markdown summary, the
per-position observed/expected tables and PIT histograms, and figures drawn from those tables.

Exit status (:mod:`harness.core.errors`, :mod:`harness.core.verdict`): 0 (PASS) when every run is as its role
requires, 1 (LOSSY) when a run is lossy that must not be (or a buggy control certified), 4 (INCONCLUSIVE) when
nothing is lossy but a run that must certify did not (or a buggy control was neither caught nor certified); 2 for
bad arguments or scenario files (before any work); 3 when the sampler under test failed (raised, exited, returned
malformed output; traceback in ``<out>/error.log``); 130 when interrupted.

The library entry point is :func:`harness.verify.pipeline.verify`; the command is :mod:`harness.verify.cli`.
One module per step:

    cli        the command line of ``verify``: options, their checks, exit status
    sampler    importing a sampler from ``--sampler`` (:func:`load_sampler`), checking a call's output
    runs       who runs on what (roles, sizes): :class:`RunSpec`, real-model and von Neumann runs
    draw       drawing every run, with resume
    family     the family of tests, their levels and the Holm adjustment
    verdicts   one verdict per run (``runs.csv``)
    outcome    the command's verdict from those rows, the loss and the tokens that carry it, the draws that certify
    report     tables, summary and figures of the report folder
    pipeline   :func:`verify`: the steps above in order
    pit        ``python -m harness pit``: the real-model catalogue through the same family

and what the steps rest on:

    battery    one run's sufficient statistics (Accumulator) and its planned tests
    realmodel  the real-model scenario: a sampler on the shipped transformers pair, scored by the target
    epsilon, sequential, until, shards   tolerances, sequential stopping, --until-certified, draw shards
    calibrate, calibrate_null            ``python -m harness calibrate``: the battery's false-alarm rate
    numerics, numerics_floor             ``python -m harness numerics``: the numerics floor
    sizing     the draws that certify a lossless sampler, and their time (the Python API's planner)

May import: :mod:`harness.controls`, :mod:`harness.laws`, :mod:`harness.stats`, :mod:`harness.core`; never
:mod:`harness.speedup` or :mod:`harness.samples`.
"""
