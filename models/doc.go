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
// This package must never launch, allocate or time anything, and must not
// depend on profiles or the scheduler: it only describes what a model
// launches. Numerical execution, weights and reference outputs come later.
package models
