"""The accept/resample step `verify_block`: hand-computed outcomes and analytic property tests.

Notation as in specimpl.speculative: p target laws p_1..p_{k+1}, q draft laws q_1..q_k, x drafts,
n accepted drafts, y the round's final token (residual at the first rejection, or the bonus).

The property tests are analytic, not sampled: verify_block is a deterministic function of its
uniforms, so the probability of an outcome is the Lebesgue measure of the uniforms that produce
it.  Both decisions are threshold rules in one uniform (accept iff u_i < b; y = the step of an
inverse CDF containing u_final), so each measure is found by bisection on verify_block itself and
the monotonicity that bisection assumes is checked on a grid.  From those measures we assemble
the exact law of the round's first emitted token and compare it with p_1 (losslessness of one
step), and the exact acceptance probability with sum_x min(p_1(x), q_1(x)).
"""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from specimpl.speculative import verify_block, verify_block_checked

F64 = torch.float64


def T(a, dtype=F64):
    return torch.tensor(a, dtype=dtype)


def run(p, q, x, u_acc, u_fin, dtype=F64):
    """verify_block on one sequence given as nested lists; returns (n, y) as ints."""
    n, y = verify_block(T([p], dtype), T([q], dtype), torch.tensor([x]), T([u_acc], dtype), T([u_fin], dtype))
    return int(n), int(y)


# -- hand-computed outcomes ----------------------------------------------------------------------
# V = 3, k = 2.
#   position 1: p_1 = [.5, .3, .2], q_1 = [.2, .6, .2], x_1 = 1  -> accept iff u_1 < .3/.6 = .5
#               residual max(0, p_1 - q_1) = [.3, 0, 0]           -> always token 0
#   position 2: p_2 = [.5, .1, .4], q_2 = [.2, .6, .2], x_2 = 1  -> accept iff u_2 < .1/.6 = 1/6
#               residual max(0, p_2 - q_2) = [.3, 0, .2] / .5 = [.6, 0, .4]
#   bonus:      p_3 = [.25, .25, .5]                              -> cdf [.25, .5, 1]
P = [[.5, .3, .2], [.5, .1, .4], [.25, .25, .5]]
Q = [[.2, .6, .2], [.2, .6, .2]]
X = [1, 1]


@pytest.mark.parametrize("u_acc, u_fin, expect", [
    ([0.40, 0.10], 0.60, (2, 2)),  # both accepted, bonus cdf: .6 in [.5, 1) -> token 2
    ([0.40, 0.10], 0.20, (2, 0)),  # bonus .2 < .25 -> token 0
    ([0.40, 0.10], 0.30, (2, 1)),  # bonus .3 in [.25, .5) -> token 1
    ([0.60, 0.00], 0.99, (0, 0)),  # reject x_1; residual is one-hot on token 0
    ([0.50, 0.00], 0.50, (0, 0)),  # u_1 = p/q exactly: accept set is [0, p/q), so reject
    ([0.40, 0.20], 0.50, (1, 0)),  # accept x_1, reject x_2; residual [.6, 0, .4]: .5 < .6 -> 0
    ([0.40, 0.20], 0.70, (1, 2)),  # .7 >= .6 -> token 2; token 1 (zero residual) is skipped
    ([0.00, 0.99], 0.00, (1, 0)),
])
@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_hand_computed_pattern(u_acc, u_fin, expect, dtype):
    assert run(P, Q, X, u_acc, u_fin, dtype) == expect


def test_batched_rows_are_independent():
    rows = [([0.40, 0.10], 0.60), ([0.60, 0.00], 0.99), ([0.40, 0.20], 0.70)]
    B = len(rows)
    n, y = verify_block(T([P] * B), T([Q] * B), torch.tensor([X] * B), T([r[0] for r in rows]), T([r[1] for r in rows]))
    assert n.tolist() == [2, 0, 1] and y.tolist() == [2, 0, 2]
    assert n.dtype == torch.int64 and y.dtype == torch.int64 and n.shape == (B,) and y.shape == (B,)


def test_p_equals_q_accepts_everything_without_nan():
    g = torch.Generator().manual_seed(0)
    B, k, V = 500, 3, 5
    p = torch.softmax(torch.randn(B, k + 1, V, generator=g, dtype=F64), -1)
    q = p[:, :k].clone()
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).view(B, k)
    u = torch.rand(B, k, generator=g, dtype=F64)
    u[0] = float(np.nextafter(1.0, 0.0))  # the largest uniform still accepts
    n, y = verify_block(p, q, x, u, torch.rand(B, generator=g, dtype=F64))
    assert bool((n == k).all()) and bool(((y >= 0) & (y < V)).all())


