"""Exact laws of a small transformer's output: the first J generated tokens, enumerated in float64.

    from harness.laws.transformer import enumerate_law, exact_acceptance, numerics_floor, markov_law
    law = enumerate_law("specimpl/assets/exact_pair/target", [[13, 0, 1]], 4, SamplingConfig(0.8))
    law.joint       # (n_prompts, V**J) float64, row-major (x_0 slowest), sums to 1 per prompt
    law.marginals   # (n_prompts, J, V) law of the token at each generated position
    law.pairs       # (n_prompts, J - 1, V * V) law of consecutive pairs, flattened x_t * V + x_{t+1}

What is computed.  For a prompt c and the warped next-token law p(. | c, x_<t) =
``specimpl.sampling.warp(logits, config)`` (the one function the samplers use, so temperature / top-k /
top-p are applied in exactly one place), the law of the first J tokens is

    P(x_0 .. x_{J-1}) = prod_t p(x_t | c, x_<t),

over all V**J sequences.  EOS is an ordinary token here (no absorbing end): the law is that of an
engine run with EOS ignored, J tokens every time.

How.  Level by level over the prefix tree with a KV cache: level 0 is one forward of the prompt; at level
j the V**j prefixes of length j are scored with one batched one-token forward whose cache is the parent
level's, each parent row repeated V times (child row r * V + x extends parent r by token x).  The
conditionals are warped in the model's dtype and multiplied in float64.  Levels with more than
``max_batch`` rows are processed in chunks of parents; the cache of the last level is never kept.

Exactness.  The model runs in float64 (a float32 checkpoint is cast exactly).  One caveat of transformers'
Llama: the rotary tables are computed in float32 (``inv_freq`` and the angle products are ``.float()``)
and then cast, so "the float64 law" is the law of the float64 model with float32 RoPE angles -- the same
tables the float32 engines use.  The Markov variant does not depend on positions at all.

Markov variant.  A Llama whose every attention output projection is zero (``markov_*`` in
specimpl/assets/exact_pair) adds exactly 0 from attention, so its logits depend on the current token only:
:func:`transition_matrix` is one forward over the V tokens, and the law at any position t is the initial
law (row of the prompt's last token) times P**t (:func:`markov_marginal`).

Depends on specimpl: ``specimpl.sampling.SamplingConfig`` / ``warp``, ``specimpl.hf.HFModel`` (loading:
safetensors only, no remote code, causality probe), ``specimpl.model.as_prompt_list`` (prompt checks),
``specimpl.errors.check_arg`` / ``as_int``.
"""
from __future__ import annotations

import copy
import inspect
import os
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np
import torch

from specimpl.errors import as_int, check_arg
from specimpl.hf import HFModel
from specimpl.model import as_prompt_list
from specimpl.sampling import SamplingConfig, warp

__all__ = ["TransformerLaw", "load_model", "prefix_conditionals", "joint_from_conditionals", "enumerate_law",
           "marginals_from_joint", "pairs_from_joint", "exact_acceptance", "entropy_per_position",
           "numerics_floor", "numerics_floor_per_prompt", "check_markov", "transition_matrix", "markov_initial",
           "markov_marginal", "markov_joint_at", "markov_law", "DEFAULT_MAX_CELLS", "DEFAULT_MAX_BATCH"]

DEFAULT_MAX_CELLS = 1 << 20  # V**J per prompt (V = 16: J <= 5)
DEFAULT_MAX_BATCH = 4096  # rows of one batched forward

ModelLike = Union[str, os.PathLike, HFModel, torch.nn.Module]


@dataclass(frozen=True)
class TransformerLaw:
    """Exact law of the first J generated tokens, per prompt (all arrays float64).

    joint (n, V**J)        P(x_0..x_{J-1}), row-major: index = sum_t x_t * V**(J-1-t)
    marginals (n, J, V)    law of x_t
    pairs (n, J-1, V*V)    law of (x_t, x_{t+1}), flattened x_t * V + x_{t+1}
    """

    joint: np.ndarray
    marginals: np.ndarray
    pairs: np.ndarray
    vocab_size: int
    n_tokens: int
    prompts: tuple
    config: SamplingConfig

    def joint_table(self, i: int) -> np.ndarray:
        """Prompt i's joint as a (V,) * J array (a view)."""
        return self.joint[i].reshape((self.vocab_size,) * self.n_tokens)


