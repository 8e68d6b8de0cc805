"""What a lossless sampler's output must follow, computed exactly, with no draws.

    ngram       exact laws of n-gram scenarios: marginals, pairs, joints, acceptance statistics
    rounds      exact round laws of block and token-tree verification
    algorithms  verification algorithms by name (chain, block, tree<n>), their sampler and round law
    transformer exact laws of a small transformer's first J tokens, enumerated in float64 (the exact pair)
    scenarios   the verification scenarios: TOML files in harness/configs/verify/ over one default

May import: :mod:`harness.stats`, :mod:`harness.core` (and ``specimpl``, the samplers' models).
"""
