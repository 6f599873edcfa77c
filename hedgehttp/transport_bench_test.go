package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// instantRT answers every request at once from memory: what remains of a
// round trip through it is the cost of the layers above.
type instantRT struct{}

func (instantRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r,
	}, nil
}

// benchRoundTrips sends b.N GETs through rt and reads each body.
func benchRoundTrips(b *testing.B, rt http.RoundTripper, url string) {
	b.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// benchPolicyTransport returns a transport whose delay (1 s) is never
// reached: the no-hedge fast path.
func benchPolicyTransport(b *testing.B, base http.RoundTripper, opts ...Option) *Transport {
	b.Helper()
	p := fixedPolicy(b, time.Second)
	return NewTransport(base, p, opts...)
}

// BenchmarkOverhead is the pure cost of the Transport on the no-hedge path:
// an in-memory base transport, plain versus wrapped. The difference of the
// two is what hedgehttp adds per request (ns/op, allocs/op).
func BenchmarkOverhead(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchRoundTrips(b, instantRT{}, "http://mem.test/x") })
	b.Run("hedgehttp", func(b *testing.B) {
		benchRoundTrips(b, benchPolicyTransport(b, instantRT{}), "http://mem.test/x")
	})
	b.Run("hedgehttp-firstbyte", func(b *testing.B) {
		benchRoundTrips(b, benchPolicyTransport(b, instantRT{}, WithFirstByte()), "http://mem.test/x")
	})
	b.Run("core-Do-only", func(b *testing.B) {
		// The share of tailcut.Hedger.Do (a goroutine, a channel, a timer,
		// a context per attempt): the same policy and base transport called
		// through Do with no request cloning, body wrapping or classifying.
		p := fixedPolicy(b, time.Second)
		h := tailcut.Hedger[*http.Response]{Policy: p}
		req, _ := http.NewRequest(http.MethodGet, "http://mem.test/x", nil)
		call := func(ctx context.Context, a tailcut.Attempt) (*http.Response, error) {
			return instantRT{}.RoundTrip(req)
		}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := h.Do(context.Background(), "mem.test", call)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("hedgehttp-default-policy", func(b *testing.B) {
		// The real policy: the delay is learned (and hedges may go when a
		// round trip is slower than the p95 of the others).
		tr := NewTransport(instantRT{}, nil)
		benchRoundTrips(b, tr, "http://mem.test/x")
		st := tr.Policy().Stats()
		b.ReportMetric(float64(st.Hedges)/float64(max(st.Requests, 1)), "hedges/op")
	})
}

// BenchmarkLoopback compares the plain http.Transport with the Transport on
// its no-hedge path over a real loopback HTTP/1.1 connection.
func BenchmarkLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	b.Run("plain", func(b *testing.B) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		benchRoundTrips(b, tr, srv.URL)
	})
	b.Run("hedgehttp", func(b *testing.B) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		benchRoundTrips(b, benchPolicyTransport(b, tr), srv.URL)
	})
}
