package fleet

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/testdist"
)

// The simulation: many low-traffic clients of one downstream, each with its
// own tailcut.Policy (the real decision code, in virtual time), hedging
// either on local estimates only or on estimates pooled through a Memory
// store by real Syncers (SyncAt in virtual time). Attempts are independent
// draws from the seed article's trimodal distribution (90 % ~100 ms, 5 %
// ~300 ms, 5 % ~800 ms); the downstream has no queue, so extra load costs
// no latency here — the lab models that; this measures what each estimate
// costs in extra load and gains in tail.

// simConfig is one simulated fleet.
type simConfig struct {
	clients  int
	rate     float64       // requests per second per client (Poisson)
	duration time.Duration // virtual
	mode     string        // "none", "local" or "pooled"
	restart  time.Duration // each client restarts (cold policy) this often; 0: never
	seed     uint64
	dist     func(*rand.Rand) time.Duration
	quantile float64 // tailcut.Config.Quantile: 0 is the default (auto delay)
}

type simResult struct {
	requests, hedges int
	p50, p99, p999   time.Duration
	coldShare        float64 // share of requests begun at the warm-up delay
}

func (r simResult) extraLoad() float64 { return float64(r.hedges) / float64(r.requests) }

// lognormalStragglers draws from the bhope workload: lognormal with mean
// 5 ms and sd 2 ms, 5 % of attempts ten times slower.
var lognormalStragglers = testdist.Lognormal

// trimodal draws one attempt's latency from the demo's distribution.
var trimodal = testdist.Demo

type simEvent struct {
	at   time.Time
	seq  int
	kind int // evArrive, evHedge, evFinish, evSync, evRestart
	c    *simClient
	req  *simReq
}

