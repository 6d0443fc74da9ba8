package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"atoll/gpu"
)

// colWorkspace is the patch workspace (im2col) each stream and each graph
// that runs a convolution gets. A pass is cut into steps whose patches fit.
const colWorkspace = 64 << 20

// convSource gathers patches (im2col) and sums patch gradients back into
// an input gradient (col2im). Elements are 16-bit (bf16 or f16); the
// gather copies bits, the scatter sums in f32.
const convSource = `
typedef unsigned short u16;

__device__ __forceinline__ float to_f32(u16 u, int bf) {
	if (bf) return __uint_as_float(((unsigned)u) << 16);
	float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(u)); return f;
}
__device__ __forceinline__ u16 from_f32(float f, int bf) {
	if (bf) {
		unsigned b = __float_as_uint(f);
		if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)0x7fc0;
		b += 0x7fffu + ((b >> 16) & 1u);
		return (u16)(b >> 16);
	}
	u16 u; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(u) : "f"(f)); return u;
}

// col[row*ld + (t - t0)*C + c] = X[n][oh*st - pad + r][ow*st - pad + s][c]
// for output pixels p0 + row (p = (n*OH + oh)*OW + ow) and taps t = r*S + s
// in [t0, t0 + taps); zero in the padding. A warp (threadIdx.x) copies a
// row, V channels a thread; threadIdx.y and the grid stride over rows.
template <int V>
__device__ void gather(const u16 *__restrict__ x, u16 *__restrict__ col, int p0, int rows, int ld,
		int H, int W, int C, int OH, int OW, int S, int st, int pad, int t0, int taps) {
	const int cv = C / V, per = taps * cv;
	for (int row = blockIdx.x * blockDim.y + threadIdx.y; row < rows; row += gridDim.x * blockDim.y) {
		int p = p0 + row, ow = p % OW, q = p / OW, oh = q % OH, n = q / OH;
		int h0 = oh * st - pad, w0 = ow * st - pad;
		const u16 *xn = x + (long long)n * H * W * C;
		u16 *dst = col + (long long)row * ld;
		for (int j = threadIdx.x; j < per; j += blockDim.x) {
			int tl = j / cv, c = (j - tl * cv) * V;
			int t = t0 + tl, r = t / S, ih = h0 + r, iw = w0 + (t - r * S);
			bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
			const u16 *src = xn + ((long long)ih * W + iw) * C + c;
			if (V == 8) {
				uint4 v = make_uint4(0, 0, 0, 0);
				if (in) v = *(const uint4 *)src;
				*(uint4 *)(dst + tl * C + c) = v;
			} else {
				dst[tl * C + c] = in ? *src : (u16)0;
			}
		}
	}
}

extern "C" __global__ void atoll_im2col8(const u16 *x, u16 *col, int p0, int rows, int ld,
		int H, int W, int C, int OH, int OW, int S, int st, int pad, int t0, int taps) {
	gather<8>(x, col, p0, rows, ld, H, W, C, OH, OW, S, st, pad, t0, taps);
}
extern "C" __global__ void atoll_im2col1(const u16 *x, u16 *col, int p0, int rows, int ld,
		int H, int W, int C, int OH, int OW, int S, int st, int pad, int t0, int taps) {
	gather<1>(x, col, p0, rows, ld, H, W, C, OH, OW, S, st, pad, t0, taps);
}

// As gather, for rows of R·S·C elements, not a multiple of 8: a row is
// padded with zeros to ld (a multiple of 8) and a thread writes 8 elements
// (16 bytes). Element e = (r·S + s)·C + c of a row is input element
// (h0 + r, w0 + s, c): the S·C elements of a filter row are consecutive in
// the input, so a thread walks them without dividing.
extern "C" __global__ void atoll_im2colp(const u16 *__restrict__ x, u16 *__restrict__ col, int p0, int rows, int ld,
		int H, int W, int C, int OH, int OW, int S, int st, int pad, int t0, int taps) {
	const int vecs = ld / 8, SC = S * C, end = (t0 + taps) * C;
	const long long total = (long long)rows * vecs, rowC = (long long)W * C;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
		int row = (int)(i / vecs), j0 = (int)(i - (long long)row * vecs) * 8;
		int p = p0 + row, ow = p % OW, q = p / OW, oh = q % OH, n = q / OH;
		int h0 = oh * st - pad, w0 = ow * st - pad;
		// Within a filter row, elements [kl, kh) are inside the input.
		const int kl = max(0, -w0) * C, kh = min(S, W - w0) * C;
		const long long base = (long long)n * H * rowC + (long long)w0 * C;
		int e = t0 * C + j0, r = e / SC, k = e - r * SC;
		uint4 v;
		u16 *u = (u16 *)&v;
		#pragma unroll
		for (int m = 0; m < 8; m++) {
			int ih = h0 + r;
			u[m] = e < end && ih >= 0 && ih < H && k >= kl && k < kh ? x[base + ih * rowC + k] : (u16)0;
			e++;
			if (++k == SC) { k = 0; r++; }
		}
		*(uint4 *)(col + (long long)row * ld + j0) = v;
	}
}

// dst[r][j] = src[r][j] for the k rows of src, zero for rows k..kp-1 (n
// elements a row): a filter padded to a product's K.
extern "C" __global__ void atoll_padrows(const u16 *__restrict__ src, u16 *__restrict__ dst, int k, int kp, int n) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kp * n; i += gridDim.x * blockDim.x)
		dst[i] = i < k * n ? src[i] : (u16)0;
}

// The first k rows of each of nb batches of kp rows (u elements of 16 bits
// a row) of src, packed into dst: a padded product's result without its
// padding.
extern "C" __global__ void atoll_unpadrows(const u16 *__restrict__ src, u16 *__restrict__ dst, int nb, int k, int kp, int u) {
	const long long per = (long long)k * u, total = nb * per;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
		long long b = i / per;
		dst[i] = src[b * kp * u + (i - b * per)];
	}
}

// dX[n][h][w][c] = sum over the taps (r, s) that read (h, w) of
// dcol[(n*OH + oh)*OW + ow][(r*S + s)*C + c], in tap order, for the imgs
// images whose patch gradients dcol holds.
template <int V>
__device__ void scatter(const u16 *__restrict__ dcol, u16 *__restrict__ dx, int imgs,
		int H, int W, int C, int OH, int OW, int R, int S, int st, int pad, int bf) {
	const int cv = C / V, total = imgs * H * W * cv, rsc = R * S * C;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
		int pix = i / cv, c = (i - pix * cv) * V;
		int w = pix % W, q = pix / W, h = q % H, n = q / H;
		float acc[V];
		#pragma unroll
		for (int k = 0; k < V; k++) acc[k] = 0.f;
		for (int r = 0; r < R; r++) {
			int y = h + pad - r;
			if (y < 0 || y % st != 0 || y / st >= OH) continue;
			for (int s = 0; s < S; s++) {
				int xx = w + pad - s;
				if (xx < 0 || xx % st != 0 || xx / st >= OW) continue;
				const u16 *src = dcol + (((long long)n * OH + y / st) * OW + xx / st) * rsc + (r * S + s) * C + c;
				if (V == 8) {
					uint4 v = *(const uint4 *)src;
					const u16 *e = (const u16 *)&v;
					#pragma unroll
					for (int k = 0; k < V; k++) acc[k] += to_f32(e[k], bf);
				} else {
					acc[0] += to_f32(*src, bf);
				}
			}
		}
		u16 *dst = dx + (long long)pix * C + c;
		if (V == 8) {
			uint4 v;
			u16 *e = (u16 *)&v;
			#pragma unroll
			for (int k = 0; k < V; k++) e[k] = from_f32(acc[k], bf);
			*(uint4 *)dst = v;
		} else {
			*dst = from_f32(acc[0], bf);
		}
	}
}

extern "C" __global__ void atoll_col2im8(const u16 *dcol, u16 *dx, int imgs,
		int H, int W, int C, int OH, int OW, int R, int S, int st, int pad, int bf) {
	scatter<8>(dcol, dx, imgs, H, W, C, OH, OW, R, S, st, pad, bf);
}
extern "C" __global__ void atoll_col2im1(const u16 *dcol, u16 *dx, int imgs,
		int H, int W, int C, int OH, int OW, int R, int S, int st, int pad, int bf) {
	scatter<1>(dcol, dx, imgs, H, W, C, OH, OW, R, S, st, pad, bf);
}
`

