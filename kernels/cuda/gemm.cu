// Tensor-core GEMM body and its problems: plain GEMM and the three
// convolution passes as implicit GEMMs (no im2col buffer: the A/B tile
// loaders compute each element's address from the logical (m, k) / (k, n)).
//
// C[b][m][n] = act(sum_k A[b][m][k] * B[b][k][n] + bias[n] + resid[b][m][n])
// 16-bit inputs (bf16 or fp16), fp32 accumulation on mma.sync.m16n8k16,
// BM x BN block tiles (128x128 with 8 warps of 64x32, or 64x64 with 4 warps
// of 32x32), K-tiles of GEMM_BK (64) in GEMM_STAGES (2: double-buffered)
// shared-memory stages filled with cp.async (16-byte, zero-filling at the
// edges) when the problem allows vector loads along the tile's rows, with
// 16-byte loads through registers when its runs lie across them (the
// convolution gradients' kTrA / kTrB), with plain loads otherwise;
// fragments through ldmatrix; one barrier per K-tile. Plain GEMM and the
// weight/dY side of convolutions walk per-thread pointers (kLinA/kLinB).

struct GemmP {
  const u16* A;      // GEMM: [batch][M][K]; conv fwd: X (NHWC); dgrad: dY (NHWC); wgrad: X (NHWC)
  const u16* B;      // GEMM: [batch][K][N]; conv fwd/dgrad: W [R][S][C][OC]; wgrad: dY (NHWC)
  void* C;           // [batch][M][N] in out_dtype; conv fwd: Y (NHWC); dgrad: dX; wgrad: dW [R][S][C][OC]
  const void* bias;  // [N] or null: f32, or f16 / bf16 when act >> 8 is 1 / 2
  const void* resid; // like C, or null
  long long sA, sB, sC; // batch strides in elements
  int M, N, K, batch;
  int act, out_dtype; // act: the activation in its low byte, the bias's type above
  int vecA, vecB;    // nonzero: 8 consecutive k (A) / n (B) are contiguous and 16-byte aligned
  // convolution geometry (unused by plain GEMM)
  int n, h, w, c, oh, ow, oc, r, s, stride, pad;
  // Split-K (splits > 1; batch must be 1): grid z = splits, entry z sums K
  // range [z·kchunk, (z+1)·kchunk) into its f32 partial tile ws[z][M][N];
  // the block that completes a tile (tags[tile], gemm_splitk_fixup) adds
  // the partials in split order and applies bias, residual and activation.
  float* ws;                 // [splits][M][N] f32 partials
  unsigned long long* tags;  // [tilesM·tilesN]: run id << 32 | splits done
  unsigned int* runs;        // Resumable instances started (their run ids)
  int splits, kchunk;        // kchunk: a multiple of GEMM_BK
  // Appended by the library to every GemmP: the run's identity.
  int* progress;             // Resumable: the Ctl's control block; else null
  int epoch;                 // the launch's serial number
};

// gemm_bias is bias[n] as a float, whatever the bias's type.
__device__ __forceinline__ float gemm_bias(const GemmP& p, int n) {
  switch (p.act >> 8) {
  case 1: return f16_to_f(((const u16*)p.bias)[n]);
  case 2: return bf16_to_f(((const u16*)p.bias)[n]);
  }
  return ((const float*)p.bias)[n];
}

// Problem policies: where the logical A[m][k] and B[k][n] live.
// a_ptr8 / b_ptr8 return the address of 8 consecutive elements (k..k+7 of A,
// n..n+7 of B) or null for zeros; a_at / b_at return one element's bits.
// A problem whose A is contiguous along m rather than k (kTrA: the weight
// gradient's X, channels innermost) has a_ptr8m (m..m+7 at one k) instead,
// and one whose B is contiguous along k (kTrB: the data gradient's W, output
// channels innermost) has b_ptr8k (k..k+7 at one n): the body loads those
// 16 bytes into registers and scatters them into the tile (vecA / vecB then
// say that such 8-element runs are contiguous and 16-byte aligned).
struct ProbGemm {
  // Linear A / B: A[m][k] = a_base[m*lda + k], B[k][n] = b_base[k*ldb + n];
  // the body then walks per-thread pointers instead of calling a_ptr8/b_ptr8.
  static const bool kLinA = true, kLinB = true, kTrA = false, kTrB = false;
  static __device__ __forceinline__ const u16* a_base(const GemmP& p, int b) { return p.A + b * p.sA; }
  static __device__ __forceinline__ const u16* b_base(const GemmP& p, int b) { return p.B + b * p.sB; }
  static __device__ __forceinline__ const u16* a_ptr8(const GemmP& p, int b, int m, int k) {
    if (m >= p.M || k >= p.K) return 0;
    return p.A + b * p.sA + (long long)m * p.K + k;
  }
  static __device__ __forceinline__ u16 a_at(const GemmP& p, int b, int m, int k) {
    if (m >= p.M || k >= p.K) return 0;
    return p.A[b * p.sA + (long long)m * p.K + k];
  }
  static __device__ __forceinline__ const u16* b_ptr8(const GemmP& p, int b, int k, int n) {
    if (k >= p.K || n >= p.N) return 0;
    return p.B + b * p.sB + (long long)k * p.N + n;
  }
  static __device__ __forceinline__ u16 b_at(const GemmP& p, int b, int k, int n) {
    if (k >= p.K || n >= p.N) return 0;
    return p.B[b * p.sB + (long long)k * p.N + n];
  }
};

