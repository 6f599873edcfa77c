package hedgehttp

import (
	"net/http"
	"sync"
)

// HedgePath configures [WithHedgePath].
type HedgePath struct {
	// Base is the transport hedges are sent through. Nil means a clone
	// of the Transport's base, which must then be an *http.Transport (a
	// nil base is one): same settings, a connection pool of its own.
	Base http.RoundTripper
	// Fresh sends every hedge over a connection of its own, dialled for
	// it and closed after it (DisableKeepAlives on Base, or on the
	// clone; Base must then be an *http.Transport). Each dial resolves
	// the host again (net.Dialer does not cache; the system's resolver
	// may), so that a hedge to a name with several addresses may reach
	// another one. It costs a handshake per hedge (TCP, and TLS over
	// https).
	Fresh bool
	// Shared sends hedges through the primaries' pool: the base's. It is
	// what a Transport over a base you give does without WithHedgePath;
	// over the nil base it turns the default hedge pool off. Base and
	// Fresh must then be unset.
	Shared bool
}

// WithHedgePath sends hedges — the header hedges and the Range hedges of
// [WithBodyHedge] — over connections the primaries never use: a pool of
// their own ([HedgePath].Base, or a clone of the base), or a new
// connection each ([HedgePath].Fresh). Over HTTP/2, where every request
// to a host shares one connection, a hedge sent through the shared pool
// rides the connection whose stall it is meant to get around, and waits
// with the primary; through a path of its own it does not. Over
// HTTP/1.1 a hedge never shares its primary's busy connection, but may
// take an idle one of the same bad path. BenchmarkHedgePath measures
// requests whose primary's HTTP/2 connection stalls, hedged through the
// shared pool and through a path of their own.
//
// By default a Transport over the nil base (the tuned clone of
// http.DefaultTransport that every such Transport shares) sends its hedges
// through a second shared clone: one more pool in the process, holding
// connections only to the hosts hedges went to. A Transport over a base
// you give sends hedges through that base unless WithHedgePath says
// otherwise, since a pool of its own would hold connections you did not
// ask for. HedgePath{Shared: true} sends them through the base in either
// case.
func WithHedgePath(p HedgePath) Option {
	return func(c *config) { c.hedgePath = &p }
}

// sharedHedgeBase is the hedge pool of the Transports over the nil base:
// a clone of sharedBase, made once.
var sharedHedgeBase = sync.OnceValue(func() *http.Transport { return sharedBase().Clone() })

// hedgeBase returns the transport hedges go through under p, over base,
// or false when p needs an *http.Transport to clone and has none.
func hedgeBase(base http.RoundTripper, p HedgePath) (http.RoundTripper, bool) {
	b := p.Base
	if b != nil && !p.Fresh {
		return b, true
	}
	if b == nil {
		b = base
	}
	tr, ok := b.(*http.Transport)
	if !ok {
		return nil, false
	}
	tr = tr.Clone()
	tr.DisableKeepAlives = tr.DisableKeepAlives || p.Fresh
	return tr, true
}

// baseFor returns the transport attempt k goes through: the hedge path's
// for a hedge (k ≥ 1) under WithHedgePath, else the base.
func (t *Transport) baseFor(k int) http.RoundTripper {
	if k > 0 && t.hedges != nil {
		return t.hedges
	}
	return t.base
}

// hedgePathOf returns the transport hedges go through under cfg's
// WithHedgePath over base: without it, the shared hedge pool over the
// shared base and nil (the base itself) over any other; nil with Shared,
// and with a bad one, which it records in cfg.
func hedgePathOf(base http.RoundTripper, cfg *config) http.RoundTripper {
	p := cfg.hedgePath
	switch {
	case p == nil && base == http.RoundTripper(sharedBase()):
		return sharedHedgeBase()
	case p == nil:
		return nil
	case p.Shared && (p.Base != nil || p.Fresh):
		cfg.fail("WithHedgePath: Shared sends hedges through the base: Base and Fresh must be unset")
		return nil
	case p.Shared:
		return nil
	}
	h, ok := hedgeBase(base, *p)
	if !ok {
		cfg.fail("WithHedgePath: a clone or Fresh needs an *http.Transport, got a %T", base)
	}
	return h
}
