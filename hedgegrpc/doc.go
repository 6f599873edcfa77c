// Package hedgegrpc hedges grpc-go calls, unary and streaming, configured
// the way gRPC users already configure hedging: the hedgingPolicy and
// retryThrottling of a gRPC service config (gRFC A6), which grpc-go never
// parses (its method config has no hedgingPolicy field: even an invalid one
// passes NewClient).
//
// On the client, [UnaryClientInterceptor] sends each call's original
// attempt and, if it has not answered after the method's hedge delay, more
// attempts, under a tailcut.Policy that picks the delay from the method's
// measured latency (its auto delay, by default) or takes the service
// config's fixed hedgingDelay, and caps
// the extra load with its budget. The first OK or fatal status wins and the
// other attempts are cancelled; a non-fatal status (UNAVAILABLE by default)
// sends the next attempt at once; a server's grpc-retry-pushback-ms trailer
// pauses hedging. [ParseServiceConfig] reads the service config.
//
// With a service config ([WithServiceConfig]):
//
//   - Only methods with a hedgingPolicy are hedged, the most specific entry
//     winning (method, service, default); without a service config every
//     method through the interceptors is hedged.
//   - No hedgingDelay means adaptive: the policy's delay for that method.
//     "0s" sends every attempt at once, as in A6; a fixed hedgingDelay (or
//     [WithDelay]) is what the method's KeyStats report as its delay.
//   - maxAttempts is capped at 5 and by the policy's MaxHedges + 1, and
//     every hedge also needs the policy's budget and fuses.
//     retryThrottling works as in A6, per server.
//   - Validation follows A6: status codes as integers or names in any case,
//     proto3 JSON durations, tokenRatio truncated to three decimals; errors
//     name the field (methodConfig[1].hedgingPolicy.maxAttempts: …).
//
// Attempts carry hedge-attempt: k and, on hedges,
// grpc-previous-rpc-attempts: k, in place of any value of either key in the
// caller's outgoing metadata (a server forwarding the metadata of the call
// it serves forwards that call's attempt). A trailer grpc-retry-pushback-ms: n pauses
// hedging of that method for n ms; a negative or malformed value stops
// hedging for that call. Each attempt decodes into its own message; only
// the winner's reaches the caller's reply. Per call, [WithoutHedging] and
// [WithDelay] override the policy.
//
// [StreamClientInterceptor] hedges streams as A6 does: the messages sent
// are buffered (up to [WithBufferLimit], 64 KiB by default) and replayed on
// every new attempt, and the stream commits to the first attempt that
// receives response headers — or, with [WithFirstMessage], a response
// message — cancelling the others; past the buffer limit it commits to the
// attempt furthest along and is hedged no more.
//
// A hedge only escapes a slow backend if it goes to another one: under
// grpc-go's default pick_first every attempt shares one connection to one
// server. The load-balancing policy this package registers as
// [BalancerName] sends each call's first attempt to the better of two ready
// backends by measured latency and each hedge to a backend the call has not
// used yet (gRFC A6: hedged RPCs run "typically by different backends");
// a backend once slow gets probes, so it is not starved. With one backend
// (or pick_first) every attempt goes to the same server.
// BenchmarkLoopbackBalancer compares it with round_robin and pick_first
// over loopback backends, one of them slow.
// One service config names it and the hedging policies; [DialOptions]
// gives it to grpc-go (adding the balancer when the config names no
// load-balancing policy) and to both interceptors:
//
//	opts, err := hedgegrpc.DialOptions(p, `{"methodConfig": [{"name": [{"service": "shop.Catalog"}],
//	        "hedgingPolicy": {"maxAttempts": 2}}]}`)
//	cc, err := grpc.NewClient("dns:///catalog:443", append(opts, creds)...)
//
// A service config the resolver delivers (DNS, xDS, a manual resolver)
// replaces that default for grpc-go and, under the balancer, for the
// interceptors: its hedgingPolicy applies without [WithServiceConfig].
// The interceptors log once ([WithLogger]) when hedges can only reach their
// original's backend (no balancer, or one backend ready) and when the
// policy's MaxHedges caps a maxAttempts.
//
// # Metrics and traces with hedging on
//
// Every attempt is a call of its own to grpc-go below the interceptor:
// whatever sits between the interceptor and the wire (stats handlers,
// interceptors chained after it) sees attempts, whatever sits outside it
// sees calls. grpc-go's OpenTelemetry plugin (stats/opentelemetry) has
// both: its interceptor records the per-call metric
// (grpc.client.call.duration), its stats handler the per-attempt ones
// (grpc.client.attempt.started, .duration, .sent_total_compressed_message_size,
// .rcvd_total_compressed_message_size). An interceptor given with
// grpc.WithUnaryInterceptor runs before every chained one, so this
// package's there puts the plugin's interceptor inside it: every hedge is
// then counted as a call, and every loser as a call that failed with
// CANCELLED (500 calls, 59 of them hedged, read as 559 calls, 59 failed).
// Chain the plugin first and the interceptors after it:
//
//	grpc.NewClient(target, opentelemetry.DialOption(o),
//		grpc.WithChainUnaryInterceptor(hedgegrpc.UnaryClientInterceptor(p)),
//		grpc.WithChainStreamInterceptor(hedgegrpc.StreamClientInterceptor(p)))
//
// That counts unary calls right. A stream's per-call metric is recorded by
// a grpc.OnFinish callback, which this package passes to every attempt:
// take hedgegrpcotel.DialOptions instead, which chains the same way, calls
// grpc.OnFinish once per stream with its final status, and records gRFC
// A96's grpc.client.call.hedges. Then, per method and target:
//
//   - grpc.client.call.duration counts calls, each with its final status:
//     a call a hedge answered is one OK call. Its latency is the caller's,
//     hedging included: this is the figure hedging improves.
//   - grpc.client.attempt.started counts attempts: calls plus hedges. The
//     extra load hedging adds is attempt.started / call.duration count − 1.
//   - grpc.client.attempt.duration counts each attempt once with its own
//     status: every hedged call adds one loser, CANCELLED (rarely OK, if
//     its answer beat its cancellation). So CANCELLED attempts are not
//     errors: the error rate of calls is read from grpc.client.call.duration,
//     and that of attempts excludes CANCELLED. Its latency mixes originals,
//     hedges and cancelled losers (a loser's ends at its cancellation): it
//     is not the latency of the server.
//   - grpc.client.call.hedges (hedgegrpcotel) holds, for each call that
//     sent any, its number of hedges.
//
// On the server each attempt is a call (grpc.server.call.*): hedges are
// there, losers as CANCELLED; [Server] counts them apart.
//
// [WithObserver] reports every attempt with the call's context;
// hedgeotel's Observer turns that into events on the caller's span and,
// optionally, a span per attempt under which a stats handler's spans nest.
//
// On the server, [Server] tells hedges from originals (the hedge-attempt
// and grpc-previous-rpc-attempts metadata) in unary calls and streams,
// counts them, and under overload sheds hedges first, with
// RESOURCE_EXHAUSTED and a pushback trailer.
//
// # Tied requests
//
// Hedging duplicates work: a hedge of a heavy query runs it twice. Where
// servers queue calls for a bounded pool of workers, tied requests (see
// tailcut.Tied) hedge the queue and never the work. The server half is
// [Admission]: interceptors that bound the calls executing at once behind
// a FIFO queue and, as a call leaves the queue, send its response headers
// at once with "tailcut-started: 1" ([StartedKey]); a call whose client
// cancels it while it waits leaves without running. The client half is
// [WithTied] with the [StartSignal] stats handler ([DialOptions] adds
// it): each unary call's twin goes at once or after a short delay, the
// first attempt whose headers carry the signal cancels its sibling still
// queued, and the budget pays only for work done twice. Each half works
// alone: a tied client facing a server that sends no signal hedges as
// without WithTied, and an Admission signals only the calls of tied
// clients (they carry [TiedKey]), so other clients see no change.
// `go run ./cmd/tied -protos grpc` in the bench module measures none,
// hedge and tied over loopback gRPC servers.
package hedgegrpc
