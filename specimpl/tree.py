"""Multi-draft / token-tree speculative sampling: recursive rejection sampling over a draft tree
(SpecInfer, Miao et al. 2024, "multi-step speculative sampling"), with children drawn with or without
replacement (Jeon et al. 2024, recursive speculative decoding; Chen et al. 2024, Sequoia).

Notation (that of :mod:`specimpl.speculative`, plus the tree)
-------------------------------------------------------------
    tree       N nodes in breadth-first order; parents[j] is node j's parent (-1: the root, i.e. the
               round's pending token); siblings are judged in index order
    x_j        node j's draft token, drawn from q_{parent(j)}: the draft's law after the path to the
               parent; with replacement siblings are iid, without replacement the s-th sibling is drawn
               from q with the earlier siblings' tokens removed (q_s = norm(q_{s-1} with x_{s-1} zeroed))
    p_j, q_j   target / draft law after the path to node j (j = root for the pending token)
    r          the running target ("residual") at the current node: r = p_cur when the node is entered;
               each rejected child updates it, r <- norm(max(0, r - q_s))
    D          the tree's depth; n accepted drafts (the depth reached), 0..D

Verification walks down from the root: at the current node each child s in order is accepted with
probability min(1, r(x_s) / q_s(x_s)) (uniform ``u_accept`` of that node); an accepted child becomes the
current node (r = p_child, fresh sibling law q_child); when every child is rejected, or the node is a
leaf, the round ends with y ~ r (the last residual, or the bonus p at a leaf).  Each step is ordinary
speculative sampling of target r by proposal q_s, so the output law is the target's.  With one child per
node (one chain) this is the token-level rule, decision for decision.

The target scores the whole tree in one call (:mod:`specimpl.tree_models`: ``forward_tree``), and both
models keep only the accepted path (``commit_path``).  :func:`verify_tree` is the pure step;
:class:`TreeSampler` the batched round loop; :func:`tree_generate` (and
:func:`tree_generate_without_replacement`) have the sampler call signature the harness verifies.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Sequence, Union

import numpy as np
import torch

from specimpl.errors import as_int, check_arg
from specimpl.inputs import check_finite_laws, check_generate_args, check_logits_vocab, law_sums, prompt_batch
from specimpl.model import LanguageModel, Prompts, check_same_vocab
from specimpl.result import PAD, GenerationResult, SpecStats, emit_round
from specimpl.sampling import SamplingConfig, check_probs, sample_categorical, warp
from specimpl.timing import device_syncer
from specimpl.tree_adapters import as_tree_model
from specimpl.tree_models import check_parents

__all__ = ["TokenTree", "sibling_laws", "verify_tree", "TreeSampler", "tree_generate", "tree_generate_without_replacement"]


# ------------------------------------------------------------------------------------------ trees
@dataclass(frozen=True)
class TokenTree:
    """A draft tree shape: ``parents[j]`` is node j's parent (-1 for a child of the root), nodes in
    breadth-first order (depth nondecreasing, parents[j] < j).  Build with :meth:`chains`,
    :meth:`from_branching` or :meth:`from_parents` (any topological order; it is made breadth-first,
    siblings keeping their relative order)."""

    parents: tuple

    def __post_init__(self):
        object.__setattr__(self, "parents", tuple(int(a) for a in check_parents(self.parents).tolist()))
        check_arg(bool((self.depths[1:] >= self.depths[:-1]).all()), "parents", list(self.parents),
                  "a breadth-first parent array (use TokenTree.from_parents for any topological order)")

    @classmethod
    def chains(cls, n: int, k: int) -> "TokenTree":
        """``n`` independent chains of ``k`` drafts (n = 1: the token-level chain)."""
        nn, kk = as_int(n), as_int(k)  # integer-like NumPy / 0-d tensor scalars too
        check_arg(nn is not None and nn >= 1, "n_drafts", n, "an integer >= 1")
        check_arg(kk is not None and kk >= 1, "k", k, "an integer >= 1")
        return cls(tuple([-1] * nn + [j for j in range((kk - 1) * nn)]))

    @classmethod
    def from_branching(cls, branching: Sequence[int]) -> "TokenTree":
        """Every node at depth d has ``branching[d]`` children (d = 0: the root), e.g. (4, 2, 1)."""
        check_arg(len(branching) >= 1 and all(isinstance(b, int) and b >= 1 for b in branching), "branching",
                  branching, "a non-empty sequence of integers >= 1")
        parents, level = [], [-1]
        for b in branching:
            nxt = []
            for a in level:
                for _ in range(b):
                    nxt.append(len(parents))
                    parents.append(a)
            level = nxt
        return cls(tuple(parents))

    @classmethod
    def from_parents(cls, parents: Sequence[int]) -> "TokenTree":
        par = check_parents(parents).tolist()
        depth = []
        for a in par:
            depth.append(0 if a < 0 else depth[a] + 1)
        order = sorted(range(len(par)), key=lambda j: (depth[j], j))  # stable: siblings keep their order
        new = {old: i for i, old in enumerate(order)}
        return cls(tuple(-1 if par[j] < 0 else new[par[j]] for j in order))

    def truncate(self, k: int) -> "TokenTree":
        """The tree without its nodes deeper than ``k``."""
        keep = int((self.depths <= k).sum())
        return TokenTree(self.parents[:keep])

    @property
    def n_nodes(self) -> int:
        return len(self.parents)

    @cached_property
    def depths(self) -> np.ndarray:
        """(N,) depth of each node (1 for a child of the root)."""
        d = np.zeros(self.n_nodes, dtype=np.int64)
        for j, a in enumerate(self.parents):
            d[j] = 1 if a < 0 else d[a] + 1
        return d

    @property
    def depth(self) -> int:
        return int(self.depths.max())

    @cached_property
    def parents_ext(self) -> torch.Tensor:
        """(1+N,) parents over [root, nodes]: the layout of ``forward_tree`` tokens (root = index 0)."""
        return torch.tensor([-1] + [a + 1 for a in self.parents], dtype=torch.long)

    @cached_property
    def children_table(self) -> torch.Tensor:
        """(1+N, max children) ext index of each node's s-th child (root = row 0), -1 where none."""
        kids = [[] for _ in range(self.n_nodes + 1)]
        for j, a in enumerate(self.parents):
            kids[a + 1].append(j + 1)
        width = max(len(c) for c in kids)
        return torch.tensor([c + [-1] * (width - len(c)) for c in kids], dtype=torch.long)

    @cached_property
    def sibling_rank(self) -> np.ndarray:
        """(N,) position of each node among its parent's children (0 = judged first)."""
        seen, rank = {}, np.zeros(self.n_nodes, dtype=np.int64)
        for j, a in enumerate(self.parents):
            rank[j] = seen.get(a, 0)
            seen[a] = rank[j] + 1
        return rank

    def level(self, d: int) -> tuple[int, int]:
        """Node index range [lo, hi) of depth ``d`` (1-based)."""
        return int(np.searchsorted(self.depths, d)), int(np.searchsorted(self.depths, d, side="right"))


