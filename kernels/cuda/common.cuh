// atoll kernel library: common definitions, the control block (Ctl) and the
// four forms every body is instantiated in. Compiled with NVRTC; includes no
// headers, so 16-bit floats are handled as raw bits.
//
// ABI: every kernel's first parameter is `Ctl` by value (40 bytes, 8-aligned),
// then the body's parameter struct by value. The Go side packs the same
// layout with gpu.Args (see kernels/abi.go).

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

struct Ctl {
  const volatile u32* flag; // preemption flag (mapped host word); nonzero = raised. Reset/Resumable.
  int* counter;             // control block in device memory, 32 bytes, zeroed before first use:
                            //   [0] logical blocks taken (Resumable), [1] completed,
                            //   [2..3] flag relay (u64), [4] relay lock. Optional for Reset.
  volatile u32* done;       // Resumable: set to 1 by the worker completing the last logical block.
  u64* trace;               // optional: trace[block] = %globaltimer at the block's exit (ns); null = off.
  int logical;              // logical blocks of the body (Resumable; Padded: HP blocks in the HP Ctl)
  int offset;               // Plain/Reset: first logical block of this launch (slicing).
  int epoch;                // launch serial number (the flag relay trusts only its own launch's reads)
  int chunk;                // Resumable: logical blocks taken per ticket (>= 1)
};

// ---- dtype helpers ---------------------------------------------------------
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };

