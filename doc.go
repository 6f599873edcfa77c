// Package tailcut cuts tail latency with adaptive hedged requests.
//
// A hedged request sends its primary attempt and, if no answer has come by
// the time a healthy request usually has one, a backup attempt (a hedge);
// the first answer wins and the others are cancelled. When to hedge is read
// from the recent latency per key (package latency): by default the delay,
// and a second hedge's, that the measured distribution predicts give the
// lowest p99 within the budget (the auto delay; see [Config.Quantile]); how
// much extra load hedges may add is capped by a budget (package budget),
// even in an outage; only requests that are safe to repeat are hedged.
//
// # Using Do
//
// Wrap any call that is safe to repeat — a cache or database read, an RPC
// of a client other than net/http's or grpc-go's (their adapters are
// hedgehttp and hedgegrpc):
//
//	v, err := tailcut.Do(ctx, p, "redis:GET", func(ctx context.Context, a tailcut.Attempt) (string, error) {
//		return rdb.Get(ctx, key).Result()
//	})
//
// What counts as a failure ([ErrorClass]): a network error (net.Error),
// io.EOF, a context's error, or an error marked [Transient]. Such an
// attempt sends the next one at once and counts for the circuit breaker.
// Every other error is an answer — redis.Nil, sql.ErrNoRows, a "not found"
// — returned at once as the client returned it (err == redis.Nil holds),
// and a sample of the downstream's latency; [Final] marks an answer that
// would look like a failure. A [Hedger] with Classify sets other rules.
//
// How to choose keys: a key is what the policy learns a latency
// distribution for — one downstream and operation ("redis:GET",
// "users-db:by-id"), never the item asked for. Each key needs MinSamples
// (20) answers before its delay is learned, and at most MaxKeys (1,024)
// are kept. Past MaxKeys a key is tracked only once it comes back soon,
// so that keys asked for once do not evict keys that learn; the others
// share one state ([UntrackedKey]) that learns from them all and gives
// them its delay: a key per item hedges at the delay of its items
// together, never its own.
// [GatherOver] fans out over items under one key; [DoReplicas] sends each
// attempt to another replica, the primary to the faster by recent
// latency, with at most one hedge fewer than replicas.
//
// What to watch: fmt.Println(p.Stats()) prints a summary, a line per key;
// [Handler] serves it as JSON for /debug/tailcut. Counts.Failed and the
// breaker ("breaker open") say the downstream fails; the extra load says
// what hedging costs; the diagnosis ("masking") says requests are slow by
// cause, not by chance. Cancelling a loser saves the server's work only
// if the client abandons a request sent: go-redis looks at the context
// only before it writes, so every hedge sent is served in full.
//
// # Layers and packages
//
// The package has two layers:
//
//   - [Policy] decides. It is pure bookkeeping: every method takes now and
//     none starts a goroutine, sleeps or reads the clock, so the same code
//     runs inside a client and, in virtual time, inside the lab (package lab).
//   - [Do], [Gather] and [Hedger] execute: they run attempts in goroutines,
//     time the hedges, cancel the losers and report every outcome to the
//     policy.
//
// Below the policy, package latency owns the windowed latency estimator
// (DDSketch) and its tail predictions, package budget the hedge budgets,
// internal/predict the significance tests, the joint allocation of
// a key's budget among its feature buckets and the quantile regression
// on numeric features (this package owns the buckets
// and their schedules, and feeds it), and internal/schedule the auto
// delay's choice of a key's hedge schedule from its distribution, the
// served target after a shift and the shift test itself, with the state
// a key carries for them (this package decides when a key's schedule is
// recomputed, keeps that state in the key and puts the choice in force),
// and internal/cycle a key's latency cycle, detected from its finished
// windows, and the distribution it forecasts (this package feeds each key's
// tracker and decides when the auto delay uses it).
// Above it, package hedgehttp adapts net/http (client Transport,
// server Handler, the Idempotent middleware), hedgegrpc adapts grpc-go,
// hedgeprom and hedgeotel export metrics and traces, fleet pools sketches
// between instances, and proxy is the sidecar behind `tailcut proxy`.
// Nothing imports upwards: the adapters use this package's public API only.
// Most users start with an adapter.
//
// # Do
//
// [Do] sends the primary; if it has not answered by the key's hedge delay it
// sends a hedge, if the policy grants it; the first answer wins and every
// other attempt is cancelled. An attempt that fails without an answer (see
// Using Do) launches the next one at once. If every attempt fails, Do returns the primary's
// result and error. If the caller's context ends, Do returns ctx.Err() —
// always, even when an attempt answered meanwhile (that result goes to
// [Hedger.Discard]) — and the request counts in Counts.Abandoned, never as
// failed nor as an error for the breaker: a caller giving up says nothing
// about the downstream. Do returns as soon as it has a winner, so a hedge
// launched just before may still start after it returns: the attempt
// function must not read what the caller changes after Do returns. Hedge
// k goes at [Request.HedgeAt](k): the key's delay for the first, and under
// the auto delay each later one [AutoChoice].Gap after the one before.
//
// [Gather] fans out one hedged leg per key and returns the results in
// order, [GatherOver] one leg per item under one key; [Hedger.Gather] with
// [GatherOptions] Need or Wait returns a good-enough fan-out. [Hedger] carries the hooks adapters need: Classify
// (success, fatal, retryable, server error), Discard (close what a loser
// returned), Keep (keep the winner's context alive, e.g. until a response
// body is closed) and InlinePrimary (run the primary on the caller's
// goroutine, for calls that return promptly when cancelled).
// [WithoutHedging] and [WithDelay] override one request; [WithChainStop]
// marks the calls made while serving a hedge, which are then sent once.
//
// # When to hedge: the auto delay
//
// With Quantile unset the policy predicts, from the measured distribution,
// the Target percentile that each of a set of candidate schedules would give
// — for independent attempts P(min(X₁, d + X₂) > t) = P(X > t) · P(X > t − d),
// extended to later hedges — with the share of hedges the budget would deny
// at that rate modelled, and keeps the best ([AutoChoice], in
// [KeyStats].Auto). A fixed quantile that hedges about as often as the
// budget allows is a trap: denials then fall at random, and a denied
// straggler is the p99; the model sees that. The schedule is recomputed on
// window rotation and every few hundred observations, never per request.
// A choice does not leave the regime in force for a distant one while that
// would put more requests above the level served so far: the p99 of traffic
// served by two schedules in turn is worse than either's. Later hedges
// (MaxHedges 2 by default) go at the earliest time at which they cost at
// most a twentieth of the budget's ratio (half a point of traffic at the
// default 10 %), and only while the budget keeps a
// reserve of its burst ([AutoChoice].Reserve), so that they rarely take the
// tokens other requests' first hedges need. An explicit Quantile (0.95 is
// The Tail at Scale's rule) pins the delay instead.
//
// What the estimator learns is the latency of each primary from its own
// start. A primary cancelled because a hedge won is only known to be longer
// than its cancellation: it is learned as censored, and the distribution
// the auto delay reads spreads its weight over the primaries that ran that
// long (Kaplan–Meier), so the learned tail is the true one. Hedges are not
// learned (only the fast ones finish), nor is the hedged end-to-end latency:
// a delay learned from it would creep down until every request is hedged.
//
// When the latency shifts (a deploy, a cold cache, an outage starting or
// ending), far more — or, over a longer stretch, far fewer — primaries
// outlive the delay than the schedule predicted; the auto delay then
// restarts its windows and relearns from the new latencies alone
// ([KeyStats].Shifts). Until the requests served before an upward shift
// leave the windows, it aims at the deeper percentile of the new traffic
// that keeps the whole at the Target (at most the p97 for the p99), but not
// at the cost of the deep tail.
//
// When a key's latency follows a cycle (diurnal traffic, a periodic batch
// job), the live windows follow it a window late and hedge the trough as
// much as the peak that makes the p99; once the policy has found the cycle
// in the key's finished windows (or Config.Period gives it), the auto delay
// chooses from the distribution of a whole cycle, mixed with the live one
// ([KeyStats].Period). A key without a cycle is decided as without it.
//
// # Predictive hedging
//
// Some slowness is known before the request goes: its route, its size, the
// replica it goes to, a cache-miss hint. With Config.Predictive a request
// may carry up to four labels and four numbers ([Features], [WithFeatures],
// [Policy.BeginWith]; the adapters add the method and a size bucket).
// Requests with the same labels share a bucket: a latency sketch of their
// own, blended with the key's by sample count. A label added with
// [Features.Where] names where the primary goes; its hedges go elsewhere and
// their latencies are learned apart. Numbers feed an online quantile
// regression per key, whose predicted classes are buckets too. A bucket
// whose latencies do not differ significantly from the key's (a
// Kolmogorov–Smirnov test and a test of its tail shares) keeps the key's
// schedule; the buckets that differ share the budget the key's schedule
// would spend on their traffic, their delays chosen together to minimise
// the p99 of the mix — hedging early where requests are often slow and
// their hedges are not — and used only when that promises a clearly lower
// p99 than the key's own schedule. A bucket whose hedges are worth less than
// half the best one's sends its first hedge only while the budget keeps
// tokens for the better ones ([BucketStats]). Keep labels of low
// cardinality: IDs make a bucket per request, each evicting another before
// it learns anything. A key keeps at most FeatureBuckets buckets, least
// recently used evicted. Without Predictive features are never read.
// BenchmarkDecisionPathPredictable and BenchmarkDecisionPathValues measure
// the cost on the request path, BenchmarkModelRecompute the recomputation.
//
// # Fuses, dry run and what to watch
//
// Every fuse switches off hedges only, never primaries, and each denial is
// counted per key by cause ([Decision]; Counts.DeniedBy): the per-key
// circuit breaker on the downstream's error rate ([BreakerConfig]: failed
// attempts and server errors such as HTTP 500, not attempts ended by their
// caller), server pushback ([Policy.Pushback]), the user's load signal
// (Config.Overloaded), the rollout sample (Config.SampleRate;
// [Policy.BeginID] makes it the same in every process) and the cap on hedges
// in flight. Per key the policy judges the hedge trigger rate over a
// window ([Diagnosis]): under 15 % healthy, 15–50 % a grey zone, above 50 %
// one warning — hedging is then masking a server-side cause (lock
// contention, slow queries, GC): read the server's profile, not the
// client's p99.
//
// To try hedging before paying for it, run with Config.DryRun, read
// [KeyStats].PredictedP99 (or [Policy.Predict]), then switch hedging on. The
// prediction assumes independent attempts and a server that does not slow
// down under the extra load: trust it less for GC pauses or lock
// contention. [Policy.Stats] reports counts and per-key state;
// [Policy.OnAttempt] reports every attempt as it ends (package hedgeprom's
// latency histogram is fed from it).
//
// # Memory
//
// A key holds at most 32 KiB of sketch (two windows and their censored
// parts, latency.DefaultMaxBins bins each; BenchmarkKeyMemory measures a
// key's heap); at most MaxKeys keys are kept, plus the state the keys not
// tracked share, and past MaxKeys a doorkeeper of 8 bytes per key.
// With Predictive, each feature bucket holds at most about 9 KiB (18 KiB
// for a Where bucket), and the regression about 300 bytes per key. From
// its first finished window on, a key of the auto delay keeps a cycle
// tracker (Config.Period; none when it is negative): a history of 256
// numbers and the window in progress, under 10 KiB, and once a cycle is
// found a sketch per phase of it, at most 16 phases and as many emptied for
// reuse.
package tailcut
