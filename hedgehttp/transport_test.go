package hedgehttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// A straggling primary is overtaken by its hedge: the caller gets the
// hedge's answer long before the primary's would have come, the primary is
// cancelled on the server, and the policy counts the hedge's wins.
func TestStragglerHedgeWins(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			var h hits
			var arrived, cancelled atomic.Int64
			srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := h.add(r)
				if r.URL.Query().Get("slow") == "1" && k == 0 {
					arrived.Add(1)
					stall(r)
					if r.Context().Err() != nil {
						cancelled.Add(1)
					}
					return
				}
				fmt.Fprintf(w, "attempt %d, proto %d", k, r.ProtoMajor)
			}))
			p := fixedPolicy(t, 20*time.Millisecond)
			c := &http.Client{Transport: NewTransport(tr, p)}
			const n, slow = 40, 4
			var worst time.Duration
			for i := range n {
				url := srv.URL + "/x"
				if i%(n/slow) == 0 {
					url += "?slow=1"
				}
				start := time.Now()
				code, body := get(t, c, t.Context(), url)
				took := time.Since(start)
				if code != 200 {
					t.Fatalf("request %d: status %d", i, code)
				}
				if want := fmt.Sprintf("proto %d", map[bool]int{false: 1, true: 2}[proto.h2]); !strings.HasSuffix(body, want) {
					t.Fatalf("request %d: body %q, want a reply over %s", i, body, want)
				}
				if strings.Contains(url, "slow") {
					if body[:9] != "attempt 1" {
						t.Errorf("slow request %d answered by %q, want the hedge", i, body)
					}
					worst = max(worst, took)
				}
			}
			// The stalled primaries would have taken 20 s; the hedges
			// answered after about the 20 ms delay.
			if worst > 10*time.Second {
				t.Errorf("slowest straggler took %v: the hedge did not win", worst)
			}
			st := p.Stats()
			if st.Wins[1] < slow {
				t.Errorf("hedge wins = %d, want ≥ %d", st.Wins[1], slow)
			}
			if st.Requests != n {
				t.Errorf("requests = %d, want %d", st.Requests, n)
			}
			c.CloseIdleConnections()
			// Every stalled primary that reached the server sees its
			// cancellation. (On a busy machine a primary still dialling
			// when its hedge wins never arrives.)
			waitFor(t, "stalled primaries to see their cancellation", func() bool {
				n := arrived.Load()
				return n > 0 && cancelled.Load() == n
			})
		})
	}
}

// waitFor waits (bounded) until cond holds, checking whenever the runtime
// has let other goroutines run: for conditions a server-side goroutine
// brings about after the client has its answer.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition, not pacing the test
	}
}

// A POST with an Idempotency-Key is hedged, and every attempt receives the
// same bytes — whether the body is replayed through GetBody or buffered.
func TestIdempotentPostBodyReplayed(t *testing.T) {
	payload := bytes.Repeat([]byte("tailcut-"), 4096) // 32 KiB, under the buffer limit
	bodies := map[string]func() io.Reader{
		"GetBody":  func() io.Reader { return bytes.NewReader(payload) },
		"buffered": func() io.Reader { return io.MultiReader(bytes.NewReader(payload)) }, // no GetBody
	}
	for _, proto := range protocols {
		for name, mk := range bodies {
			t.Run(proto.name+"/"+name, func(t *testing.T) {
				var mu sync.Mutex
				got := map[int][]byte{}
				primaryRead := make(chan struct{})
				srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, err := io.ReadAll(r.Body)
					if err != nil {
						t.Errorf("server: reading body: %v", err)
					}
					k := attemptOf(r)
					mu.Lock()
					got[k] = b
					mu.Unlock()
					if k == 0 {
						close(primaryRead)
						stall(r)
						return
					}
					<-primaryRead // answer only once the primary has its body
					io.WriteString(w, "ok")
				}))
				c := &http.Client{Transport: NewTransport(tr, fixedPolicy(t, 10*time.Millisecond))}
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, mk())
				req.Header.Set("Idempotency-Key", "k-1")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(got) != 2 {
					t.Fatalf("server saw attempts %v, want 0 and 1", keys(got))
				}
				for k, b := range got {
					if !bytes.Equal(b, payload) {
						t.Errorf("attempt %d received %d bytes (sha %x), want the %d-byte payload", k, len(b), sha256.Sum256(b), len(payload))
					}
				}
			})
		}
	}
}

