package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
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
	aBegunChained  int64 // calls A began chain-stopped (Counts.Chained)
	aOwed          int64 // of them, those that found A's budget empty (Counts.ChainOwed)
	bAttempts      int   // attempts that reached B
	maxPerRequest  int   // the most attempts one request made reach B
	hedgesOfHedges int   // hedges at B sent by A while it served a hedge
}

// chainSetup is a two-hop chain to run: requests sent by workers
// goroutines through a client → A → B chain of loopback servers, both
// hops hedging at a fixed delay up to hedges times, each from a budget of
// its own (budget.NewRatio(ratio, burst, -1): no floor); A's Handler with
// chain stop on or off. Every slowEvery-th request is slow at B — every
// attempt of it, whichever hop sent it, answers after slowFor — the
// others answer at once.
type chainSetup struct {
	chainStop                   bool
	requests, slowEvery, hedges int
	workers                     int
	delay, slowFor              time.Duration
	ratio, burst                float64
}

// run runs the chain and returns what it counted.
func (c chainSetup) run(t *testing.T) chainRun {
	t.Helper()
	policy := func() *tailcut.Policy {
		b, err := budget.NewRatio(c.ratio, c.burst, -1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tailcut.New(tailcut.Config{WarmupDelay: c.delay, MinSamples: 1 << 30, MaxHedges: c.hedges, Budget: b})
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
		if n, _ := strconv.Atoi(id); n%c.slowEvery == 0 {
			select {
			case <-time.After(c.slowFor):
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
	}), HandlerOptions{NoChainStop: !c.chainStop})
	if err != nil {
		t.Fatal(err)
	}
	srvA, trA := startServer(t, false, a)
	p1 := policy()
	c.send(t, &http.Client{Transport: NewTransport(trA, p1)}, srvA.URL)
	// Close waits for the requests still in the servers: the losers.
	srvA.Close()
	srvB.Close()
	st, ca := a.Stats(), pA.Stats().Counts
	run := chainRun{
		clientHedges:   p1.Stats().Hedges,
		aServed:        st.Primary.Served + st.Hedge.Served,
		aHedges:        ca.Hedges,
		aChained:       ca.DeniedBy(tailcut.DenyChained),
		aBegunChained:  ca.Chained,
		aOwed:          ca.ChainOwed,
		hedgesOfHedges: hedgesOfHedges,
	}
	for _, n := range perRequest {
		run.bAttempts += n
		run.maxPerRequest = max(run.maxPerRequest, n)
	}
	return run
}

// send sends the chain's requests to url through client, c.workers at a
// time, and checks every answer.
func (c chainSetup) send(t *testing.T, client *http.Client, url string) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range max(c.workers, 1) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < c.requests; i = int(next.Add(1)) - 1 {
				code, body := getNoFatal(client, t.Context(), url+"/?id="+strconv.Itoa(i))
				if code != http.StatusOK || body != "b" {
					t.Errorf("request %d: %d %q", i, code, body)
					return
				}
			}
		})
	}
	wg.Wait()
}

// getNoFatal is get for a goroutine other than the test's: a failed
// request is a status of 0.
func getNoFatal(c *http.Client, ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

// logChain logs the runs of a chain test.
func logChain(t *testing.T, requests int, with, without chainRun) {
	t.Helper()
	for _, r := range []struct {
		name string
		run  chainRun
	}{{"chain stop", with}, {"no chain stop", without}} {
		t.Logf("%s: %d requests, client hedges %d, A served %d, A hedges %d (%d denied as chained), A began %d chain-stopped (%d owed), B attempts %d (%.3f per request, at most %d for one), hedges of hedges at B %d",
			r.name, requests, r.run.clientHedges, r.run.aServed, r.run.aHedges, r.run.aChained, r.run.aBegunChained, r.run.aOwed,
			r.run.bAttempts, float64(r.run.bAttempts)/float64(requests), r.run.maxPerRequest, r.run.hedgesOfHedges)
	}
}

// On a two-hop chain of hedging services, a hedge of the first hop reaches
// the last as one attempt with chain stop: a request reaches B with at
// most 1 + 2m attempts (m hedges per hop, each hop's spent once), and no
// hedge of a hedge reaches it. Without chain stop a slow request reaches B
// with (1+m)² attempts. Counts only: the budget grants every hedge, and
// the delays leave the hedges of every slow request ample time to go
// before its first answer.
func TestChainStopTwoHops(t *testing.T) {
	setup := chainSetup{
		requests: 25, slowEvery: 5, hedges: 2, workers: 1,
		delay: 40 * time.Millisecond, slowFor: 400 * time.Millisecond,
		ratio: 1, burst: 1e6,
	}
	slow := (setup.requests + setup.slowEvery - 1) / setup.slowEvery
	setup.chainStop = true
	with := setup.run(t)
	setup.chainStop = false
	without := setup.run(t)
	logChain(t, setup.requests, with, without)
	sum, product := 1+2*setup.hedges, (1+setup.hedges)*(1+setup.hedges)
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

// On a two-hop chain where the budget, not the delays, bounds the hedges
// — every request is slow at B, every attempt of it, so both hops ask to
// hedge every request — chain stop keeps the attempts reaching B within
// one budget: A pays for the client's hedges it forwards from the budget
// its own hedges draw on, so B sees at most (1 + ratio) × requests, plus
// A's burst twice (its bucket starts full, and it may owe up to a burst
// of tokens when the run ends). Without chain stop each hop hedges from
// a budget of its own, A's fed by the client's hedges as well: about
// (1 + ratio)² × requests, the product.
func TestChainStopOneBudget(t *testing.T) {
	setup := chainSetup{
		requests: 300, slowEvery: 1, hedges: 1, workers: 8,
		delay: 10 * time.Millisecond, slowFor: 50 * time.Millisecond,
		ratio: 0.2, burst: 4,
	}
	setup.chainStop = true
	with := setup.run(t)
	setup.chainStop = false
	without := setup.run(t)
	logChain(t, setup.requests, with, without)
	n := float64(setup.requests)
	bound := (1+setup.ratio)*n + 2*setup.burst
	if float64(with.bAttempts) > bound {
		t.Errorf("chain stop: %d attempts reached B, want ≤ (1 + %v) × %d + 2 × %v = %v", with.bAttempts, setup.ratio, setup.requests, setup.burst, bound)
	}
	// A hedge the client cancels before A's handler calls B begins nothing.
	if with.aBegunChained > with.clientHedges || with.aBegunChained < with.clientHedges/2 || with.hedgesOfHedges != 0 {
		t.Errorf("chain stop: A began %d calls chain-stopped for the client's %d hedges, %d hedges of hedges at B; want at most one each and most of them, 0",
			with.aBegunChained, with.clientHedges, with.hedgesOfHedges)
	}
	if with.clientHedges < int64(setup.ratio*n/2) {
		t.Errorf("chain stop: the client sent %d hedges; want the budget spent, about %v", with.clientHedges, setup.ratio*n)
	}
	if float64(without.bAttempts) <= bound {
		t.Errorf("no chain stop: %d attempts reached B, want more than %v: the test does not tell chain stop from none", without.bAttempts, bound)
	}
}
