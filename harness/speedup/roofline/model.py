"""A roofline cost model of one forward call: T(n, B, L) from a model's config and a hardware description.

One decoding forward of a decoder-only transformer scores n new tokens for each of B sequences that
already hold L tokens of context (KV cache).  It moves bytes and does arithmetic:

    bytes  = W(B n)                              weights, read once per call (dtype bytes per parameter;
                                                 the input embedding is a gather: only the lm_head is read;
                                                 a mixture-of-experts layer reads only the experts its B n
                                                 tokens are routed to, expected E (1 - (1 - k_e / E)^(B n))
                                                 of its E experts under independent uniform routing)
           + B (L + n) layers 2 kv_heads head_dim kv_bytes      the KV cache read (and the n new rows written)
           + B n V logits_bytes                  the logits written (float32 unless the model says otherwise)
    flops  = 2 P_mm n B                          every matmul weight once per token (P_mm: linear weights
                                                 of the layers and the lm_head; a token's active experts only)
           + 4 B n (L + n) heads head_dim layers  attention scores Q K^T and their product with V
    T      = max(bytes / (BW eff_bw), flops / (peak eff_compute)) + overhead + overhead_per_layer layers

At small B n the call is memory-bound (T barely grows with n: scoring k + 1 tokens costs about what one
costs, which is why speculation pays); past the ridge point B n ~ (W / BW) (peak / 2 P_mm) it is
compute-bound (T grows with n B: extra drafted tokens cost in proportion, and speculation stops paying).

The model's shape is computed from an HF ``config.json`` (:meth:`ModelShape.from_config`; no weights
read); a missing or malformed field is a :class:`ConfigError` naming the file and the field.  The
hardware comes from ``harness/configs/hardware/<name>.toml`` (:func:`load_hardware`): bandwidth, peak matmul
throughput per dtype, the per-call overhead, the efficiency factors, and the datasheet they come from.
:func:`calibrate` fits the efficiency factors and the overhead to measured forward profiles
(:mod:`harness.speedup.profiler` rows) by least squares on log T, and :class:`Roofline` is the function
T(n, B, L) that a measured cost model can plug in (``roofline(n, B, L)`` -> seconds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np

from harness.core.config import CONFIGS
from harness.core import jsonfile
from specimpl.errors import check_arg

__all__ = ["DTYPE_BYTES", "ConfigError", "ModelShape", "Hardware", "HARDWARE_DIR", "hardware_names",
           "load_hardware", "ForwardCost", "forward_cost", "Roofline", "calibrate", "Calibration", "FITTABLE",
           "run_step_seconds"]

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "int8": 1, "int4": 0.5}
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
                  "fp8": "float8", "awq": "int4", "gptq": "int4"}
HARDWARE_DIR = CONFIGS / "hardware"
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


class ConfigError(ValueError):
    """A model config or hardware file lacks a field the roofline needs, or holds a bad value."""


def _dtype_name(value, where: str) -> str:
    name = _DTYPE_ALIASES.get(str(value).replace("torch.", ""), str(value).replace("torch.", ""))
    if name not in DTYPE_BYTES:
        raise ConfigError(f"{where} must be one of {sorted(DTYPE_BYTES)}; got {value!r}")
    return name


@dataclass(frozen=True)
class ModelShape:
    """What the roofline needs of a model: its shape and the bytes of its weights and KV cache."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = True
    dtype: str = "bfloat16"  # weights
    kv_dtype: Optional[str] = None  # KV cache (default: the weights' dtype, float16 for int4/float8 weights)
    logits_bytes: int = 4
    experts: int = 0  # mixture of experts: routed experts per layer (0: a dense MLP of `intermediate`)
    experts_per_tok: int = 0  # experts each token is routed to
    moe_intermediate: int = 0  # one expert's intermediate size
    extra_params: int = 0  # matmul weights outside the layers and lm_head (an EAGLE head's fc), read every call

    @classmethod
    def from_config(cls, path, dtype: Optional[str] = None, name: Optional[str] = None) -> "ModelShape":
        """The shape of an HF ``config.json`` (a file, or a folder holding one).  ``dtype`` overrides the
        config's ``torch_dtype`` / ``dtype`` (bfloat16 when it names none)."""
        p = Path(path)
        p = p / "config.json" if p.is_dir() else p
        if not p.is_file():
            raise ConfigError(f"model config {str(p)!r} does not exist (need an HF config.json or a folder holding one)")
        try:
            cfg = jsonfile.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"model config {str(p)!r} is not readable JSON: {e}") from None
        if not isinstance(cfg, dict):
            raise ConfigError(f"model config {str(p)!r} must hold a JSON object; got {type(cfg).__name__}")
        return cls.from_dict(cfg, where=str(p), dtype=dtype, name=name or p.parent.name)

    @classmethod
    def from_dict(cls, cfg: dict, where: str = "config", dtype: Optional[str] = None,
                  name: str = "model") -> "ModelShape":
        missing = [f for f in _REQUIRED if f not in cfg]
        if missing:
            raise ConfigError(f"{where}: field {missing[0]!r} is missing (the roofline needs {list(_REQUIRED)})")

        def integer(key, default=None):
            v = cfg.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{where}: field {key!r} must be an integer >= 1; got {v!r}")
            return v

        heads = integer("num_attention_heads")
        hidden = integer("hidden_size")
        kv = integer("num_key_value_heads", heads)
        if cfg.get("head_dim") is not None:
            hd = integer("head_dim")
        elif hidden % heads:
            raise ConfigError(f"{where}: field 'head_dim' is missing and hidden_size {hidden} is not a multiple of "
                              f"num_attention_heads {heads}")
        else:
            hd = hidden // heads
        raw = dtype or cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
        moe = {}
        n_exp = cfg.get("num_experts", cfg.get("num_local_experts"))
        if n_exp:
            key = "num_experts" if "num_experts" in cfg else "num_local_experts"
            moe = {"experts": integer(key), "experts_per_tok": integer("num_experts_per_tok"),
                   "moe_intermediate": integer("moe_intermediate_size")}
            if moe["experts_per_tok"] > moe["experts"]:
                raise ConfigError(f"{where}: field 'num_experts_per_tok' must be <= {key} {moe['experts']}; "
                                  f"got {moe['experts_per_tok']}")
        extra = cfg.get("extra_params", 0)
        if isinstance(extra, bool) or not isinstance(extra, int) or extra < 0:
            raise ConfigError(f"{where}: field 'extra_params' must be an integer >= 0; got {extra!r}")
        return cls(name=name, hidden=hidden, layers=integer("num_hidden_layers"), heads=heads, kv_heads=kv,
                   head_dim=hd, intermediate=integer("intermediate_size"), vocab=integer("vocab_size"),
                   tied=bool(cfg.get("tie_word_embeddings", False)),
                   dtype=_dtype_name(raw, f"{where}: dtype" if dtype is None else "`dtype`"), extra_params=extra,
                   **moe)

    def draft_head(self, vocab: Optional[int] = None, fc_inputs: int = 2, intermediate: Optional[int] = None,
                   extra: int = 0, name: Optional[str] = None) -> "ModelShape":
        """An EAGLE / MTP draft head on this target: one decoder layer of the target's shape (a mixture's layer as
        it is, or a dense MLP of ``intermediate``), an fc of ``fc_inputs`` hidden states -> hidden (EAGLE-1/2 and
        DeepSeek-V3's MTP module: 2; EAGLE-3: 3) plus ``extra`` weights, and an LM head of ``vocab`` rows (default
        the target's own, which the head reads every draft step; EAGLE-3 and FR-Spec heads keep a smaller draft
        vocabulary).  Its cost is a fraction of one target layer plus, where the vocabulary is large against a
        layer, the LM head (Llama-3-8B's 128256 x 4096 head is 2.4 of its layers), and it pays one layer's share of
        a per-layer fixed cost (``overhead_per_layer_s``), not the target's ``layers`` shares."""
        for key, v, least in (("vocab", vocab, 1), ("fc_inputs", fc_inputs, 0), ("intermediate", intermediate, 1),
                              ("extra", extra, 0)):
            check_arg(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= least), key, v,
                      f"an integer >= {least}" + (" or None" if key in ("vocab", "intermediate") else ""))
        moe = {} if intermediate else {"experts": self.experts, "experts_per_tok": self.experts_per_tok,
                                       "moe_intermediate": self.moe_intermediate}
        return ModelShape(name=name or f"{self.name}-head", hidden=self.hidden, layers=1, heads=self.heads,
                          kv_heads=self.kv_heads, head_dim=self.head_dim, intermediate=intermediate or self.intermediate,
                          vocab=vocab or self.vocab, tied=True, dtype=self.dtype, kv_dtype=self.kv_dtype,
                          logits_bytes=self.logits_bytes, extra_params=fc_inputs * self.hidden * self.hidden + extra,
                          **moe)

    # -- counts -------------------------------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        """q, k, v, o projections of one layer (and a mixture's router)."""
        return self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads) + self.hidden * self.experts

    @property
    def expert_params(self) -> int:
        """One expert's gated MLP (0 for a dense model)."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def layer_params(self) -> int:
        """Linear weights of one decoder layer: q, k, v, o projections and a gated MLP, or all its experts
        (norms negligible)."""
        mlp = self.experts * self.expert_params if self.experts else 3 * self.hidden * self.intermediate
        return self.attn_params + mlp

    @property
    def active_layer_params(self) -> int:
        """The weights of one layer a single token multiplies through (its routed experts only)."""
        if not self.experts:
            return self.layer_params
        return self.attn_params + self.experts_per_tok * self.expert_params

    @property
    def matmul_params(self) -> int:
        """Weights every token multiplies through: all layers (a token's experts) and the lm_head."""
        return self.layers * self.active_layer_params + self.vocab * self.hidden + self.extra_params

    def experts_read(self, tokens) -> np.ndarray:
        """Expected distinct experts per layer that ``tokens`` tokens are routed to (independent uniform
        routing: E (1 - (1 - k_e / E)^tokens)); 0 for a dense model."""
        if not self.experts:
            return np.zeros_like(np.asarray(tokens, dtype=np.float64))
        t = np.asarray(tokens, dtype=np.float64)
        return self.experts * (1.0 - (1.0 - self.experts_per_tok / self.experts) ** t)

    def weight_bytes_for(self, tokens):
        """Bytes of weights one forward over ``tokens`` tokens (all sequences) reads: :attr:`weight_bytes`
        for a dense model; a mixture reads only the experts the tokens are routed to."""
        if not self.experts:
            return self.weight_bytes
        b = DTYPE_BYTES[self.dtype]
        return (self.layers * (self.attn_params + self.experts_read(tokens) * self.expert_params) * b
                + (self.vocab * self.hidden) * max(b, 2) + self.extra_params * b)

    @property
    def params(self) -> int:
        """Total parameters (embedding counted once when tied)."""
        return (self.layers * self.layer_params + self.vocab * self.hidden + self.extra_params
                + (0 if self.tied else self.vocab * self.hidden) + (2 * self.layers + 1) * self.hidden)

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights one forward reads: the layers in the weights' dtype, the lm_head in at least
        16 bits (quantised checkpoints such as AWQ / GPTQ keep it in float16)."""
        if self.experts:
            return float(self.weight_bytes_for(1))
        return (self.layers * self.layer_params * DTYPE_BYTES[self.dtype]
                + self.vocab * self.hidden * max(DTYPE_BYTES[self.dtype], 2) + self.extra_params * DTYPE_BYTES[self.dtype])

    def resident_bytes(self, B: int, L: float) -> float:
        """Weights (all of them) and the KV cache of B sequences of L tokens, held in memory."""
        w = (self.layers * self.layer_params * DTYPE_BYTES[self.dtype]
             + self.vocab * self.hidden * max(DTYPE_BYTES[self.dtype], 2) * (1 if self.tied else 2)
             + self.extra_params * DTYPE_BYTES[self.dtype])
        return w + B * L * self.kv_bytes_per_token

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token of context, over all layers."""
        kvd = self.kv_dtype or (self.dtype if DTYPE_BYTES[self.dtype] >= 2 else "float16")
        return self.layers * 2 * self.kv_heads * self.head_dim * DTYPE_BYTES[kvd]


@dataclass(frozen=True)
class Hardware:
    """One accelerator (or CPU): datasheet numbers, the per-call overhead and the efficiency factors."""

    name: str
    bandwidth_gbps: float  # GB/s (1e9 bytes)
    peak_tflops: dict  # dtype -> dense TFLOP/s
    overhead_s: float  # fixed per forward call
    overhead_per_layer_s: float = 0.0  # per decoder layer per call (kernel launches of an eager framework)
    step_per_request_s: float = 0.0  # per running request per engine step (scheduler, sampling, output processing)
    eff_bandwidth: float = 0.8
    eff_compute: float = 0.6
    devices: int = 1  # ideal tensor-parallel scaling of bandwidth and peak
    memory_gb: float = 0.0  # capacity per device (GB, 1e9 bytes); 0: unknown, not checked
    source: str = ""
    calibrated: str = ""  # how the efficiency factors and the overhead were obtained
    path: str = ""

    def peak(self, dtype: str) -> float:
        """Dense FLOP/s for matmuls with weights of ``dtype`` (int4 / int8 / float8 weights dequantised to
        float16 unless the file gives a peak for them)."""
        for d in (dtype, "float16" if DTYPE_BYTES.get(dtype, 2) < 2 else dtype, "bfloat16", "float32"):
            if d in self.peak_tflops:
                return self.peak_tflops[d] * 1e12 * self.devices
        raise ConfigError(f"hardware {self.name!r} ({self.path}): no peak_tflops for dtype {dtype!r}")

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_gbps * 1e9 * self.devices

    def fits(self, nbytes: float) -> bool:
        """``nbytes`` resident (weights and KV cache of every model) fit in memory (True when unknown)."""
        return self.memory_gb <= 0 or nbytes <= self.memory_gb * 1e9 * self.devices

    def with_devices(self, devices: int) -> "Hardware":
        check_arg(isinstance(devices, int) and devices >= 1, "devices", devices, "an integer >= 1")
        return replace(self, devices=devices)


def hardware_names() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.toml"))


def load_hardware(name_or_path) -> Hardware:
    """``harness/configs/hardware/<name>.toml`` by name (h200, h100, a100, rtx3090, a40, local, ...) or a path."""
    import tomllib
    p = Path(str(name_or_path))
    if not p.suffix:
        p = HARDWARE_DIR / f"{name_or_path}.toml"
    if not p.is_file():
        raise ConfigError(f"`hardware` must be one of {hardware_names()} or a .toml file; got {str(name_or_path)!r}")
    try:
        d = tomllib.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"hardware file {str(p)!r} is not readable TOML: {e}") from None
    for key in ("name", "bandwidth_gbps", "peak_tflops", "overhead_s", "source"):
        if key not in d:
            raise ConfigError(f"{p}: field {key!r} is missing")
    num = {k: d[k] for k in ("bandwidth_gbps", "overhead_s", "overhead_per_layer_s", "step_per_request_s",
                             "eff_bandwidth", "eff_compute") if k in d}
    if not isinstance(d["peak_tflops"], dict) or not d["peak_tflops"]:
        raise ConfigError(f"{p}: field 'peak_tflops' must be a table of dtype = TFLOPS (e.g. float32 = 19.5); "
                          f"got {d['peak_tflops']!r}")
    # rates divide the roofline's bytes and FLOPs: 0 would make times inf and S nan
    rates = {"bandwidth_gbps", *(f"peak_tflops.{a}" for a in d["peak_tflops"])}
    fields = {**num, **{f"peak_tflops.{a}": b for a, b in d["peak_tflops"].items()},
              **{k: d[k] for k in ("memory_gb",) if k in d}}
    for k, v in fields.items():
        positive = k in rates
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or (v <= 0 if positive else v < 0)):
            raise ConfigError(f"{p}: field {k!r} must be a finite number {'> 0' if positive else '>= 0'}; got {v!r}")
    dev = d.get("devices", 1)
    if isinstance(dev, bool) or not isinstance(dev, int) or dev < 1:
        raise ConfigError(f"{p}: field 'devices' must be an integer >= 1; got {dev!r}")
    for k in ("eff_bandwidth", "eff_compute"):
        if k in num and not 0 < num[k] <= 20:  # > 1 only where a probe under load read the peak low (local)
            raise ConfigError(f"{p}: field {k!r} must be in (0, 20]; got {num[k]!r}")
    return Hardware(name=d["name"], bandwidth_gbps=float(d["bandwidth_gbps"]),
                    peak_tflops={str(k): float(v) for k, v in d["peak_tflops"].items()},
                    overhead_s=float(d["overhead_s"]), overhead_per_layer_s=float(d.get("overhead_per_layer_s", 0.0)),
                    step_per_request_s=float(d.get("step_per_request_s", 0.0)),
                    eff_bandwidth=float(d.get("eff_bandwidth", 0.8)),
                    eff_compute=float(d.get("eff_compute", 0.6)), devices=int(d.get("devices", 1)),
                    memory_gb=float(d.get("memory_gb", 0.0)), source=str(d["source"]), calibrated=str(d.get("calibrated", "")), path=p.name)