func keys[V any](m map[int]V) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// Requests that are not safe to repeat go once, untouched: a POST without
// an Idempotency-Key, and an idempotent request whose body is too long to
// buffer and cannot be replayed (its body arrives intact).
func TestUnsafeRequestsSentOnce(t *testing.T) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	want := sha256.Sum256(big)
	tests := []struct {
		name   string
		method string
		header string
		body   func() io.Reader
		length int64 // ContentLength to set; 0 = leave it to NewRequest
	}{
		{"POST without Idempotency-Key", http.MethodPost, "", func() io.Reader { return bytes.NewReader(big) }, 0},
		{"PATCH without Idempotency-Key", http.MethodPatch, "", func() io.Reader { return bytes.NewReader(big) }, 0},
		{"1 MiB body without GetBody, length unknown", http.MethodPost, "key-2", func() io.Reader { return io.MultiReader(bytes.NewReader(big)) }, -1},
		{"1 MiB body without GetBody, length known", http.MethodPut, "key-3", func() io.Reader { return io.MultiReader(bytes.NewReader(big)) }, int64(len(big))},
	}
	for _, proto := range protocols {
		for _, tt := range tests {
			t.Run(proto.name+"/"+tt.name, func(t *testing.T) {
				var h hits
				var gotSum [32]byte
				var gotLen int
				srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					h.add(r)
					b, _ := io.ReadAll(r.Body)
					gotSum, gotLen = sha256.Sum256(b), len(b)
					// Slow enough that a hedge, were it allowed, would go.
					time.Sleep(60 * time.Millisecond)
					io.WriteString(w, "done")
				}))
				p := fixedPolicy(t, 5*time.Millisecond)
				c := &http.Client{Transport: NewTransport(tr, p)}
				req, _ := http.NewRequestWithContext(t.Context(), tt.method, srv.URL, tt.body())
				if tt.length != 0 {
					req.ContentLength = tt.length
				}
				if tt.header != "" {
					req.Header.Set("Idempotency-Key", tt.header)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if got := h.total(); got != 1 {
					t.Errorf("server hits = %d, want 1", got)
				}
				if h.get(-1) != 1 {
					t.Errorf("the request carried a %s header; an unhedged request goes untouched", AttemptHeader)
				}
				if gotLen != len(big) || gotSum != want {
					t.Errorf("server received %d bytes (sha %x), want the 1 MiB body intact", gotLen, gotSum[:4])
				}
				if st := p.Stats(); st.Requests != 0 {
					t.Errorf("policy counted %d requests; requests that cannot be hedged bypass it", st.Requests)
				}
			})
		}
	}
}

// The caller's request is never modified, and every attempt carries its
// own Hedge-Attempt value.
func TestAttemptHeaderAndRequestUntouched(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]http.Header{}
	// The hedge answers once the primary has reached the server: on a
	// busy machine a primary still dialling when its hedge won would
	// never arrive.
	primaryIn := make(chan struct{})
	srv, tr := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := attemptOf(r)
		mu.Lock()
		seen[k] = r.Header.Clone()
		mu.Unlock()
		if k == 0 {
			close(primaryIn)
			stall(r)
			return
		}
		select {
		case <-primaryIn:
			io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}))
	c := &http.Client{Transport: NewTransport(tr, fixedPolicy(t, 5*time.Millisecond))}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	req.Header.Set("X-Trace", "abc")
	req.Header.Set(AttemptHeader, "7") // a caller's own value is replaced on the wire
	before := req.Header.Clone()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if fmt.Sprint(req.Header) != fmt.Sprint(before) {
		t.Errorf("request header changed: %v, was %v", req.Header, before)
	}
	mu.Lock()
	defer mu.Unlock()
	for k := 0; k <= 1; k++ {
		h, ok := seen[k]
		if !ok {
			t.Fatalf("attempt %d not seen; seen %v", k, keys(seen))
		}
		if got := h.Values(AttemptHeader); len(got) != 1 || got[0] != fmt.Sprint(k) {
			t.Errorf("attempt %d: %s = %q", k, AttemptHeader, got)
		}
		if h.Get("X-Trace") != "abc" {
			t.Errorf("attempt %d lost the caller's header", k)
		}
	}
}

