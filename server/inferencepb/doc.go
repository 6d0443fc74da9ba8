// Package inferencepb is the KServe / Open Inference Protocol v2 gRPC API
// (proto package inference, service GRPCInferenceService): the .proto file
// and the Go code protoc generates from it, committed so that building atoll
// needs no protoc. server/grpc.go serves it over a server.Engine.
//
// It must never hold hand-written logic or be edited by hand: change the
// .proto (keeping upstream's names and field numbers) and regenerate with
// protoc 3.21+, protoc-gen-go v1.36.8 and protoc-gen-go-grpc v1.5.1 on PATH:
//
//	go generate ./server/inferencepb
package inferencepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative grpc_predict_v2.proto