// convStep is one step of a convolution pass run as products: gather the
// patches of output pixels [row0, row0+rows) and taps [tap0, tap0+taps)
// into the workspace, ld elements a row, then the product m (forward,
// filter); or the product into the workspace, then the scatter of images
// [img0, img0+imgs) (data).
type convStep struct {
	row0, rows int
	tap0, taps int
	ld         int
	img0, imgs int
	m          gpu.Matmul
	// Byte offsets into the pass's operands: the product's A (data: dY),
	// B (filter: dY) and D and C (forward, filter; data: dX, where the
	// scatter writes).
	aOff, bOff, dOff int64
	// Padded steps (R·S·C not a multiple of 8, whose products would run
	// on slow kernels): rows of kp elements, zeros past R·S·C. Forward: the
	// product's B is the filter copied to the workspace's start with kp
	// rows (before the first step). Filter: the product writes nb batches
	// of kp rows to the workspace's start, whose first R·S·C rows are then
	// copied to D. colOff is where the patches start in the workspace.
	kp, nb int
	colOff int64
}

// planConv cuts c into steps whose patches take at most colBytes: a
// forward pass by output pixels, a filter pass by taps (every split's
// partial sums in one batched product), a data pass by whole images.
// Gathered rows are padded to 8 elements (16 bytes), which the products'
// fast paths need. Where R·S·C is not a multiple of 8 (first layers: 3
// channels), the products are padded too (cuBLASLt picks kernels several
// times slower for such a K or M): forward steps multiply by a padded copy
// of the filter, filter steps take all taps for whole splits and leave the
// padding rows of their product in the workspace. A pass one of whose
// smallest steps does not fit is refused (errors.ErrUnsupported).
func planConv(c gpu.Conv, colBytes int64) ([]convStep, error) {
	const es = 2 // bytes of a 16-bit element
	oh, ow := c.Out()
	rsc := c.R * c.S * c.C
	pix := c.N * oh * ow
	var steps []convStep
	switch c.Pass {
	case gpu.ConvForward:
		ld := pad8(rsc)
		var kp int
		var colOff int64
		if ld != rsc {
			kp, colOff = ld, align256(int64(ld*c.OutC*es))
			colBytes -= colOff
		}
		rows := int(colBytes / int64(ld*es))
		if rows >= 128 {
			rows &^= 127
		}
		if rows < 1 {
			return nil, fmt.Errorf("%w: cuda: conv %s: one pixel's patch exceeds the %d MiB workspace", errors.ErrUnsupported, c, colBytes>>20)
		}
		for r0 := 0; r0 < pix; r0 += rows {
			n := min(rows, pix-r0)
			off := int64(r0) * int64(c.OutC) * es
			m := gpu.Matmul{M: n, N: c.OutC, K: rsc, LdA: lda(ld, rsc), In: c.In, Out: c.In, Bias: c.Bias, BiasType: c.BiasType, Act: c.Act, Accumulate: c.Accumulate}
			if kp > 0 {
				m.K, m.LdA = kp, 0
			}
			steps = append(steps, convStep{row0: r0, rows: n, taps: c.R * c.S, ld: ld, dOff: off, kp: kp, colOff: colOff, m: m})
		}
	case gpu.ConvData:
		per := int64(oh*ow) * int64(rsc) * es
		imgs := int(colBytes / per)
		if imgs < 1 {
			return nil, fmt.Errorf("%w: cuda: conv %s: one image's patch gradients (%d MiB) exceed the %d MiB workspace", errors.ErrUnsupported, c, per>>20, colBytes>>20)
		}
		for i0 := 0; i0 < c.N; i0 += imgs {
			n := min(imgs, c.N-i0)
			steps = append(steps, convStep{img0: i0, imgs: n,
				aOff: int64(i0*oh*ow) * int64(c.OutC) * es, dOff: int64(i0*c.H*c.W) * int64(c.C) * es,
				m: gpu.Matmul{M: n * oh * ow, N: rsc, K: c.OutC, TransB: true, In: c.In, Out: c.In}})
		}
	case gpu.ConvFilter:
		splits := max(c.Split, 1)
		rows := pix / splits
		outEs := int64(es)
		if c.OutType() == gpu.F32 {
			outEs = 4
		}
		if padded := planFilterPadded(c, colBytes, rows, splits, outEs); padded != nil {
			return padded, nil
		}
		taps := 0
		for taps < c.R*c.S && int64(pix)*int64(pad8((taps+1)*c.C))*es <= colBytes {
			taps++
		}
		if taps < 1 {
			return nil, fmt.Errorf("%w: cuda: conv %s: one tap's patches (%d MiB) exceed the %d MiB workspace", errors.ErrUnsupported, c, int64(pix)*int64(pad8(c.C))*es>>20, colBytes>>20)
		}
		for t0 := 0; t0 < c.R*c.S; t0 += taps {
			n := min(taps, c.R*c.S-t0)
			ld := pad8(n * c.C)
			m := gpu.Matmul{M: n * c.C, N: c.OutC, K: rows, TransA: true, LdA: lda(ld, n*c.C), In: c.In, Out: c.OutType()}
			if splits > 1 {
				m.Batch, m.StrideA, m.StrideB, m.StrideD = splits, int64(rows)*int64(ld), int64(rows)*int64(c.OutC), int64(rsc)*int64(c.OutC)
			}
			steps = append(steps, convStep{rows: pix, tap0: t0, taps: n, ld: ld,
				dOff: int64(t0*c.C) * int64(c.OutC) * outEs, m: m})
		}
	default:
		return nil, c.Check()
	}
	return steps, nil
}

