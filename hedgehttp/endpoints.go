package hedgehttp

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tailcut/tailcut/internal/p2c"
)

// endpoint is one replica: its URL and what is known of its recent
// latency.
type endpoint struct {
	u *url.URL
	p2c.Replica
}

// endpoints is a set of replicas and the balancer that picks among them
// (package p2c: power of two choices on latency, probes, hedges to
// replicas not used yet).
type endpoints struct {
	list []*endpoint
	set  p2c.Set // set.Replicas[i] is list[i]'s
}

func newEndpoints(urls []string) *endpoints {
	eps := &endpoints{list: make([]*endpoint, len(urls))}
	eps.set.Replicas = make([]*p2c.Replica, len(urls))
	for i, s := range urls {
		u, _ := url.Parse(s) // validated by WithEndpoints
		u.Path = strings.TrimSuffix(u.Path, "/")
		u.RawPath = ""
		eps.list[i] = &endpoint{u: u}
		eps.set.Replicas[i] = &eps.list[i].Replica
	}
	return eps
}

// pick returns the index of the endpoint for the next attempt, at now, of a
// request that has already used the endpoints in the bit set used
// (p2c.Set.Pick).
func (eps *endpoints) pick(used uint64, now time.Time) int {
	return eps.set.Pick(used, now)
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
		e.Censor(d, now)
	case err != nil:
		e.Penalize(d, now)
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		e.Penalize(d, now)
	default:
		e.Observe(d, now)
	}
}
