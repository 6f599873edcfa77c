package tailcut

import (
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tailcut/tailcut/internal/key"
	"github.com/tailcut/tailcut/internal/predict"
	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/internal/shard"
	"github.com/tailcut/tailcut/latency"
)

// Decision is the policy's answer to "may a hedge go now?".
type Decision uint8

const (
	// Send means the hedge is granted and paid for: send it.
	Send Decision = iota
	// DenyBudget means the hedge budget has no token left.
	DenyBudget
	// DenyMaxHedges means the request already sent Config.MaxHedges hedges
	// (or as many as its schedule allows), or, on an auto schedule of
	// fewer hedges than MaxHedges that asks for no retry of a denied hedge
	// (AutoChoice), already asked for as many as it allows.
	DenyMaxHedges
	// DenyPushback means the downstream asked for less traffic (HTTP 429 or
	// 503 with Retry-After, gRPC grpc-retry-pushback-ms) and the pause it
	// asked for has not ended; see [Policy.Pushback].
	DenyPushback
	// DenyBreaker means the key's circuit breaker is open or half-open:
	// too many recent attempts failed (see [BreakerConfig]).
	DenyBreaker
	// DenyLoad means Config.Overloaded reported the client overloaded.
	DenyLoad
	// DenySampling means the request is outside Config.SampleRate.
	DenySampling
	// DenyInflight means Config.MaxInflightHedges hedges are in flight.
	DenyInflight
	// DryRun means the hedge would have been sent, but Config.DryRun is
	// set: it is counted (Counts.WouldHedge) and paid for in the budget,
	// and not sent.
	DryRun
	// DenyEarly means the slot came too early and the request's schedule
	// has moved: the request began before its key had any answer, with
	// the default WarmupDelay as a guess, and what the key has learned
	// since (or that no answer has come yet) puts its first hedge later.
	// Ask again for the same hedge at the request's new HedgeAt(1), its
	// new Delay, from its start; the hedges after it follow that schedule.
	// A loop that handles it as any other denial loses that slot and
	// nothing else. See Config.WarmupDelay.
	DenyEarly
	// DenyChained means the request was made while serving a request that
	// arrived as a hedge ([WithChainStop], [Request.StopChain]): a hedge
	// of a hedge would multiply the attempts at every hop of a chain of
	// hedging services. The caller asks for no further hedge of it.
	DenyChained
	// DenyGain means the key's gain fuse is open, or the request is held
	// out to measure it: the key's hedges were measured not to improve
	// its tail (see [GainConfig]).
	DenyGain

	numDecisions
)

// NumDecisions is the number of Decision values, for arrays indexed by
// Decision such as Counts.Denied.
const NumDecisions = int(numDecisions)

var decisionNames = [...]string{
	Send:          "send",
	DenyBudget:    "budget",
	DenyMaxHedges: "max_hedges",
	DenyPushback:  "pushback",
	DenyBreaker:   "breaker",
	DenyLoad:      "load",
	DenySampling:  "sampling",
	DenyInflight:  "inflight",
	DryRun:        "dry_run",
	DenyEarly:     "early",
	DenyChained:   "chained",
	DenyGain:      "gain",
}

// String returns the decision's short name, used as a metric label
// ("send", "budget", "max_hedges", "pushback", "breaker", "load",
// "sampling", "inflight", "dry_run", "early", "chained", "gain").
func (d Decision) String() string {
	if int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "unknown"
}

// Outcome is how one attempt ended, as reported to [Policy.Observe].
type Outcome uint8

const (
	// Completed means the attempt produced an answer (a success or a final
	// error such as an HTTP 404): its latency is a sample of the
	// downstream's latency.
	Completed Outcome = iota
	// Failed means the attempt failed in a way that says nothing about the
	// latency of a healthy answer (a refused connection, a 503): its latency
	// is not learned.
	Failed
	// Canceled means the attempt was cancelled because another one won. Its
	// latency, measured up to the cancellation, is a lower bound of what it
	// would have taken: a cancelled primary is learned as is when it ran
	// past the delay (a lower bound above the delay keeps the quantiles
	// below it honest); see [Policy.Observe]. It is never an error for the
	// circuit breaker.
	Canceled
	// Errored means the attempt produced an answer that reports a failure
	// of the downstream itself (an HTTP 500, a gRPC INTERNAL) — final, so
	// not retried, yet an error for the circuit breaker. Like Failed, its
	// latency is not learned: a fast error says nothing about how long a
	// healthy answer takes. Completed stays the outcome of every other
	// answer, a 404 included.
	Errored
	// Abandoned means the attempt ended because its caller gave up: the
	// request's context was cancelled or its deadline passed (see
	// [CallerGone]), whatever the attempt returned then. The caller's
	// choice says nothing of the downstream's health: like Canceled it is
	// never an error (nor a success) for the circuit breaker, and its
	// latency is learned as Canceled's is, a lower bound, never as a
	// completed sample. End such a request with [Policy.Abandon].
	Abandoned
)

