package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoadUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"load"}, "one URL"},
		{[]string{"load", "ftp://x"}, "absolute http"},
		{[]string{"load", "--rate", "10", "--concurrency", "2", "http://x"}, "exclude"},
		{[]string{"load", "--duration", "1s", "--requests", "2", "http://x"}, "exclude"},
		{[]string{"load", "--rate", "0", "http://x"}, "--rate"},
		{[]string{"load", "--concurrency", "-1", "http://x"}, "--concurrency"},
		{[]string{"load", "--hedge", "maybe", "http://x"}, "--hedge"},
		{[]string{"load", "--quantile", "1", "http://x"}, "--quantile"},
		{[]string{"load", "--max-hedges", "5", "http://x"}, "--max-hedges"},
		{[]string{"load", "--budget", "off", "http://x"}, "--budget"},
		{[]string{"load", "-H", "no colon", "http://x"}, "--header"},
		{[]string{"load", "--budget", "0%", "http://x"}, "--budget: must be above 0 and at most 1"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// load against a loopback server with stragglers: both runs, the table, and
// the attempts counted.
func TestLoadTable(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test") != "yes" {
			http.Error(w, "header missing", http.StatusBadRequest)
			return
		}
		if n.Add(1)%10 == 0 {
			select { // a straggler; freed when the hedge wins
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	code, out, errs := runCLI(t, "load", "--concurrency", "4", "--requests", "200", "-H", "X-Test: yes", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"closed loop, 4 clients, 200 requests", "p99.9", "extra load", "hedge rate", "errors", "req/s", "none", "adaptive", "baseline"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if errs != "" {
		t.Errorf("stderr without a terminal: %q", errs)
	}
}

func TestLoadJSON(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method != http.MethodPost {
			t.Errorf("method %s", r.Method)
		}
	}))
	defer srv.Close()
	code, out, errs := runCLI(t, "load", "--rate", "400", "--requests", "100", "--hedge", "off", "--method", "post", "--body", "x", "--json", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Target  string           `json:"target"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if rep.Target != srv.URL || len(rep.Results) != 1 {
		t.Fatalf("report %+v", rep)
	}
	r := rep.Results[0]
	for _, k := range []string{"strategy", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "mean_ms", "extra_load", "hedge_rate", "verdict", "requests", "attempts", "errors", "throughput_rps"} {
		if _, ok := r[k]; !ok {
			t.Errorf("result lacks %q", k)
		}
	}
	if r["strategy"] != "none" || r["requests"] != 100.0 || r["attempts"] != 100.0 || r["errors"] != 0.0 || r["verdict"] != "baseline" {
		t.Errorf("result %v", r)
	}
	if hits.Load() != 100 {
		t.Errorf("server hits %d, want 100", hits.Load())
	}
}

// TestLoadDefaultsToTheLibrarysPolicy: without --quantile, load's adaptive
// run is the library's default policy (the auto delay), not a pinned p95;
// --quantile pins it.
func TestLoadDefaultsToTheLibrarysPolicy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "hedging: auto delay,"},
		{[]string{"--quantile", "0.9"}, "hedging: quantile 0.9,"},
	} {
		args := append([]string{"load", "--concurrency", "2", "--requests", "20", "--hedge", "on"}, c.args...)
		code, out, errs := runCLI(t, append(args, srv.URL)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%v: output lacks %q:\n%s", args, c.want, out)
		}
	}
}

// With --hedge off the header says hedging is off and names no hedging
// setting.
func TestLoadHedgeOffHeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	code, out, errs := runCLI(t, "load", "--concurrency", "2", "--requests", "20", "--hedge", "off", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	header, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(header, "hedging off") {
		t.Errorf("header %q does not say hedging is off", header)
	}
	for _, setting := range []string{"auto delay", "max hedges", "budget"} {
		if strings.Contains(header, setting) {
			t.Errorf("header %q names a hedging setting (%s) of a run without hedging", header, setting)
		}
	}
}

// Against a port nobody listens on every request fails: load says so and
// exits non-zero, instead of a verdict computed from the failures.
func TestLoadAllFailed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/"
	ln.Close()
	for _, mode := range [][]string{{"--concurrency", "2"}, {"--rate", "200"}} {
		args := append(append([]string{"load"}, mode...), "--requests", "20", refused)
		code, out, errs := runCLI(t, args...)
		if code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
		if !strings.Contains(errs, "every one of the 20 requests of the unhedged run") || !strings.Contains(errs, "refused") {
			t.Errorf("%v: stderr %q: want every request failed, and why", args, errs)
		}
		if strings.Contains(out, "FAIL") || strings.Contains(out, "PASS") {
			t.Errorf("%v: a verdict from failures:\n%s", args, out)
		}
	}
}

// --html writes the table, the verdicts and the latency tails.
func TestLoadHTML(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	report := filepath.Join(t.TempDir(), "load.html")
	code, out, errs := runCLI(t, "load", "--concurrency", "2", "--requests", "50", "--html", report, srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "report written to "+report) {
		t.Errorf("output does not name the report:\n%s", out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "Latency tail", "p99 ms", "baseline", srv.URL, "adaptive"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// A run keeps every request's latency only for the --html report: without
// it the histogram alone holds them, whatever the run's length.
func TestLoadKeepsLatenciesOnlyForHTML(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{false, true} {
		p := &loadPlan{target: u, method: http.MethodGet, header: http.Header{}, clients: 2, requests: 20,
			timeout: 10 * time.Second, keepLatencies: keep}
		res, err := p.runOne(context.Background(), "none", func(int) {})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 0, true: 20}[keep]; len(res.lat) != want || res.Requests != 20 {
			t.Errorf("keepLatencies %v: %d latencies kept of %d requests, want %d", keep, len(res.lat), res.Requests, want)
		}
	}
}