// planFilterPadded plans a filter pass whose R·S·C is not a multiple of 8:
// every tap at once, rows padded to kp, in steps of whole splits (rows
// pixels each), each step's products (kp rows a split, outEs bytes an
// element) at the workspace's start and its patches after them. Nil when
// R·S·C needs no padding or one split does not fit.
func planFilterPadded(c gpu.Conv, colBytes int64, rows, splits int, outEs int64) []convStep {
	const es = 2
	rsc := c.R * c.S * c.C
	kp := pad8(rsc)
	if kp == rsc {
		return nil
	}
	scratch, patches := int64(kp*c.OutC)*outEs, int64(rows)*int64(kp)*es
	// Less than 256 bytes of the workspace go to aligning the patches.
	nb := min(int((colBytes-255)/(scratch+patches)), splits)
	if nb < 1 {
		return nil
	}
	colOff := align256(int64(nb) * scratch)
	var steps []convStep
	for s0 := 0; s0 < splits; s0 += nb {
		k := min(nb, splits-s0)
		m := gpu.Matmul{M: kp, N: c.OutC, K: rows, TransA: true, In: c.In, Out: c.OutType()}
		if k > 1 {
			m.Batch, m.StrideA, m.StrideB, m.StrideD = k, int64(rows)*int64(kp), int64(rows)*int64(c.OutC), int64(kp)*int64(c.OutC)
		}
		steps = append(steps, convStep{row0: s0 * rows, rows: k * rows, taps: c.R * c.S, ld: kp, kp: kp, nb: k, colOff: colOff,
			bOff: int64(s0*rows) * int64(c.OutC) * es, dOff: int64(s0) * int64(rsc) * int64(c.OutC) * outEs, m: m})
	}
	return steps
}

