// Training bodies (family "train"; the misc family precedes it): batch norm with
// batch statistics (partial sums, a finishing reduction, apply, backward),
// softmax cross-entropy and its gradient, column sums (bias gradients),
// pooling backward and SGD with fp32 momentum.
//
// Preemption: no body accumulates across logical blocks. A reduction over
// many pixels is split in two kernels: the partial kernel's logical block
// writes its own slot of a scratch tensor (plain stores, a fixed order
// inside the block), and a finishing kernel sums the slots in a fixed
// order. A logical block run again after a reset preemption stores the
// same bytes, so every form (Plain, Reset re-run, Resumable, Padded) gives
// bit-identical results. Atomics accumulated across blocks would make the
// result depend on the block order, and a re-run block would add twice.

// ---- per-channel partial sums over NHWC pixels.
// Logical block lb = split * tiles + tile covers pixels
// [split*BN_CHUNK, (split+1)*BN_CHUNK) and channels [tile*64, tile*64+64);
// 256 threads = 64 channels x 4 pixel lanes. part is [splits][2][c] f32.
//   mode 0 (forward):  (Σx, Σx²)
//   mode 1 (backward): (Σdz, Σdz·x̂), dz = dy·[y > 0] (ReLU) or dy,
//                      x̂ = (x − mean)·rstd with stats = [mean[c], rstd[c]].
#define BN_CHUNK 256
struct BnPartP {
  const void* x; const void* dy; const void* y; const float* stats;
  float* part;
  int pixels, c, tiles, mode, act;
};
template <int DT> __device__ __forceinline__ void body_bn_partial(int lb, const BnPartP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  __shared__ float red[2][4][64];
  const int tile = lb % p.tiles, split = lb / p.tiles;
  const int cl = threadIdx.x & 63, lane = threadIdx.x >> 6;
  const int ch = tile * 64 + cl;
  const long long p0 = (long long)split * BN_CHUNK;
  const long long p1 = p0 + BN_CHUNK < (long long)p.pixels ? p0 + BN_CHUNK : (long long)p.pixels;
  float s0 = 0.f, s1 = 0.f;
  if (ch < p.c) {
    float mean = 0.f, rstd = 0.f;
    if (p.mode == 1) { mean = p.stats[ch]; rstd = p.stats[p.c + ch]; }
    for (long long px = p0 + lane; px < p1; px += 4) {
      const long long i = px * p.c + ch;
      const float x = D::load((const T*)p.x, i);
      if (p.mode == 0) {
        s0 += x;
        s1 += x * x;
      } else {
        float dz = D::load((const T*)p.dy, i);
        if (p.act == ACT_RELU && !(D::load((const T*)p.y, i) > 0.f)) dz = 0.f;
        s0 += dz;
        s1 += dz * ((x - mean) * rstd);
      }
    }
  }
  red[0][lane][cl] = s0;
  red[1][lane][cl] = s1;
  BSYNC(256);
  if (lane == 0 && ch < p.c) {
    const float a = (red[0][0][cl] + red[0][1][cl]) + (red[0][2][cl] + red[0][3][cl]);
    const float b = (red[1][0][cl] + red[1][1][cl]) + (red[1][2][cl] + red[1][3][cl]);
    p.part[(2LL * split) * p.c + ch] = a;
    p.part[(2LL * split + 1) * p.c + ch] = b;
  }
}

