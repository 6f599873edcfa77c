package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

type okRT struct{}

func (okRT) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

func TestDefaultFeatures(t *testing.T) {
	r, _ := http.NewRequest(http.MethodPost, "http://h/x", strings.NewReader(strings.Repeat("a", 5000)))
	f := DefaultFeatures(r)
	if got := strings.Join(f.Labels(), "|"); got != "POST|size:<16KiB" {
		t.Errorf("labels %q", got)
	}
	r, _ = http.NewRequest(http.MethodGet, "http://h/x", nil)
	f = DefaultFeatures(r)
	if got := strings.Join(f.Labels(), "|"); got != "GET|size:0" {
		t.Errorf("labels %q", got)
	}
}

// A predictive policy's requests begin with the transport's labels,
// followed by the context's; WithFeatures replaces the default.
func TestTransportFeatures(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{Predictive: true})
	if err != nil {
		t.Fatal(err)
	}
	route := func(*http.Request) tailcut.Features { return tailcut.Features{}.With("GET /items/{id}") }
	for _, tr := range []*Transport{NewTransport(okRT{}, p), NewTransport(okRT{}, p, WithFeatures(route))} {
		ctx := tailcut.WithFeatures(context.Background(), tailcut.Features{}.With("tenant:a"))
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://h/items/7", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := map[string]bool{}
	for _, b := range p.Buckets("h", time.Now()) {
		got[strings.Join(b.Labels, "|")] = true
	}
	if !got["GET|size:0|tenant:a"] || !got["GET /items/{id}|tenant:a"] || len(got) != 2 {
		t.Errorf("buckets %v", got)
	}
	if err := NewTransport(okRT{}, p, WithFeatures(nil)).Err(); err == nil {
		t.Error("WithFeatures(nil) accepted")
	}
}
