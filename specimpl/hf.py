"""Hugging Face causal LMs behind the :class:`specimpl.model.LanguageModel` interface.

    target, draft = load_pair(*EXAMPLE_HUB_PAIR)       # hub names (needs network; not run in CI)
    target, draft = load_pair("/ckpt/big", "/ckpt/small")  # local directories
    model = HFModel.from_pretrained("/ckpt/big")          # one model
    target, draft = load_tiny_pair()                      # the pair shipped in specimpl/assets

KV cache layout
---------------
One preallocated buffer per attention layer, keys and values (B, H, S, D), where sequence b owns
slots ``0 .. lengths[b] - 1`` *in order* (slot index == position).  A forward call writes the T
new tokens of row b at slots ``lengths[b] .. lengths[b] + T - 1`` (a slice copy when every row has
the same length, else one row copy per new key and head: ``index_copy_`` on a flat view) and attends with

    mask[b, t, s] = s <= lengths[b] + t        position_ids[b, t] = lengths[b] + t

so rows of a ragged batch never see each other's padding.  Only ``tokens[b, :n_new[b]]`` count:
``lengths[b] += n_new[b]``; the padded tail was written to slots past the new length, which no
later query can see and the next call overwrites.  Rolling back is therefore O(1) — set
``lengths`` — and exactly restores the state of a fresh run on the kept prefix; ``select``
gathers rows.  The same code serves batch 1 (slice writes, a (1, 1, T, S) mask) and batch B.

The cache class is :class:`specimpl.hf_cache.RaggedKVCache`.  The mask is handed to the model as a ready 4D additive mask (0 visible, dtype-min hidden), which
transformers passes through unchanged; for sliding-window configs the window is applied in the
mask, and models with mixed layer types get a ``{layer_type: mask}`` mapping.

Loading checks, before any weights are read: a local path (absolute, starting with . or ~, or
whose first component exists here) must be a directory holding config.json, else FileNotFoundError
at once (no hub retries); any other name is a hub id, and when the hub cannot be reached (one HEAD request to
``HF_ENDPOINT``, directly or through the environment's proxy, answered within 2 s) it is read from the Hugging Face
cache only: a name in neither fails at once naming it (``tiny/target`` with no ./tiny spent 25 s in the
hub client's retries); the
config is a decoder-only causal LM (not encoder-decoder, not an encoder such as BERT without
``is_decoder``), and for a pair, equal output vocabularies and identical tokenizers.  After
loading, a two-input probe checks that logits at a position do not depend on later tokens.
``trust_remote_code`` is off unless passed.  ``HFModel.name`` is :func:`portable_name` of the path
(no absolute directories of this machine in reports).
"""
from __future__ import annotations

import functools
import inspect
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import torch

from specimpl.errors import check_arg
from specimpl.hf_version import MIN_TRANSFORMERS, require_transformers
from specimpl.model import LanguageModel, ModelState, Prompts, as_prompt_list

__all__ = ["HFModel", "HFState", "RaggedKVCache", "load_pair", "load_tiny_pair", "check_pair", "TINY_PAIR_DIR",
           "EXAMPLE_HUB_PAIR", "MIN_TRANSFORMERS", "require_transformers",
           "tiny_pair_prompts", "tiny_pair_positions", "portable_name", "NonCausalModelError", "VocabularyMismatchError"]


TINY_PAIR_DIR = Path(__file__).resolve().parent / "assets" / "tiny_pair"


def tiny_pair_positions() -> int:
    """The shipped tiny pair's positions (its target's max_position_embeddings), read from its config alone."""
    import json
    return int(json.loads((TINY_PAIR_DIR / "target" / "config.json").read_text()).get("max_position_embeddings", 2048))

# A public pair sharing one tokenizer (vocabulary 49152, Llama architecture), for users with network
# access; nothing in this repository downloads it.
EXAMPLE_HUB_PAIR = ("HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-135M")

# encoder families that transformers also registers as "causal LM" heads; they are causal only
# when configured with is_decoder=True
_ENCODER_FAMILIES = {
    "bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "electra", "ernie", "roformer",
    "data2vec-text", "xmod", "rembert", "megatron-bert", "big_bird", "bert-generation", "qdqbert", "nezha",
    "roberta-prelayernorm", "mra",
}