// ---- finishing reduction of the partials, in double, fixed order.
// Logical block = 8 channels; 256 threads = 32 split lanes x 8 channels
// (thread = lane * 8 + channel): lane j sums splits j, j+32, ... (four
// independent loads in flight), then thread lane 0 adds the 32 lane sums
// in order.
//   grad 0: out0 = [mean[c], rstd[c]] (biased variance, as BN normalises)
//   grad 1: out0 = dγ = Σdz·x̂, out1 = dβ = Σdz
struct BnFinP { const float* part; float* out0; float* out1; int pixels, c, splits, grad; float eps; };
template <int DT> __device__ __forceinline__ void body_bn_final(int lb, const BnFinP& p) {
  __shared__ double red[2][32][8];
  const int cl = threadIdx.x & 7, lane = threadIdx.x >> 3;
  const int ch = lb * 8 + cl;
  double a = 0.0, b = 0.0;
  if (ch < p.c) {
    int s = lane;
    for (; s + 96 < p.splits; s += 128) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        v[2 * u] = p.part[(2LL * (s + 32 * u)) * p.c + ch];
        v[2 * u + 1] = p.part[(2LL * (s + 32 * u) + 1) * p.c + ch];
      }
#pragma unroll
      for (int u = 0; u < 4; u++) {
        a += (double)v[2 * u];
        b += (double)v[2 * u + 1];
      }
    }
    for (; s < p.splits; s += 32) {
      a += (double)p.part[(2LL * s) * p.c + ch];
      b += (double)p.part[(2LL * s + 1) * p.c + ch];
    }
  }
  red[0][lane][cl] = a;
  red[1][lane][cl] = b;
  BSYNC(256);
  if (lane == 0 && ch < p.c) {
    double sa = 0.0, sb = 0.0;
    for (int j = 0; j < 32; j++) {
      sa += red[0][j][cl];
      sb += red[1][j][cl];
    }
    if (p.grad) {
      p.out0[ch] = (float)sb;
      p.out1[ch] = (float)sa;
    } else {
      const double mean = sa / p.pixels;
      double var = sb / p.pixels - mean * mean;
      if (var < 0.0) var = 0.0;
      p.out0[ch] = (float)mean;
      p.out0[p.c + ch] = (float)(1.0 / sqrt(var + (double)p.eps));
    }
  }
}

// ---- batch-norm apply: y = act(γ·(x − mean)·rstd + β [+ r]); 1024 elements
// per logical block (256 threads x 4).
struct BnApP { const void* x; const float* stats; const void* r; const float* gamma; const float* beta; void* y; long long n; int c, act; };
template <int DT> __device__ __forceinline__ void body_bn_apply(int lb, const BnApP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  if (quad_ok<DT>(p.n, p.c, p.x, p.r, p.y)) {
    // Four consecutive elements per thread, one channel lookup for them.
    const long long i = (long long)lb * 1024 + threadIdx.x * 4;
    if (i >= p.n) return;
    const int ch = chan(i, p.c, p.n);
    float x[4], r[4] = {0.f, 0.f, 0.f, 0.f};
    Quad<DT>::load(p.x, i, x);
    if (p.r != 0) Quad<DT>::load(p.r, i, r);
#pragma unroll
    for (int u = 0; u < 4; u++)
      x[u] = apply_act((x[u] - p.stats[ch + u]) * p.stats[p.c + ch + u] * p.gamma[ch + u] + p.beta[ch + u] + r[u], p.act);
    Quad<DT>::store(p.y, i, x);
    return;
  }
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const int ch = chan(i, p.c, p.n);
    float v = (D::load((const T*)p.x, i) - p.stats[ch]) * p.stats[p.c + ch] * p.gamma[ch] + p.beta[ch];
    if (p.r != 0) v += D::load((const T*)p.r, i);
    D::store((T*)p.y, i, apply_act(v, p.act));
  }
}

// ---- batch-norm backward (data): dz = dy·[y > 0] (ReLU) or dy;
// dx = γ·rstd·(dz − dβ/P − x̂·dγ/P); dshort (residual units) = dz.
struct BnBwP {
  const void* dy; const void* y; const void* x; const float* stats; const float* dgamma; const float* dbeta; const float* gamma;
  void* dx; void* dshort; long long n; int c, act; float inv_pixels;
};
template <int DT> __device__ __forceinline__ void body_bn_bwd(int lb, const BnBwP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  if (quad_ok<DT>(p.n, p.c, p.dy, p.y, p.x, p.dx, p.dshort)) {
    // Four consecutive elements per thread, one channel lookup for them.
    const long long i = (long long)lb * 1024 + threadIdx.x * 4;
    if (i >= p.n) return;
    const int ch = chan(i, p.c, p.n);
    float dz[4], y[4], x[4], dx[4];
    Quad<DT>::load(p.dy, i, dz);
    if (p.act == ACT_RELU) {
      Quad<DT>::load(p.y, i, y);
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (!(y[u] > 0.f)) dz[u] = 0.f;
    }
    Quad<DT>::load(p.x, i, x);
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int c = ch + u;
      const float rstd = p.stats[p.c + c];
      const float xh = (x[u] - p.stats[c]) * rstd;
      dx[u] = p.gamma[c] * rstd * (dz[u] - p.dbeta[c] * p.inv_pixels - xh * p.dgamma[c] * p.inv_pixels);
    }
    Quad<DT>::store(p.dx, i, dx);
    if (p.dshort != 0) Quad<DT>::store(p.dshort, i, dz);
    return;
  }
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const int ch = chan(i, p.c, p.n);
    float dz = D::load((const T*)p.dy, i);
    if (p.act == ACT_RELU && !(D::load((const T*)p.y, i) > 0.f)) dz = 0.f;
    const float rstd = p.stats[p.c + ch];
    const float xh = (D::load((const T*)p.x, i) - p.stats[ch]) * rstd;
    const float dx = p.gamma[ch] * rstd * (dz - p.dbeta[ch] * p.inv_pixels - xh * p.dgamma[ch] * p.inv_pixels);
    D::store((T*)p.dx, i, dx);
    if (p.dshort != 0) D::store((T*)p.dshort, i, dz);
  }
}

