"""Sampling controls (`warp`), the inverse-CDF draw and probability checks, by hand."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from specimpl.sampling import SamplingConfig, TableSampler, check_probs, sample_categorical, warp

F64 = torch.float64


def logits_of(probs, dtype=F64):
    with np.errstate(divide="ignore"):
        return torch.log(torch.tensor(probs, dtype=dtype))


# -- warp ------------------------------------------------------------------------------------
def test_warp_identity_is_softmax():
    p = warp(logits_of([1 / 6, 2 / 6, 3 / 6]), SamplingConfig())
    torch.testing.assert_close(p, torch.tensor([1 / 6, 2 / 6, 3 / 6], dtype=F64), rtol=0, atol=1e-15)


@pytest.mark.parametrize("T, expect", [
    (2.0, np.sqrt([1, 2, 3]) / np.sqrt([1, 2, 3]).sum()),  # p^(1/2)
    (0.5, np.array([1, 4, 9]) / 14),  # p^2
    (1.0, np.array([1, 2, 3]) / 6),
])
def test_warp_temperature(T, expect):
    p = warp(logits_of([1, 2, 3]), SamplingConfig(temperature=T))
    np.testing.assert_allclose(p.numpy(), expect, rtol=1e-13)


def test_warp_top_k():
    p = warp(logits_of([1 / 6, 3 / 6, 2 / 6]), SamplingConfig(top_k=2))
    np.testing.assert_allclose(p.numpy(), [0, 3 / 5, 2 / 5], rtol=1e-13)
    assert p[0] == 0
    # top_k >= V keeps everything
    p = warp(logits_of([1 / 6, 3 / 6, 2 / 6]), SamplingConfig(top_k=3))
    np.testing.assert_allclose(p.numpy(), [1 / 6, 3 / 6, 2 / 6], rtol=1e-13)


@pytest.mark.parametrize("top_p, expect", [
    (0.70, [0, 0.5 / 0.8, 0, 0.3 / 0.8]),  # smallest prefix reaching 0.7: {0.5, 0.3}
    (0.45, [0, 1, 0, 0]),  # the top token alone already has 0.5 >= 0.45
    (0.90, [0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95]),
    (1.00, [0.15, 0.5, 0.05, 0.3]),
])
def test_warp_top_p(top_p, expect):
    p = warp(logits_of([0.15, 0.5, 0.05, 0.3]), SamplingConfig(top_p=top_p))
    np.testing.assert_allclose(p.numpy(), expect, rtol=1e-12, atol=1e-15)


def test_warp_order_temperature_then_top_k_then_top_p():
    # T = 0.5 squares: [1, 4, 9, 16]/30; top_k=3 -> [4, 9, 16]/29; top_p=0.8: 16/29 = .55 < .8, 25/29 >= .8
    cfg = SamplingConfig(temperature=0.5, top_k=3, top_p=0.8)
    p = warp(logits_of([1, 2, 3, 4]), cfg)
    np.testing.assert_allclose(p.numpy(), [0, 0, 9 / 25, 16 / 25], rtol=1e-12)


@pytest.mark.parametrize("cfg", [SamplingConfig(greedy=True), SamplingConfig(temperature=0)])
def test_warp_greedy_one_hot_lowest_index_on_ties(cfg):
    p = warp(torch.tensor([[0.1, 0.7, 0.7, 0.2], [3.0, -1.0, 2.0, float("-inf")]], dtype=F64), cfg)
    assert p.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]
    assert cfg.is_greedy and cfg.describe() == "greedy"


def test_warp_keeps_dtype_zeros_and_normalisation():
    logits = logits_of([[0.0, 0.25, 0.75], [0.5, 0.5, 0.0]], dtype=torch.float32)
    for cfg in [SamplingConfig(), SamplingConfig(temperature=0.7), SamplingConfig(top_k=1), SamplingConfig(top_p=0.6)]:
        p = warp(logits, cfg)
        assert p.dtype == torch.float32 and p.shape == logits.shape
        assert p[0, 0] == 0 and p[1, 2] == 0, cfg  # -inf logits stay probability 0
        torch.testing.assert_close(p.sum(-1), torch.ones(2))


@pytest.mark.parametrize("kwargs, name", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"), (dict(temperature=True), "temperature"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_p=-1), "top_p"),
    (dict(top_p=float("nan")), "top_p"),
    (dict(top_k=0), "top_k"), (dict(top_k=-3), "top_k"), (dict(top_k=2.5), "top_k"),
    (dict(greedy="yes"), "greedy"),
])
def test_config_validation_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        SamplingConfig(**kwargs)


def test_config_describe():
    assert SamplingConfig().describe() == "T=1"
    assert SamplingConfig(temperature=0.5, top_k=4, top_p=0.9).describe() == "T=0.5,top_k=4,top_p=0.9"


# -- check_probs -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, word", [
    ([0.5, float("nan"), 0.5], "NaN"),
    ([0.6, -0.1, 0.5], "negative"),
    ([0.5, 0.2, 0.2], "normalised"),
    ([[0.5, 0.5, 0.0], [0.5, 0.6, 0.0]], "normalised"),
])
def test_check_probs_rejects(bad, word):
    with pytest.raises(ValueError, match=rf"`my_p`.*{word}"):
        check_probs("my_p", torch.tensor(bad, dtype=F64))


def test_check_probs_rejects_integer_tensors_and_accepts_good_rows():
    with pytest.raises(ValueError, match="`my_p`"):
        check_probs("my_p", torch.tensor([0, 1]))
    check_probs("my_p", torch.tensor([[0.0, 1.0], [0.25, 0.75]]))


# -- sample_categorical ------------------------------------------------------------------------
def test_sample_categorical_inverse_cdf_by_hand():
    probs = torch.tensor([0.2, 0.3, 0.5], dtype=F64).expand(6, 3)
    u = torch.tensor([0.0, 0.19, 0.21, 0.49, 0.51, 0.999], dtype=F64)
    assert sample_categorical(probs, u).tolist() == [0, 0, 1, 1, 2, 2]


def test_sample_categorical_unnormalised_rows():
    probs = torch.tensor([[2.0, 6.0], [2.0, 6.0], [0.0, 1e-30]], dtype=F64)  # [1/4, 3/4] and [0, 1]
    u = torch.tensor([0.24, 0.26, 0.0], dtype=F64)
    assert sample_categorical(probs, u).tolist() == [0, 1, 1]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_sample_categorical_zero_tokens_never_returned(dtype):
    probs = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0], dtype=dtype)
    below_one = torch.nextafter(torch.tensor(1.0, dtype=dtype), torch.tensor(0.0, dtype=dtype))
    u = torch.cat([torch.linspace(0, 1, 10001, dtype=dtype)[:-1], torch.tensor([0.5, below_one], dtype=dtype)])
    idx = sample_categorical(probs.expand(len(u), 5), u)
    assert set(idx.tolist()) == {1, 3}
    assert idx[-1] == 3  # u just below 1 lands on the last positive token, not on the zero tail


def test_sample_categorical_u_near_one_with_round_off():
    # rows whose float32 cumulative sum ends slightly below or above their exact total
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(2000, 7, generator=g) * (torch.rand(2000, 7, generator=g) > 0.3)
    probs[:, 2] += 1e-3  # no all-zero row
    probs[:, 5:] = 0  # a zero tail
    u = torch.full((2000,), float(np.nextafter(np.float32(1), np.float32(0))))
    idx = sample_categorical(probs, u)
    last_pos = 6 - (probs > 0).flip(-1).int().argmax(-1)
    assert torch.equal(idx, last_pos)


def test_sample_categorical_shapes_and_dtype():
    probs = torch.full((2, 3, 4), 0.25)
    u = torch.rand(2, 3)
    idx = sample_categorical(probs, u)
    assert idx.shape == (2, 3) and idx.dtype == torch.int64


@given(st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1.0)), min_size=1, max_size=8),
       st.floats(0.0, 1.0, exclude_max=True))
def test_sample_categorical_property(weights, u):
    """The draw is a token of positive weight whose CDF step contains u * total."""
    if sum(weights) == 0:
        weights = weights[:-1] + [1.0]
    probs = torch.tensor(weights, dtype=F64)
    i = int(sample_categorical(probs, torch.tensor(u, dtype=F64)))
    assert probs[i] > 0
    cdf = np.cumsum(weights)
    lo = cdf[i - 1] if i > 0 else 0.0
    assert lo <= u * cdf[-1] * (1 + 1e-12)
    assert u * cdf[-1] < cdf[i] or i == max(j for j, w in enumerate(weights) if w > 0)


# -- TableSampler: sample_categorical on table rows, bit for bit -----------------------------------
@st.composite
def table_and_draws(draw):
    R = draw(st.integers(1, 6))
    V = draw(st.integers(1, 9))
    rows = []
    for _ in range(R):
        w = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-9, 1.0)), min_size=V, max_size=V))
        if sum(w) == 0:
            w[-1] = 1.0
        rows.append(w)
    dtype = draw(st.sampled_from([torch.float32, F64]))
    normalise = draw(st.booleans())
    P = torch.tensor(rows, dtype=dtype)
    if normalise:
        P = P / P.sum(1, keepdim=True)
    buckets = draw(st.sampled_from([1, 4, 64, 8192]))
    return P, buckets


@given(table_and_draws(), st.integers(0, 2 ** 31 - 1))
def test_table_sampler_equals_sample_categorical(tb, seed):
    P, buckets = tb
    R, V = P.shape
    ts = TableSampler(P, max_buckets=buckets)
    g = torch.Generator().manual_seed(seed)
    n = 3000
    rows = torch.randint(0, R, (n,), generator=g)
    u = torch.rand(n, generator=g, dtype=P.dtype)
    one = torch.ones((), dtype=P.dtype)
    # bucket edges and the floats just below them, the largest uniform below 1, and 0
    edges = (torch.arange(ts.M, dtype=P.dtype) / ts.M)[:1000]
    u[:len(edges)] = edges
    u[1000:1000 + len(edges)] = torch.nextafter(edges, torch.zeros((), dtype=P.dtype)).clamp(min=0)
    u[-200:-100] = torch.nextafter(one, torch.zeros((), dtype=P.dtype))
    u[-100:] = 0
    expect = sample_categorical(P[rows], u)
    got = ts.draw(rows, u)
    assert torch.equal(got, expect)
    assert got.dtype == torch.int64
    assert torch.equal(ts.draw(rows.int(), u, torch.int32), expect.int())


def test_table_sampler_validates():
    with pytest.raises(ValueError, match="`probs`"):
        TableSampler(torch.tensor([0.5, 0.5]))
