package loadgen_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"atoll/bench"
	"atoll/loadgen"
)

// A 100-request Poisson load with a 50ms SLO against a server (here a
// stand-in that answers every request at once).
func ExampleRun() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/models/tiny", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"name":"tiny","platform":"atoll","inputs":[{"name":"x","datatype":"FP32","shape":[-1,8]}]}`)
	})
	mux.HandleFunc("POST /v2/models/tiny/infer", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"model_name":"tiny","outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[0]}]}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c, err := loadgen.NewClient(srv.URL, loadgen.ClientOptions{MaxInFlight: 256, Timeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	span := 500 * time.Millisecond
	times, err := bench.Arrivals(bench.Poisson, 200, span, 1, 0)
	if err != nil {
		panic(err)
	}
	res, err := loadgen.Run(context.Background(), c, loadgen.Config{
		Model: "tiny", Schedule: times, Span: span, MaxInFlight: 256,
		SLO: 50 * time.Millisecond, LateThreshold: 10 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	rep := loadgen.Summarize(res)
	fmt.Println("every request answered:", rep.Total.OK == len(times))
	fmt.Println("errors:", len(rep.Total.Errors), "dropped:", rep.Total.Dropped)
	// Output:
	// every request answered: true
	// errors: 0 dropped: 0
}
