package hedgedhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tailcut/tailcut/hedgehttp/hedgedhttp"
)

// A program written for github.com/cristalhq/hedgedhttp, with only its
// import changed: a client that sends a hedge after 1 s, up to 3 attempts
// in all.
func ExampleNewClient() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	client, stats, err := hedgedhttp.NewClientAndStats(time.Second, 3, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	fmt.Println("requests:", stats.RequestedRoundTrips(), "attempts:", stats.ActualRoundTrips())
	// Output:
	// hello
	// requests: 1 attempts: 1
}

// The settings of Loki's hedging (at: 250ms, up_to: 3, max_per_second: 5)
// and of Thanos' or Cortex's (up_to, quantile: 0.9) in tailcut's terms. The
// Config's tailcut fields turn the fixed delay into a minimum (Adaptive),
// pin it to a quantile, and cap the hedges per second on top of the
// budget.
func ExampleNew() {
	loki, err := hedgedhttp.New(hedgedhttp.Config{Upto: 3, Delay: 250 * time.Millisecond, MaxPerSecond: 5})
	if err != nil {
		panic(err)
	}
	c := loki.Policy().Config()
	fmt.Println("loki: hedges", c.MaxHedges, "delay", c.MinDelay, "to", c.MaxDelay)

	thanos, err := hedgedhttp.New(hedgedhttp.Config{Upto: 3, Adaptive: true, Quantile: 0.9})
	if err != nil {
		panic(err)
	}
	c = thanos.Policy().Config()
	fmt.Printf("thanos: hedges %d delay the p%g of each host's latency\n", c.MaxHedges, c.Quantile*100)
	// Output:
	// loki: hedges 2 delay 250ms to 250ms
	// thanos: hedges 2 delay the p90 of each host's latency
}

// routed sends first attempts and hedges through transports of their own.
type routed struct{ first, hedges http.RoundTripper }

func (t routed) RoundTrip(r *http.Request) (*http.Response, error) {
	if hedgedhttp.IsHedgedRequest(r) {
		return t.hedges.RoundTrip(r)
	}
	return t.first.RoundTrip(r)
}

// IsHedgedRequest tells a hedge from a first attempt in the transport
// under the hedged one (here, to send hedges over connections of their
// own) and on the server.
func ExampleIsHedgedRequest() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hedgedhttp.IsHedgedRequest(r) {
			<-r.Context().Done() // the first attempt straggles until cancelled
			return
		}
		io.WriteString(w, "answered by a hedge")
	}))
	defer srv.Close()

	hedges := &http.Transport{}
	defer hedges.CloseIdleConnections()
	rt, err := hedgedhttp.NewRoundTripper(10*time.Millisecond, 2, routed{first: http.DefaultTransport, hedges: hedges})
	if err != nil {
		panic(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output: answered by a hedge
}
