// Package hedgehttp makes an http.Client hedge its requests: a drop-in
// [http.RoundTripper] built on a [tailcut.Policy].
//
//	client := &http.Client{Transport: hedgehttp.NewTransport(nil, nil)}
//
// The [Transport] sends each safe request (GET, HEAD, OPTIONS, or one with an
// Idempotency-Key header) once, and a hedge when no answer has come by the
// policy's delay for the request's host (chosen from its recent latency),
// if the policy's budget and fuses allow it. The first final answer wins; the others
// are cancelled, their bodies drained (at most 1 MiB) and closed so their
// connections go back to the pool. Every attempt carries a Hedge-Attempt
// header (0 for the primary) so that servers and traces can tell a hedge from
// a primary. Requests that are not safe to repeat, or whose body cannot be
// replayed, are passed to the base transport untouched.
//
// Options choose the key requests are grouped by ([WithKey]), the latency
// signal ([WithFirstByte] for streaming servers), replicas ([WithEndpoints]),
// a hard timeout ([WithTimeout], [WithQuantileTimeout]), which methods
// and bodies may be repeated ([WithMethods], [WithBufferLimit]), and
// whether the primary runs on the caller's goroutine ([WithInlinePrimary]:
// by default only over a base transport known to return when cancelled,
// such as an http.Transport). Per request,
// [WithoutHedging] and [WithDelay] override the policy through the request's
// context.
//
// On the server side, [Handler] is the matching middleware: it reads the
// Hedge-Attempt header, puts the attempt index in the request context
// ([AttemptFromContext]), counts primaries and hedges apart, and when the
// server is busy refuses hedges first, with 429 and Retry-After — which a
// Transport honours as pushback — and primaries only past a hard limit.
// [Idempotent] makes hedged writes safe: the copies of a request carrying
// one Idempotency-Key run the handler once and all get its response, kept
// in a [Store] ([MemoryStore] in one process, or Redis in package
// hedgehttp/idemredis for a fleet).
package hedgehttp