// align256 is n rounded up to a multiple of 256.
func align256(n int64) int64 { return (n + 255) &^ 255 }

// pad8 is n rounded up to a multiple of 8.
func pad8(n int) int { return (n + 7) &^ 7 }

// lda is a Matmul's LdA for rows of ld elements holding n: 0 when packed.
func lda(ld, n int) int {
	if ld == n {
		return 0
	}
	return ld
}

// convRec is what a launch of a Conv Func needs: its steps, each with the
// product's plan, and the gather and scatter kernels.
type convRec struct {
	c      gpu.Conv
	steps  []convStep
	mms    []*matmulRec // per step
	k8, k1 gpu.Func     // gather (forward, filter) or scatter (data), 8 channels a thread or 1
	kp     gpu.Func     // the padded steps' gather
	pad    gpu.Func     // a filter padded to kp rows (padded forward steps)
	unpad  gpu.Func     // a padded product's rows copied to D (padded filter steps)
}

// Conv implements gpu.BLAS: the pass's steps (planConv within
// colWorkspace), a cuBLASLt plan for each distinct product, and the gather
// and scatter kernels (compiled on the first convolution). The same c
// gives the same Func.
func (d *Device) Conv(c gpu.Conv) (gpu.Func, error) {
	if err := d.live(); err != nil {
		return 0, err
	}
	if err := c.Check(); err != nil {
		return 0, err
	}
	b, err := d.blas()
	if err != nil {
		return 0, err
	}
	if f, ok := b.convs[c]; ok {
		return f, nil
	}
	steps, err := planConv(c, colWorkspace)
	if err != nil {
		return 0, err
	}
	r := &convRec{c: c, steps: steps}
	for _, s := range steps {
		f, err := d.Matmul(s.m)
		if err != nil {
			return 0, fmt.Errorf("conv %s: %w", c, err)
		}
		r.mms = append(r.mms, d.funcs[f].matmul)
	}
	if err := d.convKernels(b); err != nil {
		return 0, err
	}
	r.k8, r.k1, r.kp, r.pad, r.unpad = b.im2col8, b.im2col1, b.im2colp, b.padrows, b.unpadrows
	if c.Pass == gpu.ConvData {
		r.k8, r.k1 = b.col2im8, b.col2im1
	}
	d.funcs = append(d.funcs, funcRec{name: "cublasLt conv " + c.String(), mod: -1, maxThreads: 1024, paramBytes: gpu.MatmulArgBytes, conv: r})
	f := gpu.Func(len(d.funcs) - 1)
	b.convs[c] = f
	return f, nil
}

