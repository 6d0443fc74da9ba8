// Strided batched GEMM (attention and other GEMMs over views of larger
// buffers): for batch entry b = o * inner + i (o: sequence, i: head),
//
//   C[b][m][n] = act(scale * sum_k A[b][m][k] * B[b][k][n] + bias[n])
//   A[b][m][k] = A[o*oA + i*iA + m*ldA + k]
//   B[b][k][n] = B[o*oB + i*iB + k*ldB + n]      (TRANSB: B[... + n*ldB + k])
//   C[b][m][n] -> C[o*oC + i*iC + m*ldC + n]
//
// A and B point at the views' first elements (the Go side adds the
// offsets). With TRANSB the B view holds B transposed (row n, column k): the
// keys of Q*K^T read straight out of a fused QKV projection. 16-bit inputs,
// fp32 accumulation on mma.sync.m16n8k16; 64x64 block tiles, 4 warps of
// 32x32, K-tiles of 32 double-buffered in shared memory (cp.async 16-byte
// copies when a view's rows are 16-byte aligned, plain loads otherwise);
// the helpers (cp_async16s, ldmatrix, mma16816) are gemm.cu's, which the
// module always includes before this file.

struct SgemmP {
  const u16* A;      // A view's first element
  const u16* B;      // B view's first element
  void* C;           // output buffer (out_dtype)
  const float* bias; // [N] or null
  long long ldA, ldB, ldC;           // row strides (elements)
  long long oA, iA, oB, iB, oC, iC;  // outer (sequence) and inner (head) batch strides
  int M, N, K, inner, batch;         // batch = outer * inner
  int act, out_dtype;
  int vecA, vecB, vecC;              // 16-byte rows (A, B) / 4-byte column pairs (C)
  float scale;
};

#define SG_BM 64
#define SG_BN 64
#define SG_BK 32
#define SG_NT 128
#define SG_A_LD (SG_BK + 8)                    // A tile [BM][BK+8]
#define SG_B_LD (SG_BN + 8)                    // B tile [BK][BN+8]
#define SG_BT_LD (SG_BK + 8)                   // B^T tile [BN][BK+8]
#define SG_A_ELEMS (SG_BM * SG_A_LD)           // 2560
#define SG_B_ELEMS (SG_BN * SG_BT_LD)          // 2560 (>= SG_BK * SG_B_LD = 2304)
#define SG_STAGE (SG_A_ELEMS + SG_B_ELEMS)     // elements per stage
// Dynamic shared memory: 2 stages x SG_STAGE x 2 bytes = 20480 (kernels/attention.go sgemmSmem).

template <int DT, int TRANSB>
__device__ __forceinline__ void sgemm_load(const SgemmP& p, u16* smem, int st, const u16* a_b,
                                           const u16* b_b, int m0, int n0, int k0) {
  const int tid = threadIdx.x;
  u16* sa = smem + st * SG_STAGE;
  u16* sb = sa + SG_A_ELEMS;
  // A: BM rows x BK k.
  if (p.vecA) {
#pragma unroll
    for (int c = 0; c < (SG_BM * SG_BK / 8) / SG_NT; c++) {
      const int q = tid + c * SG_NT, row = q / (SG_BK / 8), kc = (q % (SG_BK / 8)) * 8;
      const bool ok = m0 + row < p.M && k0 + kc < p.K;
      cp_async16s(smem_u32(sa + row * SG_A_LD + kc), ok ? a_b + (long long)(m0 + row) * p.ldA + k0 + kc : p.A, ok);
    }
  } else {
    for (int q = tid; q < SG_BM * SG_BK; q += SG_NT) {
      const int row = q / SG_BK, kk = q % SG_BK;
      const int m = m0 + row, k = k0 + kk;
      sa[row * SG_A_LD + kk] = (m < p.M && k < p.K) ? a_b[(long long)m * p.ldA + k] : (u16)0;
    }
  }
  if (TRANSB) {
    // B^T: BN rows (n) x BK k, k contiguous.
    if (p.vecB) {
#pragma unroll
      for (int c = 0; c < (SG_BN * SG_BK / 8) / SG_NT; c++) {
        const int q = tid + c * SG_NT, row = q / (SG_BK / 8), kc = (q % (SG_BK / 8)) * 8;
        const bool ok = n0 + row < p.N && k0 + kc < p.K;
        cp_async16s(smem_u32(sb + row * SG_BT_LD + kc), ok ? b_b + (long long)(n0 + row) * p.ldB + k0 + kc : p.B, ok);
      }
    } else {
      for (int q = tid; q < SG_BN * SG_BK; q += SG_NT) {
        const int row = q / SG_BK, kk = q % SG_BK;
        const int n = n0 + row, k = k0 + kk;
        sb[row * SG_BT_LD + kk] = (n < p.N && k < p.K) ? b_b[(long long)n * p.ldB + k] : (u16)0;
      }
    }
  } else {
    // B: BK rows (k) x BN n, n contiguous.
    if (p.vecB) {
#pragma unroll
      for (int c = 0; c < (SG_BK * SG_BN / 8) / SG_NT; c++) {
        const int q = tid + c * SG_NT, row = q / (SG_BN / 8), nc = (q % (SG_BN / 8)) * 8;
        const bool ok = k0 + row < p.K && n0 + nc < p.N;
        cp_async16s(smem_u32(sb + row * SG_B_LD + nc), ok ? b_b + (long long)(k0 + row) * p.ldB + n0 + nc : p.B, ok);
      }
    } else {
      for (int q = tid; q < SG_BK * SG_BN; q += SG_NT) {
        const int row = q / SG_BN, nn = q % SG_BN;
        const int k = k0 + row, n = n0 + nn;
        sb[row * SG_B_LD + nn] = (k < p.K && n < p.N) ? b_b[(long long)k * p.ldB + n] : (u16)0;
      }
    }
  }
}

