"""The numerics floor (harness/verify/numerics.py): exact laws of low-precision sampling arithmetic.

Every exact law is checked against the sampler's own arithmetic run many times (chi-square at 1e-6, so
a wrong model of the uniforms, of the CDF rounding or of the clamping fails), and one by hand."""
import numpy as np
import pytest
import torch
from scipy import stats

from harness.core.errors import UsageError
from harness.verify.numerics import STEPS, accept_prob, draw_law, speculative_law, step_tvs, uniform_law
from harness.verify.numerics_floor import draw_figure, floor_table, load_config
from specimpl.sampling import SamplingConfig, sample_categorical, warp
from specimpl.speculative import verify_block

LOW = [torch.float32, torch.bfloat16, torch.float16]
LEVEL = 1e-6  # false alarm of each goodness-of-fit check below


def _gof(counts: np.ndarray, law: np.ndarray) -> float:
    """Pearson chi-square p-value of counts against an exact law (cells of expected count < 5 pooled);
    a count in a cell of law 0 fails outright."""
    n = counts.sum()
    assert counts[law == 0].sum() == 0, "a draw landed where the exact law has no mass"
    e = n * law
    big = e >= 5
    c = np.append(counts[big], counts[~big].sum())
    e = np.append(e[big], e[~big].sum())
    keep = e > 0
    return stats.chisquare(c[keep], e[keep]).pvalue


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_uniform_law_is_torch_rand(dtype):
    """The tabulated law of torch.rand(dtype) (24-bit uniform, rounded to nearest, 1.0 -> 0.0)."""
    U = uniform_law(dtype)
    assert U.cdf[0] == 0 and U.cdf[-1] == 1 and bool((U.values[1:] > U.values[:-1]).all())
    g = torch.Generator().manual_seed(7)
    u = torch.rand(2 ** 21, dtype=dtype, generator=g).to(torch.float64)
    idx = torch.searchsorted(U.values.to(torch.float64), u)
    assert bool((U.values.to(torch.float64)[idx] == u).all()), "torch.rand gave a value outside the table"
    counts = np.bincount(idx.numpy(), minlength=U.n)
    assert _gof(counts, np.diff(U.cdf)) > LEVEL


def test_uniform_law_float32_grid():
    U = uniform_law(torch.float32)
    u = torch.rand(2 ** 16, generator=torch.Generator().manual_seed(3)).to(torch.float64)
    assert bool(((u * 2 ** 24) == (u * 2 ** 24).round()).all())
    assert U.n == 2 ** 24 and float(U.value(torch.tensor([2 ** 24 - 1]))[0]) == 1 - 2 ** -24


def test_draw_law_by_hand_bfloat16():
    """[0.5, 0.5] in bfloat16: token 0 iff u < 0.5; u rounds to 0.5 from 0.5 - 2^-10 up (ties to even), and
    the 2^-9 of mass that rounds to 1.0 becomes 0.0: P(0) = 0.5 - 2^-10 + 2^-9."""
    law = draw_law(torch.tensor([0.5, 0.5], dtype=torch.bfloat16))
    assert law.tolist() == [0.5 + 2 ** -10, 0.5 - 2 ** -10]


@pytest.mark.parametrize("dtype", LOW)
def test_draw_law_matches_sample_categorical(dtype):
    g = torch.Generator().manual_seed(11)
    logits = 3 * torch.randn(300, generator=g, dtype=torch.float64)
    p = warp(logits.to(dtype), SamplingConfig(temperature=0.8, top_p=0.95))  # (V,) with zeros
    law = draw_law(p)
    assert abs(law.sum() - 1) < 1e-12
    n = 400_000
    u = torch.rand(n, dtype=dtype, generator=g)
    x = sample_categorical(p.unsqueeze(0).expand(n, -1), u)
    assert _gof(np.bincount(x.numpy(), minlength=p.numel()), law) > LEVEL


