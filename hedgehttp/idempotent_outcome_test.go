package hedgehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// A handler that marks its outcome unknown never lets its key run again:
// its 5xx answer is stored and replayed, and a run that panics or ends
// without a word after the mark leaves a 502 "Outcome unknown" for the
// copies. Without the mark a 5xx still frees the key.
func TestIdempotentOutcomeUnknown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		status int    // the copies' answer
		title  string // its problem's title, if the middleware wrote it
	}{
		{"5xx after the mark", func(w http.ResponseWriter, r *http.Request) {
			MarkOutcomeUnknown(r.Context())
			http.Error(w, "upstream timed out", http.StatusGatewayTimeout)
		}, http.StatusGatewayTimeout, ""},
		{"panic after the mark", func(w http.ResponseWriter, r *http.Request) {
			MarkOutcomeUnknown(r.Context())
			w.WriteHeader(http.StatusCreated)
			panic(http.ErrAbortHandler)
		}, http.StatusBadGateway, "Outcome unknown"},
		{"nothing written after the mark, client gone", func(w http.ResponseWriter, r *http.Request) {
			MarkOutcomeUnknown(r.Context())
			<-r.Context().Done()
		}, http.StatusBadGateway, "Outcome unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			h := newIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tc.answer(w, r)
			}), nil, IdempotencyOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			first := keyed(ctx, "/pay", "k", "10 EUR")
			cancelled := strings.Contains(tc.name, "client gone")
			if cancelled {
				cancel()
			}
			func() {
				defer func() {
					if p := recover(); p != nil && !errors.Is(p.(error), http.ErrAbortHandler) {
						panic(p)
					}
				}()
				serve(h, first)
			}()
			cancel()
			for i := range 3 {
				w := serve(h, keyed(context.Background(), "/pay", "k", "10 EUR"))
				if w.Code != tc.status || w.Header().Get(ReplayedHeader) != "true" {
					t.Fatalf("copy %d: %d (replayed %q), want %d replayed", i, w.Code, w.Header().Get(ReplayedHeader), tc.status)
				}
				if tc.title != "" {
					if title, _ := problemOf(t, w); title != tc.title {
						t.Errorf("copy %d: problem %q, want %q", i, title, tc.title)
					}
				}
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
			if st := h.Stats(); st.Unknown != 1 {
				t.Errorf("Stats().Unknown = %d, want 1", st.Unknown)
			}
		})
	}
	t.Run("no mark: a 5xx frees the key", func(t *testing.T) {
		var runs atomic.Int64
		h := newIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}), nil, IdempotencyOptions{})
		serve(h, keyed(context.Background(), "/pay", "k", "x"))
		serve(h, keyed(context.Background(), "/pay", "k", "x"))
		if n := runs.Load(); n != 2 || h.Stats().Unknown != 0 {
			t.Errorf("runs %d, unknown %d; want 2 and 0", n, h.Stats().Unknown)
		}
	})
	if MarkOutcomeUnknown(context.Background()) {
		t.Error("MarkOutcomeUnknown outside a run reported true")
	}
}

// goneWriter is a ResponseWriter whose client went away: every write
// fails.
type goneWriter struct{ h http.Header }

func (g *goneWriter) Header() http.Header       { return g.h }
func (g *goneWriter) WriteHeader(int)           {}
func (g *goneWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// A handler that stops at its first failed write (as httputil.ReverseProxy
// does) still finishes the answer its copies get when its client went
// away: the writes to the gone client succeed while the answer is kept.
func TestIdempotentStoresAnswerOfGoneClient(t *testing.T) {
	var runs atomic.Int64
	h := newIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		for i := range 3 {
			if _, err := fmt.Fprintf(w, "part %d;", i); err != nil {
				return // as ReverseProxy: give up at a failed write
			}
		}
	}), nil, IdempotencyOptions{})
	h.ServeHTTP(&goneWriter{h: http.Header{}}, keyed(context.Background(), "/o", "k", "b"))
	w := serve(h, keyed(context.Background(), "/o", "k", "b"))
	if w.Code != http.StatusCreated || w.Body.String() != "part 0;part 1;part 2;" || runs.Load() != 1 {
		t.Errorf("copy got %d %q, runs %d; want the whole 201 replayed, 1 run", w.Code, w.Body, runs.Load())
	}
}

// MaxBuffered bounds the keyed bodies held at once: past it a keyed
// request gets 503 with Retry-After and is neither read nor run; once the
// bodies held are let go, the next one is served.
func TestIdempotentMaxBuffered(t *testing.T) {
	if _, err := NewIdempotent(http.NotFoundHandler(), nil, IdempotencyOptions{MaxBody: 2048, MaxBuffered: 1024}); err == nil ||
		!strings.Contains(err.Error(), "MaxBuffered") {
		t.Errorf("MaxBuffered below MaxBody: err %v, want one naming MaxBuffered", err)
	}
	arrived, gate := make(chan struct{}, 4), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-gate
		w.WriteHeader(http.StatusCreated)
	})
	h := newIdem(t, next, nil, IdempotencyOptions{MaxBody: 1024, MaxBuffered: 2048})
	body := strings.Repeat("x", 1024)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range 2 {
		wg.Go(func() { codes[i] = serve(h, keyed(context.Background(), "/o", fmt.Sprint("held-", i), body)).Code })
		<-arrived
	}
	w := serve(h, keyed(context.Background(), "/o", "third", "y"))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || h.Stats().Overloaded != 1 {
		t.Errorf("third keyed body with 2 KiB held: %d (Retry-After %q, overloaded %d), want 503 with Retry-After",
			w.Code, w.Header().Get("Retry-After"), h.Stats().Overloaded)
	}
	// A body of unknown length is counted as it grows.
	r := keyed(context.Background(), "/o", "chunked", "z")
	r.ContentLength = -1
	if w := serve(h, r); w.Code != http.StatusServiceUnavailable {
		t.Errorf("a body of unknown length with 2 KiB held: %d, want 503", w.Code)
	}
	close(gate)
	wg.Wait()
	if codes[0] != http.StatusCreated || codes[1] != http.StatusCreated {
		t.Errorf("held requests answered %v, want 201s", codes)
	}
	if w := serve(h, keyed(context.Background(), "/o", "after", "y")); w.Code != http.StatusCreated {
		t.Errorf("after the bodies were let go: %d, want 201", w.Code)
	}
	if n := h.buffered.Load(); n != 0 {
		t.Errorf("%d bytes still counted as held", n)
	}
}
