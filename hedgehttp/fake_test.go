package hedgehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
)

// fakeRT is an in-memory RoundTripper for tests in a synctest bubble:
// attempt k answers after headers(k) and its body's first byte arrives
// firstByte(k) later; both honour the attempt's context.
type fakeRT struct {
	headers   func(k int) time.Duration
	firstByte func(k int) time.Duration
	status    func(k int) int

	mu     sync.Mutex
	bodies []*fakeBody
	starts []time.Time
}

func (f *fakeRT) RoundTrip(r *http.Request) (*http.Response, error) {
	k, _ := strconv.Atoi(r.Header.Get(AttemptHeader))
	f.mu.Lock()
	f.starts = append(f.starts, time.Now())
	f.mu.Unlock()
	if r.Body != nil {
		r.Body.Close()
	}
	select {
	case <-time.After(f.headers(k)):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	var fb time.Duration
	if f.firstByte != nil {
		fb = f.firstByte(k)
	}
	b := &fakeBody{ctx: r.Context(), r: strings.NewReader("attempt " + strconv.Itoa(k)), wait: fb}
	f.mu.Lock()
	f.bodies = append(f.bodies, b)
	f.mu.Unlock()
	code := 200
	if f.status != nil {
		code = f.status(k)
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{}, Body: b, Request: r, ContentLength: -1}, nil
}

// allClosed reports whether every body handed out has been closed.
func (f *fakeRT) allClosed() (n, open int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.bodies {
		if !b.closed.Load() {
			open++
		}
	}
	return len(f.bodies), open
}

type fakeBody struct {
	ctx    context.Context
	r      *strings.Reader
	wait   time.Duration // before the first byte
	waited bool
	closed atomic.Bool
}

func (b *fakeBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("read on closed body")
	}
	if !b.waited {
		b.waited = true
		select {
		case <-time.After(b.wait):
		case <-b.ctx.Done():
		}
	}
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.r.Read(p)
}

func (b *fakeBody) Close() error { b.closed.Store(true); return nil }

func fakeGet(t *testing.T, tr http.RoundTripper, ctx context.Context) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://fake.test/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

// The schedule, to the nanosecond: the hedge goes at the delay, the first
// answer wins, the winner's context lives until its body is closed, and
// every body is closed in the end — the winner's by the caller, the others
// by the transport.
func TestScheduleInMemory(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name       string
		headers    []time.Duration // per attempt
		firstByte  []time.Duration
		opts       []Option
		wantBody   string
		wantTook   time.Duration
		wantStarts []time.Duration
	}{
		{"primary answers before the delay", []time.Duration{4 * ms, ms}, nil, nil, "attempt 0", 4 * ms, []time.Duration{0}},
		{"hedge wins", []time.Duration{100 * ms, 3 * ms}, nil, nil, "attempt 1", 13 * ms, []time.Duration{0, 10 * ms}},
		{"primary wins after the hedge went", []time.Duration{12 * ms, 5 * ms}, nil, nil, "attempt 0", 12 * ms, []time.Duration{0, 10 * ms}},
		{"both answer at once", []time.Duration{20 * ms, 10 * ms}, nil, nil, "", 20 * ms, []time.Duration{0, 10 * ms}},
		{"first byte: early headers do not win", []time.Duration{ms, ms}, []time.Duration{100 * ms, 2 * ms}, []Option{WithFirstByte()}, "attempt 1", 13 * ms, []time.Duration{0, 10 * ms}},
		{"headers race: early headers win", []time.Duration{ms, ms}, []time.Duration{100 * ms, 2 * ms}, nil, "attempt 0", ms, []time.Duration{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				at := func(d []time.Duration) func(int) time.Duration {
					return func(k int) time.Duration {
						if d == nil {
							return 0
						}
						return d[min(k, len(d)-1)]
					}
				}
				f := &fakeRT{headers: at(tt.headers), firstByte: at(tt.firstByte)}
				tr := NewTransport(f, fixedPolicy(t, 10*ms), tt.opts...)
				t0 := time.Now()
				resp, err := fakeGet(t, tr, t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if took := time.Since(t0); took != tt.wantTook {
					t.Errorf("answer after %v, want %v", took, tt.wantTook)
				}
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("reading the winner's body: %v (its context must live until Close)", err)
				}
				if tt.wantBody != "" && string(b) != tt.wantBody {
					t.Errorf("body %q, want %q", b, tt.wantBody)
				}
				attemptCtx := resp.Request.Context()
				resp.Body.Close()
				if attemptCtx.Err() == nil {
					t.Error("winner's context still alive after Close")
				}
				synctest.Wait()
				f.mu.Lock()
				var starts []time.Duration
				for _, s := range f.starts {
					starts = append(starts, s.Sub(t0))
				}
				f.mu.Unlock()
				if len(starts) != len(tt.wantStarts) {
					t.Fatalf("attempts started at %v, want %v", starts, tt.wantStarts)
				}
				for i := range starts {
					if starts[i] != tt.wantStarts[i] {
						t.Errorf("attempts started at %v, want %v", starts, tt.wantStarts)
						break
					}
				}
				if n, open := f.allClosed(); open != 0 {
					t.Errorf("%d of %d response bodies left open", open, n)
				}
			})
		})
	}
}