@pytest.mark.parametrize("dtype", LOW)
def test_accept_prob_matches_the_test(dtype):
    g = torch.Generator().manual_seed(5)
    lp = 2 * torch.randn(40, generator=g, dtype=torch.float64)
    p, q = torch.softmax(lp.to(dtype), -1), torch.softmax((lp + torch.randn(40, generator=g,
                                                                            dtype=torch.float64)).to(dtype), -1)
    a = accept_prob(p, q)
    reps = 50_000
    u = torch.rand(reps, 40, dtype=dtype, generator=g)
    hits = ((u * q < p) & (q > 0)).sum(0).numpy()  # (V,) the verify step's own comparison
    for h, ai in zip(hits, a):
        lo, hi = stats.binomtest(int(h), reps).proportion_ci(1 - LEVEL / 40, method="exact")
        assert lo <= ai <= hi


def test_speculative_law_matches_verify_block_in_bfloat16():
    """One position (k = 1) of the real verify step in bfloat16 follows speculative_law's exact law."""
    g = torch.Generator().manual_seed(2)
    V, n = 24, 300_000
    lp = 2 * torch.randn(V, generator=g, dtype=torch.float64)
    p, q = (torch.softmax(x.to(torch.bfloat16), -1) for x in (lp, lp + torch.randn(V, generator=g, dtype=torch.float64)))
    u = torch.rand(n, 3, dtype=torch.bfloat16, generator=g)
    x = sample_categorical(q.unsqueeze(0).expand(n, -1), u[:, 0])  # (n,) drafts
    P = torch.stack([p, p]).unsqueeze(0).expand(n, 2, V)  # (n, 2, V) p_1 and the bonus law
    acc, y = verify_block(P, q.view(1, 1, V).expand(n, 1, V), x.view(n, 1), u[:, 1:2], u[:, 2])
    first = torch.where(acc == 1, x, y)  # (n,) the token emitted at the position
    assert _gof(np.bincount(first.numpy(), minlength=V), speculative_law(p, q)) > LEVEL


def test_float64_is_the_reference():
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(1000, generator=g, dtype=torch.float64) * 2
    lq = lp + torch.randn(1000, generator=g, dtype=torch.float64)
    tvs = step_tvs(lp, lq, SamplingConfig(), torch.float64)
    assert all(tvs[s] < 1e-12 for s in STEPS)
    low = step_tvs(lp, lq, SamplingConfig(), torch.bfloat16)
    assert low["target_only"] > 1e-4  # bfloat16 moves the law visibly (a check that can fail)


def test_config_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('seed = 1\ndtypes = ["float32"]\nrows = 1\n[[source]]\nname = "zipf"\nvocab = [10]\n'
                   'entropy = [1.0]\ndraft_noise = 1.0\nvocabb = 3\n')
    with pytest.raises(UsageError, match=r"bad.toml: key `source\[0\].vocabb`"):
        load_config(bad)
    bad.write_text('seed = 1\ndtypes = ["float8"]\nrows = 1\n')
    with pytest.raises(UsageError, match=r"bad.toml: `dtypes` must be"):
        load_config(bad)


def test_command_writes_reproducible_tables(tmp_path):
    from harness.cli import main
    cfg = tmp_path / "small.toml"
    cfg.write_text('seed = 1\ndtypes = ["float32", "bfloat16"]\nrows = 2\n[[source]]\nname = "zipf"\n'
                   'vocab = [500]\nentropy = [1.0]\ndraft_noise = 1.0\n[[sampling]]\ntemperature = 1.0\n')
    outs = []
    for i in range(2):
        out = tmp_path / f"o{i}"
        assert main(["numerics", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
        outs.append(out)
    for name in ("numerics.csv", "rows.csv"):  # the data (the provenance, time and machine load, is in the sidecar)
        a, b = ((o / name).read_text() for o in outs)
        assert a == b and not a.startswith("#") and (outs[0] / f"{name}.meta.json").is_file()
    import json
    import pandas as pd
    rows, meta = pd.read_csv(outs[0] / "rows.csv"), json.loads((outs[0] / "meta.json").read_text())
    pdfs = [draw_figure(floor_table(rows), tmp_path / f"f{i}", meta)[1].read_bytes() for i in range(2)]
    assert pdfs[0] == pdfs[1]  # a figure is a function of the stored results
    assert main(["numerics", "--config", str(cfg), "--out", str(tmp_path / "x"), "--rows", "0"]) == 2
