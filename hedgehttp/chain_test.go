package hedgehttp

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// A Handler marks the context of a hedge (Hedge-Attempt ≥ 1) with
// tailcut.WithChainStop, and of nothing else; NoChainStop turns it off.
func TestHandlerChainStop(t *testing.T) {
	for _, noChainStop := range []bool{false, true} {
		var got []bool
		h, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = append(got, tailcut.ChainStopped(r.Context()))
		}), HandlerOptions{NoChainStop: noChainStop})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"", "0", "junk", "1", "3"} {
			handlerCall(h, v)
		}
		want := []bool{false, false, false, !noChainStop, !noChainStop}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("NoChainStop %v: request %d marked %v, want %v", noChainStop, i, got[i], want[i])
			}
		}
	}
}

// chainRun is what one run of the two-hop chain counted.
type chainRun struct {
	clientHedges   int64 // hedges the client sent to A
	aServed        int64 // attempts A's handler served
	aHedges        int64 // hedges A sent to B
	aChained       int64 // hedges A was denied as chained
	bAttempts      int   // attempts that reached B
	maxPerRequest  int   // the most attempts one request made reach B
	hedgesOfHedges int   // hedges at B sent by A while it served a hedge
}

// runChain sends requests through a client → A → B chain of loopback
// servers, both hops hedging at a fixed delay up to hedges times with a
// budget that grants every hedge (as hedgedhttp's up_to does), A's
// Handler with chain stop on or off. Every slowEvery-th request is slow at
// B — every attempt of it, whichever hop sent it, answers after slowFor —
// the others answer at once.
func runChain(t *testing.T, chainStop bool, requests, slowEvery, hedges int, delay, slowFor time.Duration) chainRun {
	t.Helper()
	policy := func() *tailcut.Policy {
		b, err := budget.NewRatio(1, 1e6, -1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tailcut.New(tailcut.Config{WarmupDelay: delay, MinSamples: 1 << 30, MaxHedges: hedges, Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var (
		mu             sync.Mutex
		perRequest     = map[string]int{}
		hedgesOfHedges int
	)
	srvB, trB := startServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		mu.Lock()
		perRequest[id]++
		if attemptOf(r) >= 1 && r.Header.Get("X-Parent-Attempt") != "0" {
			hedgesOfHedges++
		}
		mu.Unlock()
		if n, _ := strconv.Atoi(id); n%slowEvery == 0 {
			select {
			case <-time.After(slowFor):
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "b")
	}))
	pA := policy()
	toB := &http.Client{Transport: NewTransport(trB, pA)}
	a, err := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, _ := AttemptFromContext(r.Context())
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, srvB.URL+"/?"+r.URL.RawQuery, nil)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("X-Parent-Attempt", strconv.Itoa(k))
		resp, err := toB.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	}), HandlerOptions{NoChainStop: !chainStop})
	if err != nil {
		t.Fatal(err)
	}
	srvA, trA := startServer(t, false, a)
	p1 := policy()
	client := &http.Client{Transport: NewTransport(trA, p1)}
	for i := range requests {
		if code, body := get(t, client, t.Context(), srvA.URL+"/?id="+strconv.Itoa(i)); code != http.StatusOK || body != "b" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	// Close waits for the requests still in the servers: the losers.
	srvA.Close()
	srvB.Close()
	st := a.Stats()
	run := chainRun{
		clientHedges:   p1.Stats().Hedges,
		aServed:        st.Primary.Served + st.Hedge.Served,
		aHedges:        pA.Stats().Hedges,
		aChained:       pA.Stats().DeniedBy(tailcut.DenyChained),
		hedgesOfHedges: hedgesOfHedges,
	}
	for _, n := range perRequest {
		run.bAttempts += n
		run.maxPerRequest = max(run.maxPerRequest, n)
	}
	return run
}

// On a two-hop chain of hedging services, a hedge of the first hop reaches
// the last as one attempt with chain stop: a request reaches B with at
// most 1 + 2m attempts (m hedges per hop, each hop's spent once), and no
// hedge of a hedge reaches it. Without chain stop a slow request reaches B
// with (1+m)² attempts. Counts only: the delays leave the hedges of every
// slow request ample time to go before its first answer.
func TestChainStopTwoHops(t *testing.T) {
	const (
		requests  = 25
		slowEvery = 5
		hedges    = 2
		delay     = 40 * time.Millisecond
		slowFor   = 400 * time.Millisecond
	)
	slow := (requests + slowEvery - 1) / slowEvery
	with := runChain(t, true, requests, slowEvery, hedges, delay, slowFor)
	without := runChain(t, false, requests, slowEvery, hedges, delay, slowFor)
	for _, r := range []struct {
		name string
		run  chainRun
	}{{"chain stop", with}, {"no chain stop", without}} {
		t.Logf("%s: %d requests (%d slow at B), client hedges %d, A served %d, A hedges %d (%d denied as chained), B attempts %d (%.2f per request, at most %d for one), hedges of hedges at B %d",
			r.name, requests, slow, r.run.clientHedges, r.run.aServed, r.run.aHedges, r.run.aChained,
			r.run.bAttempts, float64(r.run.bAttempts)/requests, r.run.maxPerRequest, r.run.hedgesOfHedges)
	}
	sum, product := 1+2*hedges, (1+hedges)*(1+hedges)
	if with.hedgesOfHedges != 0 || with.maxPerRequest > sum {
		t.Errorf("chain stop: %d hedges of hedges reached B, one request reached it %d times; want 0, at most %d", with.hedgesOfHedges, with.maxPerRequest, sum)
	}
	if with.aChained < int64(slow) {
		t.Errorf("chain stop: A was denied %d hedges as chained, want at least one per slow request (%d)", with.aChained, slow)
	}
	if want := with.bAttempts - int(with.aServed); int64(want) != with.aHedges {
		t.Errorf("chain stop: B attempts %d − A served %d = %d, A's hedges %d: an attempt at B from nowhere", with.bAttempts, with.aServed, want, with.aHedges)
	}
	if without.hedgesOfHedges < slow || without.maxPerRequest <= sum || without.aChained != 0 {
		t.Errorf("no chain stop: %d hedges of hedges, at most %d attempts of one request at B (product %d), %d chained denials; want at least %d, more than %d, 0",
			without.hedgesOfHedges, without.maxPerRequest, product, without.aChained, slow, sum)
	}
	if without.bAttempts <= with.bAttempts {
		t.Errorf("B attempts: %d without chain stop, %d with it; want fewer with it", without.bAttempts, with.bAttempts)
	}
}
