# atoll — the two commands a newcomer needs:
#   make demo   build atoll and run the co-location demo (simulated GPU when no GPU is present)
#   make test   vet and run every test with the race detector (what CI runs)

GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# go-nvml's cgo prologue calls NVML functions deprecated in CUDA 13; keep
# builds quiet without hiding other warnings.
export CGO_CFLAGS := $(or $(CGO_CFLAGS),-O2 -g) -Wno-deprecated-declarations
# Go 1.26's vector registers (simd/archsimd) for the CPU reference's GEMM:
# twice as fast on an AVX2 CPU, the same sums bit for bit (kernels/ref_simd_amd64.go);
# a plain `go build` uses the scalar loop.
export GOEXPERIMENT ?= simd

.PHONY: build demo test bench gpu-build gpu-matrix docs replays fuzz clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/atoll ./cmd/atoll

demo: build
	./bin/atoll demo

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

# Benchmarks (speed and memory targets are checked here, never by timed tests).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Binaries for the GPU machine (no Go there): the GPU test binaries and the
# CLI, stripped (the device tool carries at most 64 MiB of working tree and
# binaries together: `tools/gpu/aside.sh size` says how much would travel,
# `out` / `in` set the raw archives no device command reads aside and back).
gpu-build:
	GOOS=linux GOARCH=amd64 $(GO) test -c -o bin/cuda.test ./gpu/cuda
	GOOS=linux GOARCH=amd64 $(GO) test -c -o bin/kernels.test ./kernels
	GOOS=linux GOARCH=amd64 $(GO) build -ldflags "$(LDFLAGS) -s -w" -o bin/atoll ./cmd/atoll

# On the GPU machine (after gpu-build here, bin/ carried): the committed
# GPU matrix, resumable; run again until every cell is done.
# MATRIX_OUT=results/matrix-gpu MATRIX_BUDGET=8m by default (a new directory: cells already in OUT are skipped).
MATRIX_OUT    ?= results/matrix-gpu
MATRIX_BUDGET ?= 8m
gpu-matrix:
	tools/gpu/matrix.sh $(MATRIX_OUT) $(MATRIX_BUDGET)

# The generated tables of README.md, docs/results.md and docs/fidelity.md, from the
# committed matrix runs under results/.
docs: build
	tools/gendocs.sh

# Every committed replay of a GPU series, with this build's simulator
# (after a change to the simulator's model or figures; then make docs).
replays: build
	tools/replays.sh

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./profiles
	$(GO) test -run '^$$' -fuzz FuzzReadTrace -fuzztime 30s ./bench
	$(GO) test -run '^$$' -fuzz FuzzReadReport -fuzztime 30s ./bench

clean:
	rm -rf bin