// body_sgemm: one 64x64 output tile of one batch entry per logical block.
// lb = ((b * tilesM) + tileM) * tilesN + tileN.
template <int DT, int TRANSB>
__device__ __forceinline__ void body_sgemm(int lb, const SgemmP& p) {
  constexpr int MI = 2, NI = 4; // warp tile 32x32: 2 m16 x 4 n8
  extern __shared__ __align__(16) unsigned char smem_raw[];
  u16* smem = (u16*)smem_raw;

  const int tilesN = (p.N + SG_BN - 1) / SG_BN, tilesM = (p.M + SG_BM - 1) / SG_BM;
  const int tn = lb % tilesN, tm = (lb / tilesN) % tilesM, b = lb / (tilesN * tilesM);
  const int m0 = tm * SG_BM, n0 = tn * SG_BN;
  const int o = b / p.inner, hi = b % p.inner;
  const u16* a_b = p.A + o * p.oA + hi * p.iA;
  const u16* b_b = p.B + o * p.oB + hi * p.iB;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int j = 0; j < NI; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

  const u32 s_base = smem_u32(smem);
  // This lane's ldmatrix row addresses in stage 0.
  const u32 a_frag = s_base + ((wm + (lane & 15)) * SG_A_LD + (lane >> 4) * 8) * 2;
  const u32 b_frag = TRANSB
      ? s_base + (SG_A_ELEMS + (wn + (lane >> 4) * 8 + (lane & 7)) * SG_BT_LD + ((lane >> 3) & 1) * 8) * 2
      : s_base + (SG_A_ELEMS + (lane & 15) * SG_B_LD + wn + (lane >> 4) * 8) * 2;

  const int KT = (p.K + SG_BK - 1) / SG_BK;
  sgemm_load<DT, TRANSB>(p, smem, 0, a_b, b_b, m0, n0, 0);
  cp_async_commit();
  for (int kt = 0; kt < KT; kt++) {
    cp_async_wait<0>(); // tile kt has landed (this thread's copies)
    BSYNC(SG_NT);       // ... everyone's; and stage (kt+1)&1 is free
    if (kt + 1 < KT) sgemm_load<DT, TRANSB>(p, smem, (kt + 1) & 1, a_b, b_b, m0, n0, (kt + 1) * SG_BK);
    cp_async_commit();
    const u32 st_off = (kt & 1) * (SG_STAGE * 2);
#pragma unroll
    for (int kk = 0; kk < SG_BK; kk += 16) {
      u32 af[MI][4], bfr[NI][2];
#pragma unroll
      for (int i = 0; i < MI; i++) ldmatrix_x4(af[i], a_frag + st_off + (i * 16 * SG_A_LD + kk) * 2);
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        u32 t[4];
        if (TRANSB) {
          ldmatrix_x4(t, b_frag + st_off + (j * 8 * SG_BT_LD + kk) * 2);
        } else {
          ldmatrix_x4_trans(t, b_frag + st_off + (kk * SG_B_LD + j * 8) * 2);
        }
        bfr[j][0] = t[0]; bfr[j][1] = t[1]; bfr[j + 1][0] = t[2]; bfr[j + 1][1] = t[3];
      }
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++) mma16816<DT>(acc[i][j], af[i], bfr[j]);
    }
  }
  cp_async_wait<0>();
  BSYNC(SG_NT); // shared memory is reused by the next logical block (resumable)

  // Epilogue: scale, bias, activation; pairs of columns in one store when aligned.
  const int g = lane >> 2, t4 = lane & 3;
  const long long cbase = o * p.oC + hi * p.iC;
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int j = 0; j < NI; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int m = m0 + wm + i * 16 + g + h * 8;
        const int n = n0 + wn + j * 8 + t4 * 2;
        if (m >= p.M || n >= p.N) continue;
        const long long idx = cbase + (long long)m * p.ldC + n;
        float v0 = acc[i][j][2 * h] * p.scale, v1 = acc[i][j][2 * h + 1] * p.scale;
        if (p.bias) {
          v0 += p.bias[n];
          if (n + 1 < p.N) v1 += p.bias[n + 1];
        }
        v0 = apply_act(v0, p.act);
        v1 = apply_act(v1, p.act);
        if (p.vecC && p.out_dtype != DT_F32) { // n even, N even, idx even: one 4-byte store
          u32 w;
          if (p.out_dtype == DT_BF16) w = (u32)f_to_bf16(v0) | ((u32)f_to_bf16(v1) << 16);
          else w = (u32)f_to_f16(v0) | ((u32)f_to_f16(v1) << 16);
          *(u32*)((u16*)p.C + idx) = w;
        } else {
          store_dt(p.C, idx, p.out_dtype, v0);
          if (n + 1 < p.N) store_dt(p.C, idx + 1, p.out_dtype, v1);
        }
      }
}
