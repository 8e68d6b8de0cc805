"""The weight-streaming kernel: PyTorch's linear to float round-off, batch-invariant, clear errors."""
import os

import pytest
import torch

from harness.speedup.membound.skinny_linear import SkinnyLinear, load_kernel, skinny_linear, use_skinny_linear


@pytest.mark.parametrize("M", [1, 2, 3, 4, 5, 7, 9, 16, 37])
@pytest.mark.parametrize("N,K", [(12, 8), (13, 16), (50, 37), (259, 256), (7, 3)])
def test_matches_torch_linear(M, N, K):
    """Every micro-kernel shape, panel edges (N not a multiple of 12) and k tails (K not a multiple of 8)."""
    g = torch.Generator().manual_seed(M * 1000 + N + K)
    x, W, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)
    want = torch.nn.functional.linear(x.double(), W.double(), b.double())  # (M, N)
    got = skinny_linear(x, W, b)
    assert got.shape == (M, N) and got.dtype == torch.float32
    assert torch.allclose(got.double(), want, rtol=0, atol=1e-5 * K ** 0.5 * float(want.abs().max() + 1))


def test_batch_invariant_bitwise():
    """A row's outputs do not depend on the other rows, whatever their number."""
    g = torch.Generator().manual_seed(3)
    x, W = torch.randn(11, 64, generator=g), torch.randn(29, 64, generator=g)
    full = skinny_linear(x, W)  # (11, 29)
    for m in range(11):
        for lo in (0, max(0, m - 2)):
            part = skinny_linear(x[lo:m + 1], W)
            assert torch.equal(part[m - lo], full[m])


def test_leading_dimensions_and_a_wrong_kernel_is_caught():
    """(B, T, K) inputs keep their shape; a kernel that ignored a row would fail test_matches_torch_linear."""
    lin = torch.nn.Linear(16, 5)
    sk = SkinnyLinear(lin)
    x = torch.randn(2, 3, 16)
    assert torch.allclose(sk(x), lin(x), atol=1e-5)
    bad = x.clone()
    bad[1, 2] += 1.0
    assert not torch.allclose(sk(bad)[1, 2], lin(x)[1, 2], atol=1e-3)


def test_model_logits_unchanged():
    from specimpl.hf import load_tiny_pair
    a, _ = load_tiny_pair()
    b, _ = load_tiny_pair()
    use_skinny_linear(b)
    assert any(isinstance(m, SkinnyLinear) for m in b.model.modules())
    assert not any(isinstance(m, torch.nn.Linear) for m in b.model.modules())
    tokens = torch.randint(0, 259, (2, 9), generator=torch.Generator().manual_seed(1))  # (B, T)
    sa, sb = a.prefill(tokens[:, :6]), b.prefill(tokens[:, :6])
    la, lb = a.forward(sa, tokens[:, 5:]), b.forward(sb, tokens[:, 5:])  # (B, 4, V)
    assert torch.allclose(la, lb, rtol=1e-4, atol=1e-4 * float(la.abs().max()))


def test_bad_dtype_names_it():
    with pytest.raises(ValueError, match="model dtype.*float64"):
        SkinnyLinear(torch.nn.Linear(4, 4).double())
    with pytest.raises(ValueError, match="input dtype"):
        SkinnyLinear(torch.nn.Linear(4, 4))(torch.zeros(1, 4, dtype=torch.float64))


def test_missing_compiler_is_a_clear_error(monkeypatch):
    import harness.speedup.membound.skinny_linear as sl
    monkeypatch.setattr(sl, "_LIB", None)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(RuntimeError, match="`prepack`.*C compiler.*nonexistent"):
        load_kernel()


def test_library_is_cached_by_content():
    lib = load_kernel()
    built = list(__import__("harness.speedup.membound.skinny_linear", fromlist=["BUILD_DIR"]).BUILD_DIR.glob("*/libskinny_gemm.so"))
    assert built and lib is load_kernel()


def test_bench_script_writes_its_table(tmp_path):
    """experiments/skinny_gemm_bench.py at a toy size: both kernels timed at every row count, with provenance."""
    import importlib.util
    from pathlib import Path

    import pandas as pd
    path = Path(__file__).resolve().parents[2] / "experiments" / "skinny_gemm_bench.py"
    spec = importlib.util.spec_from_file_location("skinny_gemm_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path), "--repeats", "1", "--n-out", "24", "--n-in", "16"]) == 0
    df = pd.read_csv(tmp_path / "bench.csv")
    assert list(df.rows) == list(mod.ROWS) and (df[["torch_ms", "skinny_ms"]] > 0).all().all()
    assert (tmp_path / "bench.csv").read_text().startswith("rows,")  # a plain CSV; provenance in the sidecar
    assert (tmp_path / "bench.csv.meta.json").is_file()
    assert (tmp_path / "bench.md").read_text().count("\n") == len(mod.ROWS) + 2
