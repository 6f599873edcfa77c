package tailcut

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/latency"
)

// Defaults for the zero fields of [Config]. The README's defaults table
// mirrors these.
const (
	DefaultQuantile    = 0.95 // The Tail at Scale's rule, for a pinned Quantile
	DefaultTarget      = 0.99 // the percentile the auto delay minimises
	DefaultTolerance   = 0.03 // how much higher a Target prediction the auto delay accepts for fewer hedges
	DefaultMultiplier  = 1.0
	DefaultWindow      = 30 * time.Second
	DefaultMinSamples  = 20
	DefaultWarmupDelay = 10 * time.Millisecond
	DefaultMaxHedges   = 2
	DefaultMaxKeys     = 1024
	// DefaultFeatureBuckets is the most feature buckets a key keeps for
	// predictive hedging (Config.FeatureBuckets).
	DefaultFeatureBuckets = 16

	// MaxHedgesLimit is the largest MaxHedges accepted: beyond four backups
	// a request is not slow by chance.
	MaxHedgesLimit = 4

	// MinWindow is the shortest Window accepted. The auto delay recomputes
	// a key's schedule at every rotation of its windows, which walks its
	// sketches; a shorter window would pay that on nearly every request,
	// and would hold too few answers to resolve a p99 at any but the
	// highest request rates.
	MinWindow = 100 * time.Millisecond

	// Breaker defaults (DESIGN.md, Defaults): hedging is off while at least
	// 10 % of at least 20 attempts over the last 10 s failed.
	DefaultBreakerThreshold   = 0.10
	DefaultBreakerMinRequests = 20
	DefaultBreakerWindow      = 10 * time.Second
	DefaultBreakerOpenFor     = 10 * time.Second
	DefaultBreakerProbes      = 5

	// Gain fuse defaults (GainConfig): rounds of 400 requests, hedges
	// off for 30 s when they did not pay.
	DefaultGainRound   = 400
	DefaultGainOpenFor = 30 * time.Second
)

