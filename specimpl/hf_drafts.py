"""Draft variants that dial the acceptance rate α on a real target/draft pair.

Each variant is a :class:`specimpl.model.LanguageModel` wrapping another one; it changes the
draft's *logits* only, so the sampler's q is still exactly the (warped) law the draft token is
drawn from and the output stays lossless — only α (and speed) move.

    NoiseMixtureDraft(base, eps, noise) q = (1 − eps)·softmax(base) + eps·r, r uniform or one
                                       fixed random law (the latter also moves the argmax) α ↓ as eps ↑
    TemperedDraft(base, tau)           logits / tau before the shared controls          α ↓ away from 1
    early_exit_draft(target, layers)   the target's first `layers` decoder layers, then its final
                                       norm and head (the shipped target was trained with
                                       auxiliary losses at exits 1 and 2)               α ↑ with layers
    SelfDraft(target)                  the target itself (α = 1 up to float round-off)

:func:`tiny_pair_variants` builds the named set used for the α table and the sweep.
"""
from __future__ import annotations

import copy
import math
from typing import Optional

import torch

from specimpl.errors import check_arg
from specimpl.model import LanguageModel, ModelState
from specimpl.hf import HFModel

__all__ = ["LogitTransformDraft", "NoiseMixtureDraft", "TemperedDraft", "SelfDraft", "early_exit_draft",
           "tiny_pair_variants", "variant_names"]


class LogitTransformDraft(LanguageModel):
    """A model whose logits are ``transform(base logits)``; state handling is the base's."""

    def __init__(self, base: LanguageModel, name: str):
        self.base = base
        self.vocab_size = base.vocab_size
        self.device = base.device
        self.dtype = getattr(base, "dtype", torch.float32)
        self.name = name

    def transform(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def prefill(self, prompts) -> ModelState:
        return self.base.prefill(prompts)

    def forward(self, state, tokens, n_new=None):
        return self.transform(self.base.forward(state, tokens, n_new))  # (B, T, V)

    def rollback(self, state, lengths) -> None:
        self.base.rollback(state, lengths)

    def select(self, state, index):
        return self.base.select(state, index)


class NoiseMixtureDraft(LogitTransformDraft):
    """q = (1 − eps)·softmax(logits) + eps·r (returned as log-probabilities).

    ``noise="uniform"``: r = 1/V.  ``noise="random"``: r is one fixed random law over the vocabulary
    (softmax of 2·N(0, 1) draws from ``seed``), the same for every context — unlike uniform noise it
    also moves the argmax, so it dials α under greedy decoding too.
    """

    def __init__(self, base: LanguageModel, eps: float, noise: str = "uniform", seed: int = 0):
        check_arg(isinstance(eps, (int, float)) and 0 <= eps <= 1, "eps", eps, "a number in [0, 1]")
        check_arg(noise in ("uniform", "random"), "noise", noise, "'uniform' or 'random'")
        super().__init__(base, f"{base.name}+{noise}{eps:g}")
        self.eps = float(eps)
        V = base.vocab_size
        if noise == "uniform":
            self.log_r = torch.full((V,), -math.log(V), dtype=self.dtype, device=self.device)  # (V,)
        else:
            g = torch.Generator().manual_seed(seed)
            self.log_r = torch.log_softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), 0).to(
                self.dtype).to(self.device)  # (V,)

    def transform(self, logits):
        if self.eps == 0:
            return logits
        if self.eps == 1:
            return self.log_r.expand_as(logits)
        logp = torch.log_softmax(logits, -1)  # (B, T, V)
        # log((1 − eps)·e^logp + eps·r) computed stably
        return torch.logaddexp(logp + math.log1p(-self.eps), self.log_r + math.log(self.eps))


