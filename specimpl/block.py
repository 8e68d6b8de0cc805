"""Block verification (Sun et al. 2024, "Block Verification Accelerates Speculative Decoding",
arXiv 2403.10444, ICLR 2025): the k drafts of a round are judged jointly instead of token by token.

Notation (that of :mod:`specimpl.speculative`, plus the block quantities)
-------------------------------------------------------------------------
    p_i, q_i   target / draft law before draft x_i (i = 1..k); p_{k+1} the bonus law
    w_i        running weight of the drafted prefix: w_0 = 1, w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i))
               (the paper's p_i; renamed so that p stays the target)
    R_i        residual mass after i drafts: sum_x max(0, w_i p_{i+1}(x) - q_{i+1}(x)),  i < k
    h_i        stop probability: h_i = R_i / (R_i + 1 - w_i) for i < k (1 when the denominator is 0),
               h_k = w_k
    eta_i      one uniform per position (``u_accept``)
    tau        accepted drafts: the *largest* i with eta_i < h_i, 0 if none

The round emits x_1..x_tau and a final token y: y ~ norm(max(0, w_tau p_{tau+1} - q_{tau+1})) when
tau < k (with w_0 = 1 this is the token-level residual at the first position), y ~ p_{k+1} when
tau = k.  Unlike the token-level rule, an early position may "fail" its test and still be accepted
because a later one passes: tau is a maximum, not an accepted prefix.  The output law is the target's
(the paper's Theorem 1) and E[tau] is at least the token-level rule's (Theorem 2).

The comparison is strict (eta < h): with ``<=`` a token of target probability 0 (h = 0) would be
accepted when eta is exactly 0 (SGLang #35771 is that bug in a tree sampler).  The last position's
test eta_k < w_k is evaluated as eta_k q_k(x_k) < w_{k-1} p_k(x_k), without a division, so for k = 1
this function makes exactly the decisions of :func:`specimpl.speculative.verify_block` (bit for bit).

:func:`verify_block_jointly` is the pure step (uniforms are arguments); :class:`BlockSampler` is the
reference round loop (:class:`specimpl.speculative.SpeculativeSampler`'s generic path: ragged
acceptance, EOS inside a block, max_new_tokens, compaction and :class:`SpecStats` as there) with this
step as its ``verify``; :func:`block_generate` has the sampler call signature the harness verifies.
"""
from __future__ import annotations

from typing import Optional

import torch

from specimpl.model import LanguageModel
from specimpl.result import GenerationResult
from specimpl.sampling import SamplingConfig, sample_categorical
from specimpl.speculative import SpeculativeSampler

__all__ = ["verify_block_jointly", "block_weights", "block_passes", "block_final_draw", "BlockSampler",
           "block_generate"]