// Config configures a [Policy]. It is a plain struct: the zero value of each
// field means its documented default, and [New] rejects invalid values with
// an error naming the field.
type Config struct {
	// Quantile, if set, pins the hedge delay to this quantile of the
	// recent per-key latency (times Multiplier): 0.95 is The Tail at
	// Scale's rule, about 5 % extra load. Must be in (0, 1).
	//
	// Zero means auto: the policy predicts, from the measured
	// distribution, the Target percentile that each candidate schedule
	// would give — the budget's denials at each trigger rate modelled —
	// and uses the best. With a budget whose grants can be modelled (the
	// default budget.Windowed, or a budget.Ratio), first-hedge trigger
	// rates up to 1.5 × the ratio compete and the prediction decides; with
	// one that cannot (a token bucket), the first hedge's trigger rate
	// stays within 0.8 × an assumed ratio of 5 %. A fixed quantile that
	// hedges about as often as the budget allows is a trap: the denials
	// then fall at random, and a denied straggler is the p99. The auto
	// delay also notices a shift of the latency and relearns from the new
	// latencies alone ([KeyStats].Shifts).
	//
	// Target and Period are settings of the auto delay: [New] rejects a
	// Target set with a Quantile, and a pinned Quantile never forecasts a
	// cycle, whatever Period says.
	Quantile float64

	// Target is the percentile the auto delay minimises. Zero means 0.99.
	// It is a percentile of the traffic the key serves: for a while after
	// its latency shifts up, the faster requests served before still count,
	// and the auto delay aims at a deeper percentile of the new traffic (at
	// most the p97 for the p99; see AutoChoice.Target). A key's first
	// choices, from fewer observations than resolve the Target, aim at
	// the percentile they resolve. Must be in (0, 1), and left zero when
	// Quantile is set (New rejects the pair: the quantile decides alone).
	Target float64

	// Tolerance prices load: among the auto delay's candidate schedules,
	// it takes the one that hedges least among those whose predicted
	// Target percentile is within this share of the best prediction
	// (0.03: at most 3 % above it). The budget stays a cap, not a target:
	// a schedule that spends the whole budget for a prediction a few
	// percent lower is not taken. Zero means 0.03; negative means none:
	// the lowest prediction the budget allows, told apart from those
	// within a sketch bin (2 %) by the deeper tail. Must be below 1, and
	// left zero when Quantile is set. The default is the largest of those
	// measured (0.03, 0.05, 0.1, 0.2) that keeps the bhope scenario's p99
	// within 3 % of the limit of fixed delays at its own extra load
	// (lab's TestBhopeAutoTargets; `tailcut lab --scenario bhope`).
	Tolerance float64

	// Multiplier scales the quantile: delay = Multiplier × quantile.
	// Zero means 1.
	Multiplier float64

	// Window is the length of each of the two rotating latency windows.
	// Zero means 30 s; at least MinWindow (100 ms).
	Window time.Duration

	// MinSamples is how many observations a window needs before its
	// quantile is used. Zero means 20.
	MinSamples int

	// WarmupDelay is the delay used for a key until its windows hold
	// MinSamples observations (and no Warm snapshot answers). A policy
	// never hedges blind at delay zero.
	//
	// Zero means a guess of 10 ms that the policy treats as one, so that
	// a service far slower than 10 ms is not hedged on every request while
	// its key learns: once the key has answers, however few, the warm-up
	// delay is at least 1.5 × their median; and the first hedge of a
	// request begun before the key's first answer is re-timed at each of
	// its slots ([DenyEarly]) — to 1.5 × the request's age while no answer
	// has come, to the key's delay once one has — so that it goes only
	// once the request is slow by what the key has learned meanwhile. A
	// WarmupDelay set explicitly is used as given, for every request.
	WarmupDelay time.Duration

	// MinDelay and MaxDelay clamp the delay. Zero means no bound. A
	// MaxDelay is the SLA cap: never wait longer than this to hedge.
	MinDelay, MaxDelay time.Duration

	// MaxHedges is the most hedges one request may send. Zero means 2;
	// at most 4. The second and later hedges go only while the budget
	// holds more than a reserve — half of what one second of traffic
	// earns with the default budget.Windowed (its Burst), half the fixed
	// burst of a budget.Ratio — so that they rarely take the tokens the
	// first hedges of other requests need; with the auto delay they are
	// also planned to cost at most half a point of the budget's ratio
	// between them, and the reserve may be a quarter where they carry the
	// deep tail (AutoChoice.Reserve). They cut the p99.9 —
	// a request whose primary and first hedge both straggle — at little
	// cost, because few requests need them (`tailcut lab --max-hedges 1`
	// against the default on the bhope scenario shows the difference).
	MaxHedges int

	// Budget caps the extra load. Nil means budget.NewWindowed(0.1, 10s,
	// 1): each primary deposits a tenth of a token that lives for 10 s, so
	// hedges stay within 10 % of the primaries over any 10 s, and a
	// cluster of stragglers may spend at once all that the 10 s before
	// saved (the budget's capacity: at 200 requests a second, up to 200
	// hedges), with a floor of one hedge per second for quiet clients.
	// budget.NewRatio(0.1, 10, 1) is a bucket whose capacity, its burst,
	// is fixed at 10 hedges. (MaxHedges' reserve is counted in a
	// budget.Windowed's Burst, what one second earns.) One Budget serves
	// all keys of the policy.
	Budget budget.Budget

	// MaxKeys bounds the number of keys the policy tracks. Zero means
	// 1,024. Up to it, every key is tracked from its first request. Past
	// it, a key not tracked is admitted only when it comes back soon —
	// before about MaxKeys requests to other untracked keys have passed
	// (a doorkeeper of MaxKeys hashes, 8 bytes each) — and then the key
	// used least recently (of a small random sample) is forgotten: a key
	// asked for once, a scan or a key per object, never evicts one that
	// has learned. The requests to keys not tracked learn into one state
	// they share and hedge from its delay, as do the tracked keys that
	// have not learned their own yet, instead of the warm-up delay;
	// [Policy.Stats] lists it as [UntrackedKey], and a Pushback for one
	// of them pauses them all.
	//
	// Each key holds at most 32 KiB of sketch (BenchmarkKeyMemory measures
	// a key's heap after a few hundred answers), and with the cycle
	// forecast (Period not negative) a tracker: its history of a few KiB
	// and, once a cycle is known, up to 32 phase sketches.
	MaxKeys int

	// Warm, if set, seeds every new key's estimator, so a fresh process
	// hedges at a measured delay from its first request instead of at
	// WarmupDelay (see latency.Estimator.Seed). Without it, a key learns
	// from its first answers, and the first requests' hedges go on little
	// knowledge: on a service far slower than WarmupDelay, the schedule
	// chosen from the first few dozen answers hedges some stragglers too
	// late or not at all, and their share of a run of a few thousand
	// requests shows in its p99 (`tailcut lab --scenario demo
	// --concurrency 20 --requests 3000 --warm 2000` against the same
	// without --warm; lab's TestWarmStart).
	Warm *latency.Snapshot

	// The fuses below switch off hedges only, never primaries. Each denial
	// is counted per key under its own Decision.

	// Breaker stops hedging for a key while the downstream's error rate is
	// high ([DenyBreaker]). The zero value is the default breaker: off at
	// ≥ 10 % errors over ≥ 20 attempts in 10 s, back after a 10 s pause
	// and 5 successful attempts in a row.
	Breaker BreakerConfig

	// Gain, when enabled, stops hedging for a key whose hedges were
	// measured not to improve its tail ([DenyGain]): now and then a round
	// of the key's requests is held out unhedged, and compared with a
	// hedged round. It is off by default: the requests it holds out meet
	// the unhedged tail, which costs a workload whose hedges pay about
	// 1 % of its p99 (the lab's TestBhopeAutoTargets); see [GainConfig].
	Gain GainConfig

	// Overloaded, if set, is the user's load signal (CPU, queue depth,
	// in-flight count): while it returns true for a key, hedges to that key
	// are denied ([DenyLoad]). It is called only when a hedge is asked for,
	// never for primaries, possibly from many goroutines at once; it must be
	// fast and must not call back into the Policy.
	Overloaded func(key string) bool

	// SampleRate is the fraction of requests that may be hedged, for a
	// gradual rollout (0.01 → 0.05 → 0.2 → 1); the others are denied with
	// [DenySampling]. Zero means 1 (every request). Must be in (0, 1]. A
	// request begun with [Policy.BeginID] is sampled by a hash of its ID, so
	// the same ID gets the same answer in every process; otherwise requests
	// are sampled by a deterministic pseudo-random sequence.
	SampleRate float64

	// DryRun decides and counts every hedge but sends none: a hedge that
	// would have been sent gets [DryRun] instead of [Send] (so [Do] sends
	// nothing), counts in Counts.WouldHedge, and Stats report the p99 that
	// hedging is predicted to reach. The budget is drawn as if the hedges
	// went, so the counts are those hedging would really have had.
	DryRun bool

	// MaxInflightHedges caps the hedges in flight at once across the
	// policy ([DenyInflight]). Zero means no cap. A hedge is in flight from
	// the [Policy.Hedge] that grants it to the [Policy.Observe] of its
	// attempt.
	MaxInflightHedges int

	// DiagnosisWindow is the window over which each key's hedge trigger
	// rate is judged (see [Diagnosis]). Zero means Window.
	DiagnosisWindow time.Duration

	// Predictive turns on predictive hedging: a request begun with
	// [Features] ([WithFeatures], [Policy.BeginWith], or the labels the
	// adapters derive) is hedged on the schedule predicted from the
	// latencies of earlier requests with the same labels, blended with its
	// key's, once they differ significantly from the key's (model.go).
	// Numeric values (Features.Value) are learned by a quantile regression
	// per key (about 300 bytes) whose predicted classes are buckets too
	// (regress.go). Off, features are ignored at no cost.
	Predictive bool

	// FeatureBuckets is the most feature buckets (label sequences) a key
	// keeps with Predictive; past it the least recently used is forgotten.
	// Zero means 16; at most 256. Each bucket holds at most about 9 KiB of sketch (18
	// KiB for a bucket of Features.Where, whose hedges are learned apart),
	// so a key holds at most FeatureBuckets × 18 KiB (288 KiB at 16; 144
	// KiB without Where) besides its own 32 KiB.
	FeatureBuckets int

	// Period is the cycle of a key's latency that the auto delay
	// forecasts from (internal/key, Cycles): under a periodic load — diurnal
	// traffic, an hourly batch job — the live windows follow the cycle a
	// Window late and minimise each window's own p99, hedging the trough
	// as much as the peak; once the cycle is known, the auto delay
	// chooses from the distribution of a whole cycle as the cycles before
	// had it, mixed with the live one. Zero means detect each key's cycle
	// from its own finished windows (internal/cycle; a period of up to
	// about 85 Windows): a key whose latency does not repeat, or has not
	// repeated for three cycles yet, is decided exactly as with a
	// negative Period. Positive gives the period, which must be at least
	// two Windows; detection is skipped. Negative never forecasts.
	// Ignored when Quantile is set.
	Period time.Duration

	// Logger receives the diagnosis warning (one per episode and key) when
	// a key's hedge trigger rate stays above 50 % for a DiagnosisWindow.
	// Nil means slog.Default() at the time of logging; a logger over
	// slog.DiscardHandler silences it.
	Logger *slog.Logger
}