def test_p_equals_q_forced_rejection_falls_back_to_p():
    # x has q(x) = p(x) = 0 (only possible when supplied by hand): rejected, residual p - q = 0 -> draw from p
    p = [[.5, .5, 0.], [.5, .5, 0.]]
    for u in [0.0, 0.3, 0.7, 0.999]:
        n, y = run(p, [[.5, .5, 0.]], [2], [0.0], u)
        assert n == 0 and y in (0, 1)


def test_supplied_draft_with_zero_draft_probability_is_rejected():
    # q_1(1) = 0 but p_1(1) = .5: even u = 0 must not accept (the ratio p/q is undefined)
    n, y = run([[.5, .5, 0.], [1 / 3] * 3], [[1., 0., 0.]], [1], [0.0], 0.3)
    assert (n, y) == (0, 1)  # residual max(0, p - q) = [0, .5, 0]


def test_target_zero_token_is_never_accepted_nor_resampled():
    # p_1(2) = 0: the draft x = 2 is rejected for every u; the residual puts no mass on 2
    for u_acc in [0.0, 1e-300, 0.5]:
        for u_fin in np.linspace(0, 1, 101)[:-1]:
            n, y = run([[.7, .3, 0.], [.2, .2, .6]], [[.1, .2, .7]], [2], [u_acc], u_fin)
            assert n == 0 and y != 2


@pytest.mark.parametrize("u_acc, u_fin, expect", [
    (0.99, 0.5, (1, 2)),  # p one-hot on 1: x = 1 has ratio 1/.3 -> always accepted; bonus p_2 -> token 2
    (0.0, 0.5, (1, 2)),
])
def test_one_hot_target(u_acc, u_fin, expect):
    assert run([[0., 1., 0.], [0., 0., 1.]], [[.3, .3, .4]], [1], [u_acc], u_fin) == expect
    # the other drafts are always rejected and the residual [0, .7, 0] is one-hot on 1
    assert run([[0., 1., 0.], [0., 0., 1.]], [[.3, .3, .4]], [0], [0.0], u_fin) == (0, 1)


def test_one_hot_draft():
    # q one-hot on 1 with p_1(1) = .5: accept iff u < .5; residual [.2, 0, .3] / .5 = [.4, 0, .6]
    p = [[.2, .5, .3], [1., 0., 0.]]
    assert run(p, [[0., 1., 0.]], [1], [0.49], 0.9) == (1, 0)
    assert run(p, [[0., 1., 0.]], [1], [0.51], 0.39) == (0, 0)
    assert run(p, [[0., 1., 0.]], [1], [0.51], 0.41) == (0, 2)


def test_disjoint_supports_always_reject_and_resample_from_p():
    p = [[.5, .5, 0., 0.], [.25] * 4]
    q = [[0., 0., .5, .5]]
    for x in (2, 3):
        for u_fin, y in [(0.1, 0), (0.49, 0), (0.51, 1), (0.99, 1)]:
            assert run(p, q, [x], [0.0], u_fin) == (0, y)


def test_k_equals_one_shapes():
    n, y = verify_block(T([[[.5, .5], [.1, .9]]]), T([[[.5, .5]]]), torch.tensor([[0]]), T([[0.2]]), T([0.5]))
    assert (int(n), int(y)) == (1, 1) and n.shape == (1,)


# -- analytic property tests -------------------------------------------------------------------------
def bisect_boundary(pred, m: int, iters: int = 64) -> torch.Tensor:
    """For m monotone predicates (True on [0, b_j), False on [b_j, 1)), return the b_j (float64).

    ``pred(u)`` takes u of shape (m, G) and returns booleans (m, G): predicate j at u[j, g].
    """
    lo = torch.zeros(m, 1, dtype=F64)
    hi = torch.ones(m, 1, dtype=F64)
    for _ in range(iters):
        mid = (lo + hi) / 2
        t = pred(mid)
        lo = torch.where(t, mid, lo)
        hi = torch.where(t, hi, mid)
    ends = pred(torch.tensor([[0.0, float(np.nextafter(1.0, 0.0))]], dtype=F64).expand(m, 2))  # (m, 2)
    b = torch.where(ends[:, :1], hi, torch.zeros_like(hi))
    b = torch.where(ends[:, 1:], torch.ones_like(b), b)[:, 0]  # (m,)
    # the predicate really is a threshold rule: check it on a grid against the boundary found
    grid = torch.linspace(0, 1, 257, dtype=F64)[:-1].expand(m, -1)  # (m, G)
    t = pred(grid)
    far = (grid - b[:, None]).abs() > 1e-12
    assert bool((t == (grid < b[:, None]))[far].all()), "accept / draw decision is not a threshold rule in u"
    return b


