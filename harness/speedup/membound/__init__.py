"""The memory-bound pair: a widened target with the tiny target's output law, and its CPU kernel.

    widen          function-preserving widening of a Llama model
    skinny_linear  weight-streaming linear layers for few-token forwards (csrc/skinny_gemm.c)
"""