class TemperedDraft(LogitTransformDraft):
    """The draft's own temperature ``tau`` applied before the shared sampling controls."""

    def __init__(self, base: LanguageModel, tau: float):
        check_arg(isinstance(tau, (int, float)) and math.isfinite(tau) and tau > 0, "tau", tau, "a finite number > 0")
        super().__init__(base, f"{base.name}@tau{tau:g}")
        self.tau = float(tau)

    def transform(self, logits):
        return logits / self.tau


class SelfDraft(LogitTransformDraft):
    """The target as its own draft (separate state): α = 1 up to float round-off; a control."""

    def __init__(self, target: LanguageModel):
        super().__init__(target, f"{target.name}(self)")


def early_exit_draft(target, layers: int):
    """An :class:`specimpl.hf.HFModel` running the first ``layers`` decoder layers of ``target``
    (weights shared, not copied) followed by its final norm and LM head."""
    m = target.model
    n_total = target.num_layers
    check_arg(isinstance(layers, int) and 1 <= layers <= n_total, "layers", layers,
              f"an integer in [1, {n_total}] (the target has {n_total} layers)")
    blocks = _decoder_layers(m, n_total)
    memo = {id(p): p for p in m.parameters()}
    memo.update({id(b): b for b in m.buffers()})
    memo.update({id(b): b for b in blocks})  # share the blocks themselves (no copies)
    short = copy.deepcopy(m, memo)  # new module tree, same parameter tensors
    short.config = copy.deepcopy(m.config)
    _set_layers(short, short.config, blocks, layers)
    return HFModel(short, target.tokenizer, name=f"{target.name}[:{layers}]", logits_dtype=target.dtype,
                   probe=False)


def _decoder_layers(model, n: int) -> torch.nn.ModuleList:
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n:
            return mod
    raise ValueError(f"cannot find the {n} decoder layers of {type(model).__name__} for an early-exit draft")


def _set_layers(model, config, blocks, layers: int) -> None:
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if child is blocks or (isinstance(child, torch.nn.ModuleList) and len(child) == len(blocks)
                                   and all(a is b for a, b in zip(child, blocks))):
                setattr(parent, name, torch.nn.ModuleList(list(blocks)[:layers]))
    for mod in model.modules():
        if hasattr(mod, "config") and mod.config is not config and hasattr(mod.config, "num_hidden_layers"):
            mod.config = config
    for attr in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(getattr(config, attr, None), int):
            setattr(config, attr, layers)
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:layers]


def variant_names(num_layers: int) -> list[str]:
    """The names :func:`tiny_pair_variants` builds for a target of ``num_layers`` layers (no model needed)."""
    return ["draft", "draft+noise0.25", "draft+noise0.5", "draft+noise0.9", "uniform", "draft@tau0.5", "draft@tau2",
            *(f"target[:{L}]" for L in range(1, num_layers)), "target(self)"]


def tiny_pair_variants(target, draft, which: Optional[list[str]] = None) -> dict[str, LanguageModel]:
    """Named draft variants of a loaded pair, from α ≈ 0 (uniform draft) to α = 1 (the target)."""
    builders = {
        "draft": lambda: draft,
        "draft+noise0.25": lambda: NoiseMixtureDraft(draft, 0.25, "random"),
        "draft+noise0.5": lambda: NoiseMixtureDraft(draft, 0.5, "random"),
        "draft+noise0.9": lambda: NoiseMixtureDraft(draft, 0.9, "random"),
        "uniform": lambda: NoiseMixtureDraft(draft, 1.0),
        "draft@tau0.5": lambda: TemperedDraft(draft, 0.5),
        "draft@tau2": lambda: TemperedDraft(draft, 2.0),
    }
    for L in range(1, target.num_layers):
        builders[f"target[:{L}]"] = (lambda L=L: early_exit_draft(target, L))
    builders["target(self)"] = lambda: SelfDraft(target)
    assert list(builders) == variant_names(target.num_layers)  # one list of names
    names = list(builders) if which is None else which
    bad = [n for n in names if n not in builders]
    check_arg(not bad, "which", bad, f"names among {list(builders)}")
    return {n: builders[n]() for n in names}
