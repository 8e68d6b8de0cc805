"""The real-model scenario: a sampler's output on a real (transformers) target/draft pair, scored by the target.

    from harness.verify.realmodel import real_model_draw
    d = real_model_draw(sampler, n_sequences=384, max_new_tokens=64, seed=0)   # the shipped tiny pair
    d.u                     # (N, T) randomized PIT of every emitted token under the target

Under H0 (the sampler's output law equals the target's) each emitted token's randomized PIT

    U_t = F_t(x_t − 1) + V_t · p_t(x_t),   V_t ~ U(0, 1),   p_t = warp(target logits | prompt, x_<t)

is iid U(0, 1) (Brockwell 2007; Czado, Gneiting & Held 2009).  The target's conditionals come from
scoring each emitted sequence with the target in *one* forward (prompt + x_1..x_{T−1}), which is an
independent computation from the sampler's incremental KV-cached calls.  EOS is off (every sequence
has exactly T tokens); no pad handling is needed.

The same scoring pass gives each sequence's log-likelihood martingale M = Σ_t [log p_t(x_t) + H(p_t)]
its predictable variance V = Σ_t Var_{p_t}(log p_t) and squared increments Q (:mod:`harness.stats.loglik`;
``loglik_m``, ``loglik_v``, ``loglik_q``).

These PIT values are independent only under H0: a lossy sampler whose bug is per sequence makes the PIT values
of one sequence dependent, so no bound over the N·T pooled values is a certificate.  They are tests here (they can
reject); the real-model scenario's certificate is on the exact transformer pair, where the sequence is the unit
(:mod:`harness.verify.exactmodel`).

This module draws and scores; it tests nothing.  The tests of the PIT values (pooled KS, KS per
position, χ² of PIT pairs at lags 1..k+1) and the martingale test
(:func:`harness.verify.battery.plan_pit_value_tests`) run in the family of
``python -m harness verify`` (its real-model scenario, ``[real_model]`` in
harness/configs/verify/default.toml, :class:`RealModelSpec`) and of ``python -m harness pit`` (the
whole real-model catalogue), with one Holm adjustment over the command.  ``python -m harness alpha``
(:mod:`harness.speedup.alpha`) measures the acceptance of draft variants on the same pair.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from harness import stats
from specimpl.errors import check_arg
from specimpl.sampling import SamplingConfig, warp
from specimpl.speculative import PAD, speculative_generate
from harness.stats.loglik import martingale_terms
from specimpl.hf import tiny_pair_prompts
from harness.controls import hf as hf_bugs
from specimpl.hf import load_tiny_pair
from harness.verify.sampler import check_output
from harness.verify.exactmodel import MODEL_LOAD_LOCK, ExactModelSpec, load_exact_model_spec

__all__ = ["RealModelDraw", "RealModelSpec", "load_real_model_spec", "REAL_MODEL_SCENARIO", "real_model_draw",
           "target_pit", "tiny_pair"]


@torch.no_grad()
def target_pit(target, prompts: list[list[int]], tokens: torch.Tensor, config: SamplingConfig,
               generator: torch.Generator, chunk: int = 256, loglik: Optional[list] = None) -> np.ndarray:
    """Randomized PIT (N, T) of emitted ``tokens`` under the target's warped conditionals, each row
    scored in one forward of prompt + tokens[:-1].  PAD entries (after a sequence's end) get U = V.
    ``loglik`` (a list): the per-sequence log-likelihood martingale and its predictable variance from the
    same scoring pass (:func:`harness.stats.loglik.martingale_terms`) are appended to it as (M, V, Q), each (N,)."""
    N, T = tokens.shape
    out, ms = [], []
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
        if loglik is not None:
            ms.append(martingale_terms(p, x.masked_fill(pad, 0), pad))  # (M, V, Q), each (n,)
    if loglik is not None:
        loglik.append(tuple(np.concatenate(c) for c in zip(*ms)))
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
    loglik_m: Optional[np.ndarray] = None  # (N,) per-sequence M = Σ_t [log p_t(x_t) + H(p_t)] (harness.stats.loglik)
    loglik_v: Optional[np.ndarray] = None  # (N,) its predictable variance Σ_t Var_{p_t}(log p_t)
    loglik_q: Optional[np.ndarray] = None  # (N,) its squared increments Σ_t (log p_t(x_t) + H(p_t))²

    @property
    def n_tokens(self) -> int:
        return self.n_sequences * self.T


def real_model_draw(sampler: Callable = speculative_generate, *, target=None, draft=None,
                    n_sequences: int = 128, max_new_tokens: int = 64, k: int = 4,
                    config: SamplingConfig = SamplingConfig(), prompt_lengths: tuple = (8, 48),
                    batch_size: int = 256, seed: int = 0, name: Optional[str] = None, progress: bool = True,
                    catch: bool = False) -> RealModelDraw:
    """Run ``sampler`` (the harness's sampler call signature) on the real pair and return the PIT values
    of its output (no test yet: callers put the tests into their family).

    target, draft   :class:`specimpl.hf.HFModel` (default: the shipped tiny pair, loaded once).
    n_sequences     prompts (held-out stdlib text, ragged lengths in ``prompt_lengths``); the run
                    emits ``n_sequences * max_new_tokens`` tokens (EOS off).
    batch_size      prompts per sampler call (a batch-1 sampler simply loops inside).
    seed            drives the prompts, the sampler's generator and the PIT's V draws.
    catch           a sampler that raises or returns malformed tokens gives a draw with ``error`` set
                    instead of raising.
    """
    check_arg(isinstance(n_sequences, (int, np.integer)) and n_sequences >= 1, "n_sequences", n_sequences,
              "an integer >= 1")
    check_arg(isinstance(max_new_tokens, (int, np.integer)) and max_new_tokens >= 2, "max_new_tokens",
              max_new_tokens, "an integer >= 2 (the pair test needs consecutive tokens)")
    if target is None or draft is None:
        target, draft = tiny_pair()
    label = name or getattr(sampler, "__name__", "sampler")
    lo, hi = prompt_lengths
    prompts = tiny_pair_prompts(n_sequences, length=hi, min_length=lo, seed=seed)
    tic = time.perf_counter()
    try:
        tokens, acceptance = _sample(sampler, target, draft, prompts, k=k, max_new_tokens=max_new_tokens,
                                     config=config, batch_size=batch_size, seed=seed, label=label, progress=progress)
    except Exception as e:  # noqa: BLE001 - a sampler that fails is reported, with the reason
        if not catch:
            raise
        return RealModelDraw(label, None, n_sequences, max_new_tokens, k, config.describe(), None,
                             time.perf_counter() - tic, 0.0, error=f"{type(e).__name__}: {e}")
    wall_sample = time.perf_counter() - tic
    tic = time.perf_counter()
    ll: list = []
    u = target_pit(target, prompts, tokens, config, torch.Generator().manual_seed(seed + 7919), loglik=ll)
    return RealModelDraw(label, u, n_sequences, max_new_tokens, k, config.describe(), acceptance, wall_sample,
                         time.perf_counter() - tic, loglik_m=ll[0][0], loglik_v=ll[0][1],
                         loglik_q=ll[0][2])


def _sample(sampler, target, draft, prompts, *, k, max_new_tokens, config, batch_size, seed, label,
            progress) -> tuple[torch.Tensor, Optional[float]]:
    """The tokens (N, T) the sampler emits for ``prompts`` in calls of ``batch_size``, checked, and its
    acceptance rate (accepted / drafted; None without instrumentation)."""
    from tqdm import tqdm
    gen = torch.Generator().manual_seed(seed)
    toks, accepted, drafted = [], 0, 0
    for s in tqdm(range(0, len(prompts), batch_size), desc=f"sample {label}", disable=not progress,
                  file=sys.stderr, leave=False):
        pr = prompts[s:s + batch_size]
        r = sampler(target, draft, pr, k=k, max_new_tokens=max_new_tokens, config=config, eos_token_id=None,
                    generator=gen)
        toks.append(check_output(r, len(pr), max_new_tokens, target.vocab_size, pad=False).cpu())
        st = getattr(r, "stats", None)
        if st is not None:
            tot = st.totals()
            accepted += int(tot.get("accepted", 0))
            drafted += int(tot.get("drafted", 0))
    return torch.cat(toks), (accepted / drafted if drafted else None)


# ------------------------------------------------------------- the real-model scenario of verify and pit
REAL_MODEL_SCENARIO = "real_model"  # its name in reports and in `python -m harness verify --scenario real_model`


@dataclass(frozen=True)
class RealModelSpec:
    """The ``[real_model]`` table of ``harness/configs/verify/default.toml``: the real-model scenario of
    ``make verify`` (the shipped tiny pair, sequential randomized PIT).

    enabled            part of the default run (``--no-real-model`` drops it; ``--scenario real_model``
                       asks for it explicitly)
    n_sequences        sequences of the sampler under test (× max_new_tokens tokens); ``full_n_sequences``
                       with ``--full``
    controls           control name -> sequences: names from ``harness.controls.hf.HF_BUGS`` (must be caught)
                       and ``HF_LOSSLESS_CONTROLS`` (must pass); run only for the reference sampler
    exact              the certificate: the same samplers on the exact transformer pair
                       (:class:`harness.verify.exactmodel.ExactModelSpec`, ``[real_model.exact]``); the PIT tests
                       of the tiny pair certify nothing (their pooled values are independent only under H0)
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
    exact: Optional[ExactModelSpec] = None  # the certificate on the exact pair ([real_model.exact]); None: none
    raw: dict = field(default_factory=dict, compare=False)

    def control_samplers(self) -> list[tuple[str, str, Callable, int]]:
        """(name, role 'lossy' | 'lossless', sampler, sequences) per control."""
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
    t = dict(table or {})
    known = {"enabled", "n_sequences", "full_n_sequences", "max_new_tokens", "k", "prompt_lengths", "batch_size",
             "sampling", "controls", "exact"}
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
    exact = load_exact_model_spec(t["exact"]) if "exact" in t else None
    if exact is not None:
        unknown = sorted(set(exact.controls_of()) - set(names))
        check_arg(not unknown, "real_model.exact.controls", unknown, f"names among {sorted(names)}")
        exact = exact if exact.enabled else None
    return RealModelSpec(enabled=en, prompt_lengths=pl, config=cfg, controls=tuple(ctrl.items()), exact=exact, raw=t,
                         **ints)


_PAIR = None


def tiny_pair():
    """The shipped tiny (target, draft) pair, loaded once per process."""
    global _PAIR
    with MODEL_LOAD_LOCK:  # not loaded by two threads at once (transformers' loading is not thread-safe)
        if _PAIR is None:
            _PAIR = load_tiny_pair()
    return _PAIR
