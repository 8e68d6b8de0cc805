"""`tune --acceptance FILE`: choose k per batch (the number of requests running together: the concurrency) from an
engine's own numbers -- its per-position acceptance counters (:mod:`harness.speedup.engine_acceptance`) and the
target's target-only tokens/s -- with no model of ours loaded.

    python -m harness tune --acceptance metrics.prom --draft eagle --target-layers 32 \\
        --target-only-rates 1:95,8:610,32:1700 --batch 1,8,32

The cost model (docs/roofline.md, "tune from an engine's own numbers"):

- **Target.**  ``--target-only-rates B:TOK_S,...`` (tokens/s of all B requests together, speculation off; two or
  more batch sizes, a batch may repeat) give step times t(B) = B / rate, fitted by least squares as
  t(B) = a + b B: a, the step's fixed cost (weights read, launches, scheduler), b, its cost per token row.  Two
  batch sizes identify both; a fit with a <= 0 or b < 0 is refused (exit 2).  A verification step of k drafts
  at batch B costs t(B) + f b B k: the k extra positions of each request pay a fraction f
  (``--verify-row-cost``) of a request's row cost.  f = 0 (the default) is the classic model (Leviathan et al.
  2023: verifying k + 1 tokens costs one target step): b is then taken as per-request work (scheduling,
  sampling, the request's own activations) and the weights are read once per step; f = 1 prices every scored
  position as a whole request, right where the step is compute-bound (large batches on a GPU).  Target-only
  rates alone do not tell the two apart.
- **Draft**, per drafted token at batch B (``--draft``): ``model``, a separate draft model: its own step
  a_d + b_d B from ``--draft-rates`` (the draft served alone, as the target's rates), or ``--draft-cost``;
  ``eagle`` / ``mtp``, a head of one decoder layer (EAGLE-1/2/3: Li et al. 2024, 2025; DeepSeek-V3's MTP module:
  DeepSeek-AI 2024, sec. 2.2): ``--draft-cost`` x t(B), by default 1 / ``--target-layers`` (one layer's share of
  the target's step; the LM head the head shares with the target is not counted: give ``--draft-cost`` where
  the vocabulary is large against a layer), or with ``--target-config`` (the target's config.json) the head's
  weight read over the target's: one layer, an fc and its LM head of ``--draft-vocab`` rows (default the
  target's vocabulary; Llama-3-8B: 0.104 of a step, not 1/32); ``ngram``: a lookup on the host, ``--draft-cost``
  (default 0).
- **Round.**  E_k = 1 + sum_i prod_{j <= i} alpha_j tokens per request from the file's conditional alphas
  (positions past the file's k are not predicted: ``--k`` must stay within them; a chain draft's alpha at
  position i is taken not to depend on k); steady-state S = E_k t(B) / (a + b B (k + 1) + k d(B)); the S of a
  call of ``--max-new-tokens`` tokens per request, requests starting together and leaving when done
  (:func:`harness.speedup.costmodel.simulate_rounds`), is the steady S times that call's ratio at the point
  estimates.  Prefill is not modelled (both sides pay it).
- **Intervals.**  ``--replicates`` parametric bootstrap draws: each position's accepted count redrawn
  Binomial(tried, alpha) (only where the file holds counts), and the rates resampled within each batch where a
  batch was given more than once (otherwise the costs are taken as exact, and the table says so).  The chosen k
  is the best point estimate; another k ties it within noise when the 95 % interval of the paired difference
  S(best) - S(k), over the same draws, holds 0; "off" (plain decoding) ties it when S's interval holds 1.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import linregress

from harness.core.atomic import staged_report
from harness.core.errors import UsageError
from harness.core.options import check_option, check_out, check_seed
from harness.core.outdir import claim_out
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, metadata
from harness.speedup.costmodel import simulate_rounds
from harness.speedup.engine_acceptance import PositionCounts, read_acceptance
from harness.speedup.roofline.model import ConfigError, ModelShape

__all__ = ["DRAFT_KINDS", "parse_rates", "fit_step", "EngineCosts", "engine_costs", "speedup_draws", "choose",
           "tune_from_counts", "run"]

DRAFT_KINDS = ("eagle", "mtp", "model", "ngram")
LEVEL = 0.95


def parse_rates(option: str, text: str) -> pd.DataFrame:
    """``B:TOK_S,...`` -> frame (batch, rate); at least two distinct batch sizes."""
    rows = []
    for part in str(text).split(","):
        b, _, r = part.strip().partition(":")
        try:
            B, rate = int(b), float(r)
        except ValueError:
            B, rate = 0, float("nan")
        check_option(B >= 1 and math.isfinite(rate) and rate > 0, option, text,
                     "comma-separated BATCH:TOKENS_PER_S pairs (batch >= 1, tokens/s > 0), e.g. 1:85.8,4:249")
        rows.append({"batch": B, "rate": rate})
    df = pd.DataFrame(rows)
    check_option(df.batch.nunique() >= 2, option, text, "rates at two or more distinct batch sizes (they identify "
                 "the step's fixed cost and its cost per token row)")
    return df


def fit_step(rates: pd.DataFrame) -> tuple[float, float]:
    """(a, b) of the least-squares step time t(B) = a + b B over t = B / rate."""
    t = rates.batch / rates.rate
    b, a = np.polyfit(rates.batch.astype(float), t.astype(float), 1)
    return float(a), float(b)


def _checked_fit(option: str, text: str, rates: pd.DataFrame, notes: list) -> tuple[float, float]:
    """(a, b) of ``rates``, b >= 0: a slope below 0 within its noise (several rates at a batch: b + 1.96 standard
    errors >= 0) is the step time flat in B, fitted as b = 0 and a = the mean step time (least squares under b >= 0,
    said in ``notes``); a slope below 0 beyond it, or with one rate per batch, is refused (exit 2)."""
    a, b = fit_step(rates)
    if b < 0 and rates.batch.value_counts().max() >= 2:
        t = (rates.batch / rates.rate).astype(float)
        fit = linregress(rates.batch.astype(float), t)
        if fit.slope + 1.96 * fit.stderr >= 0:
            a, b = float(t.mean()), 0.0
            notes.append(f"{option}: the step time is flat in B within noise (least squares gives b = "
                         f"{fit.slope:.3g} s per row, standard error {fit.stderr:.2g}): fitted with b = 0, a = the mean "
                         f"step time {a * 1e3:.3g} ms")
    check_option(a > 0 and b >= -1e-12 * a, option, text,
                 f"rates whose step time B / rate fits a + b B with a > 0 and b >= 0 (a step of more rows cannot take "
                 f"less time; a negative b within the noise of repeated rates is fitted as 0); these give a = {a:.4g} s, "
                 f"b = {b:.4g} s per row")
    return a, max(b, 0.0)


@dataclass(frozen=True)
class EngineCosts:
    """Step costs (seconds): target t(B) = a + b B; f, the share of b an extra verified position pays; a draft
    token at batch B: d_a + d_b B + d_frac t(B)."""

    a: float
    b: float
    f: float = 0.0
    d_a: float = 0.0
    d_b: float = 0.0
    d_frac: float = 0.0

    def target(self, B) -> float:
        return self.a + self.b * B

    def round(self, B, k: int) -> float:
        """One round at batch B: k draft tokens and the verification of k + 1 positions of B requests."""
        return self.a + self.b * B * (1 + self.f * k) + k * (self.d_a + self.d_b * B + self.d_frac * self.target(B))


def engine_costs(args) -> tuple[EngineCosts, pd.DataFrame, pd.DataFrame | None, str]:
    """The costs from the options (exit 2 naming the one at fault), the rate frames and the draft's cost in words
    (with what the fits of the rates had to say first)."""
    notes: list = []
    costs, tr, dr, words = _engine_costs(args, notes)
    return costs, tr, dr, "; ".join(notes + [words])


def _engine_costs(args, notes: list) -> tuple[EngineCosts, pd.DataFrame, pd.DataFrame | None, str]:
    tr = parse_rates("--target-only-rates", args.target_only_rates)
    a, b = _checked_fit("--target-only-rates", args.target_only_rates, tr, notes)
    f = args.verify_row_cost
    check_option(math.isfinite(f) and 0 <= f <= 1, "--verify-row-cost", f, "a fraction in [0, 1]")
    dr, kind, frac = None, args.draft, args.draft_cost
    if frac is not None:
        check_option(math.isfinite(frac) and frac >= 0, "--draft-cost", frac, "a fraction >= 0 of the target's step")
    if kind == "model" and frac is None:
        check_option(args.draft_rates is not None, "--draft-rates", None,
                     "given with --draft model (the draft served alone: BATCH:TOKENS_PER_S pairs), or --draft-cost")
        dr = parse_rates("--draft-rates", args.draft_rates)
        da, db = _checked_fit("--draft-rates", args.draft_rates, dr, notes)
        return EngineCosts(a, b, f, da, db), tr, dr, "draft model's own step (--draft-rates)"
    check_option(args.draft_vocab is None or args.target_config is not None, "--draft-vocab", args.draft_vocab,
                 "given only with --target-config")
    if kind in ("eagle", "mtp") and frac is None and args.target_config is not None:
        frac, words = head_fraction(args)
        return EngineCosts(a, b, f, d_frac=frac), tr, None, words
    if kind in ("eagle", "mtp") and frac is None:
        check_option(args.target_layers is not None and args.target_layers >= 1, "--target-layers",
                     args.target_layers, f"the target's decoder layers (an integer >= 1) with --draft {kind}, "
                     "or --draft-cost")
        frac = 1.0 / args.target_layers
        return EngineCosts(a, b, f, d_frac=frac), tr, None, f"one decoder layer: 1/{args.target_layers} of the target step"
    frac = 0.0 if frac is None else frac
    return EngineCosts(a, b, f, d_frac=frac), tr, None, f"{frac:g} x the target step (--draft-cost)"


def head_fraction(args) -> tuple[float, str]:
    """An EAGLE / MTP head's cost per drafted token as a fraction of the target's step, from ``--target-config``:
    the head's weight read (one target layer, an fc of 2 hidden states, its LM head of ``--draft-vocab`` rows or
    the target's: :meth:`harness.speedup.roofline.model.ModelShape.draft_head`) over the target's, the share of a
    memory-bound step it costs.  Exit 2 naming the option at fault."""
    check_option(args.target_layers is None, "--target-layers", args.target_layers,
                 "left out with --target-config (the config gives the layers)")
    check_option(args.draft_vocab is None or args.draft_vocab >= 1, "--draft-vocab", args.draft_vocab, "an integer >= 1")
    try:
        t = ModelShape.from_config(args.target_config)
    except ConfigError as e:
        raise UsageError(f"`--target-config`: {e}") from None
    head = t.draft_head(vocab=args.draft_vocab)
    frac = head.weight_bytes / t.weight_bytes
    return frac, (f"one of the target's {t.layers} layers, an fc and an LM head of {head.vocab} rows: {frac:.3g} of "
                  f"the target's weight read (--target-config)")


def expected_tokens(alpha: np.ndarray, k: int) -> np.ndarray:
    """E_k per draw: alpha (..., K) -> (...,)."""
    return 1.0 + np.cumprod(alpha[..., :k], axis=-1).sum(-1)


def _alpha_draws(pc: PositionCounts, R: int, rng) -> np.ndarray:
    """(R, K) conditional alphas: binomial redraws of each position's accepted count (the point without counts)."""
    a = pc.alpha
    if not pc.counted:
        return np.tile(a, (R, 1))
    n = np.round(pc.tried).astype(np.int64)
    x = rng.binomial(n[None, :], a[None, :], size=(R, pc.k))  # (R, K)
    return np.divide(x, n[None, :], out=np.zeros((R, pc.k)), where=n[None, :] > 0)


