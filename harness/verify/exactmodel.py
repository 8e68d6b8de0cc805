"""The real-model certificate: a sampler on the exact transformer pair, judged against its enumerated law.

    from harness.verify.exactmodel import ExactModelSpec, exact_model_draw, exact_model_law, plan_exact_model_tests
    spec = ExactModelSpec()                                  # specimpl/assets/exact_pair/{target,draft}
    d = exact_model_draw(sampler, spec, n_sequences=4096, seed=0)   # tokens (n, J), prompt index (n,)
    law = exact_model_law(spec, SamplingConfig())            # float64 law of the first J tokens per prompt
    specs = plan_exact_model_tests(d, law)                   # χ² + finite-sample token-TV bound per law below

What is certified, and why it holds under any dependence.  The sampler under test runs on a real
Llama-architecture pair (attention, V = 16; :mod:`harness.laws.transformer`) through its ordinary torch
forward passes (KV caches, ragged batches: the prompts alternate within every batch).  The target is small
enough that the law of its first J generated tokens after each prompt is enumerated in float64, so the
output needs no scoring: the unit is the **sequence**.  Sequences are independent draws (one generator per
shard, each call's rows drawn with their own uniforms), so the counts of the n sequences of one prompt at
position t (or on a pair, or a window of W tokens) are exactly multinomial(n, Q) whatever the dependence
between the tokens *of one sequence*: the finite-sample TV bounds of the exact-law battery
(:func:`harness.verify.battery.tv_interval`) hold as stated.  (The PIT tests of the tiny pair,
:mod:`harness.verify.realmodel`, pool N·T PIT values that are independent only under H0: they can reject,
they certify nothing.)  What is *assumed*: the rows of a batch are independent of each other (a sampler
that couples the rows of one batch, e.g. shares a uniform between them, is outside this certificate).

The laws bounded, per prompt: the marginal at each of the first J positions, each consecutive pair, and
every window of W tokens inside the first J (TV(Q, p) ≤ ε for each).  p is the float64 law of the float32
checkpoint; the float32 sampler's own law sits ``floor`` from it in TV on the whole first-J law
(:func:`harness.laws.transformer.numerics_floor`), so a certified ε bounds TV to the float64 law and the floor
says how much of it float32 arithmetic alone accounts for.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

import specimpl
from harness.core.models import SHIPPED
from harness.laws.transformer import enumerate_law, numerics_floor_per_prompt
from harness.verify.battery import TestSpec, gof_evaluator
from harness.verify.sampler import check_output
from specimpl.errors import check_arg
from specimpl.hf import load_pair
from specimpl.sampling import SamplingConfig

__all__ = ["EXACT_PAIR_DIR", "EXACT_FAMILY", "ExactModelSpec", "ExactModelDraw", "ExactModelLaw",
           "load_exact_model_spec", "exact_model_draw", "merge_draws", "exact_model_law", "remember_law",
           "plan_exact_model_tests", "exact_model_counts", "exact_model_bounds", "prompt_of_family", "sequences_per_shard",
           "window_offsets", "exact_pair"]

EXACT_PAIR_DIR = Path(specimpl.__file__).resolve().parent / "assets" / "exact_pair"
EXACT_FAMILY = "exact_pair"  # tests.csv family of prompt i: f"{EXACT_FAMILY}.p{i}"


@dataclass(frozen=True)
class ExactModelSpec:
    """The ``[real_model.exact]`` table of harness/configs/verify/default.toml.

    target, draft     model folders (relative: under specimpl/assets/exact_pair) or shipped names (exact, exact-markov, ...)
    prompts           token-id prompts (ragged: every batch alternates them); the certificate is per prompt
    n_tokens          J: generated tokens per sequence, all of them enumerated (V**J cells)
    window            W: the windows certified are every W consecutive tokens inside the first J
    k                 drafts per round of the sampler
    n_sequences       sequences *per prompt* of the sampler under test (``full_n_sequences`` with --full)
    shard_sequences   sequences per task (each with its own seed): the draw spreads over the workers
    controls          control name -> sequences per prompt (harness.controls.hf names; reference sampler only)
    """

    enabled: bool = True
    target: str = "target"
    draft: str = "draft"
    prompts: tuple = ((13, 2, 5), (13, 0, 4, 2, 7, 1, 9, 3, 11, 6))
    n_tokens: int = 4
    window: int = 3
    k: int = 4
    n_sequences: int = 40_000
    full_n_sequences: int = 160_000
    batch_size: int = 2048
    shard_sequences: int = 16_384
    controls: tuple = ()
    raw: dict = field(default_factory=dict, compare=False)

    def path(self, which: str) -> Path:
        """The folder of ``target`` or ``draft``: a shipped short name (harness.core.models: exact, exact-markov,
        ...), an absolute folder, or a folder relative to specimpl/assets/exact_pair."""
        v = getattr(self, which)
        if v in SHIPPED:
            return SHIPPED[v].path
        p = Path(v)
        return p if p.is_absolute() else EXACT_PAIR_DIR / p

    def controls_of(self) -> dict:
        return dict(self.controls)


def load_exact_model_spec(table: Optional[dict]) -> ExactModelSpec:
    """An :class:`ExactModelSpec` from a parsed ``[real_model.exact]`` table (None or {}: the defaults); a bad
    value raises ValueError naming the key, the value and what is allowed."""
    t = dict(table or {})
    d = ExactModelSpec()
    known = {"enabled", "target", "draft", "prompts", "n_tokens", "window", "k", "n_sequences", "full_n_sequences",
             "batch_size", "shard_sequences", "controls"}
    extra = sorted(set(t) - known)
    check_arg(not extra, "real_model.exact", extra, f"keys among {sorted(known)}")
    ints = {}
    for key, lo in (("n_tokens", 2), ("window", 1), ("k", 1), ("n_sequences", 1), ("full_n_sequences", 1),
                    ("batch_size", 1), ("shard_sequences", 1)):
        v = t.get(key, getattr(d, key))
        check_arg(isinstance(v, int) and not isinstance(v, bool) and v >= lo, f"real_model.exact.{key}", v,
                  f"an integer >= {lo}")
        ints[key] = v
    check_arg(ints["window"] <= ints["n_tokens"], "real_model.exact.window", ints["window"],
              f"at most n_tokens = {ints['n_tokens']}")
    en = t.get("enabled", d.enabled)
    check_arg(isinstance(en, bool), "real_model.exact.enabled", en, "true or false")
    prompts = t.get("prompts", [list(p) for p in d.prompts])
    check_arg(isinstance(prompts, list) and len(prompts) >= 1 and all(
        isinstance(p, list) and len(p) >= 1 and all(isinstance(x, int) and x >= 0 for x in p) for p in prompts),
        "real_model.exact.prompts", prompts, "a non-empty list of non-empty lists of token ids >= 0")
    names = {"target": t.get("target", d.target), "draft": t.get("draft", d.draft)}
    for key, v in names.items():
        check_arg(isinstance(v, str) and v, f"real_model.exact.{key}", v, "a model folder (relative: under "
                  f"{EXACT_PAIR_DIR}) or a shipped model name ({', '.join(SHIPPED)})")
        where = SHIPPED[v].path if v in SHIPPED else (Path(v) if Path(v).is_absolute() else EXACT_PAIR_DIR / v)
        check_arg(where.is_dir(), f"real_model.exact.{key}", v, "a model folder (relative: under "
                  f"{EXACT_PAIR_DIR}) or a shipped model name ({', '.join(SHIPPED)}); no such folder")
    ctrl = t.get("controls", {})
    check_arg(isinstance(ctrl, dict), "real_model.exact.controls", ctrl, "a table name = sequences per prompt")
    for name, n in ctrl.items():
        check_arg(isinstance(n, int) and not isinstance(n, bool) and n >= 1, f"real_model.exact.controls.{name}", n,
                  "an integer >= 1 (sequences per prompt)")
    return ExactModelSpec(enabled=en, prompts=tuple(tuple(p) for p in prompts), controls=tuple(ctrl.items()),
                          raw=t, **names, **ints)


# ---------------------------------------------------------------------------------------------- the draw
@dataclass(frozen=True)
class ExactModelDraw:
    """One sampler's output on the exact pair: ``tokens`` (n, J) and ``prompt`` (n,) the prompt index of each row
    (``error`` set, ``tokens`` None, when the sampler raised or returned malformed output)."""

    name: str
    tokens: Optional[np.ndarray]
    prompt: Optional[np.ndarray]
    n_prompts: int
    accepted: int = 0
    drafted: int = 0
    wall_s: float = 0.0
    error: Optional[str] = None

    @property
    def n_sequences(self) -> int:
        return 0 if self.tokens is None else int(self.tokens.shape[0])

    @property
    def acceptance_rate(self) -> Optional[float]:
        return self.accepted / self.drafted if self.drafted else None


def exact_model_draw(sampler: Callable, spec: ExactModelSpec, *, n_sequences: int, seed: int,
                     config: SamplingConfig = SamplingConfig(), name: Optional[str] = None, catch: bool = False,
                     progress: bool = False) -> ExactModelDraw:
    """``n_sequences`` sequences of J tokens (rows alternate the prompts: row r has prompt r % P) drawn by
    ``sampler`` on the exact pair in calls of ``spec.batch_size`` rows from one generator seeded ``seed``."""
    check_arg(isinstance(n_sequences, (int, np.integer)) and n_sequences >= 1, "n_sequences", n_sequences,
              "an integer >= 1")
    target, draft = exact_pair(spec)
    for m in (target, draft):  # the KV cache sized for J tokens and a last round of k drafts (it grows if outgrown)
        m.cache_headroom = spec.n_tokens + spec.k + 2
    label = name or getattr(sampler, "__name__", "sampler")
    P, J = len(spec.prompts), spec.n_tokens
    gen = torch.Generator().manual_seed(int(seed))
    toks, acc, dr, tic = [], 0, 0, time.perf_counter()
    try:
        for s in range(0, n_sequences, spec.batch_size):
            rows = range(s, min(n_sequences, s + spec.batch_size))
            prompts = [list(spec.prompts[r % P]) for r in rows]
            res = sampler(target, draft, prompts, k=spec.k, max_new_tokens=J, config=config, eos_token_id=None,
                          generator=gen)
            toks.append(check_output(res, len(prompts), J, target.vocab_size, pad=False).cpu().numpy())
            st = getattr(res, "stats", None)
            if st is not None:
                tot = st.totals()
                acc, dr = acc + int(tot.get("accepted", 0)), dr + int(tot.get("drafted", 0))
            if progress:
                print(f"exact pair {label}: {rows.stop}/{n_sequences}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - a sampler that fails is reported, with the reason
        if not catch:
            raise
        return ExactModelDraw(label, None, None, P, wall_s=time.perf_counter() - tic, error=f"{type(e).__name__}: {e}")
    tokens = np.concatenate(toks).astype(np.int16)
    return ExactModelDraw(label, tokens, (np.arange(n_sequences) % P).astype(np.int16), P, acc, dr,
                          time.perf_counter() - tic)


def merge_draws(parts: list) -> ExactModelDraw:
    """The shards of one run as one draw (the first error, if any shard failed)."""
    bad = [p for p in parts if p.error is not None]
    if bad:
        return bad[0]
    return ExactModelDraw(parts[0].name, np.concatenate([p.tokens for p in parts]),
                          np.concatenate([p.prompt for p in parts]), parts[0].n_prompts,
                          sum(p.accepted for p in parts), sum(p.drafted for p in parts), sum(p.wall_s for p in parts))


_PAIRS: dict = {}
MODEL_LOAD_LOCK = threading.RLock()  # transformers' loading is not thread-safe (a global meta-device context):
                                     # every model load of the real-model scenario holds it


def exact_pair(spec: ExactModelSpec):
    """The (target, draft) :class:`specimpl.hf.HFModel` pair of ``spec``, float32, loaded once per process."""
    key = (str(spec.path("target")), str(spec.path("draft")))
    with MODEL_LOAD_LOCK:
        if key not in _PAIRS:
            _PAIRS[key] = load_pair(*key, local_files_only=True)
    return _PAIRS[key]


# ---------------------------------------------------------------------------------------------- the law
@dataclass(frozen=True)
class ExactModelLaw:
    """The float64 law of the first J tokens after each prompt (:class:`harness.laws.transformer.TransformerLaw`)
    and the float32 numerics floor: the largest TV over prompts between the float32 and float64 laws of the first
    J tokens (bounds the floor of every marginal, pair and window, which are functions of them)."""

    law: object
    floor: float
    window: int

    def window_law(self, i: int, s: int) -> np.ndarray:
        """(V**W,) law of tokens s .. s + W - 1 after prompt i."""
        J, V, W = self.law.n_tokens, self.law.vocab_size, self.window
        t = self.law.joint_table(i)
        return t.sum(axis=tuple(a for a in range(J) if not s <= a < s + W)).ravel()

    def of(self, test: str, i: int, pos: int) -> np.ndarray:
        """The law a test of prompt i is against: position / pair at ``pos``, joint[s:s+W]."""
        if test == "position":
            return self.law.marginals[i, pos]
        if test == "pair":
            return self.law.pairs[i, pos]
        return self.window_law(i, pos)


_LAWS: dict = {}


def _law_key(spec: ExactModelSpec, config: SamplingConfig) -> tuple:
    return str(spec.path("target")), spec.prompts, spec.n_tokens, spec.window, config.describe()


def remember_law(spec: ExactModelSpec, config: SamplingConfig, law: ExactModelLaw) -> None:
    """Keep a law computed elsewhere (a worker: :class:`harness.verify.shards.LawTask`) for this process."""
    _LAWS[_law_key(spec, config)] = law


def exact_model_law(spec: ExactModelSpec, config: SamplingConfig) -> ExactModelLaw:
    """The enumerated float64 law of ``spec``'s target after its prompts, with the float32 floor (once per process
    per target, prompts, J, W and sampling config)."""
    key = _law_key(spec, config)
    with MODEL_LOAD_LOCK:
        if key not in _LAWS:
            _LAWS[key] = _enumerate(spec, config)
    return _LAWS[key]


def _enumerate(spec: ExactModelSpec, config: SamplingConfig) -> ExactModelLaw:
    prompts = [list(p) for p in spec.prompts]
    law = enumerate_law(spec.path("target"), prompts, spec.n_tokens, config)
    floor = float(numerics_floor_per_prompt(spec.path("target"), prompts, spec.n_tokens, config).max())
    return ExactModelLaw(law, floor, spec.window)


def window_offsets(J: int, W: int) -> range:
    return range(0, J - W + 1)


def exact_model_bounds(law: ExactModelLaw, n_prompts: int):
    """Every law the certificate bounds, as (prompt i, test, position): per prompt the marginal at each position
    t < J, each consecutive pair, and every window of W tokens (``joint[s:s+W]``)."""
    J, W = law.law.n_tokens, law.window
    for i in range(n_prompts):
        yield from ((i, "position", t) for t in range(J))
        yield from ((i, "pair", t) for t in range(J - 1))
        yield from ((i, f"joint[{s}:{s + W}]", s) for s in window_offsets(J, W))


_CELLS = {"position": (1, "tokens"), "pair": (2, "pairs"), "joint": (0, "sequences")}  # tokens per cell (0: W)


def exact_model_counts(draw: ExactModelDraw, law: ExactModelLaw):
    """The counts of each law of :func:`exact_model_bounds` in ``draw``, as (i, test, position, counts, law,
    cells), the counts of whole sequences (the independent unit).  The one place these statistics are computed:
    the verdict's tests (:func:`plan_exact_model_tests`) and the stop at the need (:mod:`harness.verify.stopping`)."""
    V = law.law.vocab_size
    xs = [draw.tokens[draw.prompt == i].astype(np.int64) for i in range(draw.n_prompts)]  # (n_i, J) each
    for i, test, pos in exact_model_bounds(law, draw.n_prompts):
        kind = "joint" if test.startswith("joint") else test
        width, unit = _CELLS[kind]
        width = width or law.window
        code = np.zeros(len(xs[i]), np.int64)  # (n_i,) the cell of each sequence
        for t in range(pos, pos + width):
            code = code * V + xs[i][:, t]
        yield i, test, pos, np.bincount(code, minlength=V ** width), law.of(test, i, pos), f"{V ** width} {unit}"


def plan_exact_model_tests(draw: ExactModelDraw, law: ExactModelLaw) -> list[TestSpec]:
    """Per prompt i (family ``exact_pair.p{i}``): a χ² goodness of fit with its finite-sample token-TV bound
    (:func:`harness.verify.battery.gof_evaluator`) of each law of :func:`exact_model_counts` against its float64
    law."""
    return [TestSpec(f"{EXACT_FAMILY}.p{i}", test, pos, True, gof_evaluator(c, P, cells), True)
            for i, test, pos, c, P, cells in exact_model_counts(draw, law)]


def prompt_of_family(family: str) -> int:
    """Prompt index of a tests.csv family ``exact_pair.p{i}``."""
    return int(family.rsplit(".p", 1)[1])


def sequences_per_shard(spec: ExactModelSpec, n_per_prompt: int) -> list[int]:
    """Rows per task for ``n_per_prompt`` sequences per prompt: multiples of the prompt count (each shard alternates
    the prompts from row 0), at most ``spec.shard_sequences`` each."""
    P = len(spec.prompts)
    total, step = n_per_prompt * P, max(P, spec.shard_sequences // P * P)
    return [min(step, total - s) for s in range(0, total, step)]