// ---- softmax cross-entropy loss per row: loss = log Σ exp(x) − x[label],
// from the logits in fp32; one row per logical block, 128 threads. A label
// outside [0, classes) gives NaN (the host checks labels before upload).
struct XentP { const void* logits; const int* labels; float* loss; int rows, classes; };
template <int DT> __device__ __forceinline__ void body_xent(int lb, const XentP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  __shared__ float red[4];
  const long long row = (long long)lb * p.classes;
  float mx = -3.402823466e38f;
  for (int j = threadIdx.x; j < p.classes; j += 128) mx = fmaxf(mx, D::load((const T*)p.logits, row + j));
  mx = block_max<128>(mx, red);
  float s = 0.f;
  for (int j = threadIdx.x; j < p.classes; j += 128) s += expf(D::load((const T*)p.logits, row + j) - mx);
  s = block_sum<128>(s, red);
  if (threadIdx.x == 0) {
    const int lab = p.labels[lb];
    p.loss[lb] = (lab >= 0 && lab < p.classes) ? logf(s) + mx - D::load((const T*)p.logits, row + lab) : __int_as_float(0x7fc00000);
  }
}

// ---- its gradient: dlogits = (softmax − onehot(label)) · scale (1/rows:
// the loss is the batch mean); 1024 elements per logical block.
struct XentBwP { const void* probs; const int* labels; void* dlogits; long long n; int classes; float scale; };
template <int DT> __device__ __forceinline__ void body_xent_bwd(int lb, const XentBwP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const int row = (int)(i / p.classes), j = (int)(i % p.classes);
    const int lab = p.labels[row];
    float v = __int_as_float(0x7fc00000);
    if (lab >= 0 && lab < p.classes) v = (D::load((const T*)p.probs, i) - (j == lab ? 1.f : 0.f)) * p.scale;
    D::store((T*)p.dlogits, i, v);
  }
}

// ---- column sums: out[j] (fp32) = Σ_r x[r][j], one thread per column in
// row order (bias gradients over a short batch dimension).
struct ColSumP { const void* x; float* out; int rows, cols; };
template <int DT> __device__ __forceinline__ void body_colsum(int lb, const ColSumP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const int j = lb * 256 + threadIdx.x;
  if (j >= p.cols) return;
  float s = 0.f;
  for (int r = 0; r < p.rows; r++) s += D::load((const T*)p.x, (long long)r * p.cols + j);
  p.out[j] = s;
}

