"""A roofline model of one forward call, T(n, B, L), and the speedup it predicts.

    model     T(n, B, L) from a model's config and a hardware file (harness/configs/hardware/)
    speedup   speedup over (alpha_i, c, k, B, L, algorithm) with roofline costs
    local     this machine as a roofline (bandwidth, matmul rate)      measure  T measured on a device
    fidelity  the model against published GPU measurements (harness/configs/fidelity/published.toml)
"""