def _cost_draws(costs: EngineCosts, tr: pd.DataFrame, dr, R: int, rng) -> list[EngineCosts]:
    """R cost models: the rates resampled within each batch (the same model R times where no batch repeats)."""
    if tr.batch.value_counts().max() < 2 and (dr is None or dr.batch.value_counts().max() < 2):
        return [costs] * R

    def redraw(df):
        return pd.concat([g.sample(len(g), replace=True, random_state=rng) for _, g in df.groupby("batch")])
    out = []
    for _ in range(R):
        a, b = fit_step(redraw(tr))
        da, db = (costs.d_a, costs.d_b) if dr is None else fit_step(redraw(dr))
        out.append(EngineCosts(max(a, 1e-12), max(b, 0.0), costs.f, max(da, 0.0), max(db, 0.0), costs.d_frac))
    return out


def _call_factor(costs: EngineCosts, alpha: np.ndarray, k: int, B: int, N: int) -> float:
    """S of an N-token call over the steady-state S, at the point estimates (the ragged end, the last round cut)."""
    if N <= 0:
        return 1.0
    r = simulate_rounds(alpha[:k], B, N, 200, np.random.default_rng(0), compact_below=1.0)  # (B + 1,)
    spec = sum(n * costs.round(A, k) for A, n in enumerate(r) if n > 0)
    steady = expected_tokens(alpha, k) * costs.target(B) / costs.round(B, k)
    return float(N * costs.target(B) / spec / steady)


