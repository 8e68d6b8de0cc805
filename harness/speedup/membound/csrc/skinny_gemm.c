/* y = x W^T for a skinny x: a weight-streaming kernel for the memory-bound pair (harness/skinny_linear.py).
 *
 *   x (M, K) float32, row-major      a few token rows (M = batch x scored tokens)
 *   W (N, K) float32, row-major      a linear layer's weight (torch.nn.Linear's layout), N x K large
 *   y (M, N) float32, row-major      y[m, n] = sum_k x[m, k] W[n, k]
 *
 * The weight rows are taken NB at a time; each such panel is read from memory once and dotted with
 * every row of x while it sits in cache, so the weights stream once per call whatever M is, and the
 * cost stays near one matrix-vector product until the arithmetic catches up with memory.
 *
 * Every dot product is summed in one fixed order (8-lane partial sums over k, a fixed horizontal sum,
 * then the k % 8 tail), whichever micro-kernel computes it: y[m, n] depends on x[m] and W[n] only, not
 * on M or the other rows of x (batch-invariant), and rows past the end of x or W are clamped to the last
 * one (computed, not stored).
 */
#include <stddef.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define NB 12 /* weight rows per panel: a multiple of every micro-kernel's R */

#ifdef __AVX2__
static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);                  /* (a0+a4, a1+a5, a2+a6, a3+a7) */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));         /* (s0+s2, s1+s3, ..) */
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));  /* s0+s1 */
    return _mm_cvtss_f32(s);
}
#define ACC_INIT(R, C) __m256 acc[R][C]; \
    for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps(); \
    for (; k + 8 <= K; k += 8) { \
        __m256 xv[C], wv[R]; \
        for (int c = 0; c < C; c++) xv[c] = _mm256_loadu_ps(xr[c] + k); \
        for (int r = 0; r < R; r++) wv[r] = _mm256_loadu_ps(wr[r] + k); \
        for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(wv[r], xv[c], acc[r][c]); \
    } \
    for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) out[r][c] = hsum(acc[r][c]);
#else
#define ACC_INIT(R, C) for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) out[r][c] = 0.0f;
#endif

/* An R x C micro-kernel: weight rows n0 .. n0+R-1 against x rows m0 .. m0+C-1.  R * C accumulators and
 * R + C operands fit AVX2's 16 vector registers for (3, 3), (4, 2) and (6, 1). */
#define MICRO(R, C) \
static void micro_##R##x##C(const float *x, const float *W, float *y, long M, long N, long K, long m0, long n0) { \
    const float *xr[C], *wr[R]; \
    for (int c = 0; c < C; c++) xr[c] = x + (m0 + c < M ? m0 + c : M - 1) * K; \
    for (int r = 0; r < R; r++) wr[r] = W + (n0 + r < N ? n0 + r : N - 1) * K; \
    float out[R][C]; \
    long k = 0; \
    ACC_INIT(R, C) \
    for (; k < K; k++) for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) out[r][c] += wr[r][k] * xr[c][k]; \
    for (int r = 0; r < R && n0 + r < N; r++) for (int c = 0; c < C && m0 + c < M; c++) y[(m0 + c) * N + n0 + r] = out[r][c]; \
}
MICRO(3, 3)
MICRO(4, 2)
MICRO(6, 1)

int skinny_gemm_has_avx2(void) {
#ifdef __AVX2__
    return 1;
#else
    return 0;
#endif
}

void skinny_gemm(const float *x, const float *W, float *y, long M, long N, long K) {
    long m3 = M - M % 3;
    for (long p = 0; p < N; p += NB) {                      /* each panel streams from memory once ... */
        for (long m0 = 0; m0 < m3; m0 += 3)                 /* ... and meets every row of x in cache */
            for (long n0 = p; n0 < p + NB && n0 < N; n0 += 3) micro_3x3(x, W, y, M, N, K, m0, n0);
        if (M % 3 == 2)
            for (long n0 = p; n0 < p + NB && n0 < N; n0 += 4) micro_4x2(x, W, y, M, N, K, m3, n0);
        if (M % 3 == 1)
            for (long n0 = p; n0 < p + NB && n0 < N; n0 += 6) micro_6x1(x, W, y, M, N, K, m3, n0);
    }
}