// lruGrain is the resolution of a key's lastUsed (key.LRUGrain).
const lruGrain = key.LRUGrain

// recomputeEvery is how many observations a key takes before its cached
// delay is recomputed (key.RecomputeEvery).
const recomputeEvery = key.RecomputeEvery

// Policy decides when to hedge: the delay to wait per key, whether a hedge
// may go now, and what was learned from each attempt.
//
// A Policy is pure bookkeeping. Every method takes now; none starts a
// goroutine, sleeps or reads the clock — [Do] and the adapters supply the
// real time, the lab a virtual one. A Policy is safe for concurrent use, and
// one Policy should serve all requests to a downstream so that its budget
// caps their extra load together.
//
// The request path is [Policy.Begin], then [Policy.Hedge] before each hedge,
// [Policy.Observe] once for every attempt sent, and [Policy.End] (or
// [Policy.Abandon], if the caller gave up first). Together
// they allocate nothing; BenchmarkDecisionPath measures their cost.
// The auto delay's recomputation, paid by the request that triggers it
// (every 256 observations of a key and at each window rotation), allocates
// a few small objects, and the cycle tracker's feed, once a window, a few
// sketches' worth (BenchmarkAutoDelayCycle measures both).
//
// A recomputation runs in Begin (and Delay) when it is due, and in one
// case in Hedge: while WarmupDelay is left at its default, the first
// hedge of a request begun before its key's first answer is re-timed at
// each of its slots until it is granted ([DenyEarly]), and once the key
// has an answer the re-timing asks the key for its delay in force, which
// recomputes it first when due, as Begin would. Only the requests begun
// before their key's first answer pay it, at most once per slot: the
// warm-up delay's recomputation (BenchmarkHedgeRetime), or, when the key
// learned its delay while such a request waited, the auto delay's
// (BenchmarkAutoDelayCycle). The feature model's recomputation runs in
// BeginWith ([Policy.BeginWith]).
//
// [Do] pools its per-call channel and timer in the Policy: in a test, a
// Policy used inside a testing/synctest bubble must be created inside it
// (Default() does not pool and may be used anywhere).
type Policy struct {
	cfg Config

	mu   sync.RWMutex
	keys map[string]*keyState // written under mu, which readers of the whole set take
	// index holds the same keys for the request path's lookups, which
	// take no lock and write nothing shared (keyindex.go). It is written
	// under mu beside keys.
	index keyIndex
	// last is the state of the key created last: a client of one
	// downstream host, the common case, finds it there without the map and
	// its lock; other keys are looked up in the map. It is written only
	// when a key is created, under mu, so that lookups of several keys do
	// not take turns writing it. An eviction happens only to make room for
	// a new key, which becomes last: last is never an evicted key.
	last atomic.Pointer[keyState]

	// Past MaxKeys (keyOf's admission rule): seen is the doorkeeper of
	// the keys not tracked, nil until the policy first tracks MaxKeys
	// keys; untracked is the state they share, their parent, nil until
	// the first of them.
	seen      atomic.Pointer[key.Doorkeeper]
	untracked atomic.Pointer[keyState]

	// evicted sums the counters of the keys evicted so far; Stats adds
	// the live keys' to make the totals. Requests keep no total of their
	// own: two atomic adds per request on a line every core shares.
	evicted counters

	// set is what the keys read of the configuration when they compute
	// their schedules (internal/key): the auto delay's settings, the
	// warm-up rules and the fallbacks.
	set    key.Settings
	cycles key.Cycles // the keys' cycle trackers (Config.Period)

	// states pools Do's per-call state (*state[T], any T) with its
	// channels and timer (do.go, internal/exec). It is per policy, not global, because
	// channels and timers must not cross testing/synctest bubbles; noPool
	// turns it off for Default().
	states sync.Pool
	noPool bool

	onAttempt atomic.Pointer[[]func(AttemptEvent)] // OnAttempt's functions (onattempt.go); nil: none

	gainOn      bool          // the gain fuse is on: Enabled, not a dry run
	inflight    atomic.Int64  // hedges granted and not yet observed
	chainDebt   atomic.Int64  // tokens owed by requests begun chain-stopped (chainpay.go)
	sampleSeq   atomic.Uint64 // sequence for requests sampled without an ID
	sampleBelow uint64        // a request is sampled if its hash is below; 0: no sampling
}

