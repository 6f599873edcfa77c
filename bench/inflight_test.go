package bench

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cristalhq/hedgedhttp"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
)

// blockingRT holds every request until release is closed or the request's
// context ends, and counts the requests it holds: a base transport whose
// own memory per request is a few words, so that what stays in flight is
// what the hedging layer above it holds.
type blockingRT struct {
	release chan struct{}
	held    atomic.Int64
	arrived chan struct{} // a token per request held
}

func (b *blockingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	b.held.Add(1)
	b.arrived <- struct{}{}
	defer b.held.Add(-1)
	select {
	case <-r.Context().Done():
		return nil, r.Context().Err()
	case <-b.release:
		return &http.Response{
			StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r,
		}, nil
	}
}

// fixedHedger is the lightest hedging RoundTripper there is: the primary
// and, after delay, one hedge, each on a goroutine of its own; the first
// answer wins and the other attempt's context is cancelled. It is the
// floor the libraries are measured against.
type fixedHedger struct {
	base  http.RoundTripper
	delay time.Duration
}

func (f fixedHedger) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	type res struct {
		resp *http.Response
		err  error
	}
	ch := make(chan res, 2)
	send := func() {
		resp, err := f.base.RoundTrip(r.WithContext(ctx))
		ch <- res{resp, err}
	}
	go send()
	t := time.NewTimer(f.delay)
	defer t.Stop()
	select {
	case x := <-ch:
		return x.resp, x.err
	case <-t.C:
	}
	go send()
	x := <-ch
	return x.resp, x.err
}

// inflightDelay is the hedge delay of BenchmarkInflightMemory: short, so
// that every request sends its hedge at once.
const inflightDelay = 100 * time.Microsecond

// inflightLibraries wrap a base transport in each hedging library,
// configured to hedge once after inflightDelay.
var inflightLibraries = []struct {
	name string
	wrap func(b *testing.B, base http.RoundTripper) http.RoundTripper
}{
	{"tailcut", func(b *testing.B, base http.RoundTripper) http.RoundTripper {
		bud, err := budget.NewRatio(1, 1e6, -1) // never denies the hedge
		if err != nil {
			b.Fatal(err)
		}
		p, err := tailcut.New(tailcut.Config{WarmupDelay: inflightDelay, MinSamples: 1 << 30, MaxHedges: 1, Budget: bud})
		if err != nil {
			b.Fatal(err)
		}
		// The base returns when cancelled: the primary runs inline, as
		// over an *http.Transport.
		return hedgehttp.NewTransport(base, p, hedgehttp.WithInlinePrimary(true))
	}},
	{"hedgedhttp", func(b *testing.B, base http.RoundTripper) http.RoundTripper {
		rt, err := hedgedhttp.NewRoundTripper(inflightDelay, 2, base)
		if err != nil {
			b.Fatal(err)
		}
		return rt
	}},
	{"fixed", func(_ *testing.B, base http.RoundTripper) http.RoundTripper {
		return fixedHedger{base: base, delay: inflightDelay}
	}},
}

// inflightRequests is how many requests BenchmarkInflightMemory holds in
// flight at once.
const inflightRequests = 2000

// BenchmarkInflightMemory is the memory a hedged request holds while in
// flight with one hedge, per library: inflightRequests GETs, each from a
// goroutine of its own, held by a base transport (blockingRT) until both
// their attempts are in it; then the growth of the heap and of the
// goroutine stacks in use (runtime.MemStats HeapInuse and StackInuse,
// after a GC) since before the requests, divided by their number. It
// reports heap-B/req, stack-B/req and B/req (their sum); the caller's
// goroutine is counted in every library's. Each iteration is one such
// round; run it with -benchtime Nx and compare the libraries interleaved
// (-count).
//
// The stack figure depends on the size new goroutines start with, which
// the runtime adapts to the average stack in use at the last collection
// (GODEBUG adaptivestackstart, on by default): between rounds, and between
// libraries, it may be 2 or 4 KiB. Run it with
// GODEBUG=adaptivestackstart=0 for figures that compare: every goroutine
// starts at 2 KiB and holds what its frames need, in powers of two.
func BenchmarkInflightMemory(b *testing.B) {
	for _, lib := range inflightLibraries {
		b.Run(lib.name, func(b *testing.B) {
			goroutines := runtime.NumGoroutine()
			var heap, stack float64
			rounds := 0
			for b.Loop() {
				h, s := inflightRound(b, lib.wrap, inflightRequests, goroutines)
				heap += h
				stack += s
				rounds++
			}
			heap /= float64(rounds)
			stack /= float64(rounds)
			b.ReportMetric(heap, "heap-B/req")
			b.ReportMetric(stack, "stack-B/req")
			b.ReportMetric(heap+stack, "B/req")
		})
	}
}

// inflightRound holds n hedged requests in flight through wrap over a
// blockingRT and returns the heap and stack growth per request. It starts
// and ends with at most the given number of goroutines.
func inflightRound(b *testing.B, wrap func(*testing.B, http.RoundTripper) http.RoundTripper, n, goroutines int) (heap, stack float64) {
	base := &blockingRT{release: make(chan struct{}), arrived: make(chan struct{}, 2*n)}
	rt := wrap(b, base)
	req, err := http.NewRequest(http.MethodGet, "http://mem.test/x", nil)
	if err != nil {
		b.Fatal(err)
	}
	// Warm the path once (pools, lazily made state), then measure.
	close(base.release)
	if resp, err := rt.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	base.release = make(chan struct{})
	for len(base.arrived) > 0 {
		<-base.arrived
	}

	settle(b, base, goroutines)
	var before, after runtime.MemStats
	// Two collections empty the sync.Pools (the first moves their objects
	// to a victim cache, the second drops it): a request in flight holds
	// what it takes from a pool as much as what it allocates, and a round
	// must not find last round's objects there, counted before it began.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	for range 2 * n {
		<-base.arrived
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	close(base.release)
	wg.Wait()
	settle(b, base, goroutines)
	heap = (float64(after.HeapInuse) - float64(before.HeapInuse)) / float64(n)
	stack = (float64(after.StackInuse) - float64(before.StackInuse)) / float64(n)
	return heap, stack
}

// settle waits until no request is held by base and no goroutine a round
// started is left (losers end after their caller returns; hedgedhttp's
// pool keeps its goroutines, stacks grown, for 10 s after their last
// task), so that a round measures only what its own requests hold.
func settle(b *testing.B, base *blockingRT, goroutines int) {
	deadline := time.Now().Add(30 * time.Second)
	for base.held.Load() > 0 || runtime.NumGoroutine() > goroutines {
		if time.Now().After(deadline) {
			b.Fatalf("%d requests held, %d goroutines after 30 s", base.held.Load(), runtime.NumGoroutine())
		}
		runtime.Gosched()
	}
}
