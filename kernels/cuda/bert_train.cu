// BERT training bodies (family "bert"; the misc family precedes it for its
// block reductions): activation backward (GELU, tanh), softmax backward,
// layernorm backward and its weight-gradient partials, the embedding
// tables' gradients, the [CLS] gradient scatter, a batched transpose and
// Adam.
//
// Preemption: no body accumulates across logical blocks. The layernorm
// weight gradients are per-block partials (LN_CHUNK rows x 64 columns,
// BnPartP's layout) that bn_finalize_grad finishes; the embedding gradient
// gives each table row to one logical block, which sums the tokens that
// map to it in token order. A logical block run again stores the same
// bytes, so every form gives bit-identical results. Adam may run in place
// and relies on the resumable loop's exactly-once tickets.

// ---- activation backward, 1024 elements per logical block.
//   act ACT_GELU: dx = dy·gelu'(x), x the pre-activation (tanh approximation)
//   act ACT_TANH: dx = dy·(1 − y²), x holding tanh's output y
struct ActBwP { const void* dy; const void* x; void* dx; long long n; int act; };
template <int DT> __device__ __forceinline__ void body_act_bwd(int lb, const ActBwP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const float g = D::load((const T*)p.dy, i), x = D::load((const T*)p.x, i);
    float d;
    if (p.act == ACT_TANH) {
      d = 1.f - x * x;
    } else {
      const float x2 = x * x;
      const float t = tanhf(0.7978845608f * (x + 0.044715f * x2 * x));
      d = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.7978845608f * (1.f + 3.f * 0.044715f * x2);
    }
    D::store((T*)p.dx, i, g * d);
  }
}

// ---- softmax backward: one row per logical block, 128 threads.
// dx = scale·y·(dy − Σ dy·y).
struct SmBwP { const void* dy; const void* y; void* dx; int rows, cols; float scale; };
template <int DT> __device__ __forceinline__ void body_softmax_bwd(int lb, const SmBwP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  __shared__ float red[4];
  const long long row = (long long)lb * p.cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < p.cols; j += 128) s += D::load((const T*)p.dy, row + j) * D::load((const T*)p.y, row + j);
  s = block_sum<128>(s, red);
  for (int j = threadIdx.x; j < p.cols; j += 128) {
    const float y = D::load((const T*)p.y, row + j);
    D::store((T*)p.dx, row + j, p.scale * y * (D::load((const T*)p.dy, row + j) - s));
  }
}

// ---- layernorm backward: one row per logical block, 256 threads.
// mean and rstd recomputed as body_layernorm computes them; x̂ = (x − mean)·rstd,
// g = dy·γ, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)); stats[2·row] = (mean, rstd).
struct LnBwP { const void* dy; const void* x; const float* gamma; void* dx; float* stats; int rows, cols; float eps; };
template <int DT> __device__ __forceinline__ void body_ln_bwd(int lb, const LnBwP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  __shared__ float red[8];
  const long long row = (long long)lb * p.cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < p.cols; j += 256) s += D::load((const T*)p.x, row + j);
  const float mean = block_sum<256>(s, red) / p.cols;
  float v = 0.f;
  for (int j = threadIdx.x; j < p.cols; j += 256) {
    const float d = D::load((const T*)p.x, row + j) - mean;
    v += d * d;
  }
  const float rstd = rsqrtf(block_sum<256>(v, red) / p.cols + p.eps);
  float a = 0.f, b = 0.f;
  for (int j = threadIdx.x; j < p.cols; j += 256) {
    const float g = D::load((const T*)p.dy, row + j) * p.gamma[j];
    a += g;
    b += g * ((D::load((const T*)p.x, row + j) - mean) * rstd);
  }
  a = block_sum<256>(a, red) / p.cols;
  b = block_sum<256>(b, red) / p.cols;
  for (int j = threadIdx.x; j < p.cols; j += 256) {
    const float g = D::load((const T*)p.dy, row + j) * p.gamma[j];
    const float xh = (D::load((const T*)p.x, row + j) - mean) * rstd;
    D::store((T*)p.dx, row + j, rstd * (g - a - xh * b));
  }
  if (threadIdx.x == 0) {
    p.stats[2LL * lb] = mean;
    p.stats[2LL * lb + 1] = rstd;
  }
}

#define LN_CHUNK 256 // = BN_CHUNK (train.cu), kernels.BNChunk

