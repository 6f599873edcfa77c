package hedgehttp

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// endpointAlpha is the weight of a new sample in an endpoint's moving
// average of latency, when the previous sample is recent.
const endpointAlpha = 0.2

// endpointDecay is how fast what is known of an endpoint fades when it gets
// no samples: its average decays toward the best endpoint's by a factor e
// per endpointDecay of silence, and a sample after a silence weighs more
// (see observe). Without it, an endpoint penalized once (penalize doubles
// its average) would be measured again only when picked, and with three
// endpoints or more it loses every draw to the others: it could starve
// long after it recovered. The decay lets it win draws again once its
// average has faded close enough to the others'; probes (below) measure
// it in the meantime.
const endpointDecay = time.Second

// Probing. The decay alone does not bring a recovered endpoint back in
// every case: its cost tends to the best endpoint's without reaching it,
// so with two endpoints (both are in every draw) and no requests queued,
// the one that was slow once loses every draw for ever. So every
// probeEvery-th pick is a probe: it goes to the endpoint measured least
// recently, if no sample of it and no probe to it is younger than
// probeAfter. Both bounds are deterministic: probes are at most
// 1/probeEvery of the picks (3.1 %), and an endpoint gets at most one probe
// per probeAfter (8 a second) however busy the transport is; an endpoint
// that still fails costs at most that many failed attempts, each followed
// at once by a hedge. A probe's sample, taken after a silence, weighs more
// than a regular one (see observe). At one request a millisecond
// (TestProbeBringsBackRecoveredEndpoint), an endpoint slow (100 ms instead
// of 5) for a second gets a quarter of the traffic back 1.7 s after it
// recovers among three endpoints, 2.2 s among two; one that stays slow
// keeps 0.8 % of it. The pick costs one atomic add more, on a counter with
// a cache line of its own (BenchmarkPick, two sessions of 10 runs
// alternated with the pick before probes, shared 2-core machine at load
// 5–8: serial medians 105 → 108 and 65 → 68 ns; on two Ps at once 116 →
// 114 and 53 → 67 ns — the shared counter costs up to about 15 ns when
// both Ps pick in a tight loop).
const (
	probeEvery = 32
	probeAfter = 125 * time.Millisecond
)

// tieMargin: two endpoints whose costs differ by less than 1/tieMargin
// (6 %) of the higher are a tie, settled by the random draw. Estimates that
// close are noise; and an endpoint measured again after a silence converges
// toward the best one's average without reaching it (its samples are as
// fast, but the old slow ones never quite leave the moving average): with
// strict comparison it would lose every draw against the best.
const tieMargin = 16

// endpoint is one replica and what is known of its recent latency.
type endpoint struct {
	u        *url.URL
	ewma     atomic.Uint64 // math.Float64bits of the moving average, ns; 0 = no sample yet
	seen     atomic.Int64  // when the last sample was folded in, Unix ns
	probed   atomic.Int64  // when the last probe was sent to it, Unix ns
	inflight atomic.Int64  // attempts sent to it and not finished
}

// cost is the endpoint's expected wait at now: its average latency scaled
// by the attempts already queued on it (the peak-EWMA load balancer's
// rule). An average above best, the best endpoint's, decays toward it with
// the time since the endpoint's last sample (endpointDecay). An endpoint
// with no sample yet costs nothing, so every replica gets probed.
func (e *endpoint) cost(best float64, now time.Time) float64 {
	v := math.Float64frombits(e.ewma.Load())
	if v > best {
		if idle := now.UnixNano() - e.seen.Load(); idle > 0 {
			v = best + (v-best)*math.Exp(-float64(idle)/float64(endpointDecay))
		}
	}
	return v * float64(e.inflight.Load()+1)
}

// observe folds a latency sample taken at now into the moving average: with
// weight endpointAlpha right after the previous sample, more after a
// silence (1 − (1 − endpointAlpha)·e^(−silence/endpointDecay)), so that an
// endpoint that was avoided for a while is judged on what it does now.
func (e *endpoint) observe(d time.Duration, now time.Time) {
	x, n := float64(d), now.UnixNano()
	for {
		old := e.ewma.Load()
		v := math.Float64frombits(old)
		if old == 0 {
			v = x
		} else {
			w := endpointAlpha
			if idle := n - e.seen.Load(); idle > 0 {
				w = 1 - (1-endpointAlpha)*math.Exp(-float64(idle)/float64(endpointDecay))
			}
			v += w * (x - v)
		}
		if e.ewma.CompareAndSwap(old, math.Float64bits(v)) {
			e.seen.Store(n)
			return
		}
	}
}