// keyState is what the policy knows of one key: the key's latency and
// schedule in force (key.State), and what the policy adds — its counters,
// fuses, diagnosis and feature model. The fields a request without a
// hedge touches come first, so that they share three cache lines (and the
// breaker's): over a network a request finds them evicted by the
// kernel's and the transport's work, and each line is a miss
// (TestKeyStateLayout). What each request writes is elsewhere — its
// counts at the end, or by shard once the key's requests have met on two
// cores (key.State.Spread), its latency in the estimator — or written
// only when it changes (lastUsed, the delay in force), so that requests
// on different cores read these lines without taking them from each
// other.
type keyState struct {
	// The first cache line: what every Begin reads, these two and the
	// key.State's first 48 bytes; its second line holds the rest of the
	// schedule in force and the auto delay's request-path state.
	lastUsed atomic.Int64 // now.UnixNano() of the last Begin, to key.LRUGrain
	diagEnd  atomic.Int64 // UnixNano at which the diagnosis window ends; 0 before the first request (diagnosis.go)
	key.State
	// The rest of key.State's last line is left empty: it holds the
	// key's count of observations, which every Observe writes.
	_ [stateTail]byte

	// Begin reads used and the gain fuse's round; Hedge reads and writes
	// the two after it, on the same line. The padding makes the
	// breaker start the next line, so that its fast path reads one line.
	used         atomic.Int64 // 1 + ns of the delay the last request's caller set (Request.UseDelay); 0: none
	gain         gainFuse     // the gain fuse (gain.go)
	pausedUntil  atomic.Int64 // UnixNano before which hedges are denied (pushback)
	firstGranted atomic.Int64 // first hedges granted (sent, or would be in a dry run)
	_            [16]byte

	breaker breaker
	diag    key.Diagnosis

	model key.Model // predictive hedging's feature buckets and regression (model.go, regress.go)

	counts keyCounts // the key's counters (counters.go)
}

// count returns the key's counter of the Counts field at offset off
// (keyCounts.count): the key's own, or the calling goroutine's stripe's
// once the key's requests have met on two cores.
func (ks *keyState) count(off uintptr) *atomic.Int64 { return ks.counts.count(off, ks.Spread()) }

// stateTail is the room left on the cache line where a keyState's
// key.State ends.
const stateTail = (shard.Line - (shard.Line-key.FirstLine+unsafe.Sizeof(key.State{}))%shard.Line) % shard.Line

// New returns a Policy for cfg, or an error naming the first invalid field.
func New(cfg Config) (*Policy, error) {
	guess := cfg.WarmupDelay == 0
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	// Validate the estimator settings once, so that creating a key cannot
	// fail later.
	if _, err := latency.New(cfg.estimatorConfig()); err != nil {
		return nil, err
	}
	p := &Policy{cfg: cfg, keys: make(map[string]*keyState)}
	p.index.init()
	p.sampleBelow = sampleThreshold(cfg.SampleRate)
	p.gainOn = cfg.Gain.Enabled && !cfg.DryRun // a dry run sends no hedge to measure
	p.set = key.Settings{
		Sched: schedule.ParamsFor(cfg.Budget), Auto: cfg.Quantile == 0, Guess: guess,
		Quantile: cfg.Quantile, Multiplier: cfg.Multiplier,
		WarmupDelay: cfg.WarmupDelay, MinDelay: cfg.MinDelay, MaxDelay: cfg.MaxDelay,
		Window: cfg.Window, MinSamples: cfg.MinSamples,
		Parent: (*parentOf)(p), Logger: cfg.Logger,
	}
	p.set.Sched.Target, p.set.Sched.MaxHedges = cfg.Target, cfg.MaxHedges
	p.set.Sched.Tolerance = max(cfg.Tolerance, 0)
	p.set.Sched.MinDelay, p.set.Sched.MaxDelay = cfg.MinDelay, cfg.MaxDelay
	p.set.Sched.Window, p.set.Sched.MinEvery = cfg.Window, recomputeEvery
	p.set.FeatureBuckets, p.set.ClassHashes = cfg.FeatureBuckets, classHashes
	p.set.Alloc = predict.Params{
		Target: cfg.Target, MaxHedges: cfg.MaxHedges, MinDelay: cfg.MinDelay, MaxDelay: cfg.MaxDelay,
		Rate: schedule.CapShare * p.set.Sched.Ratio,
	}
	if p.set.Auto && cfg.Period >= 0 {
		p.cycles.Configure(cfg.Window, cfg.Period)
		p.set.Cycles = &p.cycles
	}
	return p, nil
}

