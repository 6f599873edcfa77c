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
// long after it recovered. With it, a recovered endpoint wins draws again
// within a few endpointDecay (about 1.6 s when its penalized average is
// twice the best and another endpoint is 20 % slower than the best), and an
// endpoint still failing costs about one failed attempt every few seconds.
const endpointDecay = time.Second

// endpoint is one replica and what is known of its recent latency.
type endpoint struct {
	u        *url.URL
	ewma     atomic.Uint64 // math.Float64bits of the moving average, ns; 0 = no sample yet
	seen     atomic.Int64  // when the last sample was folded in, Unix ns
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

// endpoints is a set of replicas.
type endpoints []*endpoint

func newEndpoints(urls []string) endpoints {
	eps := make(endpoints, len(urls))
	for i, s := range urls {
		u, _ := url.Parse(s) // validated by WithEndpoints
		u.Path = strings.TrimSuffix(u.Path, "/")
		u.RawPath = ""
		eps[i] = &endpoint{u: u}
	}
	return eps
}

// best returns the lowest moving average of the endpoints that have one,
// or 0 if none has.
func (eps endpoints) best() float64 {
	b := 0.0
	for _, e := range eps {
		if v := math.Float64frombits(e.ewma.Load()); v > 0 && (b == 0 || v < b) {
			b = v
		}
	}
	return b
}

// pick returns the index of the endpoint for the next attempt, at now, of a
// request that has already used the endpoints in the bit set used: the
// better of two unused endpoints drawn at random, the only unused one, or —
// once every endpoint has been used — the better of two drawn from all of
// them.
func (eps endpoints) pick(used uint64, now time.Time) int {
	n := len(eps)
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
	if eps[b].cost(best, now) < eps[a].cost(best, now) {
		return b
	}
	return a
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
