package hedgehttp

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
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

// BenchmarkIdempotentHeld measures the memory a keyed request takes while
// its handler runs: 32 requests are held in the handler at once, and the
// live heap (after a GC) is compared with the heap before they came. It
// reports B/held, the bytes per held request, and B/held-over-body, that
// less the body; the bodies come from one shared slice, so what is
// counted is the middleware's copy of each body and its own state (a
// server's connection buffers come on top). "declared" bodies carry their
// length; "unknown" ones are read as a stream, whose buffer grows by
// doubling.
func BenchmarkIdempotentHeld(b *testing.B) {
	const held = 32
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, declared := range []bool{true, false} {
			name := fmt.Sprintf("body=%dKiB/length=unknown", size>>10)
			if declared {
				name = fmt.Sprintf("body=%dKiB/length=declared", size>>10)
			}
			b.Run(name, func(b *testing.B) {
				payload := bytes.Repeat([]byte("x"), size)
				var perReq float64
				for i := 0; b.Loop(); i++ {
					perReq += float64(heldBytes(b, held, payload, declared, i)) / held
				}
				perReq /= float64(b.N)
				b.ReportMetric(perReq, "B/held")
				b.ReportMetric(perReq-float64(size), "B/held-over-body")
			})
		}
	}
}

// heldBytes serves n keyed requests carrying payload through a new
// Idempotent, holds them all in the handler, and returns the growth of the
// live heap while they are held.
func heldBytes(b *testing.B, n int, payload []byte, declared bool, round int) uint64 {
	arrived, release := make(chan struct{}, n), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	h, err := NewIdempotent(next, nil, IdempotencyOptions{MaxBuffered: 1 << 30, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			var body io.Reader = bytes.NewReader(payload)
			if !declared {
				body = io.MultiReader(body) // hides the length
			}
			r := httptest.NewRequest(http.MethodPost, "/orders", body)
			r.Header.Set(IdempotencyKeyHeader, "k-"+strconv.Itoa(round)+"-"+strconv.Itoa(i))
			h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
			done <- struct{}{}
		}()
	}
	for range n {
		<-arrived
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := ms.HeapAlloc - before
	close(release)
	for range n {
		<-done
	}
	return grown
}