def as_token_tree(tree, k: int, n_drafts: int) -> TokenTree:
    """``None`` -> ``n_drafts`` chains of length k; a TokenTree or a parent list -> that tree cut at depth k."""
    if tree is None:
        return TokenTree.chains(n_drafts, k)
    if not isinstance(tree, TokenTree):
        check_arg(isinstance(tree, (list, tuple)) or torch.is_tensor(tree), "tree", type(tree).__name__,
                  "None, a TokenTree or a parent list (parents[j] in [-1, j))")
        tree = TokenTree.from_parents(tree)
    return tree.truncate(k)


# ---------------------------------------------------------------------------------- pure step
def sibling_laws(q: torch.Tensor, x: torch.Tensor, tree: TokenTree, replacement: bool = True) -> torch.Tensor:
    """The law each node's token was drawn from.

    q (B, 1+N, V) draft laws after [root, nodes] (the parents' laws);  x (B, N) node tokens.
    Returns qc (B, N, V): with replacement qc_j = q_{parent(j)}; without replacement the parent's law
    with the tokens of j's earlier siblings removed and renormalised (zeros when nothing is left; the
    first sibling's law is the parent's, unchanged).
    """
    par = tree.parents_ext[1:].to(q.device)  # (N,) ext parent of each node
    qc = q[:, par]  # (B, N, V)
    if replacement:
        return qc
    rank = torch.from_numpy(tree.sibling_rank).to(q.device)  # (N,)
    for j in (rank > 0).nonzero().squeeze(1).tolist():
        earlier = ((par == par[j]) & (rank < rank[j])).nonzero().squeeze(1)  # (r,) j's earlier siblings
        taken = torch.zeros_like(qc[:, j], dtype=torch.bool)  # (B, V)
        tok = x[:, earlier]  # (B, r)
        taken.scatter_(1, tok.clamp(min=0), tok >= 0)
        left = q[:, par[j]].masked_fill(taken, 0.0)  # (B, V)
        mass = left.sum(-1, keepdim=True)
        qc[:, j] = torch.where(mass > 0, left / mass.clamp(min=torch.finfo(left.dtype).tiny), left)
    return qc