def speedup_draws(pc: PositionCounts, costs: EngineCosts, tr, dr, ks, batches, N: int, R: int, seed: int):
    """(point S (len(ks), len(batches)), draws (R, len(ks), len(batches)), steady point S)."""
    rng = np.random.default_rng(seed)
    alphas, cdraws = _alpha_draws(pc, R, rng), _cost_draws(costs, tr, dr, R, rng)
    point = np.zeros((len(ks), len(batches)))
    steady = np.zeros_like(point)
    draws = np.zeros((R, len(ks), len(batches)))
    for i, k in enumerate(ks):
        E = expected_tokens(alphas, k)  # (R,)
        for j, B in enumerate(batches):
            steady[i, j] = expected_tokens(pc.alpha, k) * costs.target(B) / costs.round(B, k)
            f = _call_factor(costs, pc.alpha, k, B, N)
            point[i, j] = steady[i, j] * f
            draws[:, i, j] = f * E * np.array([c.target(B) / c.round(B, k) for c in cdraws])
    return point, draws, steady


def choose(point: np.ndarray, draws: np.ndarray, ks, level: float = LEVEL) -> dict:
    """For one batch: point S (K,) and draws (R, K) -> the pick, its interval and what ties it within noise."""
    q = (1 - level) / 2
    best = int(np.argmax(point))
    lo, hi = np.quantile(draws, [q, 1 - q], axis=0)  # (K,) each
    ties = [ks[i] for i in range(len(ks)) if i != best
            and np.quantile(draws[:, best] - draws[:, i], q) <= 0 <= np.quantile(draws[:, best] - draws[:, i], 1 - q)]
    on = point[best] > 1.0
    off_tie = bool(lo[best] <= 1.0 <= hi[best])
    return {"k": ks[best] if on else 0, "best_k": ks[best], "speedup": float(point[best]),
            "speedup_lo": float(lo[best]), "speedup_hi": float(hi[best]), "ties": ties, "ties_off": off_tie,
            "lo": lo, "hi": hi}