def rows(t: torch.Tensor, m: int, G: int) -> torch.Tensor:
    """Repeat a (m or 1, ...) tensor to (m * G, ...) in the row order of u.reshape(-1) for u (m, G)."""
    return t.expand(m, *t.shape[1:]).repeat_interleave(G, 0)


def final_law(p, q, x, u_acc) -> torch.Tensor:
    """Exact law (V,) of y over u_final ~ U(0,1) for one fixed (p, q, x, u_accept) of a single sequence."""
    V = p.shape[-1]
    m = V - 1  # thresholds "y >= v" for v = 1..V-1

    def pred(u):  # True while y(u) < v: the draw is an inverse CDF, nondecreasing in u
        G = u.shape[1]
        _, y = verify_block(rows(p, m, G), rows(q, m, G), rows(x, m, G), rows(u_acc, m, G), u.reshape(-1))
        return y.view(m, G) < torch.arange(1, V)[:, None]

    c = bisect_boundary(pred, m)  # c_v = measure of {u : y(u) < v}
    edges = torch.cat([torch.zeros(1, dtype=F64), c, torch.ones(1, dtype=F64)])
    return edges[1:] - edges[:-1]


@st.composite
def law(draw, V):
    w = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.01, 1.0)), min_size=V, max_size=V))
    if sum(w) == 0:
        w[draw(st.integers(0, V - 1))] = 1.0
    w = np.asarray(w)
    return w / w.sum()


@st.composite
def block(draw):
    """A random single-sequence block (p, q, x) with x_i in the support of q_i; p == q with some chance."""
    V = draw(st.integers(2, 5))
    k = draw(st.integers(1, 3))
    p = np.stack([draw(law(V)) for _ in range(k + 1)])
    same = draw(st.booleans())
    q = p[:k].copy() if same else np.stack([draw(law(V)) for _ in range(k)])
    x = [draw(st.sampled_from(np.flatnonzero(q[i]).tolist())) for i in range(k)]
    return T(p)[None], T(q)[None], torch.tensor([x]), same


@given(block())
def test_acceptance_probability_is_sum_min_analytically(blk):
    """P(accept position 1) = sum_x q_1(x) * |{u : accepted}| = sum_x min(p_1(x), q_1(x))."""
    p, q, _, _ = blk
    V, k = p.shape[-1], q.shape[1]
    xs = torch.arange(V)[q[0, 0] > 0]  # every possible first draft
    m = len(xs)
    x = torch.zeros(m, k, dtype=torch.long)
    x[:, 0] = xs

    def accepted(u):  # u (m, G)
        G = u.shape[1]
        ua = torch.zeros(m * G, k, dtype=F64)
        ua[:, 0] = u.reshape(-1)
        n, _ = verify_block(rows(p, m, G), rows(q, m, G), rows(x, m, G), ua, torch.zeros(m * G, dtype=F64))
        return n.view(m, G) >= 1

    b = bisect_boundary(accepted, m)  # measure of accepting uniforms, per draft
    ratio = torch.clamp(p[0, 0, xs] / q[0, 0, xs], max=1)
    torch.testing.assert_close(b, ratio, rtol=0, atol=1e-12)
    acc = float((q[0, 0, xs] * b).sum())
    assert acc == pytest.approx(float(torch.minimum(p[0, 0], q[0, 0]).sum()), abs=1e-12)


