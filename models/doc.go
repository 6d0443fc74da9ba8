// Package models is atoll's model zoo: real network architectures written
// as the sequence of kernel launches (kernels.Op) one request — or one
// training step — makes, at the architectures' true shapes.
//
// Every model is NHWC and bf16 (fp32 accumulation; fp32 optimizer state in
// training). Images are 224x224x3. Inference models fold batch
// normalisation into the preceding convolution (a per-channel bias fused
// with the activation in the convolution's epilogue), as inference engines
// do; training models keep batch normalisation as separate statistics and
// apply kernels, because batch statistics cannot be folded.
//
// The phase is part of the name: "resnet50" is inference, "resnet50-train"
// one training step (forward, loss, backward, optimizer update). Names lists
// the zoo, Get finds a model and Model.Ops builds its launch sequence for a
// batch size.
//
// Each Layer records the trainable parameters it owns (Params), computed
// from its op's shape (weights K·N or OutC·R·S·C, plus bias; layernorm
// scale and shift; a gather's Vocab·Cols table), except the position and
// token-type tables fused into BERT's embedding add and BN's scale and shift
// on the training apply kernel, which come from the configuration. Backward
// and optimizer ops own none, so Params of a training step counts each
// parameter once.
//
// Dataflow. Model.Graph builds the same layers with the tensors they read
// and write (Layer.In, W, Out; Graph.Tensors with shapes, types and kinds:
// inputs, weights, activations, gradients, optimizer state). Operands maps
// a layer's tensors onto its kernel's operands. Layers whose operands need
// a layout change no kernel of the sequence makes (global average pooling
// over NHWC, attention's per-head views of the fused QKV projection, the
// pooler's [CLS] rows, the optimizer's multi-tensor apply) say so in
// Layer.Glue.
//
// Weights. InitWeights draws every weight from a seed (He for convs,
// Xavier for linears, see its comment); LoadWeights reads a safetensors
// file (ReadSafetensors, WriteSafetensors: BF16, F16, F32, I32) and checks
// it against the graph, naming any missing, unexpected, mis-shaped or
// mis-typed tensor. InitInputs draws images and token ids.
//
// References. Reference runs an inference graph on the CPU in float64,
// rounding every activation to its type between layers as the GPU does,
// using kernels.Reference for layers with a kernel and computing glue and
// cost-only layers itself. tools/torchref/ref.py builds the same networks
// in PyTorch from a weights file's metadata (Model.Arch); the tests compare
// the two. Reduced configurations (NewResNet, NewBERT, NewVGG) keep tests
// fast. Package models/exec executes graphs on a gpu.Device.
//
// This package must never launch, allocate device memory or time anything,
// and must not depend on profiles or the scheduler: it describes models,
// holds weights and computes references on the CPU.
package models
