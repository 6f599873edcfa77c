package hedgehttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

func TestHandlerParseAttempt(t *testing.T) {
	for _, c := range []struct {
		vals []string
		want int
	}{
		{nil, 0},
		{[]string{"0"}, 0},
		{[]string{"1"}, 1},
		{[]string{"4"}, 4},
		{[]string{"007"}, 7},
		{[]string{"1000000"}, 1000000},
		{[]string{"1000001"}, 0},
		{[]string{"99999999999999999999"}, 0},
		{[]string{""}, 0},
		{[]string{"-1"}, 0},
		{[]string{"+1"}, 0},
		{[]string{" 1"}, 0},
		{[]string{"1x"}, 0},
		{[]string{"1", "2"}, 0},
	} {
		h := http.Header{}
		if c.vals != nil {
			h[AttemptHeader] = c.vals
		}
		if got := ParseAttempt(h); got != c.want {
			t.Errorf("ParseAttempt(%q) = %d, want %d", c.vals, got, c.want)
		}
	}
}

func FuzzParseAttempt(f *testing.F) {
	for _, s := range []string{"0", "1", "4", "", "-1", "1000000", "1000001", "x", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := ParseAttempt(http.Header{AttemptHeader: {s}})
		if k < 0 || k > 1_000_000 {
			t.Fatalf("ParseAttempt(%q) = %d out of range", s, k)
		}
		if k > 0 && strings.TrimLeft(s, "0123456789") != "" {
			t.Fatalf("ParseAttempt(%q) = %d for a non-decimal value", s, k)
		}
	})
}

func TestHandlerOptionsValidated(t *testing.T) {
	next := http.NotFoundHandler()
	for _, c := range []struct {
		next http.Handler
		opts HandlerOptions
		want string
	}{
		{nil, HandlerOptions{}, "nil next"},
		{next, HandlerOptions{HedgeLimit: -1}, "HedgeLimit"},
		{next, HandlerOptions{HardLimit: -1}, "HardLimit"},
		{next, HandlerOptions{HedgeLimit: 5, HardLimit: 4}, "HardLimit (4) must be at least HedgeLimit (5)"},
		{next, HandlerOptions{RetryAfter: -time.Second}, "RetryAfter"},
		{next, HandlerOptions{ShedStatus: 500}, "ShedStatus"},
	} {
		_, err := NewHandler(c.next, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewHandler(%+v) = %v, want an error containing %q", c.opts, err, c.want)
		}
	}
	if _, err := NewHandler(next, HandlerOptions{HedgeLimit: 4, HardLimit: 4}); err != nil {
		t.Errorf("equal limits: %v", err)
	}
	if _, err := NewHandler(next, HandlerOptions{HedgeLimit: 4}); err != nil {
		t.Errorf("hedge limit alone: %v", err)
	}
}

// handlerCall serves one request with the given Hedge-Attempt value ("" for
// none) and returns the recorder.
func handlerCall(h http.Handler, attempt string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if attempt != "" {
		r.Header.Set(AttemptHeader, attempt)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHandlerAttemptInContext(t *testing.T) {
	var got []int
	var mu sync.Mutex
	h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, ok := AttemptFromContext(r.Context())
		if !ok {
			t.Error("no attempt in the context")
		}
		mu.Lock()
		got = append(got, k)
		mu.Unlock()
	}), HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"", "0", "1", "2", "junk", "17"} {
		handlerCall(h, v)
	}
	want := []int{0, 0, 1, 2, 0, 17}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: attempt %d, want %d", i, got[i], want[i])
		}
	}
	st := h.Stats()
	if st.Primary.Served != 3 || st.Hedge.Served != 3 || st.Primary.Shed+st.Hedge.Shed != 0 {
		t.Errorf("stats %+v, want 3 primaries and 3 hedges served", st)
	}
	if _, ok := AttemptFromContext(context.Background()); ok {
		t.Error("AttemptFromContext outside a Handler reports ok")
	}
}

// handlerBlocked starts n requests that block in the next handler until
// release is closed, and waits until they are all inside.
func handlerBlocked(t *testing.T, h http.Handler, entered <-chan struct{}, n int, attempt string) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if w := handlerCall(h, attempt); w.Code != http.StatusOK {
				t.Errorf("blocked request (attempt %q) got %d", attempt, w.Code)
			}
		})
	}
	for range n {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("blocked requests did not enter the handler")
		}
	}
	return &wg
}