# ---------------------------------------------------------------------------------------------
# Loading and argument checks
# ---------------------------------------------------------------------------------------------
def load_model(model: ModelLike, dtype: torch.dtype = torch.float64,
               attn_implementation: Optional[str] = "sdpa") -> torch.nn.Module:
    """A causal LM in ``dtype``, in eval mode.

    model : a local directory or hub name (loaded by :meth:`specimpl.hf.HFModel.from_pretrained`:
            safetensors only, no remote code, config and causality checks), an :class:`HFModel`, or a
            loaded transformers model.  A model in another dtype is *copied* and cast (the caller's model
            is left as it is).
    attn_implementation : for a path only.  "eager" is refused in float64: transformers' eager attention
            computes its softmax in float32 (``softmax(..., dtype=torch.float32)``), which would put a
            ~1e-8 float32 error into "the exact law"."""
    if isinstance(model, (str, os.PathLike)):
        m = HFModel.from_pretrained(model, dtype=dtype, load_tokenizer=False,
                                    attn_implementation=attn_implementation).model
    elif isinstance(model, HFModel):
        m = model.model
    elif isinstance(model, torch.nn.Module):
        m = model
    else:
        check_arg(False, "model", type(model).__name__, "a model directory, a hub name, an HFModel or a "
                  "transformers causal LM (torch.nn.Module)")
    attn = getattr(m.config, "_attn_implementation", None)
    check_arg(not (dtype == torch.float64 and attn == "eager"), "attn_implementation", attn,
              "'sdpa' (or another float64 kernel) for a float64 law: transformers' eager attention takes its "
              "softmax in float32")
    if next(m.parameters()).dtype != dtype:
        m = copy.deepcopy(m).to(dtype)
    return m.eval()


def vocab_size_of(model: torch.nn.Module) -> int:
    """Rows of the output embedding (the width of the logits)."""
    out = model.get_output_embeddings()
    return int(out.weight.shape[0]) if out is not None else int(model.config.vocab_size)


def _check_n_tokens(n_tokens, vocab_size: int, max_cells: int) -> int:
    J = as_int(n_tokens)
    check_arg(J is not None and J >= 1, "n_tokens", n_tokens, "an integer >= 1")
    check_arg(vocab_size ** J <= max_cells, "n_tokens", n_tokens,
              f"small enough that V**J <= max_cells = {max_cells} (V = {vocab_size})")
    return J


def _check_config(config) -> SamplingConfig:
    check_arg(isinstance(config, SamplingConfig), "config", config, "a specimpl.sampling.SamplingConfig")
    return config


def _check_length(model: torch.nn.Module, prompt: list, n_tokens: int) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None:
        check_arg(len(prompt) + n_tokens - 1 <= limit, "prompts", f"a prompt of length {len(prompt)}",
                  f"at most max_position_embeddings - n_tokens + 1 = {limit - n_tokens + 1} tokens long")


# ---------------------------------------------------------------------------------------------
# The enumeration
# ---------------------------------------------------------------------------------------------
def _cache_kw(model: torch.nn.Module) -> str:
    """The forward keyword of the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _dynamic_cache() -> "DynamicCache":
    """A fresh transformers DynamicCache (transformers imported here, on first use: a command that never touches a
    transformer law does not pay its ~1-2 s import)."""
    from transformers import DynamicCache
    return DynamicCache()


def _cache_from(kv: list, index: torch.Tensor, repeats: int) -> "DynamicCache":
    """A fresh DynamicCache holding rows ``index`` of every layer's (keys, values), each repeated ``repeats``
    times (row i * repeats + x is a copy of row index[i])."""
    cache = _dynamic_cache()
    for layer, (k, v) in enumerate(kv):  # k, v (R, H, S, D)
        cache.update(k.index_select(0, index).repeat_interleave(repeats, 0),
                     v.index_select(0, index).repeat_interleave(repeats, 0), layer)
    return cache


def _kv_of(cache: DynamicCache) -> list:
    """Every layer's (keys, values) of a cache, each (R, H, S, D)."""
    return [(item[0], item[1]) for item in cache]


