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
// average of latency.
const endpointAlpha = 0.2

// endpoint is one replica and what is known of its recent latency.
type endpoint struct {
	u        *url.URL
	ewma     atomic.Uint64 // math.Float64bits of the moving average, ns; 0 = no sample yet
	inflight atomic.Int64  // attempts sent to it and not finished
}

// cost is the endpoint's expected wait: its average latency scaled by the
// attempts already queued on it (the peak-EWMA load balancer's rule). An
// endpoint with no sample yet costs nothing, so every replica gets probed.
func (e *endpoint) cost() float64 {
	return math.Float64frombits(e.ewma.Load()) * float64(e.inflight.Load()+1)
}

// observe folds a latency sample into the moving average.
func (e *endpoint) observe(d time.Duration) {
	x := float64(d)
	for {
		old := e.ewma.Load()
		v := math.Float64frombits(old)
		if old == 0 {
			v = x
		} else {
			v += endpointAlpha * (x - v)
		}
		if e.ewma.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// penalize records a failed attempt: the endpoint is treated as at least
// twice as slow as it was, so the next picks avoid it while others answer.
func (e *endpoint) penalize(elapsed time.Duration) {
	for {
		old := e.ewma.Load()
		v := max(2*math.Float64frombits(old), float64(elapsed), float64(time.Millisecond))
		if e.ewma.CompareAndSwap(old, math.Float64bits(v)) {
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

// pick returns the index of the endpoint for the next attempt of a request
// that has already used the endpoints in the bit set used: the better of two
// unused endpoints drawn at random, the only unused one, or — once every
// endpoint has been used — the better of two drawn from all of them.
func (eps endpoints) pick(used uint64) int {
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
	if eps[b].cost() < eps[a].cost() {
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

// record learns from an attempt sent to e: an answer's latency, a failure
// as a penalty, a cancellation (another attempt won, or the caller gave up)
// as a lower bound of its latency.
func (e *endpoint) record(resp *http.Response, err error, d time.Duration, canceled bool) {
	switch {
	case canceled:
		if float64(d) > math.Float64frombits(e.ewma.Load()) {
			e.observe(d)
		}
	case err != nil:
		e.penalize(d)
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		e.penalize(d)
	default:
		e.observe(d)
	}
}
