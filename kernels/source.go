package kernels

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed cuda/common.cuh cuda/gemm.cu cuda/misc.cu cuda/attention.cu cuda/train.cu cuda/bert_train.cu
var cudaFS embed.FS

func mustRead(name string) string {
	b, err := cudaFS.ReadFile("cuda/" + name)
	if err != nil {
		panic("kernels: embedded source missing: " + name) // a build defect, not a run-time condition
	}
	return string(b)
}

var (
	srcCommon = mustRead("common.cuh")
	srcFamily = map[string]string{"gemm": mustRead("gemm.cu"), "misc": mustRead("misc.cu"), "attn": mustRead("attention.cu"),
		"train": mustRead("train.cu"), "bert": mustRead("bert_train.cu")}
	// familyDeps are the families a family's source builds on (included
	// before it, once per module).
	familyDeps = map[string][]string{"attn": {"gemm"}, "train": {"misc"}, "bert": {"misc"}}
)

// Kernel function names of the forms. Every module also holds WatchFunc.
func formFunc(kernel, form string) string { return kernel + "_" + form }

// PaddedFunc is the name of the padded pair kernel of an HP and a BE kernel.
func PaddedFunc(hp, be string) string { return "pad_" + hp + "__" + be }

// WatchFunc is a one-thread kernel that spins until a flag is raised and
// stores %globaltimer (ns) when it sees it: the GPU-clock time of a host's
// flag raise, for preemption-latency measurements.
const WatchFunc = "atoll_flag_watch"

const watchSrc = `
extern "C" __global__ void atoll_flag_watch(const volatile u32* flag, u64* seen, u64* start) {
  if (start) *start = globaltimer();
  while (*flag == 0u) { }
  *seen = globaltimer();
}
`

// minBlocks is the blocks per SM the kernel's register allocation must
// allow: 2 for the GEMM family (128 registers for 256 threads) and the
// strided GEMM (attn: 128 threads, up to 255 registers); for the rest full
// occupancy (2048 threads per SM, 32 registers a thread) unless the
// Geometry asks for more registers a thread (kernels that hold a tile per
// thread and would otherwise spill to local memory).
func (k *kspec) minBlocks() int {
	if k.family == "gemm" || k.family == "attn" {
		return 2
	}
	return max(1, min(2048/k.threads, 65536/(k.threads*max(k.regs, 32)), 32))
}

func (k *kspec) syncFlag() int {
	if k.noSync {
		return 0
	}
	return 1
}

func bodyWrapper(k *kspec) string {
	return fmt.Sprintf("__device__ __forceinline__ void B_%s(int lb, const %s& p) { %s(lb, p); }\n", k.name, k.param, k.body)
}

func header(families ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#define GEMM_BK %d\n#define GEMM_STAGES %d\n", gemmBK, gemmStages)
	b.WriteString(srcCommon)
	seen := map[string]bool{}
	var add func(f string)
	add = func(f string) {
		if seen[f] {
			return
		}
		seen[f] = true
		for _, d := range familyDeps[f] {
			add(d)
		}
		b.WriteString("\n// ---- " + f + " ----\n")
		b.WriteString(srcFamily[f])
	}
	for _, f := range families {
		add(f)
	}
	b.WriteString(watchSrc)
	return b.String()
}

// moduleSource is the CUDA source of one kernel's module: the shared header,
// its family's bodies and the plain, reset and resumable instantiations.
func moduleSource(k *kspec) string {
	var b strings.Builder
	b.WriteString(header(k.family))
	b.WriteString("\n// ---- instantiation ----\n")
	b.WriteString(bodyWrapper(k))
	fmt.Fprintf(&b, "FORMS(%s, %s, %d, %d, %d, B_%s)\n", k.name, k.param, k.threads, k.minBlocks(), k.syncFlag(), k.name)
	return b.String()
}

// pairSource is the CUDA source of a padded pair's module: both bodies and
// the pair kernel. (The BE kernel's standalone forms live in its own module.)
func pairSource(hp, be *kspec) string {
	var b strings.Builder
	b.WriteString(header(hp.family, be.family))
	b.WriteString("\n// ---- instantiation ----\n")
	b.WriteString(bodyWrapper(hp))
	if be.name != hp.name {
		b.WriteString(bodyWrapper(be))
	}
	fmt.Fprintf(&b, "PADDED(%s, %s, %d, B_%s, %s, %d, %d, B_%s)\n", PaddedFunc(hp.name, be.name),
		hp.param, hp.threads, hp.name, be.param, be.threads, be.syncFlag(), be.name)
	return b.String()
}

// Source returns the CUDA source of op's module (for inspection and offline
// compilation, e.g. with nvcc or CuPy).
func Source(op Op) (string, error) {
	k, err := spec(op)
	if err != nil {
		return "", err
	}
	return moduleSource(k), nil
}

// PairSource returns the CUDA source of the padded pair (hp, be).
func PairSource(hp, be Op) (string, error) {
	h, err := spec(hp)
	if err != nil {
		return "", err
	}
	b, err := spec(be)
	if err != nil {
		return "", err
	}
	return pairSource(h, b), nil
}
