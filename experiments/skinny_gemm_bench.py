"""Time one linear layer at a few token rows: PyTorch's float32 ``linear`` against the weight-streaming kernel.

    python experiments/skinny_gemm_bench.py --out results/skinny_gemm     # ~1 minute on one core

A (8192, 2048) float32 weight (64 MB, the memory-bound pair's MLP shape), rows M in 1..512, one thread,
``perf_counter``, two warm-up calls then the median of ``--repeats``; both kernels timed side by side for
each M (alternating calls), so their ratio is measured in one run.  Writes ``bench.csv`` (with a provenance
line) and ``bench.md``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.speedup.membound.skinny_linear import skinny_linear  # noqa: E402

ROWS = (1, 2, 3, 5, 9, 16, 36, 80, 144, 512)


def _median_ms(fns: dict, repeats: int) -> dict:
    for f in fns.values():
        f(), f()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    return {name: 1e3 * float(pd.Series(ts).median()) for name, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--n-out", type=int, default=8192)
    ap.add_argument("--n-in", type=int, default=2048)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    W = torch.randn(args.n_out, args.n_in, generator=torch.Generator().manual_seed(0))  # (N, K)
    rows = []
    for M in ROWS:
        x = torch.randn(M, args.n_in, generator=torch.Generator().manual_seed(M))  # (M, K)
        ms = _median_ms({"torch": lambda: torch.nn.functional.linear(x, W), "skinny": lambda: skinny_linear(x, W)},
                        args.repeats)
        rows.append({"rows": M, "torch_ms": ms["torch"], "skinny_ms": ms["skinny"]})
        print(f"M = {M:4d}: torch {ms['torch']:8.2f} ms   skinny {ms['skinny']:8.2f} ms", file=sys.stderr)
    df = pd.DataFrame(rows)
    t1 = df.loc[df.rows == 1]
    df["torch_over_T1"] = df.torch_ms / float(t1.torch_ms.iloc[0])
    df["skinny_over_T1"] = df.skinny_ms / float(t1.skinny_ms.iloc[0])
    df["torch_over_skinny"] = df.torch_ms / df.skinny_ms
    args.out.mkdir(parents=True, exist_ok=True)
    config = {"name": "skinny-gemm-bench", "n_out": args.n_out, "n_in": args.n_in, "repeats": args.repeats,
              "threads": 1, "rows": list(ROWS)}
    atomic_write_csv(args.out / "bench.csv", df.round(4), metadata(config, 0))
    md = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    md += ["| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r) + " |" for r in df.itertuples(index=False)]
    atomic_write_text(args.out / "bench.md", "\n".join(md) + "\n")
    print(f"wrote {args.out / 'bench.csv'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