var (
	defaultOnce   sync.Once
	defaultPolicy *Policy
)

// Default returns the process-wide policy with the default [Config], used
// where a nil *Policy is passed.
func Default() *Policy {
	defaultOnce.Do(func() {
		p, err := New(Config{})
		if err != nil {
			panic("tailcut: default config invalid: " + err.Error()) // a bug, not input
		}
		// The shared policy may serve several testing/synctest bubbles:
		// it must not pool their channels and timers.
		p.noPool = true
		defaultPolicy = p
	})
	return defaultPolicy
}

func (c *Config) estimatorConfig() latency.Config {
	return latency.Config{Window: c.Window, MinSamples: c.MinSamples}
}

// Config returns the configuration in force, with defaults filled in —
// but Target and Tolerance left zero when Quantile is set (the pairs are
// refused), so that New(p.Config()) makes a policy configured as p.
func (p *Policy) Config() Config {
	c := p.cfg
	if c.Quantile != 0 {
		c.Target, c.Tolerance = 0, 0
	}
	return c
}

// Request is the policy's record of one request in flight, returned by
// [Policy.Begin]. It is a small value meant to live on the caller's stack;
// pass its address to the other methods. A Request is used by one goroutine
// at a time.
type Request struct {
	ks       *keyState
	name     string // the key, for a request to an untracked key (ks is the parent's); "" otherwise
	delay    time.Duration
	gap      time.Duration // from hedge k−1 to hedge k, k ≥ 2; 0 means delay
	limit    int           // most hedges for this request
	hedges   int           // hedges granted so far
	id       uint64        // hash of the request ID (BeginID)
	start    int64         // when it began, ns since the epoch; set only while blind
	began    int64         // when it began, ns since the epoch, for the gain fuse
	phase    uint64        // the gain fuse's round it began in (gain.go)
	would    uint8         // hedges that would have been sent (dry run)
	inflight uint8         // bit k set while granted hedge k is in flight
	hasID    bool
	asked    bool        // a hedge was asked for
	blind    bool        // its key had no answer when it began, and its slots may be re-timed (warmup.go)
	chained  bool        // made while serving a hedge: its hedges are denied (chain.go)
	asks     uint8       // hedges asked for, granted or not (up to 255)
	sampled  uint8       // 0 undecided, sampledIn, sampledOut
	own      bool        // hedged at a delay of the caller's (UseDelay): not a sample of the hedges' wins
	share    float32     // the predicted P(X > delay) at Begin; < 0: not a sample of it (internal/schedule, State.Sample)
	b        *key.Bucket // the feature bucket that learns the primary (model.go); nil without features
	pred     bool        // the schedule is the bucket's own
	low      bool        // and its first hedge leaves a reserve in the budget (key.LowReserve)

	// Numeric features (regress.go): the regression that learns the
	// primary, nil without values, and the request's values (NaN where
	// missing).
	reg *predict.Regression
	x   [MaxValues]float32
}

// Delay is the hedge delay chosen for this request when it began, or when
// its first hedge was re-timed ([DenyEarly]).
func (r *Request) Delay() time.Duration { return r.delay }

// UseDelay tells the policy that the caller hedges r at d instead of at
// Delay (a delay fixed by a gRPC service config's hedgingDelay, or set for
// the request): the key's [KeyStats] then report d as its Delay, until
// the key's next request begins without one. What the policy learns and
// decides is unchanged (Delay, HedgeAt and the auto delay's bookkeeping
// stay the policy's). It costs one atomic store.
func (r *Request) UseDelay(d time.Duration) {
	r.blind = false // the caller's delay: never re-timed
	r.own = d != r.delay
	if r.ks != nil {
		r.ks.used.Store(1 + int64(max(d, 0)))
	}
}

// MaxHedges returns the most hedges this request may send: Config.MaxHedges,
// or fewer when the auto delay found that later hedges do not pay for
// themselves.
func (r *Request) MaxHedges() int { return r.limit }

// HedgeAt returns when hedge k (k ≥ 1) is due, as an offset from the start
// of the request: Delay for the first, then one gap more for each next one
// (the gap is Delay itself, unless the auto delay chose another).
func (r *Request) HedgeAt(k int) time.Duration {
	if k <= 1 || r.gap == 0 {
		return time.Duration(k) * r.delay
	}
	return r.delay + time.Duration(k-1)*r.gap
}