// A 429 with Retry-After pauses hedges for its key, primaries still go, and
// hedging resumes once the pause is over.
func TestPushbackPausesHedges(t *testing.T) {
	for _, form := range []string{"delay-seconds", "HTTP-date"} {
		t.Run(form, func(t *testing.T) {
			var h hits
			srv, tr := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.add(r)
				if r.URL.Path == "/busy" {
					if form == "delay-seconds" {
						w.Header().Set("Retry-After", "30")
					} else {
						w.Header().Set("Retry-After", time.Now().Add(31*time.Second).UTC().Format(http.TimeFormat))
					}
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				time.Sleep(30 * time.Millisecond) // slower than the delay
			}))
			p := fixedPolicy(t, 2*time.Millisecond)
			c := &http.Client{Transport: NewTransport(tr, p)}
			// Not hedged: a hedge of /busy sent before the 429 arrives
			// (the delay is 2 ms) would reach the server during the pause
			// (about 1 run in 10 under -race on a loaded machine).
			if code, _ := get(t, c, tailcut.WithoutHedging(t.Context()), srv.URL+"/busy"); code != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429 passed to the caller", code)
			}
			before := h.total()
			const n = 5
			for range n {
				get(t, c, t.Context(), srv.URL+"/slow")
			}
			if got := h.total() - before; got != n {
				t.Errorf("server hits during the pause = %d, want %d (no hedges)", got, n)
			}
			st := p.Stats()
			if st.Denied[tailcut.DenyPushback] < n {
				t.Errorf("pushback denials = %d, want ≥ %d", st.Denied[tailcut.DenyPushback], n)
			}
			// The pause lasts about 30 s: over at +40 s, in force at +20 s.
			key := srv.Listener.Addr().String()
			now := time.Now()
			r := p.Begin(key, now.Add(20*time.Second))
			if d := p.Hedge(&r, now.Add(20*time.Second)); d != tailcut.DenyPushback {
				t.Errorf("hedge 20 s later: %v, want pushback", d)
			}
			r = p.Begin(key, now.Add(40*time.Second))
			if d := p.Hedge(&r, now.Add(40*time.Second)); d != tailcut.Send {
				t.Errorf("hedge 40 s later: %v, want send", d)
			}
		})
	}
}

// 502/503/504 are not final: the next attempt goes at once, without waiting
// for the delay. When every attempt gets one, the caller receives the
// primary's response, body intact.
func TestRetryableStatus(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			var h hits
			srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := h.add(r)
				switch {
				case r.URL.Path == "/flaky" && k == 0:
					http.Error(w, "primary unavailable", http.StatusServiceUnavailable)
				case r.URL.Path == "/down":
					w.WriteHeader([]int{http.StatusBadGateway, http.StatusGatewayTimeout}[min(k, 1)])
					fmt.Fprintf(w, "down, attempt %d", k)
				default:
					fmt.Fprintf(w, "fine, attempt %d", k)
				}
			}))
			p := fixedPolicy(t, time.Hour) // only a failure can bring a hedge on
			c := &http.Client{Transport: NewTransport(tr, p)}
			code, body := get(t, c, t.Context(), srv.URL+"/flaky")
			if code != 200 || body != "fine, attempt 1" {
				t.Errorf("flaky: %d %q, want 200 from attempt 1", code, body)
			}
			code, body = get(t, c, t.Context(), srv.URL+"/down")
			if code != http.StatusBadGateway || body != "down, attempt 0" {
				t.Errorf("down: %d %q, want the primary's 502 and its body", code, body)
			}
			if got := h.total(); got != 4 {
				t.Errorf("server hits = %d, want 4", got)
			}
		})
	}
}

// A 503 with Retry-After both pauses hedging and is not retried: the
// caller gets the 503 from the single attempt.
func TestServiceUnavailableWithRetryAfter(t *testing.T) {
	var h hits
	srv, tr := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		w.Header().Set("Retry-After", "5")
		http.Error(w, "go away", http.StatusServiceUnavailable)
	}))
	p := fixedPolicy(t, time.Hour)
	c := &http.Client{Transport: NewTransport(tr, p)}
	code, body := get(t, c, t.Context(), srv.URL)
	if code != http.StatusServiceUnavailable || body != "go away\n" {
		t.Errorf("got %d %q, want the 503 and its body", code, body)
	}
	if h.total() != 1 {
		t.Errorf("server hits = %d, want 1", h.total())
	}
	if st := p.Stats(); st.Denied[tailcut.DenyPushback] != 1 {
		t.Errorf("pushback denials = %d, want 1", st.Denied[tailcut.DenyPushback])
	}
}