// Hedges are shed past the hedge limit while primaries still pass; past the
// hard limit primaries are shed too, with 503, and hedges before them.
func TestHandlerShedsHedgesFirst(t *testing.T) {
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("quick") == "" {
			entered <- struct{}{}
			<-release
		}
	}), HandlerOptions{HedgeLimit: 2, HardLimit: 4, RetryAfter: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	quick := func(attempt string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/?quick=1", nil)
		if attempt != "" {
			r.Header.Set(AttemptHeader, attempt)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	// One request in flight: a hedge (the second) is within the limit.
	wg := handlerBlocked(t, h, entered, 1, "")
	if w := quick("1"); w.Code != http.StatusOK {
		t.Fatalf("hedge with 1 in flight: %d, want 200", w.Code)
	}
	// Two in flight: a hedge would be the third, over HedgeLimit 2.
	wg2 := handlerBlocked(t, h, entered, 1, "")
	w := quick("1")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("hedge with 2 in flight: %d, want 429", w.Code)
	}
	if ra := w.Header().Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After %q, want \"2\" (1.5 s rounded up)", ra)
	}
	if d, ok := ParseRetryAfter(w.Header().Get("Retry-After"), time.Now()); !ok || d != 2*time.Second {
		t.Errorf("Retry-After does not parse as 2 s: %v %v", d, ok)
	}
	// Primaries still pass up to the hard limit.
	if w := quick(""); w.Code != http.StatusOK {
		t.Fatalf("primary with 2 in flight: %d, want 200", w.Code)
	}
	wg3 := handlerBlocked(t, h, entered, 2, "0")
	if st := h.Stats(); st.Inflight != 4 || st.Primary.Inflight != 4 {
		t.Errorf("in flight: %+v, want 4 primaries", st)
	}
	w = quick("")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("primary over the hard limit: %d (Retry-After %q), want 503 with Retry-After",
			w.Code, w.Header().Get("Retry-After"))
	}
	close(release)
	wg.Wait()
	wg2.Wait()
	wg3.Wait()

	st := h.Stats()
	want := HandlerStats{
		Primary: HandlerCounts{Served: 5, Shed: 1},
		Hedge:   HandlerCounts{Served: 1, Shed: 1},
	}
	st.Primary.Time, st.Hedge.Time = 0, 0
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	// With nothing in flight every request passes again.
	if w := quick("3"); w.Code != http.StatusOK {
		t.Errorf("hedge after the load: %d", w.Code)
	}
}

func TestHandlerLoadSignal(t *testing.T) {
	var level Load
	var mu sync.Mutex
	h, err := NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		HandlerOptions{ShedStatus: http.StatusServiceUnavailable, Load: func(*http.Request) Load {
			mu.Lock()
			defer mu.Unlock()
			return level
		}})
	if err != nil {
		t.Fatal(err)
	}
	set := func(l Load) { mu.Lock(); level = l; mu.Unlock() }
	for _, c := range []struct {
		level           Load
		primary, hedge  int
		hedgeRetryAfter string
	}{
		{LoadNormal, 200, 200, ""},
		{LoadHigh, 200, 503, "1"},
		{LoadCritical, 503, 503, "1"},
	} {
		set(c.level)
		if w := handlerCall(h, "0"); w.Code != c.primary {
			t.Errorf("load %d: primary %d, want %d", c.level, w.Code, c.primary)
		}
		w := handlerCall(h, "1")
		if w.Code != c.hedge || w.Header().Get("Retry-After") != c.hedgeRetryAfter {
			t.Errorf("load %d: hedge %d (Retry-After %q), want %d (%q)", c.level, w.Code, w.Header().Get("Retry-After"), c.hedge, c.hedgeRetryAfter)
		}
	}
}

// A request whose client goes away is counted as cancelled, and a handler
// that watches r.Context().Done() returns at once.
func TestHandlerCountsCanceled(t *testing.T) {
	returned := make(chan error, 1)
	h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			returned <- r.Context().Err()
		case <-time.After(10 * time.Second):
			returned <- nil
		}
	}), HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	r.Header.Set(AttemptHeader, "1")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if err := <-returned; err != context.Canceled {
		t.Fatalf("handler saw %v, want context.Canceled", err)
	}
	if st := h.Stats(); st.Hedge.Canceled != 1 || st.Hedge.Served != 1 || st.Primary.Served != 0 {
		t.Errorf("stats %+v, want one cancelled hedge", st)
	}
}