@torch.inference_mode()
def _prefill(model: torch.nn.Module, prompt: list, config: SamplingConfig) -> tuple:
    """One forward of the whole prompt: (level-0 law (1, V) in the model's dtype, the cache's (keys, values))."""
    dev = next(model.parameters()).device
    cache = _dynamic_cache()
    ids = torch.tensor([prompt], dtype=torch.long, device=dev)  # (1, P)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{_cache_kw(model): cache})
    return warp(out.logits[:, -1], config), _kv_of(cache)  # (1, V)


@torch.inference_mode()
def _level(model: torch.nn.Module, kv: list, config: SamplingConfig, keep_cache: bool, max_batch: int) -> tuple:
    """Score every child of the R parent prefixes in ``kv``: returns (law (R * V, V), the children's cache or None)."""
    V = vocab_size_of(model)
    R = kv[0][0].shape[0]
    dev = kv[0][0].device
    per = max(1, max_batch // V)  # parents per chunk
    laws, new_kv = [], []
    for a in range(0, R, per):
        idx = torch.arange(a, min(R, a + per), device=dev)  # (c,)
        cache = _cache_from(kv, idx, V)
        tokens = torch.arange(V, device=dev).repeat(idx.shape[0]).unsqueeze(1)  # (c * V, 1) child token x
        out = model(input_ids=tokens, use_cache=True, **{_cache_kw(model): cache})
        laws.append(warp(out.logits[:, -1], config))  # (c * V, V)
        if keep_cache:
            new_kv.append(_kv_of(cache))
    if not keep_cache:
        return torch.cat(laws), None
    merged = [(torch.cat([c[i][0] for c in new_kv]), torch.cat([c[i][1] for c in new_kv])) for i in range(len(kv))]
    return torch.cat(laws), merged  # (R * V, V)


def prefix_conditionals(model: torch.nn.Module, prompt: Sequence[int], n_tokens: int,
                        config: SamplingConfig = SamplingConfig(), max_batch: int = DEFAULT_MAX_BATCH) -> list:
    """The warped next-token laws at every node of the prefix tree, level by level.

    Returns J arrays, float64 (converted after warping in the model's dtype): level j is (V**j, V), row r the
    law of x_j after the prefix whose tokens are the base-V digits of r (x_0 most significant)."""
    law, kv = _prefill(model, list(prompt), config)
    levels = [law.double().cpu().numpy()]  # (1, V)
    for j in range(1, n_tokens):
        law, kv = _level(model, kv, config, keep_cache=j < n_tokens - 1, max_batch=max_batch)
        levels.append(law.double().cpu().numpy())  # (V**j, V)
    return levels


def joint_from_conditionals(levels: list) -> np.ndarray:
    """(V**J,) float64 product of the conditionals along every path, row-major (x_0 slowest)."""
    joint = np.ones(1)
    for cond in levels:  # cond (V**j, V)
        joint = (joint[:, None] * cond).ravel()  # (V**(j+1),)
    return joint


def marginals_from_joint(joint: np.ndarray, vocab_size: int, n_tokens: int) -> np.ndarray:
    """(J, V) law of each position from one prompt's joint (V**J,)."""
    t = joint.reshape((vocab_size,) * n_tokens)
    return np.stack([t.sum(axis=tuple(a for a in range(n_tokens) if a != i)) for i in range(n_tokens)])


def pairs_from_joint(joint: np.ndarray, vocab_size: int, n_tokens: int) -> np.ndarray:
    """(J-1, V*V) law of consecutive pairs (x_t, x_{t+1}), flattened x_t * V + x_{t+1}."""
    t = joint.reshape((vocab_size,) * n_tokens)
    out = [t.sum(axis=tuple(a for a in range(n_tokens) if a not in (i, i + 1))).ravel() for i in range(n_tokens - 1)]
    return np.stack(out) if out else np.zeros((0, vocab_size * vocab_size))


def _assemble(joints: list, V: int, J: int, prompts: list, config: SamplingConfig) -> TransformerLaw:
    joint = np.stack(joints)  # (n, V**J)
    marg = np.stack([marginals_from_joint(j, V, J) for j in joints])  # (n, J, V)
    pairs = np.stack([pairs_from_joint(j, V, J) for j in joints])  # (n, J-1, V*V)
    return TransformerLaw(joint, marg, pairs, V, J, tuple(tuple(p) for p in prompts), config)


def enumerate_law(model: ModelLike, prompts, n_tokens: int, config: SamplingConfig = SamplingConfig(), *,
                  dtype: torch.dtype = torch.float64, max_cells: int = DEFAULT_MAX_CELLS,
                  max_batch: int = DEFAULT_MAX_BATCH) -> TransformerLaw:
    """Exact law of the first ``n_tokens`` generated tokens after each prompt (see the module docstring).

    model : see :func:`load_model` (cast to ``dtype``; float64 for the exact law)
    prompts : a list of non-empty token-id lists, or a (B, P) integer tensor
    n_tokens : J >= 1 with V**J <= ``max_cells``."""
    m = load_model(model, dtype)
    V = vocab_size_of(m)
    config = _check_config(config)
    J = _check_n_tokens(n_tokens, V, max_cells)
    plist = as_prompt_list(prompts, V)
    joints = []
    for p in plist:
        _check_length(m, p, J)
        joints.append(joint_from_conditionals(prefix_conditionals(m, p, J, config, max_batch)))
    return _assemble(joints, V, J, plist, config)


# ---------------------------------------------------------------------------------------------
# Quantities along the prefix tree: acceptance, entropy, the float32 numerics floor
# ---------------------------------------------------------------------------------------------
def _path_weights(levels: list) -> list:
    """Target probability of every level-j prefix: J arrays (V**j,)."""
    w, out = np.ones(1), []
    for cond in levels:
        out.append(w)
        w = (w[:, None] * cond).ravel()
    return out


def exact_acceptance(target: ModelLike, draft: ModelLike, prompts, n_tokens: int,
                     config: SamplingConfig = SamplingConfig(), *, max_cells: int = DEFAULT_MAX_CELLS) -> np.ndarray:
    """(n_prompts, J) alpha_t = E_{x_<t ~ p} sum_x min(p(x | c, x_<t), q(x | c, x_<t)), in float64.

    The acceptance probability of a draft token at generated position t when the context follows the
    target's law (the per-position overlap of the two warped laws, not the round-structured statistics)."""
    mt, md = load_model(target), load_model(draft)
    V = vocab_size_of(mt)
    check_arg(vocab_size_of(md) == V, "draft", f"a model with vocabulary {vocab_size_of(md)}", f"vocabulary {V}")
    J = _check_n_tokens(n_tokens, V, max_cells)
    config = _check_config(config)
    out = []
    for p in as_prompt_list(prompts, V):
        lp = prefix_conditionals(mt, p, J, config)
        lq = prefix_conditionals(md, p, J, config)
        w = _path_weights(lp)
        out.append([float(w[j] @ np.minimum(lp[j], lq[j]).sum(1)) for j in range(J)])
    return np.array(out)  # (n, J)


def entropy_per_position(model: ModelLike, prompts, n_tokens: int, config: SamplingConfig = SamplingConfig(), *,
                         max_cells: int = DEFAULT_MAX_CELLS) -> np.ndarray:
    """(n_prompts, J) expected conditional entropy E_{x_<t} H(p(. | c, x_<t)) in nats, in float64."""
    m = load_model(model)
    V = vocab_size_of(m)
    J = _check_n_tokens(n_tokens, V, max_cells)
    config = _check_config(config)
    out = []
    for p in as_prompt_list(prompts, V):
        lp = prefix_conditionals(m, p, J, config)
        w = _path_weights(lp)
        with np.errstate(divide="ignore", invalid="ignore"):
            h = [-(np.where(c > 0, c * np.log(c), 0.0)).sum(1) for c in lp]  # (V**j,) each
        out.append([float(w[j] @ h[j]) for j in range(J)])
    return np.array(out)


def numerics_floor_per_prompt(model_dir: ModelLike, prompts, n_tokens: int,
                              config: SamplingConfig = SamplingConfig()) -> np.ndarray:
    """(n_prompts,) TV between the joint law enumerated with the model and warp in float32 and the float64 law.

    Each float32 conditional is the law a float32 engine would draw from (same batched KV-cached forward);
    the products along the paths are taken in float64 either way."""
    exact = enumerate_law(model_dir, prompts, n_tokens, config, dtype=torch.float64)
    f32 = enumerate_law(model_dir, prompts, n_tokens, config, dtype=torch.float32)
    return 0.5 * np.abs(exact.joint - f32.joint).sum(1)


def numerics_floor(model_dir: ModelLike, prompts, n_tokens: int, config: SamplingConfig = SamplingConfig()) -> float:
    """Largest TV over prompts between the float32 and the float64 joint law of the first J tokens: the
    part of a certificate's epsilon that float32 arithmetic alone accounts for."""
    return float(numerics_floor_per_prompt(model_dir, prompts, n_tokens, config).max())


# ---------------------------------------------------------------------------------------------
# Markov models (every attention o_proj zero)
# ---------------------------------------------------------------------------------------------
def check_markov(model: torch.nn.Module) -> None:
    """Raise a ValueError unless every decoder layer's attention output projection is exactly zero."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    check_arg(layers is not None and len(layers) > 0, "model", type(model).__name__,
              "a Llama-style causal LM (model.model.layers[i].self_attn.o_proj)")
    for i, layer in enumerate(layers):
        o = getattr(getattr(layer, "self_attn", None), "o_proj", None)
        check_arg(o is not None, "model", f"layer {i} without self_attn.o_proj", "a Llama-style causal LM")
        top = float(o.weight.detach().abs().max())
        check_arg(top == 0.0 and (o.bias is None or not bool(o.bias.any())), "model",
                  f"layer {i} with max |o_proj| = {top:.3g}", "a Markov model: every attention o_proj exactly 0")


@torch.inference_mode()
def transition_matrix(model: ModelLike, config: SamplingConfig = SamplingConfig()) -> np.ndarray:
    """(V, V) float64 P[a, b] = warped law of the next token after current token a, for a Markov model:
    one forward of the V one-token sequences (position plays no part when attention adds 0)."""
    m = load_model(model)
    check_markov(m)
    V = vocab_size_of(m)
    ids = torch.arange(V, device=next(m.parameters()).device).unsqueeze(1)  # (V, 1)
    logits = m(input_ids=ids, use_cache=False).logits[:, -1]  # (V, V)
    return warp(logits, _check_config(config)).double().cpu().numpy()


def markov_initial(P: np.ndarray, prompts) -> np.ndarray:
    """(n_prompts, V) law of the first generated token: the row of each prompt's last token."""
    V = P.shape[0]
    return np.stack([P[p[-1]] for p in as_prompt_list(prompts, V)])


def markov_marginal(P: np.ndarray, prompts, t: int) -> np.ndarray:
    """(n_prompts, V) exact law of the token at generated position t >= 0: initial @ P**t."""
    tt = as_int(t)
    check_arg(tt is not None and tt >= 0, "t", t, "an integer >= 0")
    return markov_initial(P, prompts) @ np.linalg.matrix_power(P, tt)


def markov_joint_at(P: np.ndarray, prompts, offset: int, n_tokens: int) -> np.ndarray:
    """(n_prompts, V**J) exact joint law of the J tokens at generated positions [offset, offset + J), row-major
    (x_offset slowest): the marginal at ``offset`` pushed through J - 1 steps of the chain."""
    V = P.shape[0]
    J = _check_n_tokens(n_tokens, V, DEFAULT_MAX_CELLS)
    joints = []
    for pi in markov_marginal(P, prompts, offset):  # pi (V,)
        joint = pi
        for _ in range(J - 1):
            joint = (joint.reshape(-1, V)[:, :, None] * P[None]).ravel()  # (V**(j+1),) last token picks the row
        joints.append(joint)
    return np.stack(joints)


def markov_law(model: ModelLike, prompts, n_tokens: int, config: SamplingConfig = SamplingConfig(), *,
               offset: int = 0, max_cells: int = DEFAULT_MAX_CELLS) -> TransformerLaw:
    """The :class:`TransformerLaw` of a Markov model from its transition matrix alone, for the J tokens at
    generated positions [offset, offset + J) (``offset`` = 0: the first J, as :func:`enumerate_law`)."""
    P = transition_matrix(model, config)
    V = P.shape[0]
    J = _check_n_tokens(n_tokens, V, max_cells)
    plist = as_prompt_list(prompts, V)
    return _assemble(list(markov_joint_at(P, plist, offset, J)), V, J, plist, config)