// In a total outage (every request slow) the extra load stays within the
// budget: server hits ≤ requests × (1 + ratio) + burst.
func TestOutageStaysWithinBudget(t *testing.T) {
	const ratio, burst = 0.1, 10
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			var h hits
			srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.add(r)
				time.Sleep(15 * time.Millisecond)
			}))
			b, err := budget.NewRatio(ratio, burst, -1)
			if err != nil {
				t.Fatal(err)
			}
			p, err := tailcut.New(tailcut.Config{WarmupDelay: time.Millisecond, MinSamples: 1 << 30, MaxHedges: 2, Budget: b})
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: NewTransport(tr, p)}
			const n, workers = 300, 15
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for range n / workers {
						req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+fmt.Sprint("/", w), nil)
						resp, err := c.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			c.CloseIdleConnections()
			st := p.Stats()
			limit := int64(n*(1+ratio) + burst)
			if st.Attempts > limit {
				t.Errorf("attempts = %d, want ≤ %d", st.Attempts, limit)
			}
			if got := int64(h.total()); got > limit {
				t.Errorf("server hits = %d, want ≤ %d", got, limit)
			}
			if st.Hedges < burst {
				t.Errorf("hedges = %d: the budget was not even used", st.Hedges)
			}
		})
	}
}

// Cancelling the caller's context ends every attempt, on the server too.
func TestCallerCancelEndsAllAttempts(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			started := make(chan int, 4)
			ended := make(chan int, 4)
			srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := attemptOf(r)
				started <- k
				stall(r)
				if r.Context().Err() != nil {
					ended <- k
				}
			}))
			p := fixedPolicy(t, 5*time.Millisecond)
			c := &http.Client{Transport: NewTransport(tr, p)}
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			recvN(t, started, 2, "both attempts to start")
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("Do: %v, want context.Canceled", err)
			}
			recvN(t, ended, 2, "both attempts to be cancelled on the server")
		})
	}
}

func recvN(t *testing.T, c <-chan int, n int, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-c:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// WithoutHedging sends the primary only; WithDelay overrides the delay.
func TestPerRequestOverrides(t *testing.T) {
	var h hits
	// The last request's primary stalls until its hedge wins, and the
	// hedge answers once that primary has arrived: on a busy machine a
	// primary still dialling when its hedge won would never arrive, and
	// one with a deadline might beat a late hedge.
	stalledIn := make(chan struct{})
	srv, tr := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := h.add(r)
		stalls := r.URL.Query().Get("stall") == "1"
		switch {
		case k == 0 && stalls:
			close(stalledIn)
			stall(r)
			return
		case k == 0:
			// Slow, but answering: a primary left alone does finish.
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		case stalls:
			select {
			case <-stalledIn:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, k)
	}))
	p := fixedPolicy(t, 5*time.Millisecond)
	c := &http.Client{Transport: NewTransport(tr, p)}

	if _, body := get(t, c, WithoutHedging(t.Context()), srv.URL); body != "0" || h.total() != 1 {
		t.Errorf("WithoutHedging: answer from attempt %s, %d hits; want the primary alone", body, h.total())
	}
	if _, body := get(t, c, WithDelay(t.Context(), time.Hour), srv.URL); body != "0" || h.total() != 2 {
		t.Errorf("WithDelay(1h): answer from attempt %s, %d hits; want the primary alone", body, h.total())
	}
	if _, body := get(t, c, t.Context(), srv.URL+"?stall=1"); body != "1" || h.total() != 4 {
		t.Errorf("default: answer from attempt %s, %d hits; want the hedge to win", body, h.total())
	}
}

// WithFirstByte races on the first body byte: a server that flushes its
// headers at once but stalls before the body is hedged, and the hedge's
// body wins.
func TestFirstByte(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := attemptOf(r)
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				if k == 0 {
					stall(r)
					return
				}
				fmt.Fprintf(w, "tokens from attempt %d", k)
			})
			srv, tr := startServer(t, proto.h2, handler)
			p := fixedPolicy(t, 10*time.Millisecond)
			c := &http.Client{Transport: NewTransport(tr, p, WithFirstByte())}
			_, body := get(t, c, t.Context(), srv.URL)
			if body != "tokens from attempt 1" {
				t.Errorf("body %q, want the hedge's", body)
			}
			if p.Stats().Wins[1] != 1 {
				t.Errorf("hedge wins = %d, want 1", p.Stats().Wins[1])
			}
			// Without WithFirstByte the primary's headers win the race,
			// and the body would wait for the stall; a short deadline
			// shows it.
			// (A delay of a minute: the primary's headers, sent at once,
			// win the race however busy the machine.)
			p2 := fixedPolicy(t, time.Minute)
			c2 := &http.Client{Transport: NewTransport(tr, p2)}
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := c2.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("headers-only race: reading the body gave %v, want the deadline", err)
			}
			if p2.Stats().Hedges != 0 {
				t.Errorf("headers-only race hedged %d times, want 0", p2.Stats().Hedges)
			}
		})
	}
}

