// Package kubernetes holds atoll's Kubernetes manifests (a kustomize base:
// kustomization.yaml and the files it lists; examples/ for objects applied
// by hand) and the test that decodes each of them strictly into the Go
// types of the API that serves it — k8s.io/api for the core, apps and batch
// objects, the Prometheus operator's for the ServiceMonitor, KServe's
// v1alpha1 schema for the ClusterServingRuntime — and checks that the
// objects refer to one another correctly. It has no code of its own.
package kubernetes