class NonCausalModelError(ValueError):
    """The model is not a decoder-only causal LM (encoder, encoder-decoder, or fails the causality probe)."""


class VocabularyMismatchError(ValueError):
    """Target and draft do not share one vocabulary / tokenizer."""


# ---------------------------------------------------------------------------------------------
# transformers (version check) and the cache (specimpl.hf_cache, imported on first use)
# ---------------------------------------------------------------------------------------------
def RaggedKVCache(num_layers: int, initial_capacity: int = 256):  # noqa: N802  (factory of a lazily imported class)
    """A fresh :class:`specimpl.hf_cache.RaggedKVCache`, imported on first use: importing specimpl.hf does
    not import transformers."""
    from specimpl.hf_cache import RaggedKVCache as cache_class
    return cache_class(num_layers, initial_capacity)


@dataclass
class HFState(ModelState):
    """lengths (B,) tokens consumed per row; cache holds their keys/values at slots 0..lengths-1."""

    cache: object = None
    max_len: int = 0  # host copy of int(lengths.max()) (no device sync in the hot path)
    uniform: bool = True  # host flag: every row has the same length


# ---------------------------------------------------------------------------------------------
# The model wrapper
# ---------------------------------------------------------------------------------------------
class HFModel(LanguageModel):
    """A transformers causal LM (any ``AutoModelForCausalLM``) as a :class:`LanguageModel`.

    ``model`` is a loaded ``PreTrainedModel``; ``tokenizer`` (optional) is kept for text prompts
    and for the pair check.  Logits come back in ``logits_dtype``: float64 by default, also for
    half-precision models, so that warping, the categorical draw's CDF and the sampler's uniforms
    (drawn in this dtype) carry 53 bits; with float32 and a vocabulary of ~50k, tokens below 2^-24
    and the CDF's round-off would bias the sampler and the baseline alike.
    """

    def __init__(self, model, tokenizer=None, name: Optional[str] = None, logits_dtype=torch.float64,
                 probe: bool = True):
        _check_config_causal(model.config, name or type(model).__name__)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        given = getattr(model.config, "_name_or_path", None)
        self.name = name or (portable_name(given) if given else type(model).__name__)
        out = model.get_output_embeddings()
        self.vocab_size = int(out.weight.shape[0]) if out is not None else int(model.config.vocab_size)
        self.device = next(model.parameters()).device
        self.dtype = logits_dtype
        self.num_layers = _num_cache_layers(model.config)
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.max_positions = _max_positions(model.config)
        self._mask_kind = _mask_kind(model.config)
        self._min = torch.finfo(next(model.parameters()).dtype).min
        self._ar = torch.arange(64, device=self.device)
        self.cache_headroom = 64  # KV slots past the longest prompt before the cache grows (see _capacity)
        if probe:
            _probe_causal(self)

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, name_or_path: Union[str, os.PathLike], *, dtype=torch.float32, device="cpu",
                        trust_remote_code: bool = False, attn_implementation: Optional[str] = "sdpa",
                        revision: Optional[str] = None, local_files_only: Optional[bool] = None,
                        load_tokenizer: bool = True, **model_kwargs) -> "HFModel":
        """Load a causal LM by hub name or local path (safetensors only; no remote code unless asked).

        Configuration and tokenizer are read and checked first; weights are loaded only when the
        config describes a decoder-only causal LM.
        """
        config, tok = _load_config_and_tokenizer(name_or_path, trust_remote_code, revision, local_files_only,
                                                 load_tokenizer)
        _check_config_causal(config, str(name_or_path))
        return cls._load_weights(name_or_path, config, tok, dtype=dtype, device=device,
                                 trust_remote_code=trust_remote_code, attn_implementation=attn_implementation,
                                 revision=revision, local_files_only=local_files_only, **model_kwargs)

    @classmethod
    def _load_weights(cls, name_or_path, config, tok, *, dtype, device, trust_remote_code, attn_implementation,
                      revision, local_files_only, **model_kwargs) -> "HFModel":
        from transformers import AutoModelForCausalLM
        kw = dict(config=config, trust_remote_code=trust_remote_code, use_safetensors=True, revision=revision,
                  **model_kwargs)
        offline = _hub_offline(str(name_or_path), local_files_only)  # as the config was read
        if local_files_only is not None or offline:
            kw["local_files_only"] = bool(local_files_only or offline)
        if attn_implementation is not None:
            kw["attn_implementation"] = attn_implementation
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, **kw)
        model.to(device)
        return cls(model, tok, name=portable_name(name_or_path))

    # -- the interface --------------------------------------------------------------------------
    def prefill(self, prompts: Prompts) -> HFState:
        """Consume every prompt token but the last.  Identical prompts are run once and their cache rows copied
        (a batch that repeats a few prompts, as the exact-pair certificate's does, pays for the distinct ones)."""
        plist = as_prompt_list(prompts, self.vocab_size)
        keys = [tuple(p) for p in plist]
        first = {}
        inverse = [first.setdefault(key, len(first)) for key in keys]  # (B,) row of each prompt's distinct copy
        if 2 * len(first) > len(plist):
            return self._prefill_rows(plist)
        state = self._prefill_rows([list(key) for key in first])  # (U,) distinct prompts, in first-seen order
        return self.select(state, torch.tensor(inverse, dtype=torch.long))

    def _prefill_rows(self, plist: list) -> HFState:
        B = len(plist)
        n = [len(p) - 1 for p in plist]  # every prompt token but the last
        state = HFState(lengths=torch.zeros(B, dtype=torch.long, device=self.device),
                        cache=RaggedKVCache(self.num_layers, initial_capacity=self._capacity(max(n))),
                        max_len=0, uniform=True)
        T = max(n)
        if T == 0:
            return state
        tokens = torch.tensor([p[:-1] + [0] * (T - len(p) + 1) for p in plist], dtype=torch.long)  # (B, T) padded
        self.forward(state, tokens.to(self.device), torch.tensor(n, dtype=torch.long, device=self.device),
                     _logits=False)
        return state

    @torch.inference_mode()
    def forward(self, state: HFState, tokens: torch.Tensor, n_new: Optional[torch.Tensor] = None,
                _logits: bool = True) -> torch.Tensor:
        B, T = tokens.shape  # (B, T)
        need = state.max_len + T
        if self.max_positions is not None and need > self.max_positions:
            raise ValueError(f"sequence length {need} exceeds the model's maximum of {self.max_positions} "
                             f"positions (`max_position_embeddings` of {self.name}); shorten the prompt or "
                             "max_new_tokens")
        cache = state.cache
        cache.seq_length = state.max_len
        cache.kv_len = need
        ar = self._arange(T)  # (T,)
        if state.uniform:  # every row at one length (always so at batch 1): slice writes, shared mask
            off = state.max_len
            cache.offset, cache.write_index = off, None
            pos = (ar + off).unsqueeze(0).expand(B, T)  # (B, T)
            mask = self._uniform_mask(B, T, off, need) if self._mask_kind is None else self._mask(pos, need)
        else:
            cache.offset = None
            pos = state.lengths.unsqueeze(1) + ar  # (B, T)
            cache.write_index = pos
            mask = self._mask(pos, need)
        out = self.model(input_ids=tokens, attention_mask=mask, position_ids=pos, use_cache=True,
                         logits_to_keep=0 if _logits else 1, **{self._cache_kw: cache})
        if n_new is None:
            state.lengths = state.lengths + T
            state.max_len += T
        else:
            state.lengths = state.lengths + n_new
            self._sync_host(state)
        return out.logits.to(self.dtype) if _logits else None  # (B, T, V)

    def rollback(self, state: HFState, lengths: torch.Tensor) -> None:
        if not torch.is_tensor(lengths) or lengths.device != state.lengths.device:
            lengths = torch.as_tensor(lengths, dtype=torch.long, device=state.lengths.device)
        if lengths.shape != state.lengths.shape:
            check_arg(False, "lengths", tuple(lengths.shape), f"a tensor of shape {tuple(state.lengths.shape)}")
        if state.lengths.shape[0] == 1:
            new = int(lengths[0])
            if not 0 <= new <= state.max_len:
                check_arg(False, "lengths", [new], f"between 0 and the current length {state.max_len}")
            state.lengths, state.max_len, state.uniform = lengths.long(), new, True
            return
        if bool(((lengths < 0) | (lengths > state.lengths)).any()):
            check_arg(False, "lengths", lengths.tolist(), f"between 0 and the current lengths {state.lengths.tolist()}")
        state.lengths = lengths.long()  # slots past a row's end are invisible, then overwritten
        self._sync_host(state)

    def select(self, state: HFState, index: torch.Tensor) -> HFState:
        index = torch.as_tensor(index, dtype=torch.long, device=self.device)
        state.cache.select(index)
        new = HFState(lengths=state.lengths[index], cache=state.cache)
        self._sync_host(new)
        return new

    # -- helpers --------------------------------------------------------------------------------
    def _capacity(self, n_prompt: int) -> int:
        """KV slots allocated at prefill: the longest prompt plus ``cache_headroom`` (the cache doubles when a row
        outgrows it).  Zeroing the buffer is most of a short call's cost at large batches, so a caller that knows
        how many tokens it will add (the exact-pair certificate: J + k + 2) sets a small headroom."""
        h = int(self.cache_headroom)
        return _round_up(n_prompt + h, min(64, _round_up(h, 8)))

    @staticmethod
    def _sync_host(state: HFState) -> None:
        """Host copies of max(lengths) and all-equal (one device read)."""
        if state.lengths.shape[0] == 1:
            state.max_len, state.uniform = int(state.lengths[0]), True
            return
        lo, hi = torch.aminmax(state.lengths).__iter__()
        lo, hi = int(lo), int(hi)
        state.max_len, state.uniform = hi, lo == hi

    def _arange(self, T: int) -> torch.Tensor:
        if self._ar.shape[0] < T:
            self._ar = torch.arange(max(T, 2 * self._ar.shape[0]), device=self.device)
        return self._ar[:T]

    def _uniform_mask(self, B: int, T: int, off: int, kv_len: int) -> torch.Tensor:
        """(B, 1, T, kv_len) additive mask when every row has ``off`` tokens: slot s visible to query t
        iff s <= off + t."""
        dt = self.model.dtype
        if T == 1:
            return torch.zeros(1, 1, 1, kv_len, dtype=dt, device=self.device).expand(B, 1, 1, kv_len)
        m = torch.full((T, kv_len), self._min, dtype=dt, device=self.device).triu_(off + 1)  # (T, S)
        return m.view(1, 1, T, kv_len).expand(B, 1, T, kv_len)

    def _mask(self, pos: torch.Tensor, kv_len: int):
        """4D additive mask (B, 1, T, kv_len): slot s visible to query (b, t) iff s <= pos[b, t]."""
        s = torch.arange(kv_len, device=self.device)  # (S,)
        q = pos.unsqueeze(-1)  # (B, T, 1)
        visible = s <= q  # (B, T, S)
        full = self._additive(visible)
        kind = self._mask_kind
        if kind is None:
            return full
        window, per_type = kind
        windowed = self._additive(visible & (s > q - window))
        if not per_type:
            return windowed
        return {"full_attention": full, "sliding_attention": windowed, "chunked_attention": full}

    def _additive(self, visible: torch.Tensor) -> torch.Tensor:
        m = torch.zeros(visible.shape, dtype=self.model.dtype, device=self.device)
        return m.masked_fill_(~visible, self._min).unsqueeze(1)  # (B, 1, T, S)

    def encode(self, texts, add_bos: bool = True) -> list[list[int]]:
        """Token lists for text prompts (needs the tokenizer)."""
        if self.tokenizer is None:
            raise ValueError(f"{self.name} was loaded without a tokenizer; pass token ids instead")
        out = []
        for t in texts:
            ids = self.tokenizer(t, add_special_tokens=False)["input_ids"]
            bos = self.tokenizer.bos_token_id
            out.append(([bos] if add_bos and bos is not None else []) + list(ids))
        return out

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids if int(i) >= 0]
        return self.tokenizer.decode(ids) if self.tokenizer is not None else repr(ids)


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _num_cache_layers(config) -> int:
    tc = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in ("num_hidden_layers", "n_layer", "num_layers"):
        v = getattr(tc, attr, None)
        if isinstance(v, int):
            return v
    raise NonCausalModelError(f"cannot tell the number of layers of {type(config).__name__}")


