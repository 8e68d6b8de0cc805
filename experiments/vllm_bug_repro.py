"""Minimal reproduction of vllm-project/vllm#55005 on vLLM 0.32.0 CPU (run with the engine's Python).

    VLLM_PLUGINS="" .venv-vllm/bin/python experiments/vllm_bug_repro.py    # stock: wrong
    .venv-vllm/bin/python experiments/vllm_bug_repro.py                    # with experiments/vllm_cpu_expand_fix: right

1. ``expand_batch_to_tokens`` (what the rejection sampler uses to give every draft token its request's
   temperature, top-k and top-p) on a float32 [0.7, 0.0, 1.5] with cu_num_tokens [2, 4, 6] must return
   [0.7, 0.7, 0.0, 0.0, 1.5, 1.5] (the greedy 0.0 replaced as the sampler asks).  The CPU shim
   ``vllm.utils.cpu_triton_utils._expand_kernel_impl`` passes ``_ensure_int64(output)`` -- a temporary int64
   copy of the float32 output -- to the C++ op, which writes into the copy: the real output stays as
   ``new_empty`` left it (uninitialised), and the float input is truncated to int64 on the way in.
2. The consequence for sampling: ``rejection_sample`` with one draft per request, target p and draft q known,
   temperature 1, 200,000 requests: the law of the first output token must be p; TV(empirical, p) is printed
   (at n = 2e5 a correct kernel gives ~1e-3).
Exit status: 0 when both checks pass, 1 when either fails.
"""
import sys

import torch
from vllm.platforms import current_platform
from vllm.plugins import load_general_plugins

load_general_plugins()
current_platform.register_triton_kernel_overrides()

from vllm.utils import cpu_triton_utils  # noqa: E402
from vllm.v1.sample import rejection_sampler as rs  # noqa: E402

sys.path.insert(0, __file__.rsplit("/experiments/", 1)[0])
from harness.samples.engines.vllm_kernel import _metadata  # noqa: E402

fixed = getattr(cpu_triton_utils._expand_kernel_impl, "_vllm_cpu_expand_fix", False)
print(f"expand shim: {'fixed (experiments/vllm_cpu_expand_fix)' if fixed else 'stock'}")

x = torch.tensor([0.7, 0.0, 1.5], dtype=torch.float32)
cu = torch.tensor([2, 4, 6], dtype=torch.int32)
got = rs.expand_batch_to_tokens(x, cu, 6, replace_from=0, replace_to=1)  # as RejectionSampler does (ints)
want = torch.tensor([0.7, 0.7, 1.0, 1.0, 1.5, 1.5])
ok1 = torch.allclose(got, want)
print(f"1. expand_batch_to_tokens([0.7, 0, 1.5]) = {got.tolist()} (want {want.tolist()}): {'ok' if ok1 else 'WRONG'}")

torch.manual_seed(0)
V, B = 8, 200_000
p = torch.softmax(torch.randn(V) * 1.5, -1)
q = torch.softmax(torch.log(p) + 0.7 * torch.randn(V), -1)
draft = torch.multinomial(q, B, replacement=True).to(torch.int32)
md = _metadata(B, {})
cu1 = torch.arange(1, B + 1, dtype=torch.int32)
logits = rs.apply_sampling_constraints(torch.log(p).expand(B, V).contiguous(), cu1, md)
bonus = torch.multinomial(p, B, replacement=True).view(B, 1)
out = rs.rejection_sample(draft, [1] * B, 1, cu1, q.expand(B, V).contiguous(), logits, bonus, md)
first = out[:, 0].long()
valid = (first >= 0) & (first < V)
emp = torch.bincount(first[valid], minlength=V)[:V].double() / max(int(valid.sum()), 1)
tv = 0.5 * float((emp - p.double()).abs().sum()) if bool(valid.all()) else 1.0
ok2 = tv < 0.01
print(f"2. law of the first token over {B} requests: TV from p = {tv:.4f} ({int((~valid).sum())} invalid ids): "
      f"{'ok' if ok2 else 'WRONG'}")
sys.exit(0 if ok1 and ok2 else 1)
