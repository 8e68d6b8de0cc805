"""harness.core.matmul: the matmul yardstick and the flop share (deterministic arithmetic; the timing only > 0)."""
import math

import pytest

from harness.core.matmul import forward_flops, matmul_gflops, model_flop_share


def test_forward_flops_is_two_per_parameter_per_position():
    assert forward_flops(1_000, 7) == 14_000.0


def test_share_divides_by_rate_and_time():
    assert model_flop_share(2e9, 2.0, 1.0) == pytest.approx(1.0)
    assert model_flop_share(1e9, 4.0, 1.0) == pytest.approx(0.25)
    assert math.isnan(model_flop_share(1e9, 0.0, 1.0))


def test_matmul_rate_is_positive_and_bad_sizes_name_themselves():
    assert matmul_gflops(n=64, repeats=3) > 0
    with pytest.raises(ValueError, match="n=8"):
        matmul_gflops(n=8)
