package server

// Test shorthands over the daemon's decoders (the handler calls
// parseInferJSON and parseInferBinaryRaw).

// parseInfer turns a body into an InferRequest for model info, with the
// class from the priority mapping. On an error, req is nil and id and
// class are what could be read before it ("" if nothing).
func parseInfer(body []byte, info ModelInfo, prio PriorityConfig) (*InferRequest, string, Class, error) {
	req, _, id, class, err := parseInferJSON(body, info, prio)
	return req, id, class, err
}

// parseInferSlow is parseInfer through encoding/json alone: the reference
// the fast path is checked against, and the path that words every error.
func parseInferSlow(body []byte, info ModelInfo, prio PriorityConfig) (*InferRequest, string, Class, error) {
	rj, err := decodeInfer(body)
	if err != nil {
		return nil, "", "", err
	}
	return buildInfer(rj, nil, info, prio)
}

// parseInferBinary parses a request in the binary extension's form: the
// JSON part (strictly, as decodeInfer does), then each binary input's
// bytes, which must add up to exactly the bytes after the JSON part. Every
// input is decoded to Data.
func parseInferBinary(body []byte, header string, info ModelInfo, prio PriorityConfig) (*InferRequest, outputModes, string, Class, error) {
	return parseInferBinaryRaw(body, header, info, prio, false)
}
