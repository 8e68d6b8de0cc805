"""harness.verify.sampler.check_output: what one sampler call must return."""
import re

import pytest
import torch

from harness.verify.sampler import SamplerOutputError, check_output
from specimpl.result import PAD, GenerationResult


def _res(tokens):
    return GenerationResult(tokens=tokens, lengths=torch.zeros(len(tokens), dtype=torch.long))


def test_signed_integer_tokens_of_every_width_that_holds_the_vocabulary_pass():
    tok = torch.tensor([[1, 2, PAD], [0, 3, 4]])
    for dtype in (torch.int64, torch.int32, torch.int16, torch.int8):
        assert torch.equal(check_output(_res(tok.to(dtype)), 2, 3, 5), tok.to(dtype))


@pytest.mark.parametrize("dtype, V", [(torch.uint8, 5), (torch.uint8, 300), (torch.int8, 300), (torch.int16, 40000)])
def test_tokens_of_an_unsigned_or_too_narrow_dtype_are_refused_naming_the_dtype(dtype, V):
    """Issue 26 finding 8: uint8 tokens (PAD wrapped to 255) were refused quoting ids, not the dtype."""
    tok = torch.tensor([[1, 2, PAD], [0, 3, 4]]).to(dtype)
    with pytest.raises(SamplerOutputError, match=rf"signed integer dtype holding every id in \[0, {V}\) and PAD = -1 "
                                                 rf".*got dtype {dtype}$"):
        check_output(_res(tok), 2, 3, V)


@pytest.mark.parametrize("tok, says", [(torch.zeros(2, 3), "dtype torch.float32"),
                                       (torch.zeros(2, 3, dtype=torch.bool), "dtype torch.bool"),
                                       (torch.zeros(2, 4, dtype=torch.long), "got shape (2, 4)"),
                                       (torch.tensor([[1, 2, 9], [0, 3, 4]]), "got [9]")])
def test_other_malformed_tokens_are_refused(tok, says):
    with pytest.raises(SamplerOutputError, match=re.escape(says)):
        check_output(_res(tok), 2, 3, 5)