@dataclass(frozen=True)
class ForwardCost:
    """One forward's bytes, FLOPs and the roofline's times (seconds)."""

    bytes: float
    flops: float
    t_memory: float
    t_compute: float
    overhead: float

    @property
    def seconds(self) -> float:
        return max(self.t_memory, self.t_compute) + self.overhead

    @property
    def bound(self) -> str:
        return "memory" if self.t_memory >= self.t_compute else "compute"


def forward_cost(shape: ModelShape, hw: Hardware, n, B, L, prefill: bool = False) -> ForwardCost:
    """The roofline of one forward scoring ``n`` tokens for ``B`` sequences holding ``L`` tokens each.
    ``prefill``: a prompt's forward, whose lm_head and logits cover its last token only.  Broadcasts over
    arrays of n, B, L (the fields are then arrays)."""
    n, B, L = (np.asarray(x, dtype=np.float64) for x in (n, B, L))
    check_arg(bool(np.all(n >= 1)), "n", n, "tokens scored >= 1")
    check_arg(bool(np.all(B >= 1)), "B", B, "a batch size >= 1")
    check_arg(bool(np.all(L >= 0)), "L", L, "a context length >= 0")
    m = np.ones_like(n) if prefill else n  # tokens per sequence that reach the lm_head
    head = shape.vocab * shape.hidden
    nbytes = shape.weight_bytes_for(B * n) + B * (L + n) * shape.kv_bytes_per_token + B * m * shape.vocab * shape.logits_bytes
    flops = (2.0 * ((shape.matmul_params - head) * n + head * m) * B
             + 4.0 * B * n * (L + n) * shape.heads * shape.head_dim * shape.layers)
    overhead = hw.overhead_s + hw.overhead_per_layer_s * shape.layers
    t_mem = nbytes / (hw.bandwidth * hw.eff_bandwidth)
    t_cmp = flops / (hw.peak(shape.dtype) * hw.eff_compute)
    sq = (lambda x: float(x) if np.ndim(x) == 0 else x)
    return ForwardCost(sq(nbytes), sq(flops), sq(t_mem), sq(t_cmp), overhead)