def verify_tree(p: torch.Tensor, qc: torch.Tensor, x: torch.Tensor, tree: TokenTree, u_accept: torch.Tensor,
                u_final: torch.Tensor, *, rejection_update=None):
    """Recursive rejection sampling of one draft tree.

    p (B, 1+N, V) target laws after [root, node 0..N-1];  qc (B, N, V) the law each node's token was
    drawn from (:func:`sibling_laws`; a one-hot row for a token chosen deterministically);
    x (B, N) node tokens (-1: unused node, skipped);  u_accept (B, N);  u_final (B,).
    Child j of the current node is accepted iff u_j qc_j(x_j) < r(x_j); a rejection updates
    r <- norm(max(0, r - qc_j)).  The residual is carried unnormalised, r = R / Z, so the first test at a
    node is u q(x) < p(x) exactly as in :func:`specimpl.speculative.verify_block`.
    ``rejection_update(R, Z, q_j, x_j, rejected) -> (R, Z)`` replaces that update (for controls only).
    Returns n (B,) accepted drafts, path (B, D) the accepted nodes by depth (-1 past n), y (B,).
    """
    B = p.shape[0]
    update = rejection_update or _after_rejection
    kids = tree.children_table.to(p.device)  # (1+N, S)
    rows = torch.arange(B, device=p.device)
    cur = torch.zeros(B, dtype=torch.long, device=p.device)  # (B,) ext index of the current node
    R, Z = p[:, 0].clone(), p.new_ones(B, 1)  # (B, V), (B, 1)
    n = torch.zeros(B, dtype=torch.long, device=p.device)
    path = torch.full((B, tree.depth), -1, dtype=torch.long, device=p.device)
    searching = torch.ones(B, dtype=torch.bool, device=p.device)
    for d in range(tree.depth):
        moved = torch.zeros_like(searching)
        for s in range(kids.shape[1]):
            c = kids[cur, s]  # (B,) ext index of the s-th child, -1 if none
            node = (c - 1).clamp(min=0)  # (B,)
            tok = x[rows, node]  # (B,)
            live = searching & ~moved & (c > 0) & (tok >= 0)
            if not bool(live.any()):
                continue
            t0 = tok.clamp(min=0).unsqueeze(1)  # (B, 1)
            q_j = qc[rows, node]  # (B, V)
            qx, rx = q_j.gather(1, t0).squeeze(1), R.gather(1, t0).squeeze(1)  # (B,)
            acc = live & (qx > 0) & (u_accept[rows, node] * qx * Z.squeeze(1) < rx)
            R, Z = update(R, Z, q_j, t0, live & ~acc)
            path[acc, d] = node[acc]
            n += acc
            moved |= acc
            cur = torch.where(acc, c, cur)
            R = torch.where(acc.unsqueeze(1), p[rows, cur], R)
            Z = torch.where(acc.unsqueeze(1), torch.ones_like(Z), Z)
        searching &= moved
    return n, path, sample_categorical(R, u_final)


def _after_rejection(R, Z, q_j, t0, rejected):
    """r <- norm(max(0, r - q_j)) as R <- max(0, R - Z q_j), Z <- sum R (kept if it would vanish: round-off)."""
    R_new = (R - Z * q_j).clamp(min=0)  # (B, V)
    Z_new = R_new.sum(-1, keepdim=True)  # (B, 1)
    ok = rejected.unsqueeze(1) & (Z_new > 0)
    return torch.where(ok, R_new, R), torch.where(ok, Z_new, Z)