// ---- layernorm weight-gradient partials over rows, BnPartP's layout.
// Logical block lb = split * tiles + tile covers rows [split*LN_CHUNK,
// (split+1)*LN_CHUNK) and columns [tile*64, tile*64+64); 256 threads = 64
// columns x 4 row lanes. part[2·split][c] = Σ dy, part[2·split+1][c] = Σ dy·x̂.
// Without x (ColumnPartial: a bias gradient) part[split][c] = Σ dy only.
struct LnPartP { const void* dy; const void* x; const float* stats; float* part; int rows, cols, tiles; };
template <int DT> __device__ __forceinline__ void body_ln_partial(int lb, const LnPartP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  __shared__ float red[2][4][64];
  const int tile = lb % p.tiles, split = lb / p.tiles;
  const int cl = threadIdx.x & 63, lane = threadIdx.x >> 6;
  const int col = tile * 64 + cl;
  const long long r0 = (long long)split * LN_CHUNK;
  const long long r1 = r0 + LN_CHUNK < (long long)p.rows ? r0 + LN_CHUNK : (long long)p.rows;
  float s0 = 0.f, s1 = 0.f;
  if (col < p.cols) {
    for (long long r = r0 + lane; r < r1; r += 4) {
      const long long i = r * p.cols + col;
      const float dy = D::load((const T*)p.dy, i);
      s0 += dy;
      if (p.x) s1 += dy * ((D::load((const T*)p.x, i) - p.stats[2 * r]) * p.stats[2 * r + 1]);
    }
  }
  red[0][lane][cl] = s0;
  red[1][lane][cl] = s1;
  BSYNC(256);
  if (lane == 0 && col < p.cols) {
    const float a = (red[0][0][cl] + red[0][1][cl]) + (red[0][2][cl] + red[0][3][cl]);
    if (!p.x) {
      p.part[(long long)split * p.cols + col] = a;
    } else {
      p.part[(2LL * split) * p.cols + col] = a;
      p.part[(2LL * split + 1) * p.cols + col] = (red[1][0][cl] + red[1][1][cl]) + (red[1][2][cl] + red[1][3][cl]);
    }
  }
  BSYNC(256); // red is reused by the ticket's next block
}

// ---- embedding table gradient: logical block = one table row's columns
// [chunk·cw, chunk·cw + cw) (lb = row·chunks + chunk), 256 threads.
// Token t belongs to row key(t): mode 0 ids[t] (word), 1 t % seq (position),
// 2 row 0 (token type 0). The block takes the keys 256 at a time; warp w
// marks by a ballot which of its 32 tokens belong to the row (the marks of
// up to 2048 tokens kept in shared memory, more scanned again each pass)
// and sums their gradients, two tokens an iteration, 256 columns a pass
// (8 a lane); the block then adds the 8 warps' sums in warp order
// (deterministic, no atomics). A row no token picks costs one scan and its
// zeros. Few-row tables (position, type) cut rows into chunks so that a
// row every token picks is spread over blocks.
struct EmbBwP { const void* dy; const int* ids; float* out; int tokens, cols, rows, seq, mode, cw; };
__device__ __forceinline__ int embed_key(const EmbBwP& p, int t) {
  if (t >= p.tokens) return -1;
  return p.mode == 0 ? p.ids[t] : (p.mode == 1 ? t % p.seq : 0);
}
// bar.sync over the block's 256 threads that also ORs v across them.
__device__ __forceinline__ int bsync_or256(int v) {
  int r;
  asm volatile("{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n bar.red.or.pred q, 0, 256, p;\n selp.s32 %0, 1, 0, q;\n}"
               : "=r"(r) : "r"(v) : "memory");
  return r;
}
template <int DT> __device__ __forceinline__ void body_embed_bwd(int lb, const EmbBwP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  __shared__ float red[8][256];
  __shared__ unsigned marks[8][8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = (p.cols + p.cw - 1) / p.cw, row = lb / chunks, cb = (lb - row * chunks) * p.cw;
  const int ce = min(p.cols, cb + p.cw), rounds = (p.tokens + 255) >> 8;
  const bool cached = rounds <= 8;
  int hit = !cached;
  if (cached) {
    for (int r = 0; r < rounds; r++) {
      const unsigned m = __ballot_sync(0xffffffffu, embed_key(p, r * 256 + warp * 32 + lane) == row);
      if (lane == 0) marks[warp][r] = m;
      hit |= m != 0u;
    }
  }
  if (!bsync_or256(hit)) { // block-uniform: no token picks the row
    for (int j = cb + threadIdx.x; j < ce; j += 256) p.out[(long long)row * p.cols + j] = 0.f;
    return;
  }
  const T* dy = (const T*)p.dy;
  for (int c0 = cb; c0 < ce; c0 += 256) {
    float acc[8];
#pragma unroll
    for (int u = 0; u < 8; u++) acc[u] = 0.f;
    for (int r = 0; r < rounds; r++) {
      const int t0 = r * 256 + warp * 32;
      unsigned m = cached ? marks[warp][r] : __ballot_sync(0xffffffffu, embed_key(p, t0 + lane) == row);
      while (m != 0u) { // uniform across the warp
        const int a = __ffs(m) - 1;
        m &= m - 1u;
        const int b = m != 0u ? __ffs(m) - 1 : -1;
        if (b >= 0) m &= m - 1u;
        const long long ra = (long long)(t0 + a) * p.cols, rb = (long long)(t0 + b) * p.cols;
        float va[8], vb[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
          const int j = c0 + u * 32 + lane;
          va[u] = j < ce ? D::load(dy, ra + j) : 0.f;
          vb[u] = j < ce && b >= 0 ? D::load(dy, rb + j) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc[u] = (acc[u] + va[u]) + vb[u];
      }
    }
#pragma unroll
    for (int u = 0; u < 8; u++) red[warp][u * 32 + lane] = acc[u];
    BSYNC(256);
    const int j = c0 + threadIdx.x;
    if (j < ce) {
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < 8; w++) v += red[w][threadIdx.x];
      p.out[(long long)row * p.cols + j] = v;
    }
    BSYNC(256); // red and marks are reused by the next pass and the ticket's next block
  }
}

// ---- [CLS] gradient scatter: dx[n·seq + s][j] = s == 0 ? dcls[n][j] : 0;
// 1024 elements per logical block.
struct ClsP { const void* src; void* dst; long long n; int seq, cols; };
template <int DT> __device__ __forceinline__ void body_cls_scatter(int lb, const ClsP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const long long tok = i / p.cols;
    const int j = (int)(i % p.cols);
    float v = 0.f;
    if (tok % p.seq == 0) v = D::load((const T*)p.src, (tok / p.seq) * p.cols + j);
    D::store((T*)p.dst, i, v);
  }
}