@dataclass(frozen=True)
class Roofline:
    """T(n, B, L) of one model on one machine: ``Roofline(shape, hw)(n, B, L)`` -> seconds."""

    shape: ModelShape
    hw: Hardware

    def __call__(self, n, B, L, prefill: bool = False):
        c = forward_cost(self.shape, self.hw, n, B, L, prefill)
        return np.maximum(c.t_memory, c.t_compute) + c.overhead if np.ndim(c.t_memory) else c.seconds

    def ridge_tokens(self, L: float = 0.0) -> float:
        """Tokens scored per call (n B) where compute time overtakes memory time, at context L (weights only
        when L = 0): the batch beyond which extra scored tokens are no longer free."""
        lo, hi = 1.0, 1e9
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            c = forward_cost(self.shape, self.hw, 1, mid, L)
            lo, hi = (mid, hi) if c.t_memory > c.t_compute else (lo, mid)
        return lo


@dataclass(frozen=True)
class Calibration:
    """Efficiency factors and overhead fitted to measured forwards, with the fit's error."""

    hardware: Hardware
    points: int
    median_abs_rel_err: float
    max_abs_rel_err: float
    fitted: tuple = ()


FITTABLE = ("eff_bandwidth", "eff_compute", "overhead_s", "overhead_per_layer_s", "step_per_request_s")


