package hedgehttp

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkHandler measures what the Handler adds to a request that is not
// shed: the no-op handler alone, then behind a Handler with limits.
func BenchmarkHandler(b *testing.B) {
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h, err := NewHandler(noop, HandlerOptions{HedgeLimit: 1 << 20, HardLimit: 1 << 21})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", noop}, {"Handler", h}} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set(AttemptHeader, "1")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(w, r)
			}
		})
	}
}