// ---- pooling backward NHWC (a gather: no atomics). Average: Σ dy/(R·S)
// over the windows covering an element. Max: a window's gradient goes to
// its first maximum in scan order (rows, then columns; PyTorch's choice),
// found again from x. Sums run over the windows in (oy, ox) order, as the
// reference's. Channels a multiple of 4: a thread takes four channels of a
// tile of T×T pixels (T = 2 for stride 2, else 1) and finds each window's
// maxima once for the whole tile, 256 tiles a logical block (8-byte
// accesses where the pointers allow). Otherwise an element a thread, 1024
// a logical block. PoolBackward.Geometry follows the same split.
struct PoolBwP { const void* dy; const void* x; void* dx; int n, h, w, c, oh, ow, r, s, stride, pad, is_max; };
template <int DT> __device__ __forceinline__ void pool_ld4(const void* p, long long i, bool vec, float* v) {
  typedef DTy<DT> D;
  if (vec) { Quad<DT>::load(p, i, v); return; }
#pragma unroll
  for (int u = 0; u < 4; u++) v[u] = D::load((const typename D::T*)p, i + u);
}
template <int DT, int T> __device__ __forceinline__ void pool_bwd_tile(const PoolBwP& p, long long q, bool vec) {
  typedef DTy<DT> D;
  const int cqn = p.c / 4, th = (p.h + T - 1) / T, tw = (p.w + T - 1) / T;
  long long t = q / cqn;
  const int ch = (int)(q - t * cqn) * 4;
  const int tx = (int)(t % tw); t /= tw;
  const int ty = (int)(t % th);
  const int img = (int)(t / th);
  const int y0 = ty * T, x0 = tx * T;
  // Windows oy with oy*stride - pad <= iy <= oy*stride - pad + r - 1 for
  // some row iy of the tile; likewise columns.
  const int ylo = max(0, (y0 + p.pad - p.r + p.stride) / p.stride), yhi = min(p.oh - 1, (y0 + T - 1 + p.pad) / p.stride);
  const int xlo = max(0, (x0 + p.pad - p.s + p.stride) / p.stride), xhi = min(p.ow - 1, (x0 + T - 1 + p.pad) / p.stride);
  float acc[T * T][4];
#pragma unroll
  for (int k = 0; k < T * T; k++)
#pragma unroll
    for (int u = 0; u < 4; u++) acc[k][u] = 0.f;
  const float inv = 1.f / (float)(p.r * p.s);
  const long long xrow = (long long)img * p.h;
  for (int oy = ylo; oy <= yhi; oy++) {
    const int wy = oy * p.stride - p.pad;
    for (int ox = xlo; ox <= xhi; ox++) {
      const int wx = ox * p.stride - p.pad;
      float g[4];
      pool_ld4<DT>(p.dy, (((long long)img * p.oh + oy) * p.ow + ox) * p.c + ch, vec, g);
      if (!p.is_max) {
#pragma unroll
        for (int k = 0; k < T * T; k++) {
          const int iy = y0 + k / T, ix = x0 + k % T;
          if (iy >= wy && iy < wy + p.r && ix >= wx && ix < wx + p.s)
#pragma unroll
            for (int u = 0; u < 4; u++) acc[k][u] += g[u] * inv;
        }
        continue;
      }
      // The window's first maximum, per channel (its pixel as y·w + x).
      float best[4];
      int at[4];
#pragma unroll
      for (int u = 0; u < 4; u++) { best[u] = 0.f; at[u] = -1; }
      for (int ry = 0; ry < p.r; ry++) {
        const int yy = wy + ry;
        if (yy < 0 || yy >= p.h) continue;
        for (int sx = 0; sx < p.s; sx++) {
          const int xx = wx + sx;
          if (xx < 0 || xx >= p.w) continue;
          float v[4];
          pool_ld4<DT>(p.x, ((xrow + yy) * p.w + xx) * p.c + ch, vec, v);
#pragma unroll
          for (int u = 0; u < 4; u++)
            if (at[u] < 0 || v[u] > best[u]) { best[u] = v[u]; at[u] = yy * p.w + xx; }
        }
      }
#pragma unroll
      for (int k = 0; k < T * T; k++) {
        const int here = (y0 + k / T) * p.w + x0 + k % T;
#pragma unroll
        for (int u = 0; u < 4; u++)
          if (at[u] == here) acc[k][u] += g[u];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < T * T; k++) {
    const int iy = y0 + k / T, ix = x0 + k % T;
    if (iy >= p.h || ix >= p.w) continue;
    const long long i = ((xrow + iy) * p.w + ix) * p.c + ch;
    if (vec) Quad<DT>::store(p.dx, i, acc[k]);
    else
#pragma unroll
      for (int u = 0; u < 4; u++) D::store((typename D::T*)p.dx, i + u, acc[k][u]);
  }
}
template <int DT> __device__ __forceinline__ void pool_bwd_one(const PoolBwP& p, long long i) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long t0 = i / p.c;
  const int ch = (int)(i - t0 * p.c);
  long long t = t0;
  const int ix = (int)(t % p.w); t /= p.w;
  const int iy = (int)(t % p.h);
  const int img = (int)(t / p.h);
  const int ylo = max(0, (iy + p.pad - p.r + p.stride) / p.stride), yhi = min(p.oh - 1, (iy + p.pad) / p.stride);
  const int xlo = max(0, (ix + p.pad - p.s + p.stride) / p.stride), xhi = min(p.ow - 1, (ix + p.pad) / p.stride);
  float acc = 0.f;
  const float inv = 1.f / (float)(p.r * p.s);
  for (int oy = ylo; oy <= yhi; oy++) {
    for (int ox = xlo; ox <= xhi; ox++) {
      const float g = D::load((const T*)p.dy, (((long long)img * p.oh + oy) * p.ow + ox) * p.c + ch);
      if (!p.is_max) {
        acc += g * inv;
        continue;
      }
      float best = 0.f;
      int by = -1, bx = -1;
      for (int ry = 0; ry < p.r; ry++) {
        const int yy = oy * p.stride - p.pad + ry;
        if (yy < 0 || yy >= p.h) continue;
        for (int sx = 0; sx < p.s; sx++) {
          const int xx = ox * p.stride - p.pad + sx;
          if (xx < 0 || xx >= p.w) continue;
          const float v = D::load((const T*)p.x, (((long long)img * p.h + yy) * p.w + xx) * p.c + ch);
          if (by < 0 || v > best) { best = v; by = yy; bx = xx; }
        }
      }
      if (by == iy && bx == ix) acc += g;
    }
  }
  D::store((T*)p.dx, i, acc);
}
template <int DT> __device__ __forceinline__ void body_pool_bwd(int lb, const PoolBwP& p) {
  if (p.c % 4 == 0) {
    const bool vec = quad_ok<DT>(4, 4, p.dy, p.x, p.dx);
    const long long q = (long long)lb * 256 + threadIdx.x;
    if (p.stride == 2) {
      if (q < (long long)p.n * ((p.h + 1) / 2) * ((p.w + 1) / 2) * (p.c / 4)) pool_bwd_tile<DT, 2>(p, q, vec);
    } else if (q < (long long)p.n * p.h * p.w * (p.c / 4)) {
      pool_bwd_tile<DT, 1>(p, q, vec);
    }
    return;
  }
  const long long total = (long long)p.n * p.h * p.w * p.c;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll 1
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= total) return;
    pool_bwd_one<DT>(p, i);
  }
}