// Predicted reports whether the request's schedule was predicted from its
// features ([Policy.BeginWith]) rather than taken from its key.
func (r *Request) Predicted() bool { return r.pred }

// Hedges returns how many hedges the policy has granted this request.
func (r *Request) Hedges() int { return r.hedges }

// WouldHedges returns how many hedges this request would have sent had
// Config.DryRun not been set.
func (r *Request) WouldHedges() int { return int(r.would) }

// Key returns the key the request was begun with.
func (r *Request) Key() string {
	if r.name != "" || r.ks == nil {
		return r.name
	}
	return r.ks.Name()
}

// Begin records the start of a request to key at now and returns its
// record, which carries the hedge delay to use. Begin pays the request's
// deposit into the budget.
func (p *Policy) Begin(key string, now time.Time) Request {
	return p.begin(key, now, false)
}

// begin is [Policy.Begin], or [Policy.BeginChained] when chained.
func (p *Policy) begin(key string, now time.Time, chained bool) Request {
	ks, tracked := p.keyOf(key, now, true)
	n := now.UnixNano()
	if n >= ks.diagEnd.Load() {
		p.rollDiagnosis(ks, n)
	}
	if n-ks.lastUsed.Load() >= lruGrain {
		ks.lastUsed.Store(n)
	}
	ks.count(unsafe.Offsetof(Counts{}.Requests)).Add(1)
	if ks.used.Load() != 0 { // a load only, unless a caller set the last delay
		ks.used.Store(0)
	}
	if chained {
		p.payChained(ks, now) // chainpay.go
	} else {
		p.cfg.Budget.Deposit(now)
	}
	d := p.delayOf(ks, now)
	r := Request{ks: ks, delay: d, limit: p.cfg.MaxHedges, share: -1, chained: chained}
	if p.gainOn {
		// The key's count of requests, this one's included: the sum of
		// its stripes, read only when the gain fuse counts rounds.
		r.began, r.phase = n, p.gainPhase(ks, ks.counts.sum(unsafe.Offsetof(Counts{}.Requests)), now)
	}
	if !tracked {
		r.name = key
	}
	if p.set.Guess && !ks.Warm() && ks.Est().Empty() && !p.fromParent(&ks.State) {
		r.blind, r.start = true, n
	}
	if p.set.Auto && ks.Warm() {
		r.share = float32(ks.Sched().Planned())
	}
	gap, limit := ks.InForce(&p.set)
	r.gap = gap
	if limit > 0 {
		r.limit = limit
	}
	return r
}

