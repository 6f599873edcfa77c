package hedgehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

// The one-line drop-in: an http.Client whose requests are hedged under the
// default policy (hedge after the p95 of the last 30 s per host, at most
// 10 % extra load).
func ExampleNewTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, attempt %s", r.Header.Get(hedgehttp.AttemptHeader))
	}))
	defer srv.Close()

	client := &http.Client{Transport: hedgehttp.NewTransport(nil, nil)}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(string(b))
	// Output: hello, attempt 0
}

// A transport for a replicated, streaming service: one policy shared by the
// whole client, the latency signal at the first body byte, attempts spread
// over two replicas, hedging per route, PUT opted in, and a hard timeout of
// 3 × the p99.9 (5 s until it is known).
func ExampleNewTransport_options() {
	policy, err := tailcut.New(tailcut.Config{Quantile: 0.95, MaxDelay: 200 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	tr := hedgehttp.NewTransport(http.DefaultTransport, policy,
		hedgehttp.WithFirstByte(),
		hedgehttp.WithEndpoints("http://10.0.0.7:8080", "http://10.0.0.8:8080"),
		hedgehttp.WithKey(hedgehttp.RouteKey),
		hedgehttp.WithMethods(http.MethodPut),
		hedgehttp.WithQuantileTimeout(0.999, 3),
		hedgehttp.WithTimeout(5*time.Second),
	)
	if err := tr.Err(); err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr}
	_ = client
	fmt.Println(hedgehttp.NewTransport(nil, nil, hedgehttp.WithEndpoints("10.0.0.9")).Err())
	// Output: hedgehttp: WithEndpoints: endpoint "10.0.0.9" is not an absolute http or https URL
}

// New returns a bad option's error at construction, where NewTransport
// would return a transport that fails every request with it.
func ExampleNew() {
	tr, err := hedgehttp.New(nil, nil, hedgehttp.WithKey(hedgehttp.RouteKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr}
	_ = client

	_, err = hedgehttp.New(nil, nil, hedgehttp.WithEndpoints("10.0.0.9"))
	fmt.Println(err)
	// Output: hedgehttp: WithEndpoints: endpoint "10.0.0.9" is not an absolute http or https URL
}

// Per-request overrides ride in the request's context.
func ExampleWithoutHedging() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	client := &http.Client{Transport: hedgehttp.NewTransport(nil, nil)}

	// This report is expensive to compute twice: never hedge it.
	req, _ := http.NewRequestWithContext(hedgehttp.WithoutHedging(context.Background()), http.MethodGet, srv.URL+"/report", nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()

	// This lookup is cheap: hedge it after 2 ms whatever the policy says.
	req, _ = http.NewRequestWithContext(hedgehttp.WithDelay(context.Background(), 2*time.Millisecond), http.MethodGet, srv.URL+"/lookup", nil)
	resp, err = client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output: 200 OK
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Sun, 29 Nov 2026 20:00:30 GMT", "later"} {
		d, ok := hedgehttp.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 0s false
}

// The one-line client's policy, for its statistics or an exporter
// (reg.MustRegister(hedgeprom.NewCollector(hedgehttp.PolicyOf(client),
// hedgeprom.Options{}))), without a type assertion.
func ExamplePolicyOf() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	client := &http.Client{Transport: hedgehttp.NewTransport(nil, nil)}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	s := hedgehttp.PolicyOf(client).Stats()
	fmt.Println("requests:", s.Requests, "hedges:", s.Hedges)
	fmt.Println("plain client:", hedgehttp.PolicyOf(&http.Client{}) == nil)
	// Output:
	// requests: 3 hedges: 0
	// plain client: true
}
