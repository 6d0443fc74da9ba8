// Package loadgen is atoll's open-loop load generator: it drives a running
// inference daemon over the KServe / Open Inference Protocol v2 REST API
// the way MLPerf LoadGen's server scenario does, and reports latency
// percentiles, SLO attainment, goodput and errors.
//
// Usage:
//
//	c, err := loadgen.NewClient("http://127.0.0.1:8000", loadgen.ClientOptions{MaxInFlight: 256})
//	...
//	defer c.Close()
//	times, _ := bench.Arrivals(bench.Poisson, 200, 30*time.Second, 1, 0)
//	res, err := loadgen.Run(ctx, c, loadgen.Config{Model: "resnet50", Schedule: times, ...})
//	rep := loadgen.Summarize(res)
//
// Tensor data goes as the binary tensor data extension by default
// (Config.Data, DataBinary): each distinct body is encoded once, and the
// sender writes the prepared bytes with only the request id spliced in.
// DataJSON sends JSON numbers, which cost milliseconds per large tensor on
// both ends.
//
// Open loop: every request is sent at its scheduled time whether or not the
// earlier ones have finished, and its latency is its completion time minus
// its SCHEDULED send time, so a generator that falls behind counts against
// the system, never for it. The generator never silently turns into a closed
// loop: when MaxInFlight requests are outstanding a due request is dropped
// and counted as dropped; when it sends a request later than LateThreshold
// after its scheduled time it records that and the report says the run is
// invalid.
//
// What it must never do: send to anything but the URL it was given (the
// command defaults to loopback), run without a bound on duration, requests
// or in-flight count, leave goroutines or connections behind when Run
// returns and Close is called, or report a made-up number: a metric with no
// samples is absent.
package loadgen