// Hedge asks, at now, whether the next hedge of r may be sent. [Send] means
// yes, and the hedge is counted and paid for; [DryRun] means it would have
// been, and is counted as such but must not be sent; any other Decision
// means no, and only the denial is counted.
//
// The fuses are checked in this order, cheapest first, and the first that
// refuses names the denial: MaxHedges (a request on an auto schedule of
// fewer hedges than MaxHedges asks at most that many times where the
// auto delay says so, AutoChoice.noRetry; a request on its feature
// bucket's own schedule asks once past it, or never if the bucket is
// low), room in the budget for a
// second or later hedge (more than half its burst left, or the auto
// delay's chosen reserve, else [DenyBudget]) and for the first hedge of a
// feature bucket whose hedges are worth less than half the best bucket's
// (one token beyond the hedge's own and a tenth of the burst; see
// BucketStats.Low),
// pushback, breaker, sampling, load signal, in-flight cap, budget. The
// budget comes last because asking it is paying; a token it grants while
// the policy owes one to a request begun chain-stopped pays that debt,
// and the hedge is denied as [DenyBudget] ([Policy.BeginChained]). Before
// them all, the first hedge of a request begun before its key's first
// answer may be re-timed ([DenyEarly], Config.WarmupDelay): nothing is
// counted but the slot moved. A request marked with [Request.StopChain] is denied before
// any fuse is asked ([DenyChained]).
func (p *Policy) Hedge(r *Request, now time.Time) Decision {
	ks := r.ks
	if r.blind && p.retime(r, now) {
		ks.count(unsafe.Offsetof(Counts{}.Denied) + 8*uintptr(DenyEarly)).Add(1)
		return DenyEarly
	}
	if !r.asked {
		r.asked = true
		ks.count(unsafe.Offsetof(Counts{}.Triggered)).Add(1)
	}
	r.asks = min(r.asks+1, math.MaxUint8)
	n := now.UnixNano()
	d := Send
	switch {
	case r.chained:
		d = DenyChained
	case r.hedges+int(r.would) >= r.limit:
		d = DenyMaxHedges
	case int(r.asks) > r.limit && r.limit < p.cfg.MaxHedges && (r.pred && (r.low || int(r.asks) > r.limit+1) || ks.NoRetry()):
		// The auto delay's schedule allows fewer hedges than the caller
		// times slots for, and a hedge at the next slot would pay less
		// than the token's use by another request's first hedge
		// (AutoChoice.noRetry); or the schedule is a feature bucket's
		// (internal/key, hedge priority): a low bucket's denied hedge is not
		// asked for again, another's once, soon after (its gap is a
		// fifth of its delay), while the request is still worth it.
		d = DenyMaxHedges
	case r.hedges+int(r.would) >= 1 && !p.roomForLater(ks, now):
		d = DenyBudget
	case r.low && r.hedges+int(r.would) == 0 && !p.roomFor(key.LowReserve, now):
		// The first hedge of a bucket worth less than half the best
		// (internal/predict, hedgeValue) leaves the budget a reserve for the
		// better ones.
		d = DenyBudget
	case n < ks.pausedUntil.Load():
		d = DenyPushback
	case !p.cfg.Breaker.Disabled && !ks.breaker.allow(n):
		d = DenyBreaker
	case heldOut(r.phase):
		d = DenyGain
	case p.sampleBelow != 0 && !p.sampled(r):
		d = DenySampling
	case p.cfg.Overloaded != nil && p.cfg.Overloaded(r.Key()):
		d = DenyLoad
	case !p.cfg.DryRun && !p.takeInflight():
		d = DenyInflight
	case !p.cfg.Budget.Withdraw(now) || p.repay():
		d = DenyBudget
		if !p.cfg.DryRun {
			p.inflight.Add(-1)
		}
	case p.cfg.DryRun:
		d = DryRun
	}
	if (d == Send || d == DryRun) && r.hedges+int(r.would) == 0 {
		ks.firstGranted.Add(1)
	}
	switch d {
	case Send:
	case DryRun:
		r.would++
		ks.count(unsafe.Offsetof(Counts{}.WouldHedge)).Add(1)
		return DryRun
	default:
		ks.count(unsafe.Offsetof(Counts{}.Denied) + 8*uintptr(d)).Add(1)
		return d
	}
	r.hedges++
	if r.hedges < 8 {
		r.inflight |= 1 << r.hedges
	}
	ks.count(unsafe.Offsetof(Counts{}.Hedges)).Add(1)
	return Send
}

// takeInflight reserves one in-flight hedge, or reports the cap reached.
func (p *Policy) takeInflight() bool {
	v := p.inflight.Add(1)
	if max := p.cfg.MaxInflightHedges; max > 0 && v > int64(max) {
		p.inflight.Add(-1)
		return false
	}
	return true
}

// Observe records how attempt (0 for the primary, k for hedge k) of r ended
// and its latency, measured from that attempt's own start. Call it once for
// every attempt sent, the losers included ([Canceled]). Never pass the
// end-to-end latency of the hedged request: it is shorter than the
// downstream's own latency, and a delay learned from it would creep down
// until every request is hedged.
//
// Observe also feeds the key's circuit breaker ([Failed] and [Errored] are
// errors, [Completed] a success, [Canceled] and [Abandoned] neither),
// ends the in-flight time of a hedge (attempt ≥ 1), and calls the
// functions registered with [Policy.OnAttempt].
func (p *Policy) Observe(r *Request, attempt int, latency time.Duration, o Outcome, now time.Time) {
	p.notifyAttempt(r, attempt, latency, o)
	ks := r.ks
	if attempt >= 1 && attempt < 8 && r.inflight&(1<<attempt) != 0 {
		r.inflight &^= 1 << attempt
		p.inflight.Add(-1)
	}
	cut := o == Canceled || o == Abandoned // ended before its answer: a lower bound
	if !cut && !p.cfg.Breaker.Disabled {
		if ks.breaker.record(&p.cfg.Breaker, now.UnixNano(), latency, o == Completed, ks.Spread()) {
			ks.count(unsafe.Offsetof(Counts{}.BreakerTrips)).Add(1)
		}
	}
	if o == Failed || o == Errored {
		// The next attempt goes for the failure, at once: a slot of a
		// request that failed is never re-timed.
		r.blind = false
		return
	}
	// Only the primary is a fair sample of the downstream's latency: a
	// hedge is observed only when it races, and the ones that finish are
	// the fast ones. (A Where bucket's hedges, which go elsewhere, are
	// learned apart, each one sent: completed, or censored when
	// cancelled.) A primary cancelled because a hedge won, or abandoned
	// by its caller, is learned as censored at its end (below): dropping
	// it would drop the slow ones, which a caller's deadline cuts short
	// most. One cut before the delay (a caller giving up early, a
	// per-request delay shorter than the policy's) says nothing about the
	// quantiles the delay is made of and is skipped.
	if attempt != 0 {
		if b := r.b; b != nil && b.Where() {
			// A hedge of a Where bucket's request: it went elsewhere,
			// and its bucket learns its latency apart (model.go).
			b.ObserveHedge(latency, cut, now)
		}
		return
	}
	if cut && latency < r.delay {
		return
	}
	if r.share >= 0 {
		// A sample of the trigger rate its schedule predicted — whenever
		// it began: a slow primary begun before a recomputation is
		// learned after it, and leaving it out would bias the count.
		ks.Sample(r.share, latency > r.delay)
	}
	switch {
	case r.b != nil:
		// The key's estimator and the feature bucket's learn it
		// (predictive hedging, model.go).
		r.b.Observe(ks.Est(), latency, cut, now)
	case cut:
		// Censored: the primary would have taken longer. The estimator
		// counts it at latency for quantiles and spreads it over the
		// longer primaries for the auto delay's predictions.
		ks.Est().AddCensored(latency, now)
	default:
		ks.Est().Add(latency, now)
	}
	ks.Observed()
	if r.reg != nil {
		r.reg.Observe(&r.x, latency, cut) // regress.go
	}
}