# ------------------------------------------------------------------------- round-loop helpers
def _record(stats: SpecStats, A: int, hist: np.ndarray, emitted: int, nodes: int, times: tuple, t_clock: dict) -> None:
    """One round into ``stats`` (:meth:`SpecStats.add_round`, k = the tree's depth D: hist (D+1,) rounds
    with n = 0..D accepted among live sequences) and into the phase clock; ``drafted`` counts tree
    nodes (N per live sequence), not D."""
    stats.add_round(A, hist, emitted, *times)
    stats.rounds[-1]["drafted"] = int(hist.sum()) * nodes
    for phase, t in zip(("draft", "target", "sampler"), times):
        t_clock[phase] += t


# ------------------------------------------------------------------------------- the sampler
class TreeSampler:
    """Batched token-tree speculative sampling with ragged acceptance, EOS and max_new_tokens.

    ``tree``: None (``n_drafts`` iid chains of k drafts), a :class:`TokenTree` or a parent list; nodes
    deeper than ``k`` are dropped.  ``replacement=False`` draws the children of a node without
    replacement and verifies with the matching rule.  Per round: uniforms ``u`` (A, 2N+1) — draft draws
    (A, N), acceptance (A, N), final draw (A,), node order = breadth-first (for one chain the
    reference sampler's layout); the draft drafts level by level (one ``forward_tree`` per depth); the
    target scores [pending, all N nodes] in one ``forward_tree``; both commit [pending, accepted path].

    Subclass and override one of :meth:`warp_target`, :meth:`warp_draft`, :meth:`draw_children`,
    :meth:`uniforms`, :meth:`proposal_laws`, :meth:`verify` to build a variant (see ``harness.controls.tree``).
    """

    compact_below = 0.5  # as the reference sampler: keeps the uniforms' batch layout identical
    check_finite = True  # raise NonFiniteLawError when a warped p or q holds NaN/inf (as the reference sampler)

    def __init__(self, target: LanguageModel, draft: LanguageModel, k: int, config: SamplingConfig = SamplingConfig(),
                 *, tree=None, n_drafts: int = 2, replacement: bool = True, validate: bool = False):
        check_same_vocab(target, draft)
        k, _, _ = check_generate_args(k, 1, config, None, target.vocab_size)  # a NumPy / 0-d tensor k as an int
        check_arg(isinstance(replacement, bool), "replacement", replacement, "True or False")
        self.tree = as_token_tree(tree, k, n_drafts)
        self.target, self.draft = as_tree_model(target), as_tree_model(draft)
        self.k, self.config, self.replacement, self.validate = k, config, replacement, bool(validate)
        self._sync = device_syncer(self.target.device)  # before each phase stamp (honest times on CUDA)

    # -- the steps a variant may override ------------------------------------------------------
    def warp_target(self, logits: torch.Tensor) -> torch.Tensor:
        return warp(logits, self.config)  # (A, 1+N, V)

    def warp_draft(self, logits: torch.Tensor) -> torch.Tensor:
        return warp(logits, self.config)  # (A, m, V)

    def draw_children(self, q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """q (A, c, V) the laws the c children are drawn from (earlier siblings already removed without
        replacement), u (A, c) -> tokens (A, c), -1 where q has no mass left."""
        x = sample_categorical(q, u)
        return torch.where(q.sum(-1) > 0, x, -1)

    def uniforms(self, A: int, generator, dtype, device):
        N = self.tree.n_nodes
        u = torch.rand(A, 2 * N + 1, generator=generator, dtype=dtype, device=device)
        return u[:, :N], u[:, N:2 * N], u[:, 2 * N]

    def proposal_laws(self, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """q (A, 1+N, V) the parents' draft laws, x (A, N) -> (A, N, V) the law each token was drawn from."""
        return sibling_laws(q, x, self.tree, self.replacement)

    def verify(self, p, qc, x, u_accept, u_final):
        return verify_tree(p, qc, x, self.tree, u_accept, u_final)

    @property
    def target_dtype(self):
        return getattr(self.target, "dtype", torch.float32)

    # -- drafting --------------------------------------------------------------------------------
    def draft_tree(self, dstate, pending: torch.Tensor, u_draft: torch.Tensor):
        """Draw the tree level by level.  Returns tokens (A, 1+N) = [pending, x] (-1: no token left
        without replacement, or below such a node) and q (A, 1+N, V): the law the children of
        [root, nodes] were drawn from (zeros for the deepest level, which has no children)."""
        tree, A = self.tree, pending.shape[0]
        par = tree.parents_ext.to(pending.device)  # (1+N,)
        tokens = torch.zeros(A, 1 + tree.n_nodes, dtype=torch.long, device=pending.device)
        tokens[:, 0] = pending
        for d in range(1, tree.depth + 1):
            lo, hi = tree.level(d)
            logits = self.draft.forward_tree(dstate, tokens[:, :1 + lo], par[:1 + lo])
            q_lev = self.warp_draft(check_logits_vocab("draft", self.draft, logits, f"depth {d}"))  # (A, 1+lo, V)
            pe = par[1 + lo:1 + hi]  # (c,) ext parents of this level's nodes
            x = self._draw_level(q_lev, pe, tree.sibling_rank[lo:hi], u_draft[:, lo:hi])  # (A, c)
            dead_parent = (pe > 0) & (tokens[:, pe] < 0)  # (A, c) a node below an unused node is unused
            tokens[:, 1 + lo:1 + hi] = torch.where(dead_parent, -1, x)
        q = q_lev.new_zeros(A, 1 + tree.n_nodes, q_lev.shape[-1])  # (A, 1+N, V)
        q[:, :q_lev.shape[1]] = q_lev
        return tokens, q

    def _draw_level(self, q_lev, pe, ranks, u):
        """Children of one level: iid from their parent's q, or without replacement in sibling order."""
        if self.replacement:
            return self.draw_children(q_lev[:, pe], u)
        A, V = q_lev.shape[0], q_lev.shape[-1]
        x = torch.empty(A, pe.numel(), dtype=torch.long, device=q_lev.device)
        taken = torch.zeros(A, q_lev.shape[1], V, dtype=torch.bool, device=q_lev.device)  # (A, 1+lo, V)
        rows = torch.arange(A, device=q_lev.device).unsqueeze(1)
        for r in range(int(ranks.max()) + 1):
            sel = torch.from_numpy(np.nonzero(ranks == r)[0]).to(q_lev.device)  # this rank's nodes
            ps = pe[sel]  # (s,) their parents (distinct)
            xs = self.draw_children(q_lev[:, ps].masked_fill(taken[:, ps], 0.0), u[:, sel])  # (A, s)
            x[:, sel] = xs
            ok = xs >= 0
            taken[rows.expand_as(xs)[ok], ps.expand_as(xs)[ok], xs[ok]] = True
        return x

    # -- the round loop ------------------------------------------------------------------------
    def generate(self, prompts: Prompts, max_new_tokens: int, eos_token_id: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> GenerationResult:
        _, max_new_tokens, eos_token_id = check_generate_args(self.k, max_new_tokens, self.config, eos_token_id,
                                                              self.target.vocab_size)
        dev = self.target.device
        t_clock = {"draft": 0.0, "target": 0.0, "sampler": 0.0}
        tic = time.perf_counter()
        batch, pending = prompt_batch(prompts, self.target.vocab_size, dev)
        st = [self.target.prefill(batch), self.draft.prefill(batch)]  # target, draft states
        self._sync()
        t_clock["prefill"] = time.perf_counter() - tic
        B, D = pending.shape[0], self.tree.depth
        out = np.full((B, max_new_tokens + D + 1), PAD, dtype=np.int64)  # host output buffer
        n_out = np.zeros(B, dtype=np.int64)
        idx = np.arange(B)  # (A,) global ids of the sequences in the batch
        alive = np.ones(B, dtype=bool)
        stats = SpecStats(D)
        j = np.arange(D + 1)
        rnd = 0
        while True:
            rnd += 1
            n_h, emit, m, done, pending, times = self._round(st, pending, max_new_tokens - n_out[idx], alive,
                                                             eos_token_id, generator, rnd)
            out[idx[:, None], n_out[idx][:, None] + j] = emit
            n_out[idx] += m
            _record(stats, idx.size, np.bincount(n_h[alive], minlength=D + 1), int(m.sum()), self.tree.n_nodes,
                    times, t_clock)
            A = idx.size
            alive = alive & ~done
            n_alive = int(alive.sum())
            if n_alive == 0:
                break
            if n_alive < self.compact_below * A:  # the reference sampler's rule and layout
                sel_h = alive.nonzero()[0]
                sel = torch.from_numpy(sel_h).to(dev)
                idx, alive, pending = idx[sel_h], alive[sel_h], pending[sel]
                st = [self.target.select(st[0], sel), self.draft.select(st[1], sel)]
        tokens = torch.from_numpy(np.ascontiguousarray(out[:, :max_new_tokens])).to(dev)
        return GenerationResult(tokens=tokens, lengths=torch.from_numpy(n_out).to(dev), stats=stats, timings=t_clock)

    def _round(self, st, pending, remaining, alive, eos_token_id, generator, rnd: int = 0):
        """One round on the batch's A sequences: draft, score, verify, commit, emit (host arrays)."""
        tstate, dstate = st
        A, dev = pending.shape[0], pending.device
        t0 = time.perf_counter()
        u_draft, u_acc, u_fin = self.uniforms(A, generator, self.target_dtype, dev)
        tokens, q = self.draft_tree(dstate, pending, u_draft)  # (A, 1+N), (A, 1+N, V)
        self._sync()
        t1 = time.perf_counter()
        logits = self.target.forward_tree(tstate, tokens, self.tree.parents_ext.to(dev))
        p = self.warp_target(check_logits_vocab("target", self.target, logits, f"round {rnd}"))  # (A, 1+N, V)
        total = law_sums(q, p) if self.check_finite else None  # read after the host copies below
        self._sync()
        t2 = time.perf_counter()
        qc = self.proposal_laws(q, tokens[:, 1:])  # (A, N, V)
        if self.validate:
            check_probs("p", p)
            check_probs("qc", qc[tokens[:, 1:] >= 0])
        n, path, y = self.verify(p, qc, tokens[:, 1:], u_acc, u_fin)  # (A,), (A, D), (A,)
        path_ext = torch.cat([torch.zeros_like(n).unsqueeze(1), (path + 1).clamp(min=0)], 1)  # (A, 1+D)
        self.target.commit_path(tstate, tokens, path_ext, n + 1)  # pending + the accepted path
        self.draft.commit_path(dstate, tokens, path_ext, n + 1)
        x_path = tokens.gather(1, path_ext[:, 1:])  # (A, D), junk past n
        n_h, y_h = n.cpu().numpy(), y.cpu().numpy()
        if total is not None and not math.isfinite(total.item()):  # before anything of this round is emitted
            check_finite_laws("draft", q, f"round {rnd}", self.config)
            check_finite_laws("target", p, f"round {rnd}", self.config)
        emit, m, done = emit_round(x_path.cpu().numpy(), n_h, y_h, remaining, alive, eos_token_id)
        self._sync()
        t3 = time.perf_counter()
        return n_h, emit, m, done, y, (t1 - t0, t2 - t1, t3 - t2)


def tree_generate(target: LanguageModel, draft: LanguageModel, prompts: Prompts, *, k: int, max_new_tokens: int,
                  config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None,
                  generator: Optional[torch.Generator] = None, tree: Union[None, TokenTree, Sequence[int]] = None,
                  n_drafts: int = 2, replacement: bool = True) -> GenerationResult:
    """Token-tree speculative sampling (SpecInfer's multi-step speculative sampling); the sampler call
    signature of :func:`specimpl.speculative_generate` plus the tree: ``tree=None`` means ``n_drafts``
    iid chains of k drafts; a :class:`TokenTree` or parent list is cut at depth k."""
    return TreeSampler(target, draft, k, config, tree=tree, n_drafts=n_drafts,
                       replacement=replacement).generate(prompts, max_new_tokens, eos_token_id, generator)


def tree_generate_without_replacement(target: LanguageModel, draft: LanguageModel, prompts: Prompts, *, k: int,
                                      max_new_tokens: int, config: SamplingConfig = SamplingConfig(),
                                      eos_token_id: Optional[int] = None, generator: Optional[torch.Generator] = None,
                                      tree: Union[None, TokenTree, Sequence[int]] = None,
                                      n_drafts: int = 2) -> GenerationResult:
    """:func:`tree_generate` with each node's children drawn without replacement (Sequoia / recursive
    speculative decoding's rule)."""
    return tree_generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens, config=config,
                         eos_token_id=eos_token_id, generator=generator, tree=tree, n_drafts=n_drafts,
                         replacement=False)