// Forward convolution: m = (img, oy, ox), k = (ry, sx, ch), n = output channel.
struct ProbConvFwd {
  static const bool kLinA = false, kLinB = true, kTrA = false, kTrB = false;
  static __device__ __forceinline__ const u16* a_base(const GemmP& p, int) { return p.A; }
  static __device__ __forceinline__ const u16* b_base(const GemmP& p, int) { return p.B; }
  static __device__ __forceinline__ long long a_index(const GemmP& p, int m, int k) {
    if (m >= p.M || k >= p.K) return -1;
    const int ch = k % p.c, rs = k / p.c, sx = rs % p.s, ry = rs / p.s;
    const int ox = m % p.ow, t = m / p.ow, oy = t % p.oh, img = t / p.oh;
    const int iy = oy * p.stride - p.pad + ry, ix = ox * p.stride - p.pad + sx;
    if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) return -1;
    return (((long long)img * p.h + iy) * p.w + ix) * p.c + ch;
  }
  static __device__ __forceinline__ const u16* a_ptr8(const GemmP& p, int, int m, int k) {
    const long long i = a_index(p, m, k);
    return i < 0 ? 0 : p.A + i;
  }
  static __device__ __forceinline__ u16 a_at(const GemmP& p, int, int m, int k) {
    const long long i = a_index(p, m, k);
    return i < 0 ? (u16)0 : p.A[i];
  }
  static __device__ __forceinline__ const u16* b_ptr8(const GemmP& p, int, int k, int n) {
    return ProbGemm::b_ptr8(p, 0, k, n);
  }
  static __device__ __forceinline__ u16 b_at(const GemmP& p, int, int k, int n) {
    return ProbGemm::b_at(p, 0, k, n);
  }
};

// Backward data: dX = dY (*) W^T. m = (img, iy, ix) over the input, k = (ry, sx, o)
// over filter taps and output channels, n = input channel.
// A[m][k] = dY[img][oy][ox][o] where iy = oy*stride - pad + ry (if divisible).
// B[k][n] = W[ry][sx][n][o].
struct ProbConvDgrad {
  static const bool kLinA = false, kLinB = false, kTrA = false, kTrB = true;
  static __device__ __forceinline__ const u16* a_base(const GemmP& p, int) { return p.A; }
  static __device__ __forceinline__ const u16* b_base(const GemmP& p, int) { return p.B; }
  static __device__ __forceinline__ long long a_index(const GemmP& p, int m, int k) {
    if (m >= p.M || k >= p.K) return -1;
    const int o = k % p.oc, rs = k / p.oc, sx = rs % p.s, ry = rs / p.s;
    const int ix = m % p.w, t = m / p.w, iy = t % p.h, img = t / p.h;
    int ty = iy + p.pad - ry, tx = ix + p.pad - sx;
    if (ty < 0 || tx < 0 || ty % p.stride != 0 || tx % p.stride != 0) return -1;
    ty /= p.stride; tx /= p.stride;
    if (ty >= p.oh || tx >= p.ow) return -1;
    return (((long long)img * p.oh + ty) * p.ow + tx) * p.oc + o;
  }
  static __device__ __forceinline__ const u16* a_ptr8(const GemmP& p, int, int m, int k) {
    const long long i = a_index(p, m, k);
    return i < 0 ? 0 : p.A + i;
  }
  static __device__ __forceinline__ u16 a_at(const GemmP& p, int, int m, int k) {
    const long long i = a_index(p, m, k);
    return i < 0 ? (u16)0 : p.A[i];
  }
  static __device__ __forceinline__ const u16* b_ptr8(const GemmP&, int, int, int) { return 0; }
  static __device__ __forceinline__ u16 b_at(const GemmP& p, int, int k, int n) {
    if (k >= p.K || n >= p.N) return 0;
    const int o = k % p.oc, rs = k / p.oc;
    return p.B[((long long)rs * p.c + n) * p.oc + o];
  }
  // k..k+7 at n: output channels o..o+7 of one tap (oc % 8 == 0, k % 8 == 0).
  static __device__ __forceinline__ const u16* b_ptr8k(const GemmP& p, int, int k, int n) {
    if (k >= p.K || n >= p.N) return 0;
    const int o = k % p.oc, rs = k / p.oc;
    return p.B + ((long long)rs * p.c + n) * p.oc + o;
  }
};