def _note(c: dict, counted: bool, costs_noisy: bool) -> str:
    if not counted and not costs_noisy:
        return "no counts in the file and one rate per batch: no interval, a tie cannot be judged"
    parts = [f"k={k}" for k in c["ties"]] + (["off"] if c["ties_off"] and c["k"] else [])
    if not c["k"] and c["ties_off"]:
        parts = [f"k={c['best_k']}"]
    return "tie within noise with " + ", ".join(parts) if parts else "clear winner"


def tune_from_counts(pc: PositionCounts, costs: EngineCosts, tr, dr, ks, batches, N: int, R: int, seed: int):
    """(recommendation per batch, grid per (k, batch)) frames."""
    point, draws, steady = speedup_draws(pc, costs, tr, dr, ks, batches, N, R, seed)
    noisy = tr.batch.value_counts().max() >= 2 or (dr is not None and dr.batch.value_counts().max() >= 2)
    rec, grid = [], []
    for j, B in enumerate(batches):
        c = choose(point[:, j], draws[:, :, j], ks)
        rec.append({"batch": B, "recommendation": f"k={c['k']}" if c["k"] else "off", "k": c["k"],
                    "speedup": c["speedup"], "speedup_lo": c["speedup_lo"], "speedup_hi": c["speedup_hi"],
                    "tie": _note(c, pc.counted, noisy)})
        grid += [{"k": k, "batch": B, "speedup": point[i, j], "speedup_lo": c["lo"][i], "speedup_hi": c["hi"][i],
                  "speedup_steady": steady[i, j], "tokens_per_round": float(expected_tokens(pc.alpha, k)),
                  "round_s": costs.round(B, k), "target_step_s": costs.target(B)} for i, k in enumerate(ks)]
    return pd.DataFrame(rec), pd.DataFrame(grid)


def check_engine_args(args) -> None:
    """The options of the engine-numbers mode, before any work (exit 2 naming the one at fault)."""
    check_option(args.draft in DRAFT_KINDS, "--draft", args.draft,
                 f"one of {list(DRAFT_KINDS)} with --acceptance (the draft's kind; its cost: --draft-rates / "
                 "--draft-cost / --target-layers)")
    check_option(args.target is None, "--target", args.target,
                 "left out with --acceptance (the target enters through --target-only-rates)")
    check_option(args.target_only_rates is not None, "--target-only-rates", None,
                 "given with --acceptance (BATCH:TOKENS_PER_S pairs of the target alone at two or more batch sizes)")
    check_option(args.hardware == "local" and args.confirm == 0 and args.prompts is None and args.target_only is None,
                 "--acceptance", str(args.acceptance), "given without --hardware, --confirm, --prompts, --target-only "
                 "(no model of ours is run)")
    check_option(args.max_new_tokens >= 0, "--max-new-tokens", args.max_new_tokens, "an integer >= 0 (0: steady state)")
    check_option(10 <= args.replicates <= 100_000, "--replicates", args.replicates, "an integer in [10, 100000]")
    check_seed(args.seed)
    check_out(args.out)