// convKernels loads the gather and scatter kernels once.
func (d *Device) convKernels(b *blasState) error {
	if b.im2col8 != 0 {
		return nil
	}
	m, err := d.LoadModule(gpu.ModuleSource{Name: "atoll-conv", CUDA: convSource})
	if err != nil {
		return fmt.Errorf("cuda: the convolution's gather kernels: %w", err)
	}
	for _, k := range []struct {
		f    *gpu.Func
		name string
	}{{&b.im2col8, "atoll_im2col8"}, {&b.im2col1, "atoll_im2col1"}, {&b.col2im8, "atoll_col2im8"}, {&b.col2im1, "atoll_col2im1"},
		{&b.im2colp, "atoll_im2colp"}, {&b.padrows, "atoll_padrows"}, {&b.unpadrows, "atoll_unpadrows"}} {
		if *k.f, err = m.Function(k.name); err != nil {
			return err
		}
	}
	return nil
}

// launchConv enqueues r's steps on stream sh of context c with the launch's
// operands: for each step the gather and the product, or the product and
// the scatter, through the stream's patch workspace (a graph's is its stream's).
func (d *Device) launchConv(c int32, sh uintptr, ws *workspace, r *convRec, l *gpu.Launch) error {
	args := l.Args.Bytes()
	if len(args) != gpu.MatmulArgBytes {
		return fmt.Errorf("%w: cuda: %q: a conv launch packs %d bytes of operands (gpu.MatmulArgs: %d)", gpu.ErrInvalidLaunch, l.Name, len(args), gpu.MatmulArgBytes)
	}
	p := func(i int) gpu.Ptr { return gpu.Ptr(*(*uint64)(unsafe.Pointer(&args[8*i]))) }
	A, B, D, bias, C := p(0), p(1), p(2), p(3), p(4)
	cv := r.c
	if A == 0 || B == 0 || D == 0 || (cv.Bias && bias == 0) || (cv.Accumulate && C == 0) {
		return fmt.Errorf("%w: cuda: %q: a null operand (A %#x B %#x D %#x bias %#x C %#x)", gpu.ErrInvalidLaunch, l.Name, A, B, D, bias, C)
	}
	if C == 0 {
		C = D
	}
	blasWS, err := d.blasWS(&ws.blas)
	if err != nil {
		return err
	}
	col, err := d.colWS(&ws.col)
	if err != nil {
		return err
	}
	oh, ow := cv.Out()
	st := int32(max(cv.Stride, 1))
	// Eight channels a thread where every access is 16 bytes aligned.
	k, v := r.k1, 1
	if cv.C%8 == 0 && (A|D)%16 == 0 {
		k, v = r.k8, 8
	}
	var kl gpu.Launch
	kl.Form = gpu.Plain
	// gather: a warp a row, 8 rows a block (padded steps: a thread 8
	// elements); scatter: a thread a vector.
	gather := func(s convStep) error {
		kl.Name, kl.Func = "atoll conv gather", k
		kl.Block, kl.Grid = gpu.Dim3{X: 32, Y: 8, Z: 1}, gpu.D1(max(1, min((s.rows+7)/8, 1<<20)))
		if s.kp > 0 {
			kl.Func = r.kp
			kl.Block, kl.Grid = gpu.D1(256), gpu.D1(max(1, min((s.rows*s.ld/8+255)/256, 1<<20)))
		}
		return d.launchOn(c, sh, ws, &kl)
	}
	// rows launches f over n elements with the packed arguments.
	rows := func(name string, f gpu.Func, n int) error {
		kl.Name, kl.Func = name, f
		kl.Block, kl.Grid = gpu.D1(256), gpu.D1(max(1, min((n+255)/256, 1<<20)))
		return d.launchOn(c, sh, ws, &kl)
	}
	outU16 := 1 // 16-bit words of one element of the filter pass's D
	if cv.OutType() == gpu.F32 {
		outU16 = 2
	}
	rsc := cv.R * cv.S * cv.C
	for i, s := range r.steps {
		mm := r.mms[i]
		switch cv.Pass {
		case gpu.ConvForward, gpu.ConvFilter:
			front, patches := col, col+gpu.Ptr(s.colOff)
			if i == 0 && s.kp > 0 && cv.Pass == gpu.ConvForward {
				kl.Args.Reset()
				kl.Args.Ptr(B).Ptr(front).I32(int32(rsc)).I32(int32(s.kp)).I32(int32(cv.OutC))
				if err := rows("atoll conv filter padding", r.pad, s.kp*cv.OutC); err != nil {
					return err
				}
			}
			kl.Args.Reset()
			kl.Args.Ptr(A).Ptr(patches).I32(int32(s.row0)).I32(int32(s.rows)).I32(int32(s.ld)).
				I32(int32(cv.H)).I32(int32(cv.W)).I32(int32(cv.C)).I32(int32(oh)).I32(int32(ow)).
				I32(int32(cv.S)).I32(st).I32(int32(cv.Pad)).I32(int32(s.tap0)).I32(int32(s.taps))
			if err := gather(s); err != nil {
				return err
			}
			switch {
			case cv.Pass == gpu.ConvForward:
				w := B
				if s.kp > 0 {
					w = front // the padded filter
				}
				err = d.matmulOn(c, sh, blasWS, mm, patches, w, D+gpu.Ptr(s.dOff), bias, C+gpu.Ptr(s.dOff), l.Name)
			case s.kp > 0:
				if err = d.matmulOn(c, sh, blasWS, mm, patches, B+gpu.Ptr(s.bOff), front, 0, front, l.Name); err != nil {
					return err
				}
				kl.Args.Reset()
				kl.Args.Ptr(front).Ptr(D + gpu.Ptr(s.dOff)).I32(int32(s.nb)).I32(int32(rsc)).I32(int32(s.kp)).I32(int32(cv.OutC * outU16))
				err = rows("atoll conv unpadding", r.unpad, s.nb*rsc*cv.OutC*outU16)
			default:
				err = d.matmulOn(c, sh, blasWS, mm, patches, B+gpu.Ptr(s.bOff), D+gpu.Ptr(s.dOff), 0, D+gpu.Ptr(s.dOff), l.Name)
			}
			if err != nil {
				return err
			}
		case gpu.ConvData:
			if err := d.matmulOn(c, sh, blasWS, mm, A+gpu.Ptr(s.aOff), B, col, 0, col, l.Name); err != nil {
				return err
			}
			bf := int32(0)
			if cv.In == gpu.BF16 {
				bf = 1
			}
			kl.Args.Reset()
			kl.Args.Ptr(col).Ptr(D + gpu.Ptr(s.dOff)).I32(int32(s.imgs)).
				I32(int32(cv.H)).I32(int32(cv.W)).I32(int32(cv.C)).I32(int32(oh)).I32(int32(ow)).
				I32(int32(cv.R)).I32(int32(cv.S)).I32(st).I32(int32(cv.Pad)).I32(bf)
			if err := rows("atoll conv scatter", k, s.imgs*cv.H*cv.W*cv.C/v); err != nil {
				return err
			}
		}
	}
	return nil
}

// colWS returns the patch workspace at *ws, allocating it on first use.
func (d *Device) colWS(ws *gpu.Ptr) (gpu.Ptr, error) {
	return d.lazyAlloc(ws, colWorkspace, "convolution")
}

// workspace is the memory a stream's vendor products use (and those of the graphs made for it):
// cuBLASLt's, and the convolutions' patches. Each is made on first use.
type workspace struct{ blas, col gpu.Ptr }

// free releases w's memory.
func (d *Device) freeWorkspace(w *workspace) error {
	var err error
	for _, p := range []*gpu.Ptr{&w.blas, &w.col} {
		if *p != 0 {
			if ferr := d.Free(*p); err == nil {
				err = ferr
			}
			*p = 0
		}
	}
	return err
}
