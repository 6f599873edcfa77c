package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cristalhq/hedgedhttp"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

// instantRT answers every request at once from memory, so that what a
// benchmark through it measures is the cost of the layers above.
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

// hedgeDelay is far above any round trip here: every benchmark measures the
// no-hedge path.
const hedgeDelay = time.Second

// libraries wrap a base transport in each hedging library, configured to
// hedge once after hedgeDelay.
var libraries = []struct {
	name string
	wrap func(b *testing.B, base http.RoundTripper) http.RoundTripper
}{
	{"plain", func(_ *testing.B, base http.RoundTripper) http.RoundTripper { return base }},
	{"tailcut", func(b *testing.B, base http.RoundTripper) http.RoundTripper {
		p, err := tailcut.New(tailcut.Config{WarmupDelay: hedgeDelay, MinSamples: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		// Both bases (instantRT, an *http.Transport) return when
		// cancelled: the primary runs inline, as over an *http.Transport.
		return hedgehttp.NewTransport(base, p, hedgehttp.WithInlinePrimary(true))
	}},
	{"hedgedhttp", func(b *testing.B, base http.RoundTripper) http.RoundTripper {
		rt, err := hedgedhttp.NewRoundTripper(hedgeDelay, 2, base)
		if err != nil {
			b.Fatal(err)
		}
		return rt
	}},
	{"failsafe-go", func(_ *testing.B, base http.RoundTripper) http.RoundTripper {
		return failsafehttp.NewRoundTripper(base, hedgepolicy.NewWithDelay[*http.Response](hedgeDelay))
	}},
}

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

// BenchmarkOverhead is each library's own cost per request on the no-hedge
// path: an in-memory base transport answers at once. Subtract "plain".
func BenchmarkOverhead(b *testing.B) {
	for _, lib := range libraries {
		b.Run(lib.name, func(b *testing.B) {
			benchRoundTrips(b, lib.wrap(b, instantRT{}), "http://mem.test/x")
		})
	}
}

// BenchmarkLoopback is the same over a real loopback HTTP/1.1 connection.
func BenchmarkLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	for _, lib := range libraries {
		b.Run(lib.name, func(b *testing.B) {
			base := http.DefaultTransport.(*http.Transport).Clone()
			defer base.CloseIdleConnections()
			benchRoundTrips(b, lib.wrap(b, base), srv.URL)
		})
	}
}