// ---- SGD with momentum, fp32 state: m' = mu·m + g; w' = w − lr·m'.
// w and g in DT; may run in place (out = w, m_out = m): each element is
// read and written by one thread, and each logical block runs once.
struct SgdP { const void* w; const void* g; const float* m; void* w_out; float* m_out; long long n; float lr, mu; };
template <int DT> __device__ __forceinline__ void body_sgd(int lb, const SgdP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long base = (long long)lb * 1024 + threadIdx.x;
  float w[4], g[4], m[4];
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    w[u] = g[u] = m[u] = 0.f;
    if (i < p.n) {
      w[u] = D::load((const T*)p.w, i);
      g[u] = D::load((const T*)p.g, i);
      m[u] = p.m[i];
    }
  }
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    const float mm = p.mu * m[u] + g[u];
    p.m_out[i] = mm;
    D::store((T*)p.w_out, i, w[u] - p.lr * mm);
  }
}

// ---- split-K sum: out[i] = Σ_s part[s][i] in split order (f32 partials of
// a split convolution wgrad), stored in DT; 1024 elements per logical block.
struct SplitSumP { const float* part; void* out; long long n; int parts; };
template <int DT> __device__ __forceinline__ void body_splitsum(int lb, const SplitSumP& p) {
  typedef DTy<DT> D;
  typedef typename D::T T;
  const long long base = (long long)lb * 1024 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; u++) {
    const long long i = base + u * 256;
    if (i >= p.n) return;
    float s = 0.f;
    for (int k = 0; k < p.parts; k++) s += p.part[(long long)k * p.n + i];
    D::store((T*)p.out, i, s);
  }
}