// penalize records a failed attempt at now: the endpoint is treated as at
// least twice as slow as it was, so the next picks avoid it while others
// answer.
func (e *endpoint) penalize(elapsed time.Duration, now time.Time) {
	for {
		old := e.ewma.Load()
		v := max(2*math.Float64frombits(old), float64(elapsed), float64(time.Millisecond))
		if e.ewma.CompareAndSwap(old, math.Float64bits(v)) {
			e.seen.Store(now.UnixNano())
			return
		}
	}
}

// endpoints is a set of replicas and the balancer that picks among them.
type endpoints struct {
	list []*endpoint
	_    [64]byte // picks, written by every pick, on a cache line of its own
	// picks counts the picks so far: every probeEvery-th may be a probe.
	picks atomic.Uint64
	_     [56]byte
}

func newEndpoints(urls []string) *endpoints {
	eps := &endpoints{list: make([]*endpoint, len(urls))}
	for i, s := range urls {
		u, _ := url.Parse(s) // validated by WithEndpoints
		u.Path = strings.TrimSuffix(u.Path, "/")
		u.RawPath = ""
		eps.list[i] = &endpoint{u: u}
	}
	return eps
}

// best returns the lowest moving average of the endpoints that have one,
// or 0 if none has.
func (eps *endpoints) best() float64 {
	b := 0.0
	for _, e := range eps.list {
		if v := math.Float64frombits(e.ewma.Load()); v > 0 && (b == 0 || v < b) {
			b = v
		}
	}
	return b
}

// pick returns the index of the endpoint for the next attempt, at now, of a
// request that has already used the endpoints in the bit set used: a probe
// to a stale endpoint on every probeEvery-th pick (see probeEvery), else
// the better of two unused endpoints drawn at random, the only unused one,
// or — once every endpoint has been used — the better of two drawn from all
// of them.
func (eps *endpoints) pick(used uint64, now time.Time) int {
	n := len(eps.list)
	if n == 1 {
		return 0
	}
	free := n
	if n <= 64 {
		free = n - bits.OnesCount64(used&(1<<n-1))
	}
	if free == 0 || n > 64 {
		used, free = 0, n
	}
	if eps.picks.Add(1)%probeEvery == 0 {
		if i := eps.probe(used, now); i >= 0 {
			return i
		}
	}
	// Draw the i-th and j-th free endpoints (i != j when two are free).
	i := rand.IntN(free)
	if free == 1 {
		return nth(used, i, n)
	}
	j := rand.IntN(free - 1)
	if j >= i {
		j++
	}
	a, b := nth(used, i, n), nth(used, j, n)
	best := eps.best()
	if cb, ca := eps.list[b].cost(best, now), eps.list[a].cost(best, now); cb < ca-ca/tieMargin {
		return b
	}
	return a // a is a random one of the two: near-ties split evenly
}

// probe returns the index of the endpoint not in used whose last sample or
// probe is the oldest, if that is at least probeAfter before now, and
// records the probe; or −1. Of concurrent probes, one wins an endpoint.
func (eps *endpoints) probe(used uint64, now time.Time) int {
	n := now.UnixNano()
	k, oldest := -1, n-int64(probeAfter)
	for i, e := range eps.list {
		if i < 64 && used&(1<<i) != 0 {
			continue
		}
		if t := max(e.seen.Load(), e.probed.Load()); t <= oldest {
			k, oldest = i, t
		}
	}
	if k < 0 {
		return -1
	}
	e := eps.list[k]
	if p := e.probed.Load(); p > oldest || !e.probed.CompareAndSwap(p, n) {
		return -1 // probed meanwhile
	}
	return k
}

// nth returns the index of the k-th (from 0) endpoint not in used.
func nth(used uint64, k, n int) int {
	for i := 0; i < n; i++ {
		if i < 64 && used&(1<<i) != 0 {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	return n - 1 // unreachable: k < number of free endpoints
}

// rewrite returns u pointed at endpoint e: e's scheme and host, e's path
// prefixed to u's.
func (e *endpoint) rewrite(u *url.URL) *url.URL {
	v := *u
	v.Scheme = e.u.Scheme
	v.Host = e.u.Host
	if e.u.Path != "" {
		v.Path = e.u.Path + u.Path
		if u.RawPath != "" {
			v.RawPath = e.u.EscapedPath() + u.RawPath
		}
	}
	return &v
}

// record learns from an attempt sent to e that took d until now: an
// answer's latency, a failure as a penalty, a cancellation (another attempt
// won, or the caller gave up) as a lower bound of its latency.
func (e *endpoint) record(resp *http.Response, err error, d time.Duration, canceled bool, now time.Time) {
	switch {
	case canceled:
		if float64(d) > math.Float64frombits(e.ewma.Load()) {
			e.observe(d, now)
		}
	case err != nil:
		e.penalize(d, now)
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		e.penalize(d, now)
	default:
		e.observe(d, now)
	}
}