// The hard timeout ends a request whose attempts all stall.
func TestHardTimeout(t *testing.T) {
	srv, tr := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { stall(r) }))
	c := &http.Client{Transport: NewTransport(tr, fixedPolicy(t, 10*time.Millisecond), WithTimeout(50*time.Millisecond))}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	_, err := c.Do(req)
	var te *TimeoutError
	if !errors.As(err, &te) || te.After != 50*time.Millisecond {
		t.Fatalf("err = %v, want a TimeoutError after 50ms", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err does not match context.DeadlineExceeded")
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("err is not a net.Error timeout")
	}
}

// Replicas: the hedge goes to a different endpoint than the primary, paths
// are kept, and a refused connection moves on to the next endpoint at once.
func TestEndpoints(t *testing.T) {
	type hit struct {
		server string
		k      int
		path   string
	}
	var mu sync.Mutex
	var log []hit
	var primaryIn chan struct{} // closed when the request's primary reaches its server
	mk := func(name string) *httptest.Server {
		srv, _ := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := attemptOf(r)
			mu.Lock()
			log = append(log, hit{name, k, r.URL.Path})
			in := primaryIn
			mu.Unlock()
			if k == 0 {
				close(in)
				stall(r)
				return
			}
			// Answer once the primary has arrived too, so that both are
			// logged however slowly the primary's connection opens on a
			// busy machine.
			select {
			case <-in:
			case <-r.Context().Done():
				return
			}
			fmt.Fprint(w, name)
		}))
		return srv
	}
	a, b := mk("a"), mk("b")
	p := fixedPolicy(t, 5*time.Millisecond)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: NewTransport(tr, p, WithEndpoints(a.URL, b.URL+"/prefix"))}
	for i := range 6 {
		mu.Lock()
		log = log[:0]
		primaryIn = make(chan struct{})
		mu.Unlock()
		_, body := get(t, c, t.Context(), "http://service.internal/v1/items")
		mu.Lock()
		hits := append([]hit(nil), log...)
		mu.Unlock() // not held across t.Fatalf: the servers' cleanup waits for handlers that take it
		if len(hits) != 2 {
			t.Fatalf("request %d: %d hits, want 2", i, len(hits))
		}
		byAttempt := map[int]hit{}
		for _, h := range hits {
			byAttempt[h.k] = h
		}
		if byAttempt[0].server == byAttempt[1].server {
			t.Errorf("request %d: primary and hedge both went to %s", i, byAttempt[0].server)
		}
		if body != byAttempt[1].server {
			t.Errorf("request %d: answer from %q, want the hedge's server %q", i, body, byAttempt[1].server)
		}
		for _, h := range byAttempt {
			want := "/v1/items"
			if h.server == "b" {
				want = "/prefix/v1/items"
			}
			if h.path != want {
				t.Errorf("server %s got path %q, want %q", h.server, h.path, want)
			}
		}
	}

	// A dead endpoint: its refused connections are not final.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	var okHits atomic.Int64
	alive, _ := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		okHits.Add(1)
		io.WriteString(w, "alive")
	}))
	c = &http.Client{Transport: NewTransport(tr, fixedPolicy(t, time.Hour), WithEndpoints(dead, alive.URL))}
	for i := range 10 {
		if code, body := get(t, c, t.Context(), "http://service.internal/"); code != 200 || body != "alive" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	if okHits.Load() != 10 {
		t.Errorf("alive endpoint hits = %d, want 10", okHits.Load())
	}
}