// Backward filter: dW[(ry,sx,ch)][o] = sum over (img,oy,ox) X[img][iy][ix][ch] * dY[img][oy][ox][o].
// m = (ry, sx, ch), k = (img, oy, ox), n = o.
struct ProbConvWgrad {
  static const bool kLinA = false, kLinB = true, kTrA = true, kTrB = false;
  static __device__ __forceinline__ const u16* a_base(const GemmP& p, int) { return p.A; }
  static __device__ __forceinline__ const u16* b_base(const GemmP& p, int) { return p.B; }
  // X's index of A[m][k] (k global over the images), or -1 for a padding tap.
  static __device__ __forceinline__ long long a_index(const GemmP& p, int m, int k) {
    const int ch = m % p.c, rs = m / p.c, sx = rs % p.s, ry = rs / p.s;
    const int ox = k % p.ow, t = k / p.ow, oy = t % p.oh, img = t / p.oh;
    const int iy = oy * p.stride - p.pad + ry, ix = ox * p.stride - p.pad + sx;
    if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) return -1;
    return (((long long)img * p.h + iy) * p.w + ix) * p.c + ch;
  }
  static __device__ __forceinline__ const u16* a_ptr8(const GemmP&, int, int, int) { return 0; }
  static __device__ __forceinline__ u16 a_at(const GemmP& p, int, int m, int k) {
    if (m >= p.M || k >= p.K) return 0;
    const long long i = a_index(p, m, k);
    return i < 0 ? (u16)0 : p.A[i];
  }
  // m..m+7 at k: channels ch..ch+7 of one pixel (c % 8 == 0, m % 8 == 0).
  static __device__ __forceinline__ const u16* a_ptr8m(const GemmP& p, int, int m, int k) {
    if (m >= p.M || k >= p.K) return 0;
    const long long i = a_index(p, m, k);
    return i < 0 ? 0 : p.A + i;
  }
  static __device__ __forceinline__ const u16* b_ptr8(const GemmP& p, int, int k, int n) {
    return ProbGemm::b_ptr8(p, 0, k, n);
  }
  static __device__ __forceinline__ u16 b_at(const GemmP& p, int, int k, int n) {
    return ProbGemm::b_at(p, 0, k, n);
  }
};

// Backward filter split over the images (split-K; Go: Conv2D.Split): batch
// entry b sums over images [b·n/S, (b+1)·n/S) only. k is local to the chunk
// (K = (n/S)·OH·OW, global k = b·K + k, so B rows start at b·sB = b·K·OC)
// and C + b·sC receives the chunk's partial dW (f32), added up in a fixed
// order by a second kernel (train.cu body_splitsum).
struct ProbConvWgradSplit {
  static const bool kLinA = false, kLinB = true, kTrA = true, kTrB = false;
  static __device__ __forceinline__ const u16* a_base(const GemmP& p, int) { return p.A; }
  static __device__ __forceinline__ const u16* b_base(const GemmP& p, int b) { return p.B + b * p.sB; }
  static __device__ __forceinline__ const u16* a_ptr8(const GemmP&, int, int, int) { return 0; }
  static __device__ __forceinline__ u16 a_at(const GemmP& p, int b, int m, int k) {
    if (m >= p.M || k >= p.K) return 0;
    const long long i = ProbConvWgrad::a_index(p, m, b * p.K + k);
    return i < 0 ? (u16)0 : p.A[i];
  }
  static __device__ __forceinline__ const u16* a_ptr8m(const GemmP& p, int b, int m, int k) {
    if (m >= p.M || k >= p.K) return 0;
    const long long i = ProbConvWgrad::a_index(p, m, b * p.K + k);
    return i < 0 ? 0 : p.A + i;
  }
  static __device__ __forceinline__ const u16* b_ptr8(const GemmP& p, int b, int k, int n) {
    return ProbGemm::b_ptr8(p, b, k, n);
  }
  static __device__ __forceinline__ u16 b_at(const GemmP& p, int b, int k, int n) {
    return ProbGemm::b_at(p, b, k, n);
  }
};