// BreakerConfig configures the per-key circuit breaker on hedges. Zero
// fields mean their defaults.
//
// The breaker counts the outcome of every attempt (primaries and hedges)
// reported to [Policy.Observe]: [Failed] and [Errored] are errors,
// [Completed] is a success, [Canceled] losers are neither. It has three
// states, as in github.com/sony/gobreaker:
//   - closed: hedges allowed. It opens when, over the last Window, at least
//     MinRequests attempts were counted and at least Threshold of them were
//     errors.
//   - open: hedges denied for OpenFor. Outcomes are ignored.
//   - half-open: hedges still denied; the attempts that flow anyway (the
//     primaries) are the probe. Probes successes in a row close the breaker
//     and hedging resumes; an error reopens it for another OpenFor. Only
//     attempts started after the pause ended count.
//
// The breaker takes now like the rest of the policy. It is not built on
// gobreaker, whose state machine reads time.Now() itself: under the lab's
// virtual clock its open state would never time out.
type BreakerConfig struct {
	// Disabled switches the breaker off.
	Disabled bool
	// Threshold is the error ratio, in (0, 1], at which the breaker opens.
	// Zero means 0.10.
	Threshold float64
	// MinRequests is the fewest attempts in the window before the breaker
	// may open. Zero means 20.
	MinRequests int
	// Window is the rolling window (ten buckets) of the closed state. Zero
	// means 10 s.
	Window time.Duration
	// OpenFor is how long hedging stays off once the breaker opens. Zero
	// means 10 s.
	OpenFor time.Duration
	// Probes is how many successful attempts in a row close a half-open
	// breaker. Zero means 5.
	Probes int
}