__device__ __forceinline__ float bf16_to_f(u16 h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ u16 f_to_bf16(float f) {
  u32 x = __float_as_uint(f);
  if ((x & 0x7f800000u) == 0x7f800000u) { // inf or nan
    return (u16)((x >> 16) | ((x & 0xffffu) ? 0x40u : 0u));
  }
  x += 0x7fffu + ((x >> 16) & 1u); // round to nearest even
  return (u16)(x >> 16);
}
__device__ __forceinline__ float f16_to_f(u16 h) {
  float f;
  asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 f_to_f16(float f) {
  u16 h;
  asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
  return h;
}

template <int DT> struct DTy;
template <> struct DTy<DT_F32> {
  typedef float T;
  static __device__ __forceinline__ float load(const T* p, long long i) { return p[i]; }
  static __device__ __forceinline__ void store(T* p, long long i, float v) { p[i] = v; }
  static __device__ __forceinline__ float to_f(T v) { return v; }
  static __device__ __forceinline__ T from_f(float v) { return v; }
};
template <> struct DTy<DT_F16> {
  typedef u16 T;
  static __device__ __forceinline__ float load(const T* p, long long i) { return f16_to_f(p[i]); }
  static __device__ __forceinline__ void store(T* p, long long i, float v) { p[i] = f_to_f16(v); }
  static __device__ __forceinline__ float to_f(T v) { return f16_to_f(v); }
  static __device__ __forceinline__ T from_f(float v) { return f_to_f16(v); }
};
template <> struct DTy<DT_BF16> {
  typedef u16 T;
  static __device__ __forceinline__ float load(const T* p, long long i) { return bf16_to_f(p[i]); }
  static __device__ __forceinline__ void store(T* p, long long i, float v) { p[i] = f_to_bf16(v); }
  static __device__ __forceinline__ float to_f(T v) { return bf16_to_f(v); }
  static __device__ __forceinline__ T from_f(float v) { return f_to_bf16(v); }
};

// Four consecutive elements as one vector access (8 bytes of 16-bit
// values, 16 of f32): Quad<DT>::load/store at an index that is a multiple
// of 4 of a pointer that quad_ok found aligned.
template <int DT> struct Quad {
  typedef DTy<DT> D;
  static __device__ __forceinline__ void load(const void* p, long long i, float* v) {
    const uint2 q = *(const uint2*)((const u16*)p + i);
    v[0] = D::to_f((u16)(q.x & 0xffff)); v[1] = D::to_f((u16)(q.x >> 16));
    v[2] = D::to_f((u16)(q.y & 0xffff)); v[3] = D::to_f((u16)(q.y >> 16));
  }
  static __device__ __forceinline__ void store(void* p, long long i, const float* v) {
    uint2 q;
    q.x = (unsigned)D::from_f(v[0]) | ((unsigned)D::from_f(v[1]) << 16);
    q.y = (unsigned)D::from_f(v[2]) | ((unsigned)D::from_f(v[3]) << 16);
    *(uint2*)((u16*)p + i) = q;
  }
};
template <> struct Quad<DT_F32> {
  static __device__ __forceinline__ void load(const void* p, long long i, float* v) {
    const float4 q = *(const float4*)((const float*)p + i);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  }
  static __device__ __forceinline__ void store(void* p, long long i, const float* v) {
    *(float4*)((float*)p + i) = make_float4(v[0], v[1], v[2], v[3]);
  }
};

// quad_ok: per-channel elementwise work over n elements of c channels may
// go four at a time (both multiples of 4, so four consecutive elements
// share a row) through these pointers (each null or aligned to a quad).
template <int DT> __device__ __forceinline__ bool quad_ok(long long n, int c, const void* a, const void* b = 0,
                                                         const void* d = 0, const void* e = 0, const void* f = 0) {
  const unsigned long long m = 4ull * sizeof(typename DTy<DT>::T) - 1;
  return ((n | (long long)c) & 3) == 0 &&
         (((unsigned long long)a | (unsigned long long)b | (unsigned long long)d | (unsigned long long)e | (unsigned long long)f) & m) == 0;
}

// chan is element i's channel (i mod c), in 32-bit arithmetic when the
// tensor's n elements allow it.
__device__ __forceinline__ int chan(long long i, int c, long long n) {
  return n <= 0x7fffffffLL ? (int)((unsigned)i % (unsigned)c) : (int)(i % c);
}

// Runtime-typed load/store (epilogues whose output type is a parameter).
__device__ __forceinline__ float load_dt(const void* p, long long i, int dt) {
  if (dt == DT_F32) return ((const float*)p)[i];
  if (dt == DT_F16) return f16_to_f(((const u16*)p)[i]);
  return bf16_to_f(((const u16*)p)[i]);
}
__device__ __forceinline__ void store_dt(void* p, long long i, int dt, float v) {
  if (dt == DT_F32) ((float*)p)[i] = v;
  else if (dt == DT_F16) ((u16*)p)[i] = f_to_f16(v);
  else ((u16*)p)[i] = f_to_bf16(v);
}

// ---- activations (same formulas as the Go references) -----------------------
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2, ACT_RELU6 = 3, ACT_TANH = 4 };
__device__ __forceinline__ float apply_act(float x, int act) {
  switch (act) {
  case ACT_RELU: return x > 0.f ? x : 0.f;
  case ACT_GELU: return 0.5f * x * (1.f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
  case ACT_RELU6: return fminf(fmaxf(x, 0.f), 6.f);
  case ACT_TANH: return tanhf(x);
  }
  return x;
}

// ---- block-level helpers -----------------------------------------------------
// BSYNC(NT): a barrier over the body's first NT threads. Bodies use it instead
// of __syncthreads so that a padded launch whose blocks are wider than one of
// its bodies can retire the surplus warps at once.
#define BSYNC(NT) asm volatile("bar.sync 0, %0;" ::"n"(NT) : "memory")

__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int linear_block() {
  return (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
}
__device__ __forceinline__ void trace_exit(const Ctl& c, int slot) {
  if (c.trace != 0 && threadIdx.x == 0) c.trace[slot] = globaltimer();
}

// ---- the flag relay -----------------------------------------------------------
// A load of the mapped host flag crosses PCIe (about 1 µs), and such loads
// from many SMs serialise: one per logical block cost a 64k-block
// elementwise kernel 66 ms instead of 0.26 ms on an H200. So blocks read a
// relay word in device memory (L2) instead: the relay holds the last host
// value, the launch epoch and the time it was read (1.024 µs units). When
// the relay is older than FLAG_TTL, the one thread that wins the relay
// lock reads the host word and refreshes it; others go on with the stale
// value meanwhile (it is at most FLAG_TTL + one host read old). Only a
// relay of another launch (another epoch) makes them wait for a fresh
// read. So the GPU reads the host word about once per FLAG_TTL, and a raise
// is seen at most ~FLAG_TTL + 2 host reads after it lands.
#ifndef FLAG_TTL
#define FLAG_TTL 4 // x 1.024 µs
#endif
__device__ __forceinline__ u64 relay_pack(u64 t, int epoch, u32 v) {
  return (t << 13) | ((u64)(epoch & 0xfff) << 1) | (v != 0u ? 1ull : 0ull);
}
__device__ __forceinline__ bool relay_mine(u64 m, int epoch) {
  return ((m >> 1) & 0xfff) == (u64)(epoch & 0xfff) && (m >> 13) != 0;
}
__device__ __forceinline__ bool flag_refresh(const Ctl& c, u64 m) {
  volatile u64* relay = (volatile u64*)(c.counter + 2);
  unsigned* lock = (unsigned*)(c.counter + 4);
  for (;;) {
    if (atomicCAS(lock, 0u, 1u) == 0u) {
      const u32 h = *c.flag;
      *relay = relay_pack(globaltimer() >> 10, c.epoch, h);
      __threadfence();
      atomicExch(lock, 0u);
      return h != 0u;
    }
    if (relay_mine(m, c.epoch)) return (m & 1) != 0; // stale but ours: go on
    __nanosleep(64);
    m = *relay;
    if (relay_mine(m, c.epoch)) return (m & 1) != 0;
  }
}
// flag_raised_from decides with a relay word m loaded earlier (possibly
// prefetched), refreshing the relay when m is stale.
__device__ __forceinline__ bool flag_raised_from(const Ctl& c, u64 m) {
  if (c.counter == 0) return *c.flag != 0u; // no relay: read the host word
  if (relay_mine(m, c.epoch) && (long long)((globaltimer() >> 10) - (m >> 13)) < FLAG_TTL) return (m & 1) != 0;
  return flag_refresh(c, m);
}
__device__ __forceinline__ u64 relay_load(const Ctl& c) {
  return c.counter == 0 ? 0ull : *(volatile u64*)(c.counter + 2);
}
__device__ __forceinline__ bool flag_raised(const Ctl& c) { return flag_raised_from(c, relay_load(c)); }

// ---- the resumable worker loop (Tally's preemptible persistent blocks) -------
// Each round thread 0 decides: if the flag is down it takes a ticket of
// c.chunk logical blocks with atomicAdd(counter[0], chunk) and broadcasts
// it through shared memory. A ticket once taken is always run to its end,
// so every logical block runs exactly once across any number of
// preemptions; counter[0] may pass `logical` (workers that find nothing
// left still add), and a relaunch then finds nothing left. Each worker
// counts the blocks it completed and adds them to counter[1] once, as it
// exits (after a fence); the worker whose add reaches `logical` stores 1 to
// *done after a system-scope fence.
#define RESUMABLE_LOOP(NT, SYNC, C, BODYCALL)                                  \
  do {                                                                         \
    __shared__ int s_lb_[2];                                                   \
    __shared__ int s_completed_;                                               \
    if (threadIdx.x == 0) s_completed_ = 0;                                    \
    for (int it_ = 0;; it_ ^= 1) {                                             \
      if (threadIdx.x == 0) {                                                  \
        int v_ = -1;                                                           \
        if (!flag_raised(C)) v_ = atomicAdd(&(C).counter[0], max((C).chunk, 1)); \
        s_lb_[it_] = v_;                                                       \
      }                                                                        \
      BSYNC(NT);                                                               \
      int lb = s_lb_[it_];                                                     \
      if (lb < 0 || lb >= (C).logical) break;                                  \
      const int end_ = min(lb + max((C).chunk, 1), (C).logical);               \
      if (threadIdx.x == 0) s_completed_ += end_ - lb;                         \
      for (; lb < end_; lb++) {                                                \
        BODYCALL;                                                              \
        if (SYNC) BSYNC(NT);                                                   \
      }                                                                        \
    }                                                                          \
    if (threadIdx.x == 0 && s_completed_ > 0) {                                \
      __threadfence();                                                         \
      const int n_ = s_completed_;                                             \
      if (atomicAdd(&(C).counter[1], n_) + n_ == (C).logical) {                \
        __threadfence_system();                                                \
        *(C).done = 1u;                                                        \
      }                                                                        \
    }                                                                          \
  } while (0)

// FORMS instantiates one body in the plain, reset and resumable forms as
// NAME_plain, NAME_reset and NAME_resumable. BODY(lb, p) is a device
// function using NT threads and dynamic shared memory. SYNC = 1 if the body
// uses shared memory (the resumable loop then puts a barrier between
// consecutive logical blocks of a ticket); bodies without shared memory
// pass 0 so that their warps run through a ticket without waiting. MINB is
// the blocks per SM the register allocation must allow (2 for the GEMM
// bodies: a 128-register cap; full occupancy for the small bodies, so that
// the resumable form keeps as many workers as the plain form has blocks).
//   plain:     lb = c.offset + linearised blockIdx.
//   reset:     thread 0 reads the flag (through the relay when c.counter is
//              set) and the block exits at once if it is raised; else as
//              plain. With c.counter, counter[1] counts completed blocks
//              (a relaxed count, exact once the kernel has finished).
//   resumable: RESUMABLE_LOOP over c.logical logical blocks.
#define FORMS(NAME, P, NT, MINB, SYNC, ...)                                                \
  extern "C" __global__ void __launch_bounds__(NT, MINB) NAME##_plain(Ctl c, P p) { \
    const int lb = c.offset + linear_block();                                  \
    (__VA_ARGS__)(lb, p);                                                      \
    trace_exit(c, linear_block());                                             \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(NT, MINB) NAME##_reset(Ctl c, P p) { \
    __shared__ u32 s_flag_;                                                    \
    if (threadIdx.x == 0) s_flag_ = flag_raised(c) ? 1u : 0u;                  \
    BSYNC(NT);                                                                 \
    if (s_flag_ != 0u) { trace_exit(c, linear_block()); return; }              \
    const int lb = c.offset + linear_block();                                  \
    (__VA_ARGS__)(lb, p);                                                      \
    if (c.counter != 0 && threadIdx.x == 0) atomicAdd(&c.counter[1], 1);       \
    trace_exit(c, linear_block());                                             \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(NT, MINB) NAME##_resumable(Ctl c, P p) { \
    RESUMABLE_LOOP(NT, SYNC, c, (__VA_ARGS__)(lb, p));                               \
    trace_exit(c, linear_block());                                             \
  }

// PADDED instantiates a proxy kernel (REEF's dynamic kernel padding) running
// two bodies in one 1-D launch of hc.logical + (BE workers) blocks of
// max(HNT, BNT) threads: blocks [0, hc.logical) run the HP body with plain
// indexing (lb = hc.offset + blockIdx.x); the rest are resumable workers of
// the BE body driven by bc. Surplus threads of the narrower body exit at once.
#define PADDED(NAME, HP, HNT, HBODY, BP, BNT, BSYNC_, BBODY)                           \
  extern "C" __global__ void NAME(Ctl hc, HP hp, Ctl bc, BP bp) {              \
    if ((int)blockIdx.x < hc.logical) {                                        \
      if (threadIdx.x >= HNT) return;                                          \
      const int lb = hc.offset + (int)blockIdx.x;                              \
      (HBODY)(lb, hp);                                                         \
      trace_exit(hc, blockIdx.x);                                              \
      return;                                                                  \
    }                                                                          \
    if (threadIdx.x >= BNT) return;                                            \
    RESUMABLE_LOOP(BNT, BSYNC_, bc, (BBODY)(lb, bp));                                  \
    trace_exit(bc, blockIdx.x - hc.logical);                                   \
  }