// Over loopback sockets, with a hedging client: the straggling primary's
// handler sees its context cancelled when the hedge wins, and the Handler
// counts it.
func TestHandlerLoopbackLoserCanceled(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			loserDone := make(chan time.Duration, 1)
			// The hedge answers once the primary is in the handler: on a
			// busy machine a primary still dialling when its hedge won
			// would never arrive.
			primaryIn := make(chan struct{})
			h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k, _ := AttemptFromContext(r.Context())
				if k == 0 {
					close(primaryIn)
					select {
					case <-r.Context().Done(): // freed as soon as the hedge wins
					case <-time.After(20 * time.Second):
					}
					return
				}
				select {
				case <-primaryIn:
					io.WriteString(w, "hedge")
				case <-r.Context().Done():
				}
			}), HandlerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// loserDone is sent once the Handler has returned, and so
			// counted the primary.
			srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				h.ServeHTTP(w, r)
				if ParseAttempt(r.Header) == 0 {
					loserDone <- time.Since(start)
				}
			}))
			c := &http.Client{Transport: NewTransport(tr, fixedPolicy(t, 5*time.Millisecond))}
			code, body := get(t, c, t.Context(), srv.URL)
			if code != 200 || body != "hedge" {
				t.Fatalf("got %d %q, want the hedge's answer", code, body)
			}
			select {
			case d := <-loserDone:
				if d > 10*time.Second {
					t.Errorf("primary's handler ran %v: not cancelled", d)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("primary's handler never returned")
			}
			st := h.Stats()
			if st.Primary.Canceled != 1 || st.Hedge.Served != 1 || st.Hedge.Canceled != 0 {
				t.Errorf("stats %+v, want the primary cancelled and the hedge served", st)
			}
		})
	}
}

// A Handler shedding hedges in front of a slow server, with a tailcut
// client: the shed hedge pauses the client's hedging (pushback), the primary
// it backed up still answers, and later requests send no hedge at all.
func TestHandlerShedPushesBackClient(t *testing.T) {
	// Each primary answers when the test releases it, so no timing decides
	// whether its hedge falls due first: the first once the client has
	// received its hedge's 503, the later ones once the client has denied
	// their hedge.
	release := make(chan struct{})
	firstIn := make(chan struct{})
	var firstOnce sync.Once
	h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k, _ := AttemptFromContext(r.Context()); k == 0 {
			firstOnce.Do(func() { close(firstIn) })
			select {
			case <-r.Context().Done():
				return
			case <-release:
			}
		}
		io.WriteString(w, "ok")
	}), HandlerOptions{HedgeLimit: 1, RetryAfter: 30 * time.Second, ShedStatus: http.StatusServiceUnavailable})
	if err != nil {
		t.Fatal(err)
	}
	// A hedge reaches the Handler once the first primary is in it, so it
	// finds the primary there (on a busy machine the primary could still
	// be on its way).
	srv, tr := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ParseAttempt(r.Header) > 0 {
			select {
			case <-firstIn:
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	// shedSeen is closed when the client receives a 503: the transport
	// records the pushback right after, in the same goroutine.
	shedSeen := make(chan struct{})
	var shedOnce sync.Once
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := tr.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
			shedOnce.Do(func() { close(shedSeen) })
		}
		return resp, err
	})
	p := fixedPolicy(t, 5*time.Millisecond)
	c := &http.Client{Transport: NewTransport(base, p)}
	for i := range 4 {
		answer := make(chan string, 1)
		go func() {
			code, body, err := tryGet(c, srv.URL)
			answer <- fmt.Sprint(code, " ", body, " ", err)
		}()
		if i == 0 {
			select {
			case <-shedSeen:
			case <-time.After(10 * time.Second):
				t.Fatal("the first request's hedge was not shed")
			}
		} else {
			waitFor(t, fmt.Sprintf("the hedge of request %d to be denied", i), func() bool {
				return p.Stats().Denied[tailcut.DenyPushback] == int64(i) || h.Stats().Hedge.Shed+h.Stats().Hedge.Served > 1
			})
		}
		release <- struct{}{}
		if got := <-answer; got != "200 ok <nil>" {
			t.Fatalf("request %d: %s, want the primary's 200 ok", i, got)
		}
	}
	st := h.Stats()
	if st.Hedge.Shed != 1 || st.Hedge.Served != 0 || st.Primary.Served != 4 {
		t.Errorf("server stats %+v, want one hedge shed, then none sent", st)
	}
	if ps := p.Stats(); ps.Denied[tailcut.DenyPushback] != 3 {
		t.Errorf("client pushback denials %d, want 3", ps.Denied[tailcut.DenyPushback])
	}
}