// GainConfig configures the gain fuse: what a key's hedges buy, measured
// against requests held out unhedged (DESIGN.md, Fuses). Each pair the
// fuse measures is two adjacent rounds of Round requests, one hedged and
// one held out, compared by the mean time their requests spent, end to
// end, beyond the key's [GainQuantile] (a request faster than it counting
// zero). Hedging pays when the hedged round's is the smaller ([GainFigures]
// reports the last pair). While it pays the pairs come further
// apart (8 to 128 rounds between them, the held-out round a quarter of a
// hedged one), so that few requests are held out; a pair in which it does
// not is confirmed by a second at once, and then the key's hedges are
// denied for OpenFor, then a probe pair (two full rounds) decides again,
// the pause doubling with each probe that finds them still not paying
// (up to 8 × OpenFor).
type GainConfig struct {
	// Enabled switches the gain fuse on. Off, no request is held out and
	// hedges are never denied by it.
	Enabled bool
	// Round is the number of requests in a round. Zero means 400: about
	// twenty requests beyond the GainQuantile unhedged, five in a
	// held-out round of a closed fuse. At least 20.
	Round int
	// OpenFor is how long hedging stays off once the gain fuse opens,
	// before a probe pair measures it again. Zero means 30 s.
	OpenFor time.Duration
}