def block_weights(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The running weights of the drafted prefixes.

    p (B, k+1, V), q (B, k, V), x (B, k).  Returns w (B, k) with w[:, i-1] = w_i, and the drafted
    tokens' probabilities p_x (B, k) = p_i(x_i), q_x (B, k) = q_i(x_i).
    """
    k = q.shape[1]
    x_ = x.unsqueeze(-1)  # (B, k, 1)
    p_x = p[:, :k].gather(-1, x_).squeeze(-1)  # (B, k)
    q_x = q.gather(-1, x_).squeeze(-1)  # (B, k)
    ratio = torch.where(q_x > 0, p_x / q_x.clamp(min=torch.finfo(q_x.dtype).tiny), torch.zeros_like(p_x))  # (B, k)
    w = torch.empty_like(ratio)  # (B, k)
    prev = torch.ones_like(ratio[:, 0])  # (B,) w_0 = 1
    for i in range(k):
        prev = (prev * ratio[:, i]).clamp(max=1.0)
        w[:, i] = prev
    return w, p_x, q_x


def block_passes(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, u_accept: torch.Tensor,
                 w: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(B, k) bool: eta_i < h_i for each position (p (B, k+1, V), q (B, k, V), x (B, k), u_accept (B, k)).

    ``w`` (B, k) the weights to use (default :func:`block_weights`; controls pass others)."""
    B, k, V = q.shape
    w_true, p_x, q_x = block_weights(p, q, x)
    w = w_true if w is None else w
    passed = torch.empty(B, k, dtype=torch.bool, device=p.device)
    if k > 1:
        w_in = w[:, :k - 1]  # (B, k-1) w_1..w_{k-1}
        R = (w_in.unsqueeze(-1) * p[:, 1:k] - q[:, 1:k]).clamp(min=0).sum(-1)  # (B, k-1) R_1..R_{k-1}
        denom = R + (1 - w_in)  # (B, k-1)
        # eta < R / denom without dividing; h = 1 (always passes) where denom is 0 (then p_{i+1} = q_{i+1}, w_i = 1)
        passed[:, :k - 1] = torch.where(denom > 0, u_accept[:, :k - 1] * denom < R, torch.ones_like(R, dtype=torch.bool))
    if w is w_true:  # eta_k < w_k = min(1, w_{k-1} p_k / q_k), evaluated as eta_k q_k < w_{k-1} p_k
        w_before = w[:, k - 2] if k > 1 else torch.ones_like(w[:, 0])  # (B,) w_{k-1}
        passed[:, k - 1] = (q_x[:, k - 1] > 0) & (u_accept[:, k - 1] * q_x[:, k - 1] < w_before * p_x[:, k - 1])
    else:
        passed[:, k - 1] = u_accept[:, k - 1] < w[:, k - 1]
    return passed


def block_final_draw(p: torch.Tensor, q: torch.Tensor, w: torch.Tensor, tau: torch.Tensor,
                     u_final: torch.Tensor) -> torch.Tensor:
    """y (B,): from norm(max(0, w_tau p_{tau+1} - q_{tau+1})) when tau < k (w_0 = 1), from p_{k+1} when tau = k."""
    B, k, V = q.shape
    w_tau = torch.cat([torch.ones_like(w[:, :1]), w], 1).gather(1, tau.unsqueeze(1))  # (B, 1)
    at = tau.view(B, 1, 1).expand(B, 1, V)  # (B, 1, V)
    p_next = p.gather(1, at).squeeze(1)  # (B, V) p_{tau+1}
    q_next = q.gather(1, at.clamp(max=k - 1)).squeeze(1)  # (B, V) q_{tau+1} (unused when tau = k)
    residual = torch.where((tau < k).unsqueeze(-1), (w_tau * p_next - q_next).clamp(min=0), p_next)  # (B, V)
    # empty only in round-off (w_tau p_next <= q_next everywhere); p_{tau+1} is then the right law
    residual = torch.where(residual.sum(-1, keepdim=True) <= 0, p_next, residual)
    return sample_categorical(residual, u_final)


def verify_block_jointly(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, u_accept: torch.Tensor,
                         u_final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification of one round of k drafts (Sun et al. 2024, Algorithm 2).

    p (B, k+1, V) target laws p_1..p_{k+1};  q (B, k, V) draft laws;  x (B, k) drafts;
    u_accept (B, k) the uniforms eta_i;  u_final (B,) uniform of the final draw.
    Returns tau (B,) accepted drafts and y (B,) the round's final token.
    """
    k = q.shape[1]
    passed = block_passes(p, q, x, u_accept)  # (B, k)
    tau = (passed * torch.arange(1, k + 1, device=p.device)).amax(dim=1)  # (B,) largest passing position, 0 if none
    w, _, _ = block_weights(p, q, x)
    return tau, block_final_draw(p, q, w, tau, u_final)


class BlockSampler(SpeculativeSampler):
    """The reference round loop with block verification as its ``verify`` step.

    Drafting, uniforms (the same layout: draft draws (B, k), eta (B, k), final draw (B,)), model calls,
    rollback, EOS / max_new_tokens truncation and :class:`SpecStats` are those of
    :class:`SpeculativeSampler`'s generic path (the n-gram lookup-table path only runs the token-level
    rule); ``n`` in the statistics is tau.
    """

    def verify(self, p, q, x, u_accept, u_final):
        return verify_block_jointly(p, q, x, u_accept, u_final)


def block_generate(target: LanguageModel, draft: LanguageModel, prompts, *, k: int, max_new_tokens: int,
                   config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None,
                   generator: Optional[torch.Generator] = None) -> GenerationResult:
    """Speculative sampling with block verification; the sampler call signature of
    :func:`specimpl.speculative_generate` (plug into ``python -m harness verify --sampler
    specimpl.block:block_generate``)."""
    return BlockSampler(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)
