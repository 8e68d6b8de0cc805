"""This machine's float32 matrix-multiply rate, the yardstick a model's arithmetic throughput is stated against.

``matmul_gflops`` times an ``n x n`` by ``n x n`` float32 product (2 n^3 flops) with ``torch.mm`` on one thread
(the verify workers' setting) after a warm-up, and returns the median rate over ``repeats`` timings
(``time.perf_counter``).  ``model_flop_share`` states how much of that rate a model workload used: 2 flops per
parameter per token position a forward pass processes (the dense-layer count; attention over the context and
everything outside the matmuls left out), divided by the rate times the seconds the workload took.
"""
from __future__ import annotations

import statistics
import time

__all__ = ["matmul_gflops", "model_flop_share", "forward_flops"]


def matmul_gflops(n: int = 512, repeats: int = 7, threads: int = 1) -> float:
    """Median GFLOP/s of an (n, n) @ (n, n) float32 ``torch.mm`` on ``threads`` threads (warm-up: 2 products)."""
    import torch
    if n < 16 or repeats < 1 or threads < 1:
        raise ValueError(f"matmul_gflops: n={n!r}, repeats={repeats!r}, threads={threads!r}; need n >= 16, "
                         f"repeats >= 1, threads >= 1")
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        a, b = torch.rand((n, n), generator=g), torch.rand((n, n), generator=g)  # (n, n) float32 each
        for _ in range(2):
            torch.mm(a, b)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(old)
    return 2.0 * n ** 3 / statistics.median(times) / 1e9


def forward_flops(n_params: int, positions: int) -> float:
    """Dense-layer flops of forward passes over ``positions`` token positions of a model of ``n_params``."""
    return 2.0 * float(n_params) * float(positions)


def model_flop_share(flops: float, seconds: float, gflops: float) -> float:
    """The share of a ``gflops`` matmul rate that ``flops`` done in ``seconds`` amount to (NaN without time)."""
    if seconds <= 0 or gflops <= 0:
        return float("nan")
    return flops / seconds / (gflops * 1e9)
