"""Does verification from a ragged state cost more than from a uniform one?  (issue 25, item 3)

    python experiments/ragged_verify_probe.py --target build/membound_pair/w8_x4_18542ba44a66c3d6/target \\
        --prepack skinny --batch 16,4 --passes 10 --out results/tune/probe

The memory-bound target's forward of n = 1, 2, 3 tokens for each of B sequences, from a uniform state (every
row holding ``--context`` tokens: the KV cache's slice writes and one shared mask) and from a ragged one (rows
rolled back by 0-3 tokens, as speculation leaves them: scatter writes, a mask per row; the longest row at
``--context``, so both attend over as many slots).  Every pass times each of the six calls once, in a fresh
random order; the ratios are taken within a pass (side by side) and summarised by their median and quartiles
over passes.  Process CPU time, one thread.  Writes ragged.csv (every pass) and ragged.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from harness.core.provenance import atomic_write_csv, atomic_write_text, command_line, metadata  # noqa: E402
from harness.speedup.membound.widen import apply_prepack  # noqa: E402
from specimpl.hf import HFModel  # noqa: E402

POINTS = [("U", 1), ("U", 2), ("U", 3), ("R", 1), ("R", 2), ("R", 3)]


def _set(model, state, lengths):
    state.lengths = lengths.clone()
    model._sync_host(state)  # the slots up to every length hold prefilled keys and values


@torch.no_grad()
def probe(model, B: int, context: int, passes: int, seed: int) -> pd.DataFrame:
    g, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    V = model.vocab_size
    state = model.prefill(torch.randint(0, V, (B, context + 8), generator=g).tolist())
    uniform = torch.full((B,), context, dtype=torch.long)
    ragged = uniform - torch.as_tensor(rng.integers(0, 4, B))
    ragged[0] = context
    rows = []
    for p in range(passes + 1):  # pass 0: warm-up
        row = {"batch": B, "pass": p}
        for i in rng.permutation(len(POINTS)):
            kind, n = POINTS[i]
            _set(model, state, uniform if kind == "U" else ragged)
            tok = torch.randint(0, V, (B, n), generator=g)
            c0 = time.process_time()
            model.forward(state, tok)
            row[f"{kind}{n}"] = time.process_time() - c0
        if p:
            rows.append(row)
    return pd.DataFrame(rows)


def _summary(df: pd.DataFrame) -> list[str]:
    out = ["| batch | ratio | median | q25 | q75 | passes |", "|---|---|---|---|---|---|"]
    for B, d in df.groupby("batch", sort=False):
        for name, r in (("R(1) / U(1)", d.R1 / d.U1), ("R(2) / U(2)", d.R2 / d.U2), ("R(3) / U(3)", d.R3 / d.U3),
                        ("U(2) / U(1)", d.U2 / d.U1), ("R(2) / U(1)", d.R2 / d.U1)):
            out.append(f"| {B} | {name} | {r.median():.3f} | {r.quantile(.25):.3f} | {r.quantile(.75):.3f} | {len(r)} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="a local HF folder")
    ap.add_argument("--prepack", choices=("none", "mkldnn", "skinny"), default="none")
    ap.add_argument("--batch", default="16,4")
    ap.add_argument("--context", type=int, default=48, help="tokens held (tune profiles at L + max_new_tokens // 2)")
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "results" / "tune" / "probe")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = HFModel.from_pretrained(args.target, local_files_only=True)
    if args.prepack != "none":
        apply_prepack(model, args.prepack)
    df = pd.concat([probe(model, int(B), args.context, args.passes, args.seed) for B in args.batch.split(",")])
    meta = metadata({**vars(args), "name": "ragged-verify-probe"}, args.seed)
    meta["command"] = command_line([__file__, *(argv if argv is not None else sys.argv[1:])])  # paths portable
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(args.out / "ragged.csv", df, meta)
    text = "\n".join([f"Verification from a ragged vs a uniform state (process CPU time, ratios within a pass). "
                      f"Command: `{meta['command']}`; commit {meta['commit']}; load average "
                      f"{meta['machine'].get('loadavg_1_5_15')}.", ""] + _summary(df)) + "\n"
    atomic_write_text(args.out / "ragged.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