// End records that r finished at now. winner is the index of the attempt
// whose answer was used, or -1 if every attempt failed. A request whose
// first hedge went on its key's auto schedule is counted, with whether a
// hedge won it, against the win share the schedule predicted
// ([AutoChoice].Correction): one atomic add.
func (p *Policy) End(r *Request, winner int, now time.Time) {
	if winner < 0 || winner > MaxHedgesLimit {
		r.ks.count(unsafe.Offsetof(Counts{}.Failed)).Add(1)
		return
	}
	r.ks.count(unsafe.Offsetof(Counts{}.Wins) + 8*uintptr(winner)).Add(1)
	if r.hedges > 0 && r.share >= 0 && !r.pred && !r.own {
		// A first hedge went on the key's auto schedule: checked
		// against the win share predicted (internal/schedule, outcome.go).
		r.ks.Sched().HedgeEnded(winner > 0)
	}
	if p.gainOn {
		r.ks.gain.record(r.phase, now.UnixNano()-r.began, winner > 0)
	}
}

// Abandon records that r ended at now because its caller gave up before
// an answer was returned — its context was cancelled or its deadline
// passed ([CallerGone]) — in place of [Policy.End]: the request counts in
// Counts.Abandoned, not in Failed. Report the attempts that ended with it
// as [Abandoned].
func (p *Policy) Abandon(r *Request, now time.Time) {
	r.ks.count(unsafe.Offsetof(Counts{}.Abandoned)).Add(1)
}

// Pushback pauses hedging for key until the given time: the downstream
// asked for less traffic. Primaries are not affected. A later pushback
// extends the pause; an earlier one does not shorten it.
func (p *Policy) Pushback(key string, until time.Time) {
	ks := p.key(key, until)
	u := until.UnixNano()
	for {
		old := ks.pausedUntil.Load()
		if u <= old || ks.pausedUntil.CompareAndSwap(old, u) {
			return
		}
	}
}

// Delay returns the first hedge's delay in force for key at now, clamped
// to [MinDelay, MaxDelay]. With the default auto delay it is the delay of
// the schedule chosen from the key's distribution ([AutoChoice].Delay);
// with Config.Quantile set, Multiplier × that quantile of the key's recent
// latency. While neither of the key's windows holds MinSamples latencies,
// it is the warm-up delay (Config.WarmupDelay): when that is left at its
// default, 10 ms, or 1.5 × the median of the answers so far if that is
// more (after five answers of 50 ms, about 75 ms); when set, as given.
// Later hedges follow at [Request.HedgeAt].
func (p *Policy) Delay(key string, now time.Time) time.Duration {
	return p.delayOf(p.key(key, now), now)
}

// delayOf returns the delay in force for ks at now, recomputing the key's
// schedule first when it is due (key.State.Delay).
func (p *Policy) delayOf(ks *keyState, now time.Time) time.Duration {
	return ks.Delay(now, &p.set)
}

