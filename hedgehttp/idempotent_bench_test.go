package hedgehttp

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// cleared by the benchmark between requests.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkIdempotent measures what Idempotent adds to a request, side by
// side with the bare handler: requests without a key (the fast path, on a
// no-op handler so that any allocation is the middleware's), a keyed
// request replayed from the MemoryStore, and a keyed request with a new
// key each time (run, then stored), on a handler answering 31 bytes of
// JSON.
func BenchmarkIdempotent(b *testing.B) {
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	fast, err := NewIdempotent(noop, nil, IdempotencyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	answer := []byte(`{"order":42,"status":"created"}`)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(answer)
	})
	ms, err := NewMemoryStore(MemoryStoreOptions{MaxBytes: 8 << 20})
	if err != nil {
		b.Fatal(err)
	}
	idem, err := NewIdempotent(next, ms, IdempotencyOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 64)
	cases := []struct {
		name   string
		h      http.Handler
		method string
		key    func(i int) string // nil: no key
	}{
		{"bare/noop", noop, http.MethodPost, nil},
		{"no key/POST", fast, http.MethodPost, nil},
		{"no key/GET", fast, http.MethodGet, nil},
		{"bare/JSON", next, http.MethodPost, nil},
		{"keyed/replay", idem, http.MethodPost, func(int) string { return "same-key" }},
		{"keyed/new key", idem, http.MethodPost, strconv.Itoa},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rd := bytes.NewReader(body)
			rc := io.NopCloser(rd)
			r := httptest.NewRequest(c.method, "/orders", nil)
			r.Body = rc
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				rd.Reset(body)
				clear(w.h)
				if c.key != nil {
					r.Header[IdempotencyKeyHeader] = []string{c.key(i)}
				}
				c.h.ServeHTTP(w, r)
				i++
			}
		})
	}
}
