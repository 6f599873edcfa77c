// Package proxy is the sidecar behind `tailcut proxy`: a hedging reverse
// proxy that gives services in any language tailcut's hedged requests by
// pointing them at it.
//
// A YAML [Config] lists listeners, upstream pools of replica URLs, and
// routes (host and path prefix) to pools, each route with its own hedging
// policy. A [Server] serves the routes with net/http/httputil.ReverseProxy
// over a hedgehttp.Transport per route (WithEndpoints over the pool), and an
// admin listener (loopback by default) with /metrics, /healthz and
// /debug/tailcut.
//
// A listener may also shed load from hedging clients of its own
// (listeners[].shed, a hedgehttp.Handler): their hedges are refused first.
//
// An idempotency section ([Idempotency], hedgehttp.Idempotent in front of
// the routes, on a memory or a Redis store) runs each keyed write upstream
// once, whichever copy of it arrives first, and sends it unhedged.
//
// Safety: only configured replicas are ever contacted; requests that are
// not safe to repeat (a POST without Idempotency-Key) or whose body is past
// the route's replay limit are sent once, intact; a Hedge-Attempt header
// sent by the client is replaced by the proxy's own.
package proxy