// key returns the state of key: its own, or, for a key the policy does
// not track (see keyOf), the state its untracked keys share. Only a
// request (Begin) counts as a sighting of a key not tracked: a Pushback
// or a Delay for it does not get it tracked.
func (p *Policy) key(key string, now time.Time) *keyState {
	ks, _ := p.keyOf(key, now, false)
	return ks
}

// keyOf returns the state of key, creating it (and evicting an old key
// when the policy tracks MaxKeys) if needed, and whether it is the key's
// own. Once the policy tracks MaxKeys keys, a key it does not track is
// admitted only when the doorkeeper has seen it recently (key.Doorkeeper; seen
// records the sighting); until then its requests share the parent state
// (untrackedState), and nothing is evicted.
func (p *Policy) keyOf(name string, now time.Time, seen bool) (*keyState, bool) {
	if ks := p.last.Load(); ks != nil && ks.Name() == name {
		return ks, true
	}
	h := p.index.hash(name) // the doorkeeper's too: one hash per lookup
	if ks := p.index.find(h, name); ks != nil {
		return ks, true
	}
	if d := p.seen.Load(); d != nil && (!seen || !d.Admit(h, now.UnixNano())) {
		return p.untrackedState(now), false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ks := p.keys[name]; ks != nil {
		return ks, true
	}
	if len(p.keys) >= p.cfg.MaxKeys {
		p.evictLocked()
	}
	ks := p.newKeyState(name, now)
	p.index.put(ks, maps.Values(p.keys))
	p.keys[name] = ks
	p.last.Store(ks)
	if len(p.keys) >= p.cfg.MaxKeys && p.seen.Load() == nil {
		p.seen.Store(key.NewDoorkeeper(p.cfg.MaxKeys))
	}
	return ks, true
}

// newKeyState returns the state of a key with no observation yet.
func (p *Policy) newKeyState(name string, now time.Time) *keyState {
	est, _ := latency.New(p.cfg.estimatorConfig()) // validated in New
	if p.cfg.Warm != nil {
		_ = est.Seed(p.cfg.Warm) // a snapshot of another accuracy is ignored
	}
	ks := &keyState{}
	ks.Init(name, est, &p.set)
	ks.lastUsed.Store(now.UnixNano())
	if p.gainOn {
		ks.gain.init()
	}
	return ks
}

// UntrackedKey is the key under which [Policy.Stats] reports the requests
// to keys the policy does not track (see Config.MaxKeys): they learn into
// and hedge from one state they share, listed under this name.
const UntrackedKey = "(untracked)"

// untrackedState returns the state the untracked keys share, creating it
// at the first of them.
func (p *Policy) untrackedState(now time.Time) *keyState {
	if ks := p.untracked.Load(); ks != nil {
		return ks
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ks := p.untracked.Load(); ks != nil {
		return ks
	}
	ks := p.newKeyState(UntrackedKey, now)
	p.untracked.Store(ks)
	return ks
}

// fromParent reports whether ks, not warm, hedges from the state its
// policy's untracked keys share: once the policy has tracked MaxKeys keys
// (below that, a key warms up alone) and that state is warm.
func (p *Policy) fromParent(ks *key.State) bool {
	if p.seen.Load() == nil {
		return false
	}
	u := p.untracked.Load()
	return u != nil && &u.State != ks && u.Warm()
}

// parentOf is a Policy as the fallback of its keys (key.Settings.Parent):
// the state its untracked keys share, once fromParent.
type parentOf Policy

// Delay returns the delay of the untracked keys' state, when s hedges
// from it.
func (q *parentOf) Delay(s *key.State) (time.Duration, bool) {
	p := (*Policy)(q)
	if !p.fromParent(s) {
		return 0, false
	}
	return p.untracked.Load().Cached(), true
}

// evictSample is how many keys eviction compares: Redis's approximated LRU.
const evictSample = 8

// evictLocked forgets the least recently used of a few keys taken in map
// order, which Go randomises. p.mu must be held.
func (p *Policy) evictLocked() {
	var victim *keyState
	i := 0
	for _, ks := range p.keys {
		if victim == nil || ks.lastUsed.Load() < victim.lastUsed.Load() {
			victim = ks
		}
		if i++; i == evictSample {
			break
		}
	}
	if victim != nil {
		delete(p.keys, victim.Name())
		p.index.remove(victim)
		p.cycles.Drop(&victim.State)
		// Requests in flight on the victim when it goes may still count
		// on it: those few are missing from the totals.
		victim.counts.addTo(&p.evicted)
	}
}
