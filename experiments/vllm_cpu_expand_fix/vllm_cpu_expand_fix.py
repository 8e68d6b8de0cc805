"""TEST-ONLY vLLM general plugin fixing the CPU shim of ``expand_kernel``.

Bug (vllm-project/vllm#55005): ``vllm.utils.cpu_triton_utils._expand_kernel_impl``
calls the C++ op on ``_ensure_int64(output)``.  For a float32 (temperature, top_p)
or int32 (top_k) ``output`` that is a *temporary* int64 copy, so the C++ kernel
writes into the temporary and the real ``output`` (allocated with
``new_empty``) stays uninitialised; float inputs are also truncated to int64.
The rejection sampler then divides logits by garbage temperatures and applies
garbage top-k/top-p.

Fix: compute the expansion with torch ops and write into ``output`` in place,
preserving its dtype (same semantics as the Triton kernel, incl. the
replace_from -> replace_to substitution and the MAX_NUM_TOKENS cap).

Toggle: loaded by vLLM in every process (entry point group
``vllm.general_plugins``, name ``cpu_expand_fix``).
  * ``VLLM_PLUGINS`` unset            -> loaded (fix ON)
  * ``VLLM_PLUGINS=cpu_expand_fix``   -> loaded (fix ON)
  * ``VLLM_PLUGINS=""`` / other names  -> not loaded (stock behaviour)
  * ``VLLM_CPU_EXPAND_FIX=0``          -> loaded but does nothing (stock)
"""

import logging
import os

import torch

logger = logging.getLogger("vllm_cpu_expand_fix")

_KERNEL_NAME = "vllm.v1.sample.rejection_sampler.expand_kernel"


def expand_kernel_impl_fixed(
    output,
    input_val,
    cu_num_tokens,
    replace_from,
    replace_to,
    MAX_NUM_TOKENS=None,
):
    """output[start_i : end_i] = (input_val[i] == replace_from ? replace_to
    : input_val[i]), in place, output dtype preserved."""
    batch_size = input_val.shape[0]
    if batch_size == 0:
        return
    device = output.device
    cu = cu_num_tokens.to(device=device, dtype=torch.int64)
    starts = torch.zeros_like(cu)
    starts[1:] = cu[:-1]
    counts = (cu - starts).clamp_(min=0)
    if MAX_NUM_TOKENS is not None:
        counts = counts.clamp_(max=int(MAX_NUM_TOKENS))
    src = torch.where(
        input_val == replace_from,
        torch.full_like(input_val, replace_to),
        input_val,
    )
    req_idx = torch.repeat_interleave(
        torch.arange(batch_size, device=device), counts
    )
    if req_idx.numel() == 0:
        return
    first = torch.cumsum(counts, 0) - counts
    within = torch.arange(req_idx.numel(), device=device) - first[req_idx]
    pos = starts[req_idx] + within
    output[pos] = src[req_idx].to(output.dtype)


expand_kernel_impl_fixed._vllm_cpu_expand_fix = True


def register():
    if os.environ.get("VLLM_CPU_EXPAND_FIX", "1") == "0":
        logger.warning("vllm_cpu_expand_fix: disabled by VLLM_CPU_EXPAND_FIX=0")
        return
    from vllm.utils import cpu_triton_utils

    if getattr(cpu_triton_utils._expand_kernel_impl, "_vllm_cpu_expand_fix", False):
        return
    cpu_triton_utils._expand_kernel_impl = expand_kernel_impl_fixed
    # Normally general plugins load before
    # CpuPlatform.register_triton_kernel_overrides() (worker_base.init_worker),
    # which reads cpu_triton_utils._expand_kernel_impl at call time.  If the
    # override was registered already, re-register it with the fixed impl.
    try:
        from vllm.triton_utils import dispatcher

        if _KERNEL_NAME in dispatcher._registry:
            dispatcher.register_kernels({_KERNEL_NAME: expand_kernel_impl_fixed})
    except Exception:  # pragma: no cover
        logger.exception("vllm_cpu_expand_fix: re-registration failed")
    logger.warning(
        "vllm_cpu_expand_fix: patched cpu_triton_utils._expand_kernel_impl (pid %d)",
        os.getpid(),
    )
