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
// GET, HEAD and OPTIONS requests, and any request with an Idempotency-Key,
// are hedged to another replica when slower than the route's hedge delay;
// hedges add at most the route's budget (10 % by default), even in an
// outage. A budget of 0 % is an error: a route that must not hedge says
// hedge: false. A fleet section pools every route's latency sketches with
// the other proxies through Redis (package fleet). The admin listener's
// /debug/tailcut serves, per route and replica, the delay, hedge rate,
// extra load, denials and diagnosis.
//
// A listener serves at most max_in_flight requests at once (2048 by
// default); past it a request gets 503 with Retry-After at once. A client
// cannot hold a slot by stalling or trickling: a request's head must
// arrive within 10 s, a request body gets 408 and an answer is cut off
// when the client moves fewer than min_progress bytes (4 KiB) per
// body_timeout or write_timeout (30 s each) the proxy spends waiting on
// it; time spent waiting on the upstream is not counted, so a long poll,
// or an upload or stream that keeps moving, is not cut. An upgraded
// connection (a WebSocket) holds its slot while open and is closed after
// 2 min with no traffic either way. A listener may
// also shed load from hedging clients of its own (listeners[].shed, a
// hedgehttp.Handler): their hedges are refused first.
//
// Tied requests (hedge the queue, never the work) work both ways. A route
// with policy.tied sends a twin to another replica after that delay, and
// the first of the two to start at its replica cancels the other while it
// is still queued there; the replicas signal a start with a
// hedgehttp.Admission in front of them. A listener with admission (a
// proxy in front of one application) is such a replica: it serves at most
// admission.limit requests at once, queues the others in arrival order,
// sends a hedging client's request a 103 with Tailcut-Started when its
// turn comes, and drops a request cancelled while queued without routing
// it. /debug/tailcut and /metrics report its queue.
//
// Paths are normalised once, before anything else sees them, and matched
// and forwarded in that one form (see [Paths]): escapes of unreserved
// characters decoded, dot-segments removed (RFC 3986 §5.2.4), runs of "/"
// merged; a path with an encoded slash or a backslash gets 400 unless
// paths.escaped_slashes says keep or unescape. So /public/%2e%2e/private
// is /private, which a route for /public/ does not match. A dot-segment
// with parameters is read as servlet containers read it, the dot-segment:
// /public/..;/private is /private too (paths.semicolons: reject answers
// 400 instead). CONNECT and TRACE get 405: the proxy is not a tunnel.
//
// Requests are forwarded without the headers whose names hold "_" (CGI
// and WSGI upstreams would read Hedge_Attempt as Hedge-Attempt) and
// without an upgrade to h2c (whose tunnel would carry requests the routes
// never see). A request framed by both Transfer-Encoding and
// Content-Length, or by Transfer-Encoding in HTTP/1.0, is answered and
// its connection closed (RFC 9112 §6.1). [Config.Warnings], which
// tailcut proxy --check prints, flags an admin listener reachable beyond
// loopback.
//
// An idempotency section ([Idempotency], hedgehttp.Idempotent in front of
// the routes, on a memory or a Redis store) runs each keyed write upstream
// once, whichever copy of it arrives first, and sends it unhedged: a hedge
// of it to another replica would run it twice, and the proxy cannot tell
// whether a slow replica has already applied it. A client's own hedges
// still pay off: the first copy to reach the store runs. Keys are scoped
// by route (and scope_header); the same key with another query or body
// gets 422. Once written upstream a keyed write's key stays held until
// its answer is known: a client that gives up does not cancel it, and an
// answer lost on the way (a reset, the route's timeout, a cut body) is
// kept as the key's answer, so no retry runs it twice; net/http never
// resends it. An upstream's own 502 or 504 frees the key, though: a
// gateway in front of the application that times out after the write
// reached it makes the next copy run it again (see [Idempotency]). A
// reload that renames a keyed route, or adds a more specific prefix,
// moves its keys to another scope. The keyed bodies held at once are bounded by
// idempotency.max_buffered (64 MiB by default), whatever max_in_flight.
//
// Safety: only configured replicas are ever contacted; requests that are
// not safe to repeat (a POST without Idempotency-Key) or whose body is past
// the route's replay limit are sent once, intact; a Hedge-Attempt header
// sent by the client is replaced by the proxy's own. Every response relayed
// from an upstream carries Tailcut-Attempt, the attempt that answered (0
// the primary, 1 a hedge; [AttemptResponseHeader]): curl -i shows it.
package proxy