// normalize fills the gain fuse's defaults and validates it.
func (g *GainConfig) normalize() error {
	if g.Round == 0 {
		g.Round = DefaultGainRound
	}
	if g.OpenFor == 0 {
		g.OpenFor = DefaultGainOpenFor
	}
	switch {
	case g.Round < minGainRound:
		return fmt.Errorf("tailcut: Gain.Round must be zero (%d) or at least %d, got %d", DefaultGainRound, minGainRound, g.Round)
	case g.OpenFor < 0:
		return fmt.Errorf("tailcut: Gain.OpenFor must not be negative, got %v", g.OpenFor)
	}
	return nil
}

// minGainRound is the smallest GainConfig.Round: a round of fewer requests
// holds about one request beyond the GainQuantile.
const minGainRound = 20

// normalize fills defaults and validates; errors name the field.
func (c Config) normalize() (Config, error) {
	targetSet, toleranceSet := c.Target != 0, c.Tolerance != 0
	c.fillDefaults()
	c.Breaker.fillDefaults()
	if err := c.validateAim(targetSet, toleranceSet); err != nil {
		return c, err
	}
	if err := c.validateLimits(); err != nil {
		return c, err
	}
	if err := c.Breaker.validate(); err != nil {
		return c, err
	}
	if err := c.Gain.normalize(); err != nil {
		return c, err
	}
	if c.Budget == nil {
		b, err := budget.NewWindowed(0, 0, 0)
		if err != nil {
			return c, err
		}
		c.Budget = b
	}
	return c, nil
}

// setDefault sets *v to def where it is zero.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// fillDefaults gives every zero field of c but Breaker its default.
func (c *Config) fillDefaults() {
	setDefault(&c.Target, DefaultTarget)
	setDefault(&c.Tolerance, DefaultTolerance)
	setDefault(&c.Multiplier, DefaultMultiplier)
	setDefault(&c.Window, DefaultWindow)
	setDefault(&c.MinSamples, DefaultMinSamples)
	setDefault(&c.WarmupDelay, DefaultWarmupDelay)
	setDefault(&c.MaxHedges, DefaultMaxHedges)
	setDefault(&c.MaxKeys, DefaultMaxKeys)
	setDefault(&c.SampleRate, 1)
	setDefault(&c.DiagnosisWindow, c.Window)
	setDefault(&c.FeatureBuckets, DefaultFeatureBuckets)
}

// fillDefaults gives every zero field of b its default.
func (b *BreakerConfig) fillDefaults() {
	setDefault(&b.Threshold, DefaultBreakerThreshold)
	setDefault(&b.MinRequests, DefaultBreakerMinRequests)
	setDefault(&b.Window, DefaultBreakerWindow)
	setDefault(&b.OpenFor, DefaultBreakerOpenFor)
	setDefault(&b.Probes, DefaultBreakerProbes)
}

// validateAim checks the auto delay's aim and the fixed quantile, which
// exclude each other; targetSet and toleranceSet say whether the caller
// gave Target and Tolerance.
func (c *Config) validateAim(targetSet, toleranceSet bool) error {
	switch {
	case c.Quantile != 0 && !(c.Quantile > 0 && c.Quantile < 1):
		return fmt.Errorf("tailcut: Quantile must be in (0, 1), got %v", c.Quantile)
	case c.Quantile != 0 && targetSet:
		return fmt.Errorf("tailcut: Target (%v) is the auto delay's aim and has no effect with Quantile (%v) set: set one of them", c.Target, c.Quantile)
	case !(c.Target > 0 && c.Target < 1):
		return fmt.Errorf("tailcut: Target must be in (0, 1), got %v", c.Target)
	case c.Quantile != 0 && toleranceSet:
		return fmt.Errorf("tailcut: Tolerance (%v) is a setting of the auto delay and has no effect with Quantile (%v) set", c.Tolerance, c.Quantile)
	case !(c.Tolerance < 1) || math.IsInf(c.Tolerance, -1):
		return fmt.Errorf("tailcut: Tolerance must be below 1 (0 means %v, negative means none), got %v", DefaultTolerance, c.Tolerance)
	case !(c.Multiplier > 0) || math.IsInf(c.Multiplier, 0):
		return fmt.Errorf("tailcut: Multiplier must be positive and finite, got %v", c.Multiplier)
	}
	return nil
}