// A winner's context is released when its body is read to the end, even if
// the caller forgets to close it.
func TestReleaseAtEOF(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{headers: func(int) time.Duration { return time.Millisecond }}
		tr := NewTransport(f, fixedPolicy(t, 10*time.Millisecond))
		resp, err := fakeGet(t, tr, t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		if resp.Request.Context().Err() == nil {
			t.Error("context alive after EOF")
		}
		resp.Body.Close()
	})
}

// The quantile timeout learns from answered attempts: 3 × p50 of 10 ms
// answers is about 30 ms, and a stalled request fails then.
func TestQuantileTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stallNext := false
		f := &fakeRT{headers: func(int) time.Duration {
			if stallNext {
				return time.Hour
			}
			return 10 * time.Millisecond
		}}
		p, err := tailcut.New(tailcut.Config{MinSamples: 5, MaxHedges: 1})
		if err != nil {
			t.Fatal(err)
		}
		tr := NewTransport(f, p, WithQuantileTimeout(0.5, 3), WithTimeout(time.Second))
		for range 5 {
			resp, err := fakeGet(t, tr, WithoutHedging(t.Context()))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		stallNext = true
		t0 := time.Now()
		_, err = fakeGet(t, tr, t.Context())
		took := time.Since(t0)
		var te *TimeoutError
		if !errors.As(err, &te) {
			t.Fatalf("err = %v, want a TimeoutError", err)
		}
		if te.After < 29*time.Millisecond || te.After > 31*time.Millisecond || took != te.After {
			t.Errorf("timed out after %v with timeout %v, want both ≈ 30ms", took, te.After)
		}
		synctest.Wait()
	})
}

// Before a key has samples, the fixed timeout applies; without one, none.
func TestQuantileTimeoutFallback(t *testing.T) {
	p := fixedPolicy(t, time.Millisecond)
	ts := newTimeouts(p.Config(), 0.99, 3, 0)
	now := time.Unix(1000, 0)
	if d := ts.get("k", now); d != 0 {
		t.Errorf("no samples, no fixed: %v, want 0", d)
	}
	ts = newTimeouts(p.Config(), 0.99, 3, 2*time.Second)
	if d := ts.get("k", now); d != 2*time.Second {
		t.Errorf("no samples: %v, want the fixed 2s", d)
	}
}

// Every attempt failing with a 503: the caller gets the primary's; the
// other is closed.
func TestAllAttemptsFailInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{
			headers: func(k int) time.Duration { return time.Duration(k+1) * time.Millisecond },
			status:  func(int) int { return http.StatusServiceUnavailable },
		}
		tr := NewTransport(f, fixedPolicy(t, time.Hour))
		resp, err := fakeGet(t, tr, t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || string(b) != "attempt 0" {
			t.Errorf("got %d %q, want the primary's 503", resp.StatusCode, b)
		}
		synctest.Wait()
		if n, open := f.allClosed(); n != 2 || open != 0 {
			t.Errorf("%d bodies, %d open; want 2, all closed", n, open)
		}
	})
}

// Invalid options are reported by Err and fail every request.
func TestInvalidOptions(t *testing.T) {
	tests := []struct {
		opt  Option
		want string
	}{
		{WithEndpoints(), "WithEndpoints"},
		{WithEndpoints("10.0.0.1:80"), "WithEndpoints"},
		{WithEndpoints("ftp://x"), "WithEndpoints"},
		{WithEndpoints("http://x/?q=1"), "WithEndpoints"},
		{WithBufferLimit(-1), "WithBufferLimit"},
		{WithLoserGrace(-time.Millisecond), "WithLoserGrace"},
		{WithTimeout(0), "WithTimeout"},
		{WithQuantileTimeout(1, 3), "WithQuantileTimeout"},
		{WithQuantileTimeout(0.99, 0.5), "WithQuantileTimeout"},
		{WithMethods("put"), "WithMethods"},
		{WithKey(nil), "WithKey"},
		{nil, "nil Option"},
	}
	for _, tt := range tests {
		tr := NewTransport(&fakeRT{}, nil, tt.opt)
		if err := tr.Err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Err() = %v, want an error naming %s", err, tt.want)
			continue
		}
		req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		if _, err := tr.RoundTrip(req); err != tr.Err() {
			t.Errorf("RoundTrip err = %v, want %v", err, tr.Err())
		}
		if tr, err := New(&fakeRT{}, nil, tt.opt); tr != nil || err == nil || err.Error() != NewTransport(&fakeRT{}, nil, tt.opt).Err().Error() {
			t.Errorf("New = %v, %v; want no transport and the option's error", tr, err)
		}
	}
	if err := NewTransport(nil, nil, WithEndpoints("http://a:1", "https://b/p"), WithMethods("PUT")).Err(); err != nil {
		t.Errorf("valid options: %v", err)
	}
	if tr, err := New(nil, nil, WithEndpoints("http://a:1", "https://b/p"), WithMethods("PUT")); tr == nil || err != nil {
		t.Errorf("New with valid options = %v, %v", tr, err)
	}
}