__device__ __forceinline__ u32 smem_u32(const void* p) {
  return (u32)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  // src == null: zero-fill the 16 bytes (src-size 0).
  const int n = src ? 16 : 0;
  const void* s = src ? src : dst; // any valid address; nothing is read when n == 0
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(s), "r"(n));
}
__device__ __forceinline__ void cp_async16s(u32 dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(u32* r, u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
template <int DT> __device__ __forceinline__ void mma16816(float* c, const u32* a, const u32* b);
template <> __device__ __forceinline__ void mma16816<DT_BF16>(float* c, const u32* a, const u32* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma16816<DT_F16>(float* c, const u32* a, const u32* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#ifndef GEMM_BK
#define GEMM_BK 64 // K-tile (the Go side prepends its own defines: ops.go gemmBK, gemmStages)
#endif
#define GEMM_KC (GEMM_BK / 8) // 16-byte chunks per A-tile row
#define GEMM_APAD 8 // elements of padding per A row (bank conflicts)
#define GEMM_BPAD 8 // elements of padding per B row
#ifndef GEMM_STAGES
#define GEMM_STAGES 2 // shared-memory pipeline depth (cp.async groups in flight: STAGES-1)
#endif

// Shared memory bytes a body needs (kernels/ops.go gemmSmem computes the same).
template <int BM, int BN> struct GemmSmem {
  enum { A_LD = GEMM_BK + GEMM_APAD, B_LD = BN + GEMM_BPAD,
         A_ELEMS = BM * A_LD, B_ELEMS = GEMM_BK * B_LD,
         STAGE = A_ELEMS + B_ELEMS, BYTES = GEMM_STAGES * STAGE * 2 };
};

template <class PR, int BM, int BN, int NT>
__device__ __forceinline__ void gemm_load_tile(const GemmP& p, u16* sa, u16* sb, int b, int m0, int n0, int k0, bool doA, bool doB) {
  typedef GemmSmem<BM, BN> L;
  const int tid = threadIdx.x;
  // A: BM rows x 32 k = BM*4 chunks of 8.
  if (!doA) {
  } else if (p.vecA) {
#pragma unroll
    for (int i = tid; i < BM * GEMM_KC; i += NT) {
      const int row = i / GEMM_KC, kc = (i % GEMM_KC) * 8;
      cp_async16(sa + row * L::A_LD + kc, PR::a_ptr8(p, b, m0 + row, k0 + kc));
    }
  } else {
    for (int i = tid; i < BM * GEMM_BK; i += NT) {
      const int row = i / GEMM_BK, kk = i % GEMM_BK;
      sa[row * L::A_LD + kk] = PR::a_at(p, b, m0 + row, k0 + kk);
    }
  }
  // B: 32 k rows x BN n = 32*BN/8 chunks of 8.
  if (!doB) {
  } else if (p.vecB) {
#pragma unroll
    for (int i = tid; i < GEMM_BK * (BN / 8); i += NT) {
      const int row = i / (BN / 8), nc = (i % (BN / 8)) * 8;
      cp_async16(sb + row * L::B_LD + nc, PR::b_ptr8(p, b, k0 + row, n0 + nc));
    }
  } else {
    for (int i = tid; i < GEMM_BK * BN; i += NT) {
      const int row = i / BN, nn = i % BN;
      sb[row * L::B_LD + nn] = PR::b_at(p, b, k0 + row, n0 + nn);
    }
  }
}

// Epilogue for one output type: bias, residual, activation, convert, and
// store pairs of adjacent columns with one 4- or 8-byte store when N is even.
template <int ODT, int MI, int NI>
__device__ __forceinline__ void gemm_epilogue(const GemmP& p, float (&acc)[MI][NI][4], int b, int mw, int nw) {
  typedef DTy<ODT> D;
  typedef typename D::T T;
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const long long cbase = b * p.sC;
  const bool pairs = (p.N & 1) == 0;
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int j = 0; j < NI; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int m = mw + i * 16 + g + h * 8;
        const int n = nw + j * 8 + t4 * 2;
        if (m >= p.M || n >= p.N) continue;
        const long long idx = cbase + (long long)m * p.N + n;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (p.bias) { v0 += gemm_bias(p, n); if (n + 1 < p.N) v1 += gemm_bias(p, n + 1); }
        if (p.resid) {
          v0 += D::load((const T*)p.resid, idx);
          if (n + 1 < p.N) v1 += D::load((const T*)p.resid, idx + 1);
        }
        v0 = apply_act(v0, p.act & 0xff);
        v1 = apply_act(v1, p.act & 0xff);
        if (pairs) { // n even and N even: idx even, so the pair is aligned
          if (ODT == DT_F32) {
            float2 f2;
            f2.x = v0;
            f2.y = v1;
            *(float2*)((float*)p.C + idx) = f2;
          } else {
            const u32 w = (u32)D::from_f(v0) | ((u32)D::from_f(v1) << 16);
            *(u32*)((u16*)p.C + idx) = w;
          }
        } else {
          D::store((T*)p.C, idx, v0);
          if (n + 1 < p.N) D::store((T*)p.C, idx + 1, v1);
        }
      }
}

// Staged epilogue: the warps write their finished values (bias, residual,
// activation applied, converted) into a BM x BN tile in shared memory, then
// the block copies it out with coalesced 16-byte stores (scalar at ragged
// edges). Falls back to gemm_epilogue when the tile does not fit in the
// body's shared memory (only with other GEMM_BK/GEMM_STAGES settings).
template <int ODT, int BM, int BN, int NT, int MI, int NI>
__device__ __forceinline__ void gemm_epilogue_staged(const GemmP& p, float (&acc)[MI][NI][4], int b, int m0, int n0,
                                                     int wm, int wn, unsigned char* smem_raw) {
  typedef DTy<ODT> D;
  typedef typename D::T T;
  constexpr int VEC = 16 / (int)sizeof(T);  // elements per 16-byte chunk
  constexpr int LDS = BN + VEC;             // staging row, padded by 16 bytes
  if constexpr ((long long)BM * LDS * sizeof(T) > (long long)GemmSmem<BM, BN>::BYTES) {
    gemm_epilogue<ODT>(p, acc, b, m0 + wm, n0 + wn);
  } else {
    T* st = (T*)smem_raw;
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const long long cbase = b * p.sC;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
      for (int j = 0; j < NI; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int r = wm + i * 16 + g + h * 8, c = wn + j * 8 + t4 * 2;
          const int m = m0 + r, n = n0 + c;
          float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
          if (m < p.M) {
            const long long idx = cbase + (long long)m * p.N + n;
            if (p.bias) {
              if (n < p.N) v0 += gemm_bias(p, n);
              if (n + 1 < p.N) v1 += gemm_bias(p, n + 1);
            }
            if (p.resid) {
              if (n < p.N) v0 += D::load((const T*)p.resid, idx);
              if (n + 1 < p.N) v1 += D::load((const T*)p.resid, idx + 1);
            }
          }
          v0 = apply_act(v0, p.act & 0xff);
          v1 = apply_act(v1, p.act & 0xff);
          if constexpr (sizeof(T) == 2) {
            *(u32*)(st + r * LDS + c) = (u32)D::from_f(v0) | ((u32)D::from_f(v1) << 16);
          } else {
            float2 f2;
            f2.x = v0;
            f2.y = v1;
            *(float2*)(st + r * LDS + c) = f2;
          }
        }
    BSYNC(NT);
    constexpr int CPR = BN / VEC; // 16-byte chunks per row
    const bool vec = (p.N % VEC) == 0 && (cbase % VEC) == 0;
    for (int q = threadIdx.x; q < BM * CPR; q += NT) {
      const int r = q / CPR, cc = (q % CPR) * VEC;
      const int m = m0 + r, n = n0 + cc;
      if (m >= p.M || n >= p.N) continue;
      T* dst = (T*)p.C + cbase + (long long)m * p.N + n;
      const T* src = st + r * LDS + cc;
      if (vec && n + VEC <= p.N) {
        *(uint4*)dst = *(const uint4*)src;
      } else {
        for (int e = 0; e < VEC && n + e < p.N; e++) dst[e] = src[e];
      }
    }
    BSYNC(NT); // the staging area is the next logical block's pipeline
  }
}

// Split-K fixup, after split z of tile `tile` stored its partial: count
// the split as done for this run and, in the block whose count completes
// the tile, add the partials of all splits in split order (so the sum does
// not depend on which block finishes last), apply bias, residual and
// activation, store C, and set the count back to zero. A tile's tag
// carries the id of the run that counted, so that the counts an unfinished
// run leaves (a cut Reset launch, an abandoned Resumable instance) are
// ignored by the next: a Plain or Reset launch is a run of its own (id =
// its epoch, below 2^31; re-enqueueing a finished launch is fine, its
// counts are back at zero, but a cut Reset launch is re-run as a new
// launch), and a Resumable instance is one run over all its launches,
// plain and padded (id = 2^31 + a serial number drawn from the scratch's
// run counter by its first worker and kept in control word 5, which the
// scheduler zeroes for every fresh instance).
template <int ODT, int BM, int BN, int NT>
__device__ __forceinline__ void gemm_splitk_sum(const GemmP& p, int m0, int n0) {
  typedef DTy<ODT> D;
  typedef typename D::T T;
  const long long mn = (long long)p.M * p.N;
  const int S = p.splits;
  // Four adjacent columns per thread and step; the partials of eight splits
  // are loaded before they are added (latency-bound otherwise: one block
  // sums the whole tile). The additions run in split order either way.
  const bool vec = (p.N & 3) == 0;
  for (int q = threadIdx.x * 4; q < BM * BN; q += NT * 4) {
    const int m = m0 + q / BN, n = n0 + q % BN;
    if (m >= p.M || n >= p.N) continue;
    const long long idx = (long long)m * p.N + n;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    const int cols = min(4, p.N - n);
    if (vec) {
      int z = 0;
      for (; z + 8 <= S; z += 8) {
        float4 a[8];
#pragma unroll
        for (int u = 0; u < 8; u++) a[u] = __ldcg((const float4*)(p.ws + (z + u) * mn + idx));
#pragma unroll
        for (int u = 0; u < 8; u++) { v[0] += a[u].x; v[1] += a[u].y; v[2] += a[u].z; v[3] += a[u].w; }
      }
      for (; z < S; z++) {
        const float4 a = __ldcg((const float4*)(p.ws + z * mn + idx));
        v[0] += a.x; v[1] += a.y; v[2] += a.z; v[3] += a.w;
      }
    } else {
      for (int z = 0; z < S; z++)
        for (int e = 0; e < cols; e++) v[e] += __ldcg(p.ws + z * mn + idx + e);
    }
    for (int e = 0; e < cols; e++) {
      float x = v[e];
      if (p.bias) x += gemm_bias(p, n + e);
      if (p.resid) x += D::load((const T*)p.resid, idx + e);
      D::store((T*)p.C, idx + e, apply_act(x, p.act & 0xff));
    }
  }
}

template <int BM, int BN, int NT>
__device__ __forceinline__ void gemm_splitk_fixup(const GemmP& p, int tile, int m0, int n0, unsigned char* smem_raw) {
  volatile int* last = (volatile int*)smem_raw;
  __threadfence(); // this block's partial is visible before it is counted
  BSYNC(NT);
  if (threadIdx.x == 0) {
    unsigned int id = (unsigned int)p.epoch & 0x7fffffffu;
    if (p.progress) {
      volatile int* slot = p.progress + 5;
      if (*slot == 0) atomicCAS(p.progress + 5, 0, (int)(0x80000000u | (atomicAdd(p.runs, 1u) + 1u)));
      id = (unsigned int)*slot;
    }
    unsigned long long* tag = p.tags + tile;
    unsigned long long old = *(volatile unsigned long long*)tag, seen;
    unsigned int done;
    do {
      seen = old;
      done = (unsigned int)(seen >> 32) == id ? (unsigned int)seen : 0u;
      old = atomicCAS(tag, seen, ((unsigned long long)id << 32) | (done + 1u));
    } while (old != seen);
    *last = done + 1u == (unsigned int)p.splits;
    if (*last) atomicExch(tag, (unsigned long long)id << 32); // count back to zero: the run saw every split
  }
  BSYNC(NT);
  const int mine = *last;
  BSYNC(NT); // the word is the next logical block's pipeline
  if (!mine) return;
  __threadfence(); // the other splits' partials, stored before they were counted
  switch (p.out_dtype) {
  case DT_F32: gemm_splitk_sum<DT_F32, BM, BN, NT>(p, m0, n0); break;
  case DT_F16: gemm_splitk_sum<DT_F16, BM, BN, NT>(p, m0, n0); break;
  default: gemm_splitk_sum<DT_BF16, BM, BN, NT>(p, m0, n0); break;
  }
}

// body_gemm: one BM x BN output tile of one batch entry per logical block.
// lb = ((z * tilesM) + tileM) * tilesN + tileN, z the batch entry or, with
// split-K, the split. A GEMM_STAGES-deep
// cp.async pipeline with one barrier per K-tile.
template <class PR, int DT, int BM, int BN, int NT>
__device__ __forceinline__ void body_gemm(int lb, const GemmP& p) {
  typedef GemmSmem<BM, BN> L;
  constexpr int WARPS = NT / 32;
  constexpr int WARPS_M = 2, WARPS_N = WARPS / WARPS_M;
  constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  constexpr int MI = WM / 16, NI = WN / 8;
  constexpr int S = GEMM_STAGES;
  static_assert(NI % 2 == 0, "warp tile N must be a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  u16* smem = (u16*)smem_raw;

  const int tilesN = (p.N + BN - 1) / BN, tilesM = (p.M + BM - 1) / BM;
  const int tn = lb % tilesN, tm = (lb / tilesN) % tilesM, z = lb / (tilesN * tilesM);
  // Split-K: z is the split, the data is batch entry 0.
  const bool split = p.splits > 1;
  const int b = split ? 0 : z;
  const int kbeg = split ? z * p.kchunk : 0;
  const int kend = split ? min(p.K, kbeg + p.kchunk) : p.K;
  const int m0 = tm * BM, n0 = tn * BN;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int j = 0; j < NI; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

  const int KT = (kend - kbeg + GEMM_BK - 1) / GEMM_BK, KT0 = kbeg / GEMM_BK;
  // Per-thread copy plan of the linear fast path: this thread copies the
  // 16-byte chunks at rows a_r0 + c*A_RS (k offset a_kc) of the A tile and
  // rows b_r0 + c*B_RS (n offset b_nc) of the B tile.
  constexpr int A_RS = NT / GEMM_KC, A_CH = BM / A_RS;
  constexpr int B_RS = NT / (BN / 8), B_CH = GEMM_BK / B_RS;
  const bool linA = PR::kLinA && p.vecA, linB = PR::kLinB && p.vecB;
  // Register-staged operands (kTrA / kTrB with vecA / vecB): each thread
  // loads RA (RB) 16-byte runs along m (k) of the next tile into registers
  // before the current tile's math and scatters them into shared memory
  // after it. Consecutive threads take consecutive k (n), so that the
  // scattered 2-byte stores of a warp fall into distinct banks.
  constexpr int RA = PR::kTrA ? (BM / 8 * GEMM_BK + NT - 1) / NT : 1;
  constexpr int RB = PR::kTrB ? (GEMM_BK / 8 * BN + NT - 1) / NT : 1;
  const bool regA = PR::kTrA && p.vecA, regB = PR::kTrB && p.vecB;
  uint4 ra[RA], rb[RB];
  const int a_r0 = tid / GEMM_KC, a_kc = (tid % GEMM_KC) * 8;
  const int b_r0 = tid / (BN / 8), b_nc = (tid % (BN / 8)) * 8;
  const long long lda = p.K, ldb = p.N;
  const u16* a_g = PR::a_base(p, b) + (long long)(m0 + a_r0) * lda + a_kc;
  const u16* b_g = PR::b_base(p, b) + (long long)b_r0 * ldb + n0 + b_nc;
  const u32 s_base = smem_u32(smem);
  const u32 a_s = s_base + (a_r0 * L::A_LD + a_kc) * 2;
  const u32 b_s = s_base + (L::A_ELEMS + b_r0 * L::B_LD + b_nc) * 2;
  const bool b_nok = n0 + b_nc < p.N;
  // ldmatrix addresses of this lane's fragments in stage 0 (A: rows wm+lane%16,
  // k half lane/16; B: k rows lane%16, n half lane/16).
  const u32 a_frag = s_base + ((wm + (lane & 15)) * L::A_LD + (lane >> 4) * 8) * 2;
  const u32 b_frag = s_base + (L::A_ELEMS + (lane & 15) * L::B_LD + wn + (lane >> 4) * 8) * 2;
  auto load = [&](int kt, int st) {
    const int k0 = (KT0 + kt) * GEMM_BK;
    u16* sp = smem + st * L::STAGE;
    if (linA) {
      const bool kok = k0 + a_kc < p.K;
#pragma unroll
      for (int c = 0; c < A_CH; c++) {
        const bool ok = kok && m0 + a_r0 + c * A_RS < p.M;
        cp_async16s(a_s + (st * L::STAGE + c * A_RS * L::A_LD) * 2, ok ? a_g + c * A_RS * lda + k0 : p.A, ok);
      }
    }
    if (linB) {
#pragma unroll
      for (int c = 0; c < B_CH; c++) {
        const bool ok = b_nok && k0 + b_r0 + c * B_RS < p.K;
        cp_async16s(b_s + (st * L::STAGE + c * B_RS * L::B_LD) * 2, ok ? b_g + (k0 + c * B_RS) * ldb : p.B, ok);
      }
    }
    if ((!linA && !regA) || (!linB && !regB))
      gemm_load_tile<PR, BM, BN, NT>(p, sp, sp + L::A_ELEMS, b, m0, n0, k0, !linA && !regA, !linB && !regB);
  };
  auto fetch = [&](int kt) { // global -> registers (register-staged operands)
    const int k0 = (KT0 + kt) * GEMM_BK;
    if constexpr (PR::kTrA) {
      if (regA) {
#pragma unroll
        for (int c = 0; c < RA; c++) {
          const int q = tid + c * NT;
          const u16* src = q < BM / 8 * GEMM_BK ? PR::a_ptr8m(p, b, m0 + (q / GEMM_BK) * 8, k0 + q % GEMM_BK) : 0;
          ra[c] = src ? __ldg((const uint4*)src) : make_uint4(0, 0, 0, 0);
        }
      }
    }
    if constexpr (PR::kTrB) {
      if (regB) {
#pragma unroll
        for (int c = 0; c < RB; c++) {
          const int q = tid + c * NT;
          const u16* src = q < GEMM_BK / 8 * BN ? PR::b_ptr8k(p, b, k0 + (q / BN) * 8, n0 + q % BN) : 0;
          rb[c] = src ? __ldg((const uint4*)src) : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  auto put = [&](int st) { // registers -> stage st (register-staged operands)
    u16* sp = smem + st * L::STAGE;
    if constexpr (PR::kTrA) {
      if (regA) {
#pragma unroll
        for (int c = 0; c < RA; c++) {
          const int q = tid + c * NT;
          if (q >= BM / 8 * GEMM_BK) break;
          const int mc = (q / GEMM_BK) * 8, kk = q % GEMM_BK;
          const u16* v = (const u16*)&ra[c];
#pragma unroll
          for (int e = 0; e < 8; e++) sp[(mc + e) * L::A_LD + kk] = v[e];
        }
      }
    }
    if constexpr (PR::kTrB) {
      if (regB) {
        u16* sb = sp + L::A_ELEMS;
#pragma unroll
        for (int c = 0; c < RB; c++) {
          const int q = tid + c * NT;
          if (q >= GEMM_BK / 8 * BN) break;
          const int kc = (q / BN) * 8, nn = q % BN;
          const u16* v = (const u16*)&rb[c];
#pragma unroll
          for (int e = 0; e < 8; e++) sb[(kc + e) * L::B_LD + nn] = v[e];
        }
      }
    }
  };
#pragma unroll
  for (int st = 0; st < S - 1; st++) {
    if (st < KT) {
      load(st, st);
      fetch(st);
      put(st);
    }
    cp_async_commit(); // always commit, so group counting stays uniform
  }
  for (int kt = 0; kt < KT; kt++) {
    cp_async_wait<S - 2>(); // tile kt has landed (this thread's copies)
    BSYNC(NT);              // ... everyone's; and stage (kt-1)%S is free
    const int nk = kt + S - 1;
    if (nk < KT) {
      load(nk, nk % S);
      fetch(nk);
    }
    cp_async_commit();
    const u32 st_off = (kt % S) * (L::STAGE * 2);
#pragma unroll
    for (int kk = 0; kk < GEMM_BK; kk += 16) {
      u32 af[MI][4], bfr[NI][2];
#pragma unroll
      for (int i = 0; i < MI; i++)
        ldmatrix_x4(af[i], a_frag + st_off + (i * 16 * L::A_LD + kk) * 2);
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        u32 t[4];
        ldmatrix_x4_trans(t, b_frag + st_off + (kk * L::B_LD + j * 8) * 2);
        bfr[j][0] = t[0]; bfr[j][1] = t[1]; bfr[j + 1][0] = t[2]; bfr[j + 1][1] = t[3];
      }
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++) mma16816<DT>(acc[i][j], af[i], bfr[j]);
    }
    // Stage nk % S was freed by this iteration's barrier; the next one
    // orders these stores before the tile is read.
    if (nk < KT) put(nk % S);
  }
  cp_async_wait<0>();
  BSYNC(NT); // shared memory is reused by the next logical block (resumable)

  if (split) {
    GemmP q = p;
    q.C = p.ws + (long long)z * p.M * p.N;
    q.bias = 0;
    q.resid = 0;
    q.act = ACT_NONE;
    gemm_epilogue_staged<DT_F32, BM, BN, NT>(q, acc, 0, m0, n0, wm, wn, smem_raw);
    gemm_splitk_fixup<BM, BN, NT>(p, tm * tilesN + tn, m0, n0, smem_raw);
    return;
  }
  switch (p.out_dtype) {
  case DT_F32: gemm_epilogue_staged<DT_F32, BM, BN, NT>(p, acc, b, m0, n0, wm, wn, smem_raw); break;
  case DT_F16: gemm_epilogue_staged<DT_F16, BM, BN, NT>(p, acc, b, m0, n0, wm, wn, smem_raw); break;
  default: gemm_epilogue_staged<DT_BF16, BM, BN, NT>(p, acc, b, m0, n0, wm, wn, smem_raw); break;
  }
}
