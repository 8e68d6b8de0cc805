"""The sequential randomized-PIT battery on a real (transformers) target/draft pair.

    from harness.realmodel import real_model_scenario
    r = real_model_scenario(sampler, n_sequences=1600, max_new_tokens=64, seed=0)   # ~100 k tokens
    r.lossless, r.pvalue, r.pooled.min_detectable_distance

Under H0 (the sampler's output law equals the target's) each emitted token's randomized PIT

    U_t = F_t(x_t − 1) + V_t · p_t(x_t),   V_t ~ U(0, 1),   p_t = warp(target logits | prompt, x_<t)

is iid U(0, 1) (Brockwell 2007; Czado, Gneiting & Held 2009).  The target's conditionals come from
scoring each emitted sequence with the target in *one* forward (prompt + x_1..x_{T−1}), which is an
independent computation from the sampler's incremental KV-cached calls.  Three families of tests
share the scenario's false-alarm budget ``alpha`` (Bonferroni, a third each):

    pooled     KS of all N·T values against U(0, 1)
    positions  KS per output position t = 1..T (each at alpha / (3T))
    pairs      χ² of consecutive pairs (U_t, U_t+1) on an m × m grid (catches coupled bugs)

Each result carries the smallest deviation it detects with probability ``power`` (DKW for KS; the
noncentral χ² for pairs), so a pass states what it rules out.  EOS is off (every sequence has
exactly T tokens); no pad handling is needed.

``make verify`` runs this scenario too (``[real_model]`` in harness/experiments/verify/default.toml,
:class:`RealModelSpec`): it takes the raw PIT values from :func:`real_model_draw` and puts the same
tests into its own family-wise budget (one Holm adjustment over the whole run) instead of this
module's per-scenario Bonferroni split.

``python -m harness.realmodel pit`` runs the reference sampler (≥ 100 k tokens), the real-model bug
catalogue (``specimpl.hf_bugs``), a lossless control and transformers' assisted generation, and
writes ``results/hf/pit.csv`` (resumable: finished rows are kept); ``python -m harness.realmodel
alpha`` measures every draft variant's acceptance and writes ``results/hf/alpha.csv``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from harness import stats
from specimpl.errors import check_arg
from specimpl.sampling import SamplingConfig, warp
from specimpl.speculative import PAD, speculative_generate

__all__ = ["RealModelResult", "RealModelDraw", "RealModelSpec", "load_real_model_spec", "REAL_MODEL_SCENARIO",
           "real_model_draw", "real_model_scenario", "real_model_suite", "target_pit", "measure_alpha", "main"]



@dataclass(frozen=True)
class RealModelResult:
    """One sampler on the real pair.  ``pvalue`` is the Bonferroni combination of the three families
    (reject iff ``pvalue <= alpha``); ``lossless`` = not rejected."""

    name: str
    statistic: float  # pooled KS distance
    pvalue: float
    lossless: bool
    alpha: float
    power: float
    n_sequences: int
    n_tokens: int
    T: int
    k: int
    config: str
    pooled: stats.KSResult
    position_min_pvalue: float  # smallest per-position KS p-value (raw)
    position_worst: int  # its position (0-based)
    position_min_detectable: float  # detectable KS distance of one position's test at alpha / (3T)
    pairs: stats.PairResult
    kolmogorov_upper: float  # DKW upper bound on the pooled PIT law's Kolmogorov distance, delta = alpha
    acceptance_rate: Optional[float]
    wall_sample_s: float
    wall_score_s: float
    tokens_per_s: float
    failed: tuple = field(default_factory=tuple)  # families that rejected

    def summary(self) -> str:
        verdict = "LOSSLESS (not rejected)" if self.lossless else f"REJECTED by {', '.join(self.failed)}"
        return (f"{self.name}: {verdict}; p = {self.pvalue:.3g} at alpha {self.alpha:g}; {self.n_tokens} tokens "
                f"({self.n_sequences} x {self.T}); pooled KS {self.pooled.statistic:.4f} (detects >= "
                f"{self.pooled.min_detectable_distance:.4f} w.p. {self.power:g}); pairs {self.pairs.bins}x"
                f"{self.pairs.bins} p {self.pairs.pvalue:.3g} (detects TV >= {self.pairs.min_detectable_tv:.4f}); "
                f"worst position {self.position_worst} p {self.position_min_pvalue:.3g}")

    def row(self) -> dict:
        return {
            "sampler": self.name, "verdict": "lossless" if self.lossless else "rejected",
            "failed": ";".join(self.failed), "pvalue": self.pvalue, "alpha": self.alpha, "power": self.power,
            "n_tokens": self.n_tokens, "n_sequences": self.n_sequences, "T": self.T, "k": self.k,
            "config": self.config, "pooled_ks": self.pooled.statistic, "pooled_p": self.pooled.pvalue,
            "pooled_min_detectable_ks": self.pooled.min_detectable_distance,
            "position_min_p": self.position_min_pvalue, "position_worst": self.position_worst,
            "position_min_detectable_ks": self.position_min_detectable,
            "pairs_stat": self.pairs.statistic, "pairs_p": self.pairs.pvalue, "pairs_bins": self.pairs.bins,
            "pairs_min_detectable_tv": self.pairs.min_detectable_tv, "kolmogorov_upper": self.kolmogorov_upper,
            "acceptance_rate": self.acceptance_rate, "wall_sample_s": self.wall_sample_s,
            "wall_score_s": self.wall_score_s, "tokens_per_s": self.tokens_per_s,
        }


@torch.no_grad()
def target_pit(target, prompts: list[list[int]], tokens: torch.Tensor, config: SamplingConfig,
               generator: torch.Generator, chunk: int = 256) -> np.ndarray:
    """Randomized PIT (N, T) of emitted ``tokens`` under the target's warped conditionals, each row
    scored in one forward of prompt + tokens[:-1].  PAD entries (after a sequence's end) get U = V."""
    N, T = tokens.shape
    out = []
    for s in range(0, N, chunk):
        pr = prompts[s:s + chunk]
        x = tokens[s:s + chunk].to(target.device)  # (n, T)
        pad = x == PAD
        xin = torch.cat([torch.tensor([[p[-1]] for p in pr], device=target.device), x[:, :-1]], 1)  # (n, T)
        st = target.prefill(pr)
        logits = target.forward(st, xin.masked_fill(xin == PAD, 0))  # (n, T, V)
        p = warp(logits.double(), config)  # (n, T, V)
        out.append(stats.pit_from_probs(p, x.masked_fill(pad, 0), generator=generator,
                                        pad_mask=pad if bool(pad.any()) else None))
    return np.concatenate(out, 0)


@dataclass(frozen=True)
class RealModelDraw:
    """The raw material of the real-model battery: PIT values ``u`` (N, T) of one sampler's output
    under the target, with the run's acceptance and timings.  ``error`` is set (and ``u`` is None)
    when the sampler raised or returned malformed output."""

    name: str
    u: Optional[np.ndarray]
    n_sequences: int
    T: int
    k: int
    config: str
    acceptance_rate: Optional[float]
    wall_sample_s: float
    wall_score_s: float
    error: Optional[str] = None

    @property
    def n_tokens(self) -> int:
        return self.n_sequences * self.T


def real_model_draw(sampler: Callable = speculative_generate, *, target=None, draft=None,
                    n_sequences: int = 128, max_new_tokens: int = 64, k: int = 4,
                    config: SamplingConfig = SamplingConfig(), prompt_lengths: tuple = (8, 48),
                    batch_size: int = 256, seed: int = 0, name: Optional[str] = None, progress: bool = True,
                    catch: bool = False) -> RealModelDraw:
    """Run ``sampler`` on the real pair and return the PIT values of its output (no test yet), so a
    caller can put the tests into its own family (``make verify`` does; see :func:`real_model_scenario`
    for the arguments).  ``catch``: a sampler that raises or returns malformed tokens gives a draw
    with ``error`` set instead of raising."""
    from tqdm import tqdm
    from specimpl.hf import tiny_pair_prompts
    check_arg(isinstance(n_sequences, (int, np.integer)) and n_sequences >= 1, "n_sequences", n_sequences,
              "an integer >= 1")
    check_arg(isinstance(max_new_tokens, (int, np.integer)) and max_new_tokens >= 2, "max_new_tokens",
              max_new_tokens, "an integer >= 2 (the pair test needs consecutive tokens)")
    if target is None or draft is None:
        target, draft = _tiny_pair_cached()
    label = name or getattr(sampler, "__name__", "sampler")
    lo, hi = prompt_lengths
    prompts = tiny_pair_prompts(n_sequences, length=hi, min_length=lo, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    toks, acc, drafted = [], 0, 0
    tic = time.perf_counter()
    V = target.vocab_size
    try:
        for s in tqdm(range(0, n_sequences, batch_size), desc=f"sample {label}", disable=not progress,
                      file=sys.stderr, leave=False):
            pr = prompts[s:s + batch_size]
            r = sampler(target, draft, pr, k=k, max_new_tokens=max_new_tokens, config=config,
                        eos_token_id=None, generator=gen)
            t = getattr(r, "tokens", None)
            if not torch.is_tensor(t) or tuple(t.shape) != (len(pr), max_new_tokens) or t.is_floating_point():
                raise ValueError(f"the sampler's `tokens` must be an integer tensor of shape (B, max_new_tokens) = "
                                 f"{(len(pr), max_new_tokens)}; got "
                                 f"{tuple(t.shape) if torch.is_tensor(t) else type(t).__name__}")
            t = t.cpu()
            if bool(((t < 0) | (t >= V)).any()):  # EOS is off: every position must hold a token
                raise ValueError(f"the sampler's `tokens` must hold ids in [0, {V}) (EOS is off, so no PAD); "
                                 f"got {t[(t < 0) | (t >= V)][:5].tolist()}")
            toks.append(t)
            st = getattr(r, "stats", None)
            if st is not None:
                tot = st.totals()
                acc += int(tot.get("accepted", 0))
                drafted += int(tot.get("drafted", 0))
    except Exception as e:  # noqa: BLE001 - a sampler that fails is reported, with the reason
        if not catch:
            raise
        return RealModelDraw(label, None, n_sequences, max_new_tokens, k, config.describe(), None,
                             time.perf_counter() - tic, 0.0, error=f"{type(e).__name__}: {e}")
    wall_sample = time.perf_counter() - tic
    tokens = torch.cat(toks)  # (N, T)
    tic = time.perf_counter()
    u = target_pit(target, prompts, tokens, config, torch.Generator().manual_seed(seed + 7919))
    wall_score = time.perf_counter() - tic
    return RealModelDraw(label, u, n_sequences, max_new_tokens, k, config.describe(),
                         acc / drafted if drafted else None, wall_sample, wall_score)


def real_model_scenario(sampler: Callable = speculative_generate, *, target=None, draft=None,
                        n_sequences: int = 128, max_new_tokens: int = 64, k: int = 4,
                        config: SamplingConfig = SamplingConfig(), prompt_lengths: tuple = (8, 48),
                        batch_size: int = 256, seed: int = 0, alpha: float = 1e-4, power: float = 0.99,
                        name: Optional[str] = None, progress: bool = True) -> RealModelResult:
    """Run ``sampler`` (the harness's sampler call signature) on the real pair and test its output
    with the sequential randomized-PIT battery.

    target, draft   :class:`specimpl.hf.HFModel` (default: the shipped tiny pair, loaded once).
    n_sequences     prompts (held-out stdlib text, ragged lengths in ``prompt_lengths``); the run
                    emits ``n_sequences * max_new_tokens`` tokens (EOS off).
    batch_size      prompts per sampler call (a batch-1 sampler simply loops inside).
    seed            drives the prompts, the sampler's generator and the PIT's V draws.
    alpha, power    false-alarm budget of the scenario (split over the three families) and the
                    power at which detectable deviations are reported.
    """
    d = real_model_draw(sampler, target=target, draft=draft, n_sequences=n_sequences, max_new_tokens=max_new_tokens,
                        k=k, config=config, prompt_lengths=prompt_lengths, batch_size=batch_size, seed=seed,
                        name=name, progress=progress)
    return _battery(d.u, d.name, k, config, alpha, power, d.acceptance_rate, d.wall_sample_s, d.wall_score_s)


def real_model_suite(*, n_sequences: int = 128, bug_sequences: int = 64, max_new_tokens: int = 64, k: int = 4,
                     config: SamplingConfig = SamplingConfig(), seed: int = 0, alpha: float = 1e-4,
                     bugs: Optional[list[str]] = None, progress: bool = True) -> list[tuple[str, str, RealModelResult]]:
    """The real-model scenario for ``make verify``: the reference sampler (must pass), the lossless
    control with a draft cache that is never rolled back (must pass) and the real-model bugs (each
    must be rejected; default: the target KV cache not rolled back, and the ragged-batch leaky mask).
    ``alpha`` is each run's own budget.  Returns (name, expected verdict, result) triples; all as
    expected iff ``all(r.lossless == (e == "lossless") for _, e, r in out)``.

    Cost on the shipped pair, 1 torch thread on a shared 2-core box: ≈ 0.35 s per sequence of 64
    tokens (sampling + scoring), so the defaults take ≈ 45 + 2 × 25 s."""
    from specimpl import hf_bugs
    names = bugs if bugs is not None else ["kv_not_rolled_back", "ragged_leaky_mask"]
    todo = [("reference", speculative_generate, "lossless", n_sequences)]
    todo += [(n, f, "lossless", bug_sequences) for n, f in hf_bugs.HF_LOSSLESS_CONTROLS.items()]
    todo += [(n, hf_bugs.HF_BUGS[n], "rejected", bug_sequences) for n in names]
    out = []
    for name, fn, expected, n in todo:
        r = real_model_scenario(fn, n_sequences=n, max_new_tokens=max_new_tokens, k=k, config=config, seed=seed,
                                alpha=alpha, name=name, progress=progress)
        out.append((name, expected, r))
    return out


def _battery(u: np.ndarray, name, k, config, alpha, power, acceptance, wall_sample, wall_score) -> RealModelResult:
    N, T = u.shape
    a3 = alpha / 3
    pooled = stats.pit_uniformity_test(u, alpha=a3, power=power)
    per = stats.pit_position_tests(u, alpha=a3 / T, power=power)
    pos_p = np.array([r.pvalue for r in per])
    worst = int(pos_p.argmin())
    pairs = stats.pit_pair_test(u, alpha=a3, power=power)
    fam = {"pooled": pooled.pvalue, "positions": min(1.0, T * float(pos_p.min())), "pairs": pairs.pvalue}
    p = min(1.0, 3 * min(fam.values()))
    failed = tuple(f for f, v in fam.items() if v <= a3)
    kb = stats.kolmogorov_upper_bound(u.ravel(), delta=alpha)
    return RealModelResult(
        name=name, statistic=pooled.statistic, pvalue=p, lossless=p > alpha, alpha=alpha, power=power,
        n_sequences=N, n_tokens=N * T, T=T, k=k, config=config.describe(), pooled=pooled,
        position_min_pvalue=float(pos_p.min()), position_worst=worst,
        position_min_detectable=per[0].min_detectable_distance, pairs=pairs, kolmogorov_upper=kb.upper,
        acceptance_rate=acceptance, wall_sample_s=wall_sample, wall_score_s=wall_score,
        tokens_per_s=N * T / max(wall_sample, 1e-9), failed=failed)


# --------------------------------------------------------------------- make verify's real-model scenario
REAL_MODEL_SCENARIO = "real_model"  # its name in `make verify` (``--scenario real_model``)


@dataclass(frozen=True)
class RealModelSpec:
    """The ``[real_model]`` table of ``harness/experiments/verify/default.toml``: the real-model scenario of
    ``make verify`` (the shipped tiny pair, sequential randomized PIT).

    enabled            part of the default run (``--no-real-model`` drops it; ``--scenario real_model``
                       asks for it explicitly)
    n_sequences        sequences of the sampler under test (× max_new_tokens tokens); ``full_n_sequences``
                       with ``--full``
    controls           control name -> sequences: names from ``specimpl.hf_bugs.HF_BUGS`` (must be caught)
                       and ``HF_LOSSLESS_CONTROLS`` (must pass); run only for the reference sampler
    """

    enabled: bool = True
    n_sequences: int = 512
    full_n_sequences: int = 1600
    max_new_tokens: int = 64
    k: int = 4
    prompt_lengths: tuple = (8, 48)
    batch_size: int = 256
    config: SamplingConfig = SamplingConfig()
    controls: tuple = (("kv_not_rolled_back", 128), ("draft_kv_not_rolled_back", 128))
    raw: dict = field(default_factory=dict, compare=False)

    def control_samplers(self) -> list[tuple[str, str, Callable, int]]:
        """(name, role 'lossy' | 'lossless', sampler, sequences) per control."""
        from specimpl import hf_bugs
        out = []
        for name, n in self.controls:
            if name in hf_bugs.HF_BUGS:
                out.append((name, "lossy", hf_bugs.HF_BUGS[name], n))
            else:
                out.append((name, "lossless", hf_bugs.HF_LOSSLESS_CONTROLS[name], n))
        return out


def load_real_model_spec(table: Optional[dict]) -> RealModelSpec:
    """A :class:`RealModelSpec` from a parsed ``[real_model]`` TOML table (None or {}: the defaults).
    Bad values raise ValueError naming the key."""
    from specimpl import hf_bugs
    t = dict(table or {})
    known = {"enabled", "n_sequences", "full_n_sequences", "max_new_tokens", "k", "prompt_lengths", "batch_size",
             "sampling", "controls"}
    extra = sorted(set(t) - known)
    check_arg(not extra, "real_model", extra, f"keys among {sorted(known)}")
    d = RealModelSpec()
    ints = {}
    for key, lo in (("n_sequences", 1), ("full_n_sequences", 1), ("max_new_tokens", 2), ("k", 1), ("batch_size", 1)):
        v = t.get(key, getattr(d, key))
        check_arg(isinstance(v, int) and not isinstance(v, bool) and v >= lo, f"real_model.{key}", v,
                  f"an integer >= {lo}")
        ints[key] = v
    en = t.get("enabled", d.enabled)
    check_arg(isinstance(en, bool), "real_model.enabled", en, "true or false")
    pl = tuple(t.get("prompt_lengths", d.prompt_lengths))
    check_arg(len(pl) == 2 and all(isinstance(x, int) for x in pl) and 1 <= pl[0] <= pl[1], "real_model.prompt_lengths",
              list(pl), "[min, max] integers with 1 <= min <= max")
    sam = dict(t.get("sampling", {}))
    if "top_k" in sam and sam["top_k"] == 0:
        sam["top_k"] = None
    try:
        cfg = SamplingConfig(**sam)
    except TypeError as e:
        raise ValueError(f"`real_model.sampling` must hold temperature, top_k, top_p, greedy; got {sam!r} ({e})") from None
    ctrl = t.get("controls", dict(d.controls))
    check_arg(isinstance(ctrl, dict), "real_model.controls", ctrl, "a table name = sequences")
    names = set(hf_bugs.HF_BUGS) | set(hf_bugs.HF_LOSSLESS_CONTROLS)
    for name, n in ctrl.items():
        check_arg(name in names, "real_model.controls", name, f"names among {sorted(names)}")
        check_arg(isinstance(n, int) and not isinstance(n, bool) and n >= 1, f"real_model.controls.{name}", n,
                  "an integer >= 1 (sequences)")
    return RealModelSpec(enabled=en, prompt_lengths=pl, config=cfg, controls=tuple(ctrl.items()), raw=t, **ints)


_PAIR = None


def _tiny_pair_cached():
    global _PAIR
    if _PAIR is None:
        from specimpl.hf import load_tiny_pair
        _PAIR = load_tiny_pair()
    return _PAIR


def measure_alpha(variants: Optional[list[str]] = None, *, configs=(SamplingConfig(temperature=1.0),
                                                                SamplingConfig(greedy=True)),
                  n_sequences: int = 256, max_new_tokens: int = 64, k: int = 4, seed: int = 0,
                  progress: bool = True):
    """Acceptance of each draft variant (``specimpl.hf_drafts.tiny_pair_variants``) on the shipped
    pair.  Two definitions, both reported:

    alpha_judged         accepted / judged drafts: the per-token acceptance probability α of the
                         iid model (a draft after the first rejection of a round is never judged);
                         Wilson 99 % interval alongside (treats judged drafts as independent)
    acceptance_rate      accepted / drafted = accepted / (k · rounds) (vLLM V0's "draft acceptance
                         rate"; counts the never-judged drafts after a rejection as drafted)

    plus per-position α_i = accepted at i / judged at i, mean accepted length 1 + accepted / rounds
    (vLLM V1, bonus or resample included) and emitted tokens per target call.  Returns a DataFrame."""
    import pandas as pd
    from tqdm import tqdm
    from specimpl.hf import tiny_pair_prompts
    from specimpl.hf_drafts import tiny_pair_variants
    target, draft = _tiny_pair_cached()
    drafts = tiny_pair_variants(target, draft, variants)
    prompts = tiny_pair_prompts(n_sequences, length=48, min_length=8, seed=seed)
    rows = []
    for name, d in tqdm(drafts.items(), desc="alpha", disable=not progress, file=sys.stderr):
        for cfg in configs:
            tic = time.perf_counter()
            r = speculative_generate(target, d, prompts, k=k, max_new_tokens=max_new_tokens, config=cfg,
                                     generator=torch.Generator().manual_seed(seed))
            wall = time.perf_counter() - tic
            st = r.stats
            tot = st.totals()
            judged = int(st.reached.sum())
            accepted = int(st.accepted_at.sum())
            lo, hi = _wilson(accepted, judged, 0.99)
            row = {"variant": name, "config": cfg.describe(), "k": k, "n_sequences": n_sequences,
                   "max_new_tokens": max_new_tokens, "rounds": int(tot["sequence_rounds"]),
                   "drafted": int(tot["drafted"]), "accepted": int(tot["accepted"]),
                   "acceptance_rate": float(tot["acceptance_rate"]),
                   "alpha_judged": accepted / max(judged, 1), "alpha_ci99_low": lo, "alpha_ci99_high": hi,
                   "mean_accepted_length": float(tot["mean_accepted_length"]),
                   "tokens_per_target_call": float(tot["tokens_per_target_call"]), "wall_s": wall}
            for i, a in enumerate(tot["alpha_per_position"]):
                row[f"alpha_{i + 1}"] = float(a)
            rows.append(row)
    return pd.DataFrame(rows)


def _wilson(k: int, n: int, level: float) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import norm
    z = float(norm.ppf(0.5 + level / 2))
    ph = k / n
    den = 1 + z * z / n
    c = (ph + z * z / (2 * n)) / den
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return max(0.0, c - h), min(1.0, c + h)


# ------------------------------------------------------------------------------------ command line
def _resolve(spec: str) -> Callable:
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


def _catalogue(include_hf_peer: bool) -> dict[str, tuple[Callable, str, dict]]:
    """name -> (sampler, expected verdict, overrides)."""
    from specimpl import hf_bugs
    cat = {"reference": (speculative_generate, "lossless", {})}
    cat.update({n: (f, "lossless", {}) for n, f in hf_bugs.HF_LOSSLESS_CONTROLS.items()})
    cat.update({n: (f, "rejected", {}) for n, f in hf_bugs.HF_BUGS.items()})
    if include_hf_peer:
        from specimpl.hf_assisted import hf_assisted_generate
        cat["hf_assisted"] = (hf_assisted_generate, "unknown", {})
    return cat


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sampler", action="append", default=None,
                    help="module:function with the sampler call signature (repeatable); default: the catalogue")
    ap.add_argument("--only", action="append", default=None, help="catalogue names to run")
    ap.add_argument("--n-sequences", type=int, default=1600, help="sequences per sampler (x T tokens)")
    ap.add_argument("--bug-sequences", type=int, default=256, help="sequences per negative control")
    ap.add_argument("--control-sequences", type=int, default=512, help="sequences per lossless control")
    ap.add_argument("--peer-sequences", type=int, default=512, help="sequences for HF assisted generation (batch 1)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=1e-4)
    ap.add_argument("--no-peer", action="store_true", help="skip transformers' assisted generation")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(RESULTS / "hf" / "pit.csv"))
    ap.add_argument("--fresh", action="store_true", help="ignore finished rows in --out (no resume)")


def run(args) -> int:
    import pandas as pd
    from harness.provenance import atomic_write_csv, metadata
    torch.set_num_threads(args.threads)
    config = SamplingConfig(temperature=args.temperature)
    if args.sampler:
        todo = {s: (_resolve(s), "unknown", {}) for s in args.sampler}
    else:
        todo = _catalogue(not args.no_peer)
    if args.only:
        todo = {n: v for n, v in todo.items() if n in args.only}
    out = Path(args.out)
    rows = []
    if out.exists() and not args.fresh:
        prev = pd.read_csv(out, comment="#")
        rows = prev.to_dict("records")
    key = lambda r: (r["sampler"], r["config"], int(r["T"]), int(r["k"]), int(r.get("seed", -1)))  # noqa: E731
    done = {key(r) for r in rows}
    meta_cfg = {k: v for k, v in vars(args).items() if k != "func"}
    code = 0
    for name, (fn, expected, _) in todo.items():
        n = args.n_sequences
        if expected == "rejected":
            n = args.bug_sequences
        elif name == "hf_assisted":
            n = args.peer_sequences
        elif name != "reference" and not args.sampler:
            n = args.control_sequences
        probe = {"sampler": name, "config": config.describe(), "T": args.max_new_tokens, "k": args.k, "seed": args.seed}
        if key(probe) in done:
            print(f"{name}: kept from {out}")
            continue
        r = real_model_scenario(fn, n_sequences=n, max_new_tokens=args.max_new_tokens, k=args.k, config=config,
                                seed=args.seed, alpha=args.alpha, name=name,
                                batch_size=1 if name == "hf_assisted" else 256)
        row = r.row()
        row.update(seed=args.seed, expected=expected,
                   as_expected=(expected == "unknown") or (row["verdict"] == expected))
        print(r.summary(), flush=True)
        if not row["as_expected"]:
            code = 1
        rows.append(row)
        atomic_write_csv(out, pd.DataFrame(rows), metadata(meta_cfg, args.seed))
    return code


def run_alpha(args) -> int:
    from harness.provenance import atomic_write_csv, metadata
    torch.set_num_threads(args.threads)
    df = measure_alpha(args.variant, n_sequences=args.n_sequences, max_new_tokens=args.max_new_tokens, k=args.k,
                       seed=args.seed)
    cols = ["variant", "config", "alpha_judged", "alpha_ci99_low", "alpha_ci99_high", "acceptance_rate",
            "mean_accepted_length", "tokens_per_target_call"] + [c for c in df.columns if c.startswith("alpha_") and c[6:].isdigit()]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    atomic_write_csv(args.out, df, metadata({k: v for k, v in vars(args).items() if k != "func"}, args.seed))
    print(f"wrote {args.out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.realmodel", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pit = sub.add_parser("pit", help="PIT battery: reference sampler, real-model bugs, HF assisted peer")
    add_arguments(pit)
    pit.set_defaults(func=run)
    al = sub.add_parser("alpha", help="acceptance of every draft variant at temperature 1 and greedy")
    al.add_argument("--variant", action="append", default=None, help="variant names (default: all)")
    al.add_argument("--n-sequences", type=int, default=256)
    al.add_argument("--max-new-tokens", type=int, default=64)
    al.add_argument("--k", type=int, default=4)
    al.add_argument("--seed", type=int, default=0)
    al.add_argument("--threads", type=int, default=1)
    al.add_argument("--out", default=str(RESULTS / "hf" / "alpha.csv"))
    al.set_defaults(func=run_alpha)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