@given(block())
def test_first_emitted_token_follows_p1_exactly(blk):
    """Law of the round's first token = sum_x q_1(x) [a(x) delta_x + (1 - a(x)) law(y | reject)] = p_1."""
    p, q, x0, same = blk
    V, k = p.shape[-1], q.shape[1]
    law1 = torch.zeros(V, dtype=F64)
    for xv in torch.arange(V)[q[0, 0] > 0].tolist():
        x = x0.clone()
        x[0, 0] = xv
        a = min(1.0, float(p[0, 0, xv] / q[0, 0, xv]))  # accept measure (checked by the test above)
        law1[xv] += q[0, 0, xv] * a
        if a < 1:
            u_rej = torch.zeros(1, k, dtype=F64)
            u_rej[0, 0] = (a + 1) / 2  # inside the rejecting interval [a, 1)
            n, _ = verify_block(p, q, x, u_rej, torch.zeros(1, dtype=F64))
            assert int(n) == 0
            law1 += q[0, 0, xv] * (1 - a) * final_law(p, q, x, u_rej)
    torch.testing.assert_close(law1, p[0, 0], rtol=0, atol=1e-12)
    if same:
        assert float(torch.minimum(p[0, 0], q[0, 0]).sum()) == pytest.approx(1.0)


@given(block(), st.data())
def test_final_token_law_and_zero_mass_tokens(blk, data):
    """Given n accepted, y ~ norm(max(0, p_{n+1} - q_{n+1})) (n < k) or p_{k+1} (n = k); p = 0 never emitted."""
    p, q, x, _ = blk
    V, k = p.shape[-1], q.shape[1]
    u = T([[data.draw(st.floats(0.0, 1.0, exclude_max=True)) for _ in range(k)]])
    n, _ = verify_block(p, q, x, u, torch.zeros(1, dtype=F64))
    n = int(n)
    # n is the accepted prefix under the rule u_i q_i(x_i) < p_i(x_i)
    ok = [bool(u[0, i] * q[0, i, x[0, i]] < p[0, i, x[0, i]]) for i in range(k)]
    assert n == (ok + [False]).index(False)
    law_y = final_law(p, q, x, u)
    if n < k:
        r = torch.clamp(p[0, n] - q[0, n], min=0)
        expect = r / r.sum() if float(r.sum()) > 0 else p[0, n]
    else:
        expect = p[0, k]
    torch.testing.assert_close(law_y, expect, rtol=0, atol=1e-12)
    assert bool((law_y[p[0, n] == 0] == 0).all())  # a token with p = 0 has exactly zero measure
    # and no uniform on a fine grid emits it
    grid = torch.linspace(0, 1, 513, dtype=F64)[:-1]
    _, ys = verify_block(p.expand(512, -1, -1), q.expand(512, -1, -1), x.expand(512, -1), u.expand(512, -1), grid)
    assert bool((p[0, n, ys] > 0).all())


# -- verify_block_checked: bad inputs get errors naming the argument --------------------------------
def good():
    return T([P]), T([Q]), torch.tensor([X]), T([[0.4, 0.1]]), T([0.6])


def test_checked_matches_unchecked():
    assert [int(t) for t in verify_block_checked(*good())] == [2, 2]


@pytest.mark.parametrize("which, value, name", [
    (0, T([[[.5, float("nan"), .5], [.5, .1, .4], [.25, .25, .5]]]), "p"),
    (0, T([[[.5, .3, .2], [.5, .1, .4], [.25, .25, .4]]]), "p"),  # unnormalised bonus row
    (0, T([[[.5, .3, .2]]]), "p"),  # k = 0: no draft position
    (0, T([[.5, .3, .2]]), "p"),  # not 3-D
    (1, T([[[.2, .6, .2], [-.1, .6, .5]]]), "q"),  # negative
    (1, T([[[.2, .6, .2], [.2, .6, .3]]]), "q"),  # unnormalised
    (1, T([[[.2, .6, .2]]]), "q"),  # wrong k
    (2, torch.tensor([[1, 3]]), "x"),  # out of vocabulary
    (2, torch.tensor([[1, -1]]), "x"),  # PAD sentinel used as a draft
    (2, T([[1.0, 1.0]]), "x"),  # float ids
    (3, T([[0.4, 1.0]]), "u_accept"),  # uniform outside [0, 1)
    (3, T([[0.4, float("nan")]]), "u_accept"),
    (4, T([-0.1]), "u_final"),
    (4, T([[0.5]]), "u_final"),  # wrong shape
])
def test_checked_rejects_bad_inputs(which, value, name):
    args = list(good())
    args[which] = value
    with pytest.raises(ValueError, match=f"`{name}`"):
        verify_block_checked(*args)