const (
	evArrive = iota
	evHedge
	evFinish
	evSync
	evRestart
)

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if c := q[i].at.Compare(q[j].at); c != 0 {
		return c < 0
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simClient struct {
	id     int
	gen    int
	p      *tailcut.Policy
	syncer *Syncer
}

type simReq struct {
	p      *tailcut.Policy
	r      tailcut.Request
	start  time.Time
	x1, x2 time.Duration // primary's and hedge's latencies (x2 < 0: no hedge)
}

const simKey = "backend"

// warm reports whether p's delay for simKey is learned from measured
// latencies, its own or the fleet's, rather than the warm-up delay.
func warm(p *tailcut.Policy) bool {
	ks := p.Stats().Keys
	return len(ks) == 1 && ks[0].Warm
}

func simulate(t testing.TB, sc simConfig) simResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(sc.seed, 42))
	start := time.Unix(1_800_000_000, 0)
	now := start
	store := &Memory{Clock: func() time.Time { return now }}
	ctx := context.Background()
	var q simQueue
	seq := 0
	push := func(e *simEvent) {
		seq++
		e.seq = seq
		heap.Push(&q, e)
	}
	interarrival := func() time.Duration {
		return time.Duration(rng.ExpFloat64() / sc.rate * 1e9)
	}
	newClient := func(c *simClient) {
		var err error
		// The defaults (30 s windows, MinSamples 20, 10 ms warm-up, 10 %
		// budget with a 1/s floor), the delay pinned to a quantile or not.
		c.p, err = tailcut.New(tailcut.Config{Quantile: sc.quantile, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		c.syncer = nil
		if sc.mode == "pooled" {
			c.syncer, err = New(c.p, store, Config{Instance: fmt.Sprintf("c%d-%d", c.id, c.gen), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			_ = c.syncer.SyncAt(ctx, now) // Start's initial round
			// Periodic rounds from a per-instance phase, as Run does.
			push(&simEvent{at: now.Add(c.syncer.phase()), kind: evSync, c: c})
		}
		c.gen++
	}
	for i := range sc.clients {
		c := &simClient{id: i}
		newClient(c)
		push(&simEvent{at: now.Add(interarrival()), kind: evArrive, c: c})
		if sc.restart > 0 {
			// Staggered rolling restarts.
			push(&simEvent{at: now.Add(sc.restart * time.Duration(i+1) / time.Duration(sc.clients)), kind: evRestart, c: c})
		}
	}
	end := start.Add(sc.duration)
	var lat []time.Duration
	res := simResult{}
	cold := 0
	for q.Len() > 0 {
		e := heap.Pop(&q).(*simEvent)
		now = e.at
		switch e.kind {
		case evArrive:
			if now.After(end) {
				continue
			}
			push(&simEvent{at: now.Add(interarrival()), kind: evArrive, c: e.c})
			req := &simReq{p: e.c.p, start: now, x1: sc.dist(rng), x2: -1}
			if !warm(req.p) {
				cold++
			}
			req.r = req.p.Begin(simKey, now)
			if sc.mode != "none" && req.x1 > req.r.Delay() {
				push(&simEvent{at: now.Add(req.r.Delay()), kind: evHedge, req: req})
			} else {
				push(&simEvent{at: now.Add(req.x1), kind: evFinish, req: req})
			}
		case evHedge:
			req := e.req
			switch req.p.Hedge(&req.r, now) {
			case tailcut.Send:
				req.x2 = sc.dist(rng)
				res.hedges++
			case tailcut.DenyEarly:
				// Re-timed (begun before the key's first answer): ask
				// again at the request's new delay, if still out then.
				if req.x1 > req.r.Delay() {
					push(&simEvent{at: req.start.Add(req.r.Delay()), kind: evHedge, req: req})
					continue
				}
			}
			fin := req.x1
			if req.x2 >= 0 {
				fin = min(req.x1, req.r.Delay()+req.x2)
			}
			push(&simEvent{at: req.start.Add(fin), kind: evFinish, req: req})
		case evFinish:
			req := e.req
			took := now.Sub(req.start)
			switch {
			case req.x2 < 0 || req.x1 <= took: // the primary won
				req.p.Observe(&req.r, 0, req.x1, tailcut.Completed, now)
				if req.x2 >= 0 {
					req.p.Observe(&req.r, 1, took-req.r.Delay(), tailcut.Canceled, now)
				}
				req.p.End(&req.r, 0, now)
			default: // the hedge won; the primary is cancelled now
				req.p.Observe(&req.r, 1, req.x2, tailcut.Completed, now)
				req.p.Observe(&req.r, 0, took, tailcut.Canceled, now)
				req.p.End(&req.r, 1, now)
			}
			lat = append(lat, took)
		case evSync:
			if e.c.syncer == nil || now.After(end) {
				continue
			}
			if e.c.p != nil && e.c.syncer.p == e.c.p { // not replaced by a restart
				_ = e.c.syncer.SyncAt(ctx, now)
				push(&simEvent{at: now.Add(e.c.syncer.cfg.Interval), kind: evSync, c: e.c})
			}
		case evRestart:
			if now.After(end) {
				continue
			}
			newClient(e.c)
			push(&simEvent{at: now.Add(sc.restart), kind: evRestart, c: e.c})
		}
	}
	res.requests = len(lat)
	slices.Sort(lat)
	pick := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	res.p50, res.p99, res.p999 = pick(0.5), pick(0.99), pick(0.999)
	res.coldShare = float64(cold) / float64(res.requests)
	return res
}

// TestSimPooledVersusLocal is the lab-style demonstration: for fleets of
// quiet clients, pooled estimates take most requests off the warm-up path
// that thin local windows leave them on, and still cut the tail; on their
// own such clients stay within the budget, their warm-up delay held above
// the median of their first answers. Run with -v for the table;
// TAILCUT_FLEET_SIM=full runs every row (about a minute and a half).
func TestSimPooledVersusLocal(t *testing.T) {
	type row struct {
		dist     string
		rate     float64
		restart  time.Duration
		quantile float64
	}
	dists := map[string]func(*rand.Rand) time.Duration{
		"trimodal 100/300/800ms": trimodal,
		"lognormal 5ms, 5% x10":  lognormalStragglers,
	}
	rows := []row{{"trimodal 100/300/800ms", 0.5, 0, 0}, {"lognormal 5ms, 5% x10", 2, 5 * time.Minute, 0}}
	dur, clients := 10*time.Minute, 40
	if raceEnabled || testing.Short() {
		rows, dur, clients = rows[:1], 5*time.Minute, 20
	}
	if os.Getenv("TAILCUT_FLEET_SIM") == "full" {
		rows = nil
		for _, q := range []float64{0, 0.95} {
			for _, d := range []string{"trimodal 100/300/800ms", "lognormal 5ms, 5% x10"} {
				rows = append(rows, []row{{d, 0.2, 0, q}, {d, 0.5, 0, q}, {d, 2, 0, q}, {d, 0.5, 5 * time.Minute, q}, {d, 2, 5 * time.Minute, q}}...)
			}
		}
		dur, clients = 20*time.Minute, 40
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d clients, %v virtual, tailcut.Config defaults (30 s windows, MinSamples 20, 10 ms warm-up, 10 %% budget + 1/s floor), sync every 10 s\n", clients, dur)
	fmt.Fprintf(&b, "%-24s %-5s %-6s %-8s %-7s %8s %8s %8s %8s %8s\n", "distribution", "delay", "req/s", "restart", "mode", "p50", "p99", "p99.9", "extra", "cold")
	for _, r := range rows {
		res := map[string]simResult{}
		delay := "auto"
		if r.quantile > 0 {
			delay = fmt.Sprintf("p%v", r.quantile*100)
		}
		for _, mode := range []string{"none", "local", "pooled"} {
			res[mode] = simulate(t, simConfig{clients: clients, rate: r.rate, duration: dur, mode: mode, restart: r.restart, seed: 1, dist: dists[r.dist], quantile: r.quantile})
			x := res[mode]
			restart := "-"
			if r.restart > 0 {
				restart = r.restart.String()
			}
			fmt.Fprintf(&b, "%-24s %-5s %-6.1f %-8s %-7s %8v %8v %8v %7.1f%% %7.1f%%\n", r.dist, delay, r.rate, restart, mode,
				x.p50.Round(100*time.Microsecond), x.p99.Round(100*time.Microsecond), x.p999.Round(100*time.Microsecond),
				100*x.extraLoad(), 100*x.coldShare)
		}
		local, pooled, none := res["local"], res["pooled"], res["none"]
		name := fmt.Sprintf("%s, delay %s, %v req/s, restart %v", r.dist, delay, r.rate, r.restart)
		// The claims, per row. Clients too quiet for a local estimate
		// spend most requests on the warm-up path; pooling ends that
		// (below). Their warm-up delay is at least 1.5 × the median of the
		// answers they have (Config.WarmupDelay), so on their own they
		// stay within the budget too rather than hedge every request at
		// the 10 ms guess.
		if local.extraLoad() > 0.15 {
			t.Errorf("%s: local extra load %.1f%%, want within the 10%% budget and its burst", name, 100*local.extraLoad())
		}
		if local.coldShare > 0.1 && pooled.coldShare >= local.coldShare/2 {
			t.Errorf("%s: %.1f%% of pooled requests began cold, not under half of local's %.1f%%", name, 100*pooled.coldShare, 100*local.coldShare)
		}
		if pooled.extraLoad() > 0.15 {
			t.Errorf("%s: pooled extra load %.1f%%, want within the 10%% budget and its burst", name, 100*pooled.extraLoad())
		}
		if pooled.p99 >= none.p99 {
			t.Errorf("%s: pooled p99 %v, not under the unhedged %v", name, pooled.p99, none.p99)
		}
		if pooled.coldShare > local.coldShare {
			t.Errorf("%s: pooled cold share %.3f above local %.3f", name, pooled.coldShare, local.coldShare)
		}
	}
	t.Log(b.String())
}