// After 10,000 hedged requests no connection is left open once the client
// closes its idle connections, and no goroutine is left running
// (goleak, in TestMain).
func TestNoConnectionLeak(t *testing.T) {
	const n = 10000
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			var mu sync.Mutex
			open := map[net.Conn]http.ConnState{}
			changed := make(chan struct{}, 1)
			payload := strings.Repeat("x", 2048)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 0 && r.URL.Query().Get("slow") == "1" {
					stall(r)
					return
				}
				io.WriteString(w, payload)
			}))
			srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
				mu.Lock()
				if s == http.StateClosed || s == http.StateHijacked {
					delete(open, c)
				} else {
					open[c] = s
				}
				mu.Unlock()
				select {
				case changed <- struct{}{}:
				default:
				}
			}
			if proto.h2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			tr := srv.Client().Transport.(*http.Transport).Clone()
			p := fixedPolicy(t, 5*time.Millisecond)
			c := &http.Client{Transport: NewTransport(tr, p)}
			var wg sync.WaitGroup
			t0 := time.Now()
			const workers = 8
			for w := range workers {
				wg.Go(func() {
					for i := range n / workers {
						url := srv.URL + "/"
						if i%10 == w%10 {
							url += "?slow=1" // a straggler: the hedge must win
						}
						req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
						resp, err := c.Do(req)
						if err != nil {
							t.Error(err)
							return
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err != nil || len(b) != len(payload) {
							t.Errorf("body: %d bytes, %v", len(b), err)
							return
						}
					}
				})
			}
			wg.Wait()
			st := p.Stats()
			if st.Requests != n || st.Hedges < n/10 {
				t.Fatalf("requests %d, hedges %d: want %d requests and ≥ %d hedges", st.Requests, st.Hedges, n, n/10)
			}
			mu.Lock()
			during := len(open)
			mu.Unlock()
			// A leaked body keeps its connection busy; everything else is
			// idle in the pool and closes with it. (An HTTP/2 connection
			// that has just reset a stream is not idle until the server
			// acknowledges a ping, so closing is retried a few times.)
			deadline := time.After(10 * time.Second)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				tr.CloseIdleConnections()
				mu.Lock()
				left := len(open)
				mu.Unlock()
				if left == 0 {
					break
				}
				select {
				case <-changed:
				case <-tick.C:
				case <-deadline:
					t.Fatalf("%d server connections still open after closing idle ones (%d before)", left, during)
				}
			}
			t.Logf("%d requests, %d hedges, %d hedge wins in %v; %d connections open before closing idle ones",
				st.Requests, st.Hedges, st.Wins[1], time.Since(t0).Round(time.Millisecond), during)
		})
	}
}

// TestServerErrorFeedsBreaker: final 500s go back to the caller at once and
// count as errors, so the breaker switches hedging off for the host.
func TestServerErrorFeedsBreaker(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	// A delay of a minute: no hedge goes because a 500 was slow to come
	// on a busy machine, only if the 500 itself launched one.
	p, err := tailcut.New(tailcut.Config{WarmupDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: NewTransport(nil, p)}
	defer c.CloseIdleConnections()
	for range 30 {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("status %d, want 500 passed through", resp.StatusCode)
		}
	}
	ks := p.Stats().Keys[0]
	if ks.Breaker != tailcut.BreakerOpen {
		t.Errorf("breaker %v after 30 server errors, want open", ks.Breaker)
	}
	if ks.Attempts != 30 {
		t.Errorf("%d attempts for 30 requests: a final 500 must not launch another", ks.Attempts)
	}
}

// TestHedgeRefusedWith429DoesNotWin: a server that sheds hedges with 429
// (hedgehttp.Handler) must not hand the caller a 429 while the primary is
// still working: the primary's answer wins, and hedging pauses. In memory
// and in virtual time, so that the 429 surely arrives first.
func TestHedgeRefusedWith429DoesNotWin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get(AttemptHeader) != "0" {
				time.Sleep(time.Millisecond)
				h := http.Header{}
				h.Set("Retry-After", "60")
				return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, Body: http.NoBody, Request: r}, nil
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("primary")), Request: r}, nil
		})
		p := fixedPolicy(t, time.Millisecond)
		tr := NewTransport(rt, p)
		req, _ := http.NewRequest(http.MethodGet, "http://backend.test/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "primary" {
			t.Fatalf("got %d %q, want the primary's 200", resp.StatusCode, body)
		}
		r := p.Begin("backend.test", time.Now())
		if d := p.Hedge(&r, time.Now()); d != tailcut.DenyPushback {
			t.Errorf("after a 429 with Retry-After, Hedge = %v, want %v", d, tailcut.DenyPushback)
		}
	})
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