// Methods opted in by WithMethods are hedged; others are not.
func TestHedgeable(t *testing.T) {
	tr := NewTransport(&fakeRT{}, nil, WithMethods("PUT"))
	tests := []struct {
		method string
		header string
		want   bool
	}{
		{"", "", true},
		{"GET", "", true},
		{"HEAD", "", true},
		{"OPTIONS", "", true},
		{"PUT", "", true},
		{"POST", "", false},
		{"DELETE", "", false},
		{"POST", "Idempotency-Key", true},
		{"PATCH", "X-Idempotency-Key", true},
		{"GET", "Upgrade", false},
	}
	for _, tt := range tests {
		req := &http.Request{Method: tt.method, Header: http.Header{}}
		if tt.header != "" {
			req.Header.Set(tt.header, "v")
		}
		if got := tr.hedgeable(req); got != tt.want {
			t.Errorf("%q with %q: hedgeable = %v, want %v", tt.method, tt.header, got, tt.want)
		}
	}
}

// spuriousCancelRT fails its first request with context.Canceled although
// the request's context is alive (what net/http can do on a connection
// just reused after a loser's cancellation), then answers.
type spuriousCancelRT struct {
	calls  atomic.Int32
	bodies []string
	mu     sync.Mutex
}

func (f *spuriousCancelRT) RoundTrip(r *http.Request) (*http.Response, error) {
	body := ""
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		body = string(b)
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	if f.calls.Add(1) == 1 {
		return nil, fmt.Errorf("net/http: request canceled: %w", context.Canceled)
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// TestSpuriousCancellationNeverReachesCaller: the attempt is sent once more,
// body intact, and the caller gets the answer.
func TestSpuriousCancellationNeverReachesCaller(t *testing.T) {
	f := &spuriousCancelRT{}
	tr := NewTransport(f, fixedPolicy(t, time.Hour))
	req, _ := http.NewRequest(http.MethodPost, "http://backend.test/x", strings.NewReader("payload"))
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v, want the second try's answer", err)
	}
	resp.Body.Close()
	if f.calls.Load() != 2 || f.bodies[0] != "payload" || f.bodies[1] != "payload" {
		t.Errorf("%d calls with bodies %q, want 2 with the payload each", f.calls.Load(), f.bodies)
	}
}

// TestLateHedgeLeavesTheRequestAlone: once RoundTrip has returned and the
// body is closed, the caller may change its request (the RoundTripper
// contract) while a hedge launched just before the answer may not have
// started yet. Such a hedge must not read the caller's request, header or
// URL any more. Here every primary answers at the very instant its hedge is
// due, so about half the requests launch a hedge that loses at once, and
// the caller rewrites its header and URL as soon as it has the answer. Run
// with -race: a late hedge reading them is reported (and the header map
// written while read is a fatal error).
func TestLateHedgeLeavesTheRequestAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 10 * time.Millisecond
		f := &fakeRT{headers: func(k int) time.Duration { return d }}
		tr := NewTransport(f, fixedPolicy(t, d))
		hedged := 0
		for i := range 200 {
			req, err := http.NewRequest(http.MethodGet, "http://fake.test/x", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Round", strconv.Itoa(i))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			req.Header.Set("X-Round", "reused")
			req.Header.Set("X-Other", "new")
			req.URL.Path = "/reused"
			hedged = int(tr.Policy().Stats().Hedges)
			synctest.Wait()
		}
		if hedged == 0 {
			t.Fatal("no hedge went: the test shows nothing")
		}
		t.Logf("%d hedges in 200 requests", hedged)
	})
}

// TestHedgeCopyAllocatesNothingUnderTheLock: what a hedge does while it
// holds the request's lock — the shallow copy with its own context, the
// URL, the header's entries and values — allocates nothing, so that it
// never assists the garbage collector while the caller's answer waits
// for that lock (roundTrip.settle).
func TestHedgeCopyAllocatesNothingUnderTheLock(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "http://example.com/a?b=c", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain")
	req.Header["X-Many"] = []string{"1", "2", "3"}
	ctx := context.Background()
	r, u := new(http.Request), new(url.URL)
	h := attemptHeader(len(req.Header)+1, 1)
	values := make([]string, valueCount(req.Header))
	allocs := testing.AllocsPerRun(100, func() {
		copyRequest(ctx, req, r, u)
		fillHeader(h, req.Header, values)
	})
	if allocs != 0 {
		t.Errorf("%v allocations under the lock, want 0", allocs)
	}
	r.Header = h
	if r.URL == req.URL || r.URL.String() != req.URL.String() || r.Context() != ctx {
		t.Errorf("copy: URL %v (shared %v), context %v", r.URL, r.URL == req.URL, r.Context())
	}
	if got := r.Header["X-Many"]; len(got) != 3 || got[2] != "3" || r.Header.Get(AttemptHeader) != "1" {
		t.Errorf("copied header %v", r.Header)
	}
}