// validateLimits checks the fields past the delay's aim, defaults filled.
func (c *Config) validateLimits() error {
	switch {
	case c.Window < MinWindow:
		return fmt.Errorf("tailcut: Window must be zero (30s) or at least %v, got %v", MinWindow, c.Window)
	case c.MinSamples < 0:
		return fmt.Errorf("tailcut: MinSamples must not be negative, got %d", c.MinSamples)
	case c.WarmupDelay < 0:
		return fmt.Errorf("tailcut: WarmupDelay must not be negative, got %v", c.WarmupDelay)
	case c.MinDelay < 0:
		return fmt.Errorf("tailcut: MinDelay must not be negative, got %v", c.MinDelay)
	case c.MaxDelay < 0:
		return fmt.Errorf("tailcut: MaxDelay must not be negative, got %v", c.MaxDelay)
	case c.MaxDelay > 0 && c.MinDelay > c.MaxDelay:
		return fmt.Errorf("tailcut: MinDelay %v exceeds MaxDelay %v", c.MinDelay, c.MaxDelay)
	case c.MaxHedges < 0 || c.MaxHedges > MaxHedgesLimit:
		return fmt.Errorf("tailcut: MaxHedges must be in [0, %d] (0 means %d), got %d", MaxHedgesLimit, DefaultMaxHedges, c.MaxHedges)
	case c.MaxKeys < 0:
		return fmt.Errorf("tailcut: MaxKeys must not be negative, got %d", c.MaxKeys)
	case !(c.SampleRate > 0 && c.SampleRate <= 1):
		return fmt.Errorf("tailcut: SampleRate must be in (0, 1], got %v", c.SampleRate)
	case c.MaxInflightHedges < 0:
		return fmt.Errorf("tailcut: MaxInflightHedges must not be negative, got %d", c.MaxInflightHedges)
	case c.FeatureBuckets < 0 || c.FeatureBuckets > maxFeatureBuckets:
		return fmt.Errorf("tailcut: FeatureBuckets must be in [0, %d] (0 means %d), got %d", maxFeatureBuckets, DefaultFeatureBuckets, c.FeatureBuckets)
	case c.DiagnosisWindow < 0:
		return fmt.Errorf("tailcut: DiagnosisWindow must not be negative, got %v", c.DiagnosisWindow)
	case c.Period > 0 && c.Period < 2*c.Window:
		return fmt.Errorf("tailcut: Period must be negative, zero or at least two Windows (%v), got %v", 2*c.Window, c.Period)
	}
	return nil
}

// validate checks the breaker's fields, defaults filled; errors name the
// field as Config.Breaker's.
func (b *BreakerConfig) validate() error {
	switch {
	case !(b.Threshold > 0 && b.Threshold <= 1):
		return fmt.Errorf("tailcut: Breaker.Threshold must be in (0, 1], got %v", b.Threshold)
	case b.MinRequests < 0:
		return fmt.Errorf("tailcut: Breaker.MinRequests must not be negative, got %d", b.MinRequests)
	case b.Window < 0:
		return fmt.Errorf("tailcut: Breaker.Window must not be negative, got %v", b.Window)
	case b.Window > 0 && b.Window < breakerBuckets:
		return fmt.Errorf("tailcut: Breaker.Window must be at least %dns, got %v", breakerBuckets, b.Window)
	case b.OpenFor < 0:
		return fmt.Errorf("tailcut: Breaker.OpenFor must not be negative, got %v", b.OpenFor)
	case b.Probes < 0:
		return fmt.Errorf("tailcut: Breaker.Probes must not be negative, got %d", b.Probes)
	}
	return nil
}