def _max_positions(config) -> Optional[int]:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(config, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _mask_kind(config):
    """None for full attention; (window, per_layer_type) when a sliding window is in use."""
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or window <= 0 or getattr(config, "use_sliding_window", True) is False:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None:
        if "sliding_attention" not in types:
            return None
        return window, True
    return window, False


def _check_config_causal(config, name: str) -> None:
    """Decoder-only causal LM, or a NonCausalModelError naming what it is."""
    require_transformers()
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    mt = getattr(config, "model_type", None)
    if getattr(config, "is_encoder_decoder", False):
        raise NonCausalModelError(f"`{name}` is an encoder-decoder model (model_type {mt!r}); "
                                  "speculative sampling here needs a decoder-only causal LM")
    if mt not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise NonCausalModelError(f"`{name}` has model_type {mt!r}, which transformers does not provide as "
                                  "AutoModelForCausalLM; a decoder-only causal LM is needed")
    if mt in _ENCODER_FAMILIES and not getattr(config, "is_decoder", False):
        raise NonCausalModelError(f"`{name}` is a bidirectional encoder (model_type {mt!r}, is_decoder=False); "
                                  "a causal LM is needed (an encoder used as a decoder needs is_decoder=True)")


@torch.inference_mode()
def _probe_causal(m: HFModel) -> None:
    """Two 8-token inputs equal in their first 4 tokens must give equal logits there."""
    g = torch.Generator().manual_seed(0)
    V = m.vocab_size
    a = torch.randint(0, V, (1, 8), generator=g)
    b = a.clone()
    b[0, 4:] = (a[0, 4:] + 1 + torch.randint(0, V - 1, (4,), generator=g)) % V
    x = torch.cat([a, b]).to(m.device)  # (2, 8)
    logits = m.model(input_ids=x, use_cache=False).logits.float()  # (2, 8, V)
    la = logits[:, :4]  # (2, 4, V) the shared prefix
    scale = float(logits.abs().max()) + 1e-12
    rel = 1e-5 if next(m.model.parameters()).dtype == torch.float32 else 1e-3
    diff = float((la[0] - la[1]).abs().max())
    if diff > rel * scale:
        raise NonCausalModelError(f"`{m.name}` is not causal: its logits at a position change with later "
                                  f"tokens (max difference {diff:.3g}, logit scale {scale:.3g})")


def _looks_local(s: str) -> bool:
    """A path rather than a hub id: absolute, starting with . or ~, existing, more than one '/', or
    whose first component exists here (``models/targt`` where ./models exists)."""
    if os.path.isabs(s) or s.startswith((".", "~")) or os.path.exists(s) or s.count("/") > 1:
        return True
    first = s.replace(os.sep, "/").split("/")[0]
    return "/" in s.replace(os.sep, "/") and first != "" and os.path.exists(first)


def _check_local_path(s: str) -> None:
    """Fail fast (no hub retries) on a local path that is not a model directory: missing, or without config.json."""
    if not _looks_local(s):
        return
    d = os.path.expanduser(s)
    if not os.path.isdir(d):
        where = os.path.dirname(d.rstrip("/")) or "."
        hint = f" ({where!r} exists)" if os.path.isdir(where) and where != "." else ""
        raise FileNotFoundError(f"`name_or_path` must be an existing model directory or a hub name; got {s!r}: "
                                f"no such directory{hint}")
    if not os.path.isfile(os.path.join(d, "config.json")):
        found = sorted(os.listdir(d))
        raise FileNotFoundError(f"`name_or_path` {s!r} is a directory without config.json (it holds "
                                f"{found[:5] if found else 'nothing'}); a model directory needs config.json and "
                                "the weights (model.safetensors), as written by save_pretrained")


HUB_PROBE_TIMEOUT_S = 2.0


@functools.lru_cache(maxsize=None)
def _hub_unreachable() -> Optional[str]:
    """Why the Hugging Face hub cannot be reached from this process (None: it can, or a proxy decides): one HEAD
    request to ``HF_ENDPOINT`` (default https://huggingface.co), directly or through the proxy the environment
    names, answered within HUB_PROBE_TIMEOUT_S, once per process.  Any HTTP answer counts as reachable (the
    certificate is not checked here: the hub client does that); no answer in time, or a refused or unresolvable
    host, counts as unreachable (a host that accepts the connection and never answers kept the hub client
    waiting for minutes); a proxy that refuses the tunnel (e.g. it wants credentials) decides for itself."""
    import http.client
    import ssl
    import urllib.request
    from urllib.parse import urlsplit
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    proxy = urllib.request.getproxies().get("https" if url.scheme != "http" else "http")
    if proxy and urllib.request.proxy_bypass(host):
        proxy = None
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    where = f"{host}:{port}" + (f" through proxy {urlsplit(proxy).hostname}" if proxy else "")
    try:
        if proxy:
            p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
            conn = http.client.HTTPConnection(p.hostname, p.port or 8080, timeout=HUB_PROBE_TIMEOUT_S)
            if url.scheme != "http":
                conn.set_tunnel(host, port)
        elif url.scheme == "http":
            conn = http.client.HTTPConnection(host, port, timeout=HUB_PROBE_TIMEOUT_S)
        else:
            conn = http.client.HTTPSConnection(host, port, timeout=HUB_PROBE_TIMEOUT_S, context=ctx)
        try:
            if proxy and url.scheme != "http":  # the tunnel, then TLS inside it
                conn.connect()
                conn.sock = ctx.wrap_socket(conn.sock, server_hostname=host)
            conn.request("HEAD", "/" if not proxy or url.scheme != "http" else f"http://{host}:{port}/")
            conn.getresponse()
        finally:
            conn.close()
    except (socket.timeout, TimeoutError) as e:
        return f"{where}: no answer in {HUB_PROBE_TIMEOUT_S:g} s ({type(e).__name__})"
    except OSError as e:
        if proxy and "Tunnel connection failed" in str(e):
            return None  # the proxy answered; it decides (credentials, policy)
        return f"{where}: {type(e).__name__}: {e}"
    except http.client.HTTPException:
        return None  # something answered in HTTP-like terms
    return None


def _hub_offline(s: str, local_files_only: Optional[bool]) -> Optional[str]:
    """Why hub id ``s`` is to be read from the Hugging Face cache only (None: as the caller asked)."""
    if local_files_only or _looks_local(s):
        return None
    if any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return None  # the hub client is offline already: it reads the cache at once
    return _hub_unreachable()


def portable_name(name_or_path) -> str:
    """A model's name for reports, free of this machine's directories: a hub id or a relative path as given
    (normalised); an absolute path as its last two components (``tiny_pair/target``)."""
    s = str(name_or_path)
    if not _looks_local(s):
        return s
    if os.path.isabs(os.path.expanduser(s)):
        parts = Path(os.path.expanduser(s)).resolve().parts
        return "/".join(parts[-2:])
    return os.path.normpath(s)


def _load_config_and_tokenizer(name_or_path, trust_remote_code, revision, local_files_only, load_tokenizer):
    require_transformers()
    from transformers import AutoConfig, AutoTokenizer
    s = str(name_or_path)
    _check_local_path(s)
    offline = _hub_offline(s, local_files_only)
    kw = dict(trust_remote_code=trust_remote_code, revision=revision)
    if local_files_only is not None or offline:
        kw["local_files_only"] = bool(local_files_only or offline)
    try:
        config = AutoConfig.from_pretrained(s, **kw)
    except OSError as e:
        if offline:
            first = s.replace(os.sep, "/").split("/")[0]
            raise FileNotFoundError(f"`name_or_path` must be a model directory or a hub id; got {s!r}: no such "
                                    f"directory here (no {first!r}), not in the Hugging Face cache, and the hub "
                                    f"cannot be reached ({offline})") from None
        raise FileNotFoundError(f"`name_or_path` {s!r}: cannot read a model config ({e})") from e
    tok = None
    if load_tokenizer:
        try:
            tok = AutoTokenizer.from_pretrained(s, **kw)
        except (OSError, ValueError, TypeError):
            tok = None
    return config, tok


# ---------------------------------------------------------------------------------------------
# Pairs
# ---------------------------------------------------------------------------------------------
def check_pair(target_config, draft_config, target_tok=None, draft_tok=None, target_name="target",
               draft_name="draft") -> None:
    """Same output vocabulary size and, when both tokenizers are known, the same token -> id map."""
    vt, vd = target_config.vocab_size, draft_config.vocab_size
    if vt != vd:
        raise VocabularyMismatchError(f"`draft` ({draft_name}) has vocabulary size {vd} but `target` "
                                      f"({target_name}) has {vt}; target and draft must share one vocabulary")
    if target_tok is not None and draft_tok is not None:
        a, b = target_tok.get_vocab(), draft_tok.get_vocab()
        if a != b:
            diff = sorted(set(a.items()) ^ set(b.items()))[:3]
            raise VocabularyMismatchError(f"`draft` ({draft_name}) and `target` ({target_name}) have different "
                                          f"tokenizers ({len(a)} vs {len(b)} tokens; e.g. {diff}); "
                                          "they must share one tokenizer")
        for attr in ("bos_token_id", "eos_token_id"):
            if getattr(target_tok, attr, None) != getattr(draft_tok, attr, None):
                raise VocabularyMismatchError(f"`draft` ({draft_name}) and `target` ({target_name}) disagree on "
                                              f"{attr}: {getattr(draft_tok, attr)} vs {getattr(target_tok, attr)}")


def load_pair(target: Union[str, os.PathLike], draft: Union[str, os.PathLike], **kwargs) -> tuple[HFModel, HFModel]:
    """Load target and draft, checking both configs and tokenizers before reading any weights."""
    trc = kwargs.get("trust_remote_code", False)
    rev, lfo = kwargs.get("revision"), kwargs.get("local_files_only")
    ct, tt = _load_config_and_tokenizer(target, trc, rev, lfo, True)
    cd, td = _load_config_and_tokenizer(draft, trc, None, lfo, True)
    _check_config_causal(ct, str(target))
    _check_config_causal(cd, str(draft))
    check_pair(ct, cd, tt, td, str(target), str(draft))
    kw = dict(dtype=kwargs.get("dtype", torch.float32), device=kwargs.get("device", "cpu"), trust_remote_code=trc,
              attn_implementation=kwargs.get("attn_implementation", "sdpa"), revision=rev, local_files_only=lfo)
    return HFModel._load_weights(target, ct, tt, **kw), HFModel._load_weights(draft, cd, td, **kw)


def load_tiny_pair(device="cpu", dtype=torch.float32) -> tuple[HFModel, HFModel]:
    """The shipped byte-level target (4 layers, width 256) and draft (1 layer, width 128)."""
    if not (TINY_PAIR_DIR / "target" / "model.safetensors").exists():
        raise FileNotFoundError(f"the tiny pair is missing from {TINY_PAIR_DIR}; "
                                "run `python experiments/train_tiny_pair.py` to rebuild it")
    return load_pair(TINY_PAIR_DIR / "target", TINY_PAIR_DIR / "draft", device=device, dtype=dtype,
                     local_files_only=True)


def tiny_pair_prompts(n: int, length: int = 32, seed: int = 0, min_length: Optional[int] = None) -> list[list[int]]:
    """``n`` byte prompts: <bos> + a slice of a held-out stdlib module (the training script's validation
    split), starting at line starts; ragged lengths in [min_length, length] when min_length is given."""
    import random
    import sysconfig
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    valid = [f for i, f in enumerate(files) if i % 20 == 19] or files
    rng = random.Random(seed)
    out = []
    text = b"".join(f.read_bytes() for f in valid)
    starts = [i + 1 for i in range(len(text) - 1) if text[i] == 10]
    for _ in range(n):
        L = length if min_length is None else rng.randint(min_length, length)
        s = rng.choice(starts[: max(1, len(starts) - L)])
        out.append([256] + list(text[s:s + L - 1]))
    return out
