// Package hedgehttp makes an http.Client hedge its requests: a drop-in
// [http.RoundTripper] built on a [tailcut.Policy].
//
//	client := &http.Client{Transport: hedgehttp.NewTransport(nil, nil)}
//
// The [Transport] sends each safe request (GET, HEAD, OPTIONS, or one with an
// Idempotency-Key header) once, and a hedge when no answer has come by the
// policy's delay for the request's host (chosen from its recent latency),
// if the policy's budget and fuses allow it. The first final answer wins; the others
// are cancelled. A loser that had answered with a final status is drained (at most 1 MiB) and
// its connection goes back to the pool, and so, with [WithLoserGrace], is
// a losing hedge whose answer comes within a grace; any other loser is
// aborted, which over HTTP/1.1 closes its connection, so a later request
// opens a new one (a TLS handshake over https). Over HTTP/2 an aborted
// loser costs a RST_STREAM frame, not a connection: prefer HTTP/2 where the
// server offers it (a nil base does, over TLS), and give a base of your own
// enough idle connections per host (see [NewTransport]). Measured by
// BenchmarkConnectionChurn (go test -run '^$' -bench ConnectionChurn
// -benchtime=1x ./hedgehttp): over HTTP/1.1 about one connection per hedge
// whose primary was still running (about half that many with 16 clients
// and WithLoserGrace), and with 16 clients over http.DefaultTransport as
// it is (2 idle connections per host) about twice as many; over HTTP/2 one
// per client. Every attempt carries a Hedge-Attempt
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
// such as an http.Transport), who is told of every attempt
// ([WithObserver]: package hedgeotel records them on the caller's span),
// whether a large body that stalls mid-way races a Range request for the
// rest of it, pinned to its ETag ([WithBodyHedge]: the bytes read are
// always an unhedged read's; package hedgehttp/s3test tests it with
// minio-go and measures it), and whether hedges take connections of
// their own ([WithHedgePath]; by default, over the nil base).
// Per request,
// [WithoutHedging] and [WithDelay] override the policy through the request's
// context. [New] is NewTransport that returns a bad option's error, naming
// the option, instead of a transport that fails every request with it
// ([Transport.Err]).
//
// [tailcut.Handler] serves the policy's figures (PolicyOf(client)) as JSON
// or text, for an admin endpoint such as /debug/tailcut.
//
// The rules a Transport keeps:
//
//   - Only what is safe to repeat is hedged. A body is replayed through
//     GetBody or buffered up to the buffer limit (64 KiB); anything else (a
//     POST without a key, a large streamed body, a WebSocket upgrade) goes
//     to the base transport once, body intact — and so does a request
//     under [WithoutHedging]. A keyed write sent once is never replayed by
//     net/http either, which resends a request with an Idempotency-Key
//     when a reused connection fails (TestSentOnceNeverReplayedByNetHTTP).
//     A buffered body shorter or longer than its ContentLength fails the
//     request with net/http's error before anything is sent. GetBody is
//     trusted: a hedge sends what it returns, which must be the bytes of
//     Body (net/http checks the length against ContentLength; the bytes
//     are not compared).
//   - Each attempt is a copy of the caller's request (which is never
//     modified) with its own context. Once the caller has closed the
//     response body it may reuse its request, even if a losing hedge is
//     still running.
//   - Connection errors and 502/503/504 send the next attempt at once,
//     budget permitting, on the status line alone (a failed attempt's
//     body is never waited for); if every attempt fails the caller gets
//     the primary's response, its body unread, or error, and a final 5xx
//     counts for the breaker. A failed body declaring at most
//     [FailedDrainLimit] bytes is read on a goroutine of its own meanwhile,
//     so that its HTTP/1.1 connection is kept when it came at once.
//   - A winning hedge never waits for the primary: the primary runs on the
//     caller's goroutine only over a base that returns when cancelled.
//   - A 429 or 503 with Retry-After (seconds or an HTTP date, capped at
//     [MaxPushback]) pauses hedging for its key; primaries are untouched.
//   - An invalid option never panics: [Transport.Err] reports it, and every
//     request fails with it.
//
// [PolicyOf] returns a client's policy, for its Stats or a metrics
// collector. Package hedgehttp/hedgedhttp puts a Transport behind the API
// of github.com/cristalhq/hedgedhttp, for programs that switch from it. Share one policy between transports that call the same
// downstream.
//
// On the server side, [Handler] is the matching middleware: it reads the
// Hedge-Attempt header, puts the attempt index in the request context
// ([AttemptFromContext]), marks a hedge's context so that the calls its
// handler makes are sent once, not hedged again (chain stop; opt out with
// HandlerOptions.NoChainStop), counts primaries and hedges apart, and when the
// server is busy refuses hedges first, with 429 and Retry-After — which a
// Transport honours as pushback — and primaries only past a hard limit.
// Handlers must watch the request context: a cancelled loser frees the
// server only if its handler stops.
//
// Tied requests hedge the queue, never the work: [Admission] bounds how many
// requests a handler executes at once and sends a 103 carrying
// [StartedHeader] as each leaves its queue; a Transport with [WithTied] then
// cancels the request's other copy, still queued elsewhere, which never
// runs. Either half alone keeps plain hedging.
//
// [Idempotent] makes hedged writes safe: the copies of a request carrying
// one Idempotency-Key (a POST, PUT, PATCH or DELETE; the key scoped by
// method, path and an optional Scope, the host not included) run the
// handler once, and every copy gets the same status, header and body, plus
// Idempotent-Replayed: true. The same key with another query or body gets
// 422, a copy still waiting for the first run at the lock timeout 409 with
// Retry-After, and every keyed write 503 while the store cannot be reached
// — never a silent second run. A 5xx, 408, 425, 429, a panic or a run
// abandoned before it wrote anything releases the key, so the next copy
// runs again — unless the handler called [MarkOutcomeUnknown] (a proxy that
// sent the write on and lost the answer): the key then keeps what it
// answered, or a 502 "Outcome unknown", and never runs again. Keyed bodies
// held in memory are bounded in bytes across requests (MaxBuffered, 64
// MiB; past it 503); BenchmarkIdempotentHeld measures what a held request
// costs beyond its body. The [Store] decides where
// "once" holds: [MemoryStore] (the default) within one process, enough when
// every copy reaches the same server; package hedgehttp/idemredis across a
// fleet, so that hedges sent to other replicas ([WithEndpoints]) still run
// once. BenchmarkIdempotent measures its cost. A handler behind it that
// forwards keyed writes sends them through [SendOnce], or net/http may send
// one a second time by itself.
package hedgehttp