def run_step_seconds(rt: Roofline, n, B, L, run=None) -> float:
    """One engine step, T(n, B, L) + s B (s: the hardware's ``step_per_request_s``, the engine's work per running
    request and step), or with ``run`` = (P, O) a whole fixed-length run's seconds per output token of a sequence:
    (T_prefill(P, B) + (O − 1) T(n, B, L)) / O + s B (the batch's prefill of P prompt tokens each, which emits the
    first token, then O − 1 steps at the mean context L; every one of the O engine steps pays s B)."""
    s = rt.hw.step_per_request_s * float(B)
    if not run:
        return float(rt(n, B, L)) + s
    P, O = run
    return float((rt(P, B, 0, prefill=True) + (O - 1) * rt(n, B, L)) / O) + s


def calibrate(hw: Hardware, measured: list, fit=FITTABLE, eff_max: float = 1.0) -> Calibration:
    """Fit ``fit`` (a subset of :data:`FITTABLE`) to measured forwards.

    ``measured``: (ModelShape, n, B, L, seconds) tuples, or (ModelShape, n, B, L, seconds, (P, O)) for a
    whole run's time per step (:func:`run_step_seconds`: a prefill of P prompt tokens and O decode steps, as a
    fixed-length benchmark's output tokens over its wall time measures).  Least squares on log T (scipy),
    efficiencies bounded to [1e-4, ``eff_max``] (1: the datasheet numbers are true peaks), overheads in
    [1e-9, 10] s.  Returns the calibrated hardware and the relative errors of the fit.
    """
    from scipy.optimize import least_squares
    check_arg(len(measured) >= 1, "measured", len(measured), "at least one (shape, n, B, L, seconds) point")
    check_arg(set(fit) <= set(FITTABLE) and len(fit) >= 1, "fit", fit, f"a non-empty subset of {FITTABLE}")
    y = np.log(np.array([m[4] for m in measured], dtype=np.float64))
    lo = {"eff_bandwidth": math.log(1e-4), "eff_compute": math.log(1e-4), "overhead_s": math.log(1e-9),
          "overhead_per_layer_s": math.log(1e-9), "step_per_request_s": math.log(1e-9)}
    x0 = np.array([math.log(max(getattr(hw, f), 1e-6)) for f in fit])

    def model(x):
        h = replace(hw, **{f: float(math.exp(v)) for f, v in zip(fit, x)})
        return np.log(np.array([run_step_seconds(Roofline(m[0], h), *m[1:4], *m[5:6]) for m in measured])), h

    lower = np.array([lo[f] for f in fit])
    upper = np.array([math.log(eff_max) if f.startswith("eff") else math.log(10.0) for f in fit])
    starts = [np.clip(x0, lower, upper)] + [np.clip(np.full(len(fit), v), lower, upper) for v in (-2.0, -5.0, -8.0)]
    fits = [least_squares(lambda x: model(x)[0] - y, s0, bounds=(lower, upper)) for s0 in starts]
    res = min(fits, key=lambda r: r.cost)  # several starts: the log-roofline's max() makes local minima
    pred, h = model(res.x)
    rel = np.abs(np.exp(pred - y) - 1.0)
    return Calibration(h, len(measured), float(np.median(rel)), float(rel.max()), tuple(fit))
