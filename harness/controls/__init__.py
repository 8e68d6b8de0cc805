"""The bug catalogue: samplers that are wrong (each modelled on a real root cause) and lossless variants
that differ from the reference; ``make verify`` must catch every one of the first and pass the second.

    chain   token-level speculative sampling (specimpl.speculative)
    tree    block verification and token-tree verification
    hf      the same bugs on the transformers pair (real-model scenario; a test fixture, not a sampler we ship)

May import: :mod:`harness.laws`, :mod:`harness.stats`, :mod:`harness.core` (and ``specimpl``).
"""