def _ks(args, pc: PositionCounts) -> list[int]:
    if args.k is None:
        return list(range(1, pc.k + 1))
    try:
        ks = sorted({int(v) for v in str(args.k).split(",") if v.strip()})
    except ValueError:
        ks = []
    check_option(bool(ks) and 1 <= ks[0] and ks[-1] <= pc.k, "--k", args.k,
                 f"draft lengths in 1..{pc.k} (the positions {args.acceptance} counts; deeper ones are not predicted)")
    return ks


def _batches(args) -> list[int]:
    try:
        bs = sorted({int(v) for v in str(args.batch).split(",") if v.strip()})
    except ValueError:
        bs = []
    check_option(bool(bs) and bs[0] >= 1 and bs[-1] <= 1_000_000, "--batch", args.batch,
                 "comma-separated batch sizes (requests running together) in 1..1000000")
    return bs


def _md(rec: pd.DataFrame, grid: pd.DataFrame, alpha: pd.DataFrame, pc: PositionCounts, draft_words: str,
        costs: EngineCosts, args, what: str) -> str:
    call = (f"a call of {args.max_new_tokens} tokens per request" if args.max_new_tokens else "steady state")
    lines = [f"`tune --acceptance` ({pc.fmt}, {int(pc.tried[0])} drafts, k <= {pc.k}); draft `{args.draft}`: "
             f"{draft_words}; target step {costs.a * 1e3:.3g} ms + {costs.b * 1e3:.3g} ms per request, an extra verified "
             f"position {costs.f:g} of that; S of {call}, "
             f"95 % interval over {args.replicates} draws of {what}.", "",
             "| batch | chosen | S (95 %) | within noise |", "|---|---|---|---|"]
    lines += [f"| {r.batch} | {r.recommendation} | {r.speedup:.3f} ({r.speedup_lo:.3f}–{r.speedup_hi:.3f}) | {r.tie} |"
              for r in rec.itertuples()]
    lines += ["", "| k | batch | S (95 %) | steady-state S | E | round ms |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.k} | {r.batch} | {r.speedup:.3f} ({r.speedup_lo:.3f}–{r.speedup_hi:.3f}) | "
              f"{r.speedup_steady:.3f} | {r.tokens_per_round:.3f} | {r.round_s * 1e3:.3g} |" for r in grid.itertuples()]
    lines += ["", "Conditional acceptance per position (exact 95 %): " + ", ".join(
        f"{r.position}: {r.alpha:.3f} ({r.alpha_lo:.3f}–{r.alpha_hi:.3f})" for r in alpha.itertuples())]
    if pc.short_drafts:
        lines += [f"{pc.short_drafts:g} drafts proposed fewer than {pc.k} tokens (counted as tried only where drafted)."]
    return "\n".join(lines) + "\n"


def run(args) -> int:
    """The engine-numbers mode of ``tune`` (``--acceptance`` given)."""
    check_engine_args(args)
    pc = read_acceptance(args.acceptance)
    ks, batches = _ks(args, pc), _batches(args)
    costs, tr, dr, words = engine_costs(args)
    return _write(args, pc, ks, batches, costs, tr, dr, words)


def _write(args, pc, ks, batches, costs, tr, dr, words) -> int:
    out = claim_out(args, "tune", ("draft",))  # --out, or runs/tune/<draft kind>-<hash>; locked
    print(f"tune: S for k = {ks} at batch {batches} ({args.replicates} draws)", file=sys.stderr)
    rec, grid = tune_from_counts(pc, costs, tr, dr, ks, batches, args.max_new_tokens, args.replicates, args.seed)
    alpha = pc.frame()
    meta = metadata({**vars(args), "name": f"tune-acceptance-{args.draft}"}, args.seed)
    noisy = tr.batch.value_counts().max() >= 2 or (dr is not None and dr.batch.value_counts().max() >= 2)
    what = " and ".join((["the acceptance counts"] if pc.counted else [])
                        + (["the rates (resampled within each batch)"] if noisy else [])) or "nothing (a point)"
    text = _md(rec, grid, alpha, pc, words, costs, args, what + ("" if noisy else "; one rate per batch: the costs "
                                                                  "taken as exact"))
    with staged_report(out, "tune") as st:
        for name, df in (("recommendation.csv", rec), ("speedups.csv", grid), ("alpha.csv", alpha)):
            atomic_write_csv(st.dir / name, df, meta)
        atomic_write_text(st.dir / "recommendation.md", text)
        atomic_write_json(st.dir / "meta.json", meta)
    print(text)
    print(f"wrote {out}/")
    return 0