// ---- batched transpose: y[b][c][r] = x[b][r][c]; 1024 outputs per block.
struct TrP { const void* x; void* y; long long n; int rows, cols; };
template <int DT> __device__ __forceinline__ void body_transpose(int lb, const TrP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long per = (long long)p.rows * p.cols;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const long long b = i / per, rem = i % per;
    const long long c = rem / p.rows, r = rem % p.rows;
    ((T*)p.y)[i] = ((const T*)p.x)[b * per + r * p.cols + c];
  }
}

// ---- Adam (no weight decay), 1024 elements per logical block; in place
// allowed. c1 = 1/(1 − β1^t), c2 = 1/(1 − β2^t) from the host. With r (16-bit
// weights) the fp32 master weight is w + r: w_out is the updated master
// rounded to the weight type, r_out what the rounding left.
struct AdamP {
  const void* w; const void* g; const float* m; const float* v; const float* r;
  void* w_out; float* m_out; float* v_out; float* r_out;
  long long n; int gdt; float lr, b1, b2, eps, c1, c2;
};
template <int DT> __device__ __forceinline__ void body_adam(int lb, const AdamP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  // Explicitly rounded fp32 operations (no FMA contraction): the CPU
  // reference repeats them exactly, so the master weight's rounding
  // residual matches bit for bit.
  const float omb1 = __fsub_rn(1.f, p.b1), omb2 = __fsub_rn(1.f, p.b2);
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const float g = load_dt(p.g, i, p.gdt);
    const float m = __fadd_rn(__fmul_rn(p.b1, p.m[i]), __fmul_rn(omb1, g));
    const float v = __fadd_rn(__fmul_rn(p.b2, p.v[i]), __fmul_rn(__fmul_rn(omb2, g), g));
    float w = D::load((const T*)p.w, i);
    if (p.r) w = __fadd_rn(w, p.r[i]);
    const float vh = fmaxf(__fmul_rn(v, p.c2), 0.f);
    const float upd = __fdiv_rn(__fmul_rn(p.lr, __fmul_rn(m, p.c1)), __fadd_rn(__fsqrt_rn(vh), p.eps));
    w = __fsub_rn(w, upd);
    p.m_out[i] = m;
    p.v_out[i] = v;
    const T wt = D::from_f(w);
    ((T*)p.w_out)[i] = wt;
    if (p.r_out) p.r_out[i] = __fsub_rn(w, D::to_f(wt));
  }
}

// ---- out[r] = [a[r], b[r], c[r]] (rows of cols): the fused QKV gradient;
// 1024 outputs per logical block.
struct Cat3P { const void* a; const void* b; const void* c; void* out; long long n; int cols; };
template <int DT> __device__ __forceinline__ void body_concat3(int lb, const Cat3P& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const long long r = i / (3LL * p.cols), q = i % (3LL * p.cols);
    const int part = (int)(q / p.cols), j = (int)(q % p.cols);
    const T* src = (const T*)(part == 0 ? p.a : (part == 1 ? p.b : p.c));
    ((T*)p.out)[i] = src[r * p.cols + j];
  }
}

// ---- embedding sum: out[t][j] = x[t][j] + pos[t % seq][j] (+ type[0][j]);
// 1024 elements per logical block.
struct EmbAddP { const void* x; const void* pos; const void* type; void* out; long long n; int seq, cols; };
template <int DT> __device__ __forceinline__ void body_embed_add(int lb, const EmbAddP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const long long t = i / p.cols;
    const int j = (int)(i % p.cols);
    float v = D::load((const T*)p.x, i) + D::load((const T*)p.pos, (t % p.seq) * p.cols + j);
    if (p.type) v += D::load((const T*)p.type, j);
    D::store((T*)p.out, i, v);
  }
}
