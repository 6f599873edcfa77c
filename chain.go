package tailcut

import (
	"context"
	"time"
)

// WithChainStop returns a context under which [Do] (and the adapters:
// hedgehttp's Transport, hedgegrpc's client interceptors) begins the
// request with [Policy.BeginChained] and sends the primary only: the
// hedge it would have sent at its slot is denied with [DenyChained] and
// counted so (Counts.DeniedBy(DenyChained)), and the request pays a
// token of the budget instead of depositing into it.
//
// It is the mark of a request that arrived as a hedge. In a chain of
// services that all hedge, a hedge of the first hop whose handler hedges
// its own calls again sends, at the last of n hops, up to (1+m)ⁿ
// attempts for one request, m hedges per hop; with the mark, the calls a
// hedge makes go once, and each hop pays for the hedges it forwards from
// the budget its own hedges draw on, so that the extra load a chain sends
// its last hop stays within one hop's budget. The server
// middleware puts it there: hedgehttp.Handler and hedgegrpc.Server mark
// the context of every request whose attempt index (Hedge-Attempt,
// hedge-attempt) is 1 or more, unless told not to. Per-request overrides
// ([WithDelay], [WithFeatures]) set on top of it keep it.
func WithChainStop(ctx context.Context) context.Context {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	switch {
	case o.chained:
		return ctx
	case o == requestOptions{}:
		return context.WithValue(ctx, ctxKey{}, chainOnly) // boxed once
	}
	o.chained = true
	return context.WithValue(ctx, ctxKey{}, o)
}

// chainOnly is the options of a context marked by WithChainStop alone,
// boxed once: a server marks every hedge it serves.
var chainOnly any = requestOptions{chained: true}

// ChainStopped reports whether ctx carries the mark of [WithChainStop],
// for adapters that drive the [Policy] themselves: they begin the
// requests made under it with [Policy.BeginChained].
func ChainStopped(ctx context.Context) bool {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	return o.chained
}

// StopChain marks r as made while serving a request that arrived as a
// hedge: [Policy.Hedge] denies its hedges, and retries after a failure,
// with [DenyChained], before any other fuse is asked and without
// touching the budget. The caller should not ask again for a request so
// denied. [Policy.BeginChained] marks the request it begins; StopChain
// marks a request begun otherwise, whose deposit into the budget stays
// made.
func (r *Request) StopChain() { r.chained = true }

// beginCtx begins a request of [Do] under its context's options o:
// chain-stopped if its context is marked, else with the adapter's
// features f and those of o.
func (p *Policy) beginCtx(key string, f *Features, o requestOptions, now time.Time) Request {
	if o.chained {
		return p.BeginChained(key, now)
	}
	return p.beginOpts(key, f, o.feat, now)
}
