package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tailcut/tailcut"
)

// Call identifies the attempt whose service time a [Scenario] draws.
type Call struct {
	Request  int // index of the request, from 0, in order of arrival
	Requests int // number of requests in the run
	Leg      int // index of the leg within a fan-out request
	Attempt  int // 0 for the primary, k for the k-th extra attempt
	Replica  int // the replica the attempt goes to
	// Label is the request's feature label (Scenario.Label), the same for
	// every attempt of a call; empty for a scenario without labels.
	Label string
	// Value is the request's numeric feature (Scenario.Value), the same
	// for every attempt of a call; 0 for a scenario without values.
	Value float64
}

// Service is the work one attempt costs a server: Work on a worker, then,
// when Hold > 0, a critical section of length Hold under one of the
// scenario's locks (the worker stays occupied while it waits for the lock).
type Service struct {
	Work time.Duration
	Hold time.Duration
}

// Total is the service time without any queueing: Work + Hold.
func (s Service) Total() time.Duration { return s.Work + s.Hold }

// Defaults are a scenario's own setup, used for the zero fields of [Config].
type Defaults struct {
	Requests    int
	Rate        float64 // open loop, requests per second (used when Concurrency is 0)
	Concurrency int     // closed loop
	Fanout      int
	Replicas    int
	Workers     int
	// IgnoreCancel: the server finishes cancelled attempts anyway (a
	// handler blocked on a sync.Mutex cannot be interrupted).
	IgnoreCancel bool
}

// GCPauses describes stop-the-world pauses: every replica stops all its
// workers for Pause once per Period, at a phase of its own drawn from the
// seed. Work in progress is stretched by the pauses it overlaps.
type GCPauses struct {
	Period, Pause time.Duration
}

// Scenario is a named service-time model. Built-in scenarios are listed by
// [Scenarios] and found by [Lookup]; [Custom] builds one from a user's
// samples or spec.
type Scenario struct {
	// Name is what --scenario takes.
	Name string
	// Summary is the one line shown by `tailcut lab --list`.
	Summary string
	// Defaults is the setup used for the zero fields of Config.
	Defaults Defaults
	// Locks is the number of locks the critical sections (Service.Hold)
	// share: 1 is a global mutex, 16 a sharded lock. A call takes the lock
	// of its key (request and leg), the same for all its attempts.
	Locks int
	// GC, if set, adds stop-the-world pauses per replica.
	GC *GCPauses
	// SlowThreshold, if set, is the latency above which a request counts
	// as slow in [Result.Slow].
	SlowThreshold time.Duration
	// Draw returns the service of one attempt, using only r for
	// randomness. It must not keep r.
	Draw func(r *rand.Rand, c Call) Service
	// Label, if set, returns the feature label of a call — what a client
	// may know of it in advance (its size, the replica its primary goes
	// to) — from the run's seed and the call's request, leg and primary
	// replica (c.Attempt is 0, c.Label empty). The predictive strategy
	// attaches it to the request; Draw sees it in Call.Label.
	Label func(seed uint64, c Call) string
	// LabelWhere says that the label names where the primary goes (a
	// replica), not what the request is: the predictive strategy attaches
	// it with tailcut.Features.Where.
	LabelWhere bool
	// Value, if set, returns the numeric feature of a call (a payload
	// size's logarithm), as Label does its label: the predictive strategy
	// attaches it with tailcut.Features.Value when asked to
	// (predictive:values, predictive:labels+values); Draw sees it in
	// Call.Value.
	Value func(seed uint64, c Call) float64
	// CDF, if set, is the exact distribution of the service time
	// (Service.Total) of call c, as Draw draws it: P(Total ≤ t). The
	// report's true quantiles come from it; without it, from draws of
	// Calibrate, which wander where the density is low.
	CDF func(t time.Duration, c Call) float64
	// Cycle, if set, makes the open-loop arrival rate periodic (the
	// diurnal scenario).
	Cycle *Cycle
	// Batch, if set, is a batch job that takes a share of every
	// replica's workers for part of each period (the batch scenario).
	Batch *BatchLoad
	// Caveat, if set, says why the scenario's results may not mean what
	// they seem (a samples file too small to have a tail); the CLI prints
	// it as a warning.
	Caveat string
}

// Validate reports whether s can be simulated.
func (s *Scenario) Validate() error {
	switch {
	case s == nil:
		return fmt.Errorf("lab: no scenario")
	case s.Draw == nil:
		return fmt.Errorf("lab: scenario %q has no Draw function", s.Name)
	case s.Locks < 0:
		return fmt.Errorf("lab: scenario %q: Locks must not be negative, got %d", s.Name, s.Locks)
	case s.GC != nil && (s.GC.Period <= 0 || s.GC.Pause < 0 || s.GC.Pause >= s.GC.Period):
		return fmt.Errorf("lab: scenario %q: GC pause %v must be in [0, period %v)", s.Name, s.GC.Pause, s.GC.Period)
	}
	return s.validatePeriodic()
}

// ms converts float milliseconds to a Duration.
func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// uniform draws from U(lo, hi) milliseconds.
func uniform(r *rand.Rand, lo, hi float64) time.Duration { return ms(lo + (hi-lo)*r.Float64()) }

// lognormal is a lognormal distribution given by its mean and standard
// deviation (not those of its logarithm).
type lognormal struct{ mu, sigma float64 }

func newLognormal(mean, sd time.Duration) lognormal {
	m, s := float64(mean), float64(sd)
	s2 := math.Log(1 + (s*s)/(m*m))
	return lognormal{mu: math.Log(m) - s2/2, sigma: math.Sqrt(s2)}
}

func (l lognormal) draw(r *rand.Rand) time.Duration {
	return time.Duration(math.Exp(l.mu + l.sigma*r.NormFloat64()))
}

// bhope is the service time of the bhope/hedge benchmark: lognormal with
// mean 5 ms and sd 2 ms, and 5 % stragglers ten times slower. Its p99 is
// 64 ms, the figure the published benchmark starts from.
var bhopeDist = newLognormal(5*time.Millisecond, 2*time.Millisecond)

func drawBhope(r *rand.Rand) time.Duration {
	d := bhopeDist.draw(r)
	if r.Float64() < 0.05 {
		d *= 10
	}
	return d
}

func drawDemo(r *rand.Rand) time.Duration {
	switch u := r.Float64(); {
	case u < 0.90:
		return uniform(r, 80, 120)
	case u < 0.95:
		return uniform(r, 280, 320)
	default:
		return uniform(r, 750, 850)
	}
}

// lockWork is the lock scenarios' request outside the critical section:
// 90 % U(10, 50) ms, 10 % U(200, 500) ms.
func lockService(r *rand.Rand) Service {
	var w time.Duration
	if r.Float64() < 0.9 {
		w = uniform(r, 10, 50)
	} else {
		w = uniform(r, 200, 500)
	}
	return Service{Work: w, Hold: uniform(r, 1, 3)}
}

// fanoutLeg is one leg of the fan-out scenario: 99 % U(10, 100) ms, 1 % a
// straggler of U(1, 2) s (the setup of the seed article's measurement).
func fanoutLeg(r *rand.Rand) time.Duration {
	if r.Float64() < 0.01 {
		return uniform(r, 1000, 2000)
	}
	return uniform(r, 10, 100)
}

// FanoutStragglerP is the probability that one leg of the fanout scenario
// is a straggler.
const FanoutStragglerP = 0.01

// builtins returns the built-in scenarios, freshly allocated, in the
// order of --list.
func builtins() []*Scenario {
	return slices.Concat(serviceScenarios(), shiftScenarios(), featureScenarios(), []*Scenario{mmcScenario()},
		queueScenarios(), periodicScenarios(), []*Scenario{objectsScenario()}) // tied.go, periodic.go
}

// serviceScenarios are the scenarios of one service-time distribution,
// steady through the run.
func serviceScenarios() []*Scenario {
	return []*Scenario{
		{
			Name:     "bhope",
			Summary:  "lognormal mean 5 ms, sd 2 ms, 5 % stragglers ×10 (the bhope/hedge benchmark: p99 64 ms)",
			Defaults: Defaults{Requests: 50000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 16},
			Draw:     func(r *rand.Rand, _ Call) Service { return Service{Work: drawBhope(r)} },
			CDF:      plain(bhopeCDF),
		},
		{
			Name:     "demo",
			Summary:  "trimodal: 90 % U(80,120) ms, 5 % U(280,320) ms, 5 % U(750,850) ms (the seed's Python demo)",
			Defaults: Defaults{Requests: 20000, Rate: 200, Fanout: 1, Replicas: 3, Workers: 32},
			Draw:     func(r *rand.Rand, _ Call) Service { return Service{Work: drawDemo(r)} },
			CDF:      plain(demoCDF),
		},
		{
			Name:     "gc",
			Summary:  "lognormal mean 5 ms, sd 2 ms; each replica stops for 50 ms every 1 s (GC pauses at its own phase)",
			Defaults: Defaults{Requests: 50000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 16},
			GC:       &GCPauses{Period: time.Second, Pause: 50 * time.Millisecond},
			Draw:     func(r *rand.Rand, _ Call) Service { return Service{Work: bhopeDist.draw(r)} },
			CDF:      plain(bhopeDist.cdf),
		},
		{
			Name: "lock",
			Summary: "a global mutex around a 1–3 ms critical section after 10–50 ms of work (10 % 200–500 ms); " +
				"closed loop, 50 clients; the server does not honour cancellation",
			Defaults: Defaults{Requests: 2000, Concurrency: 50, Fanout: 1, Replicas: 1, Workers: 1024, IgnoreCancel: true},
			Locks:    1,
			Draw:     func(r *rand.Rand, _ Call) Service { return lockService(r) },
			CDF:      plain(lockCDF),
		},
		{
			Name:     "lock16",
			Summary:  "the lock scenario with the mutex split into 16 shards (the root cause fixed)",
			Defaults: Defaults{Requests: 2000, Concurrency: 50, Fanout: 1, Replicas: 1, Workers: 1024, IgnoreCancel: true},
			Locks:    16,
			Draw:     func(r *rand.Rand, _ Call) Service { return lockService(r) },
			CDF:      plain(lockCDF),
		},
	}
}

// shiftScenarios are the scenarios whose latency shifts during the run,
// and the fan-out.
func shiftScenarios() []*Scenario {
	return []*Scenario{
		{
			Name:     "drift",
			Summary:  "bhope whose latency triples halfway through the run (a deploy, a cold cache)",
			Defaults: Defaults{Requests: 60000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 32},
			Draw: func(r *rand.Rand, c Call) Service {
				d := drawBhope(r)
				if 2*c.Request >= c.Requests {
					d *= 3
				}
				return Service{Work: d}
			},
			CDF: scaled(bhopeCDF, 3, func(c Call) bool { return 2*c.Request >= c.Requests }),
		},
		{
			Name:     "outage",
			Summary:  "bhope, with everything 10× slower during the middle third of the run",
			Defaults: Defaults{Requests: 30000, Rate: 1000, Fanout: 1, Replicas: 4, Workers: 32},
			Draw: func(r *rand.Rand, c Call) Service {
				d := drawBhope(r)
				if 3*c.Request >= c.Requests && 3*c.Request < 2*c.Requests {
					d *= 10
				}
				return Service{Work: d}
			},
			CDF: scaled(bhopeCDF, 10, func(c Call) bool { return 3*c.Request >= c.Requests && 3*c.Request < 2*c.Requests }),
		},
		{
			Name:          "fanout",
			Summary:       "fan-out of N legs (default 10); a leg takes U(10,100) ms, 1 % of legs U(1,2) s",
			Defaults:      Defaults{Requests: 10000, Rate: 20, Fanout: 10, Replicas: 10, Workers: 1000},
			SlowThreshold: time.Second,
			Draw:          func(r *rand.Rand, _ Call) Service { return Service{Work: fanoutLeg(r)} },
			CDF:           plain(fanoutCDF),
		},
	}
}

// featureScenarios are the scenarios whose requests carry a feature label
// (Scenario.Label) that tells something of their latency.
func featureScenarios() []*Scenario {
	return []*Scenario{
		{
			Name: "predictable",
			Summary: "bhope, but 10 % of requests carry a cache-miss hint (label cold): each of their attempts misses with probability 1/2 " +
				"and is then 8× slower; 5 % stragglers ×10 at random",
			Defaults: Defaults{Requests: 50000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 32},
			Label:    coldLabel,
			Draw: func(r *rand.Rand, c Call) Service {
				d := drawBhope(r)
				if c.Label == labelCold && r.Float64() < 0.5 {
					d *= 8
				}
				return Service{Work: d}
			},
			// A tenth of the requests cold, half of their attempts ×8.
			CDF: plain(func(t float64) float64 { return 0.95*bhopeCDF(t) + 0.05*bhopeCDF(t/8) }),
		},
		{
			Name:       "replica-skew",
			Summary:    "bhope on 4 replicas, one of which is 4× slower (a noisy neighbour); the feature label is the replica the primary goes to",
			Defaults:   Defaults{Requests: 50000, Rate: 1000, Fanout: 1, Replicas: 4, Workers: 32},
			Label:      replicaLabel,
			LabelWhere: true,
			Draw: func(r *rand.Rand, c Call) Service {
				d := drawBhope(r)
				if c.Replica == 0 {
					d *= 4
				}
				return Service{Work: d}
			},
			// The primary on each of the 4 replicas alike, as Calibrate draws it.
			CDF: plain(func(t float64) float64 { return 0.75*bhopeCDF(t) + 0.25*bhopeCDF(t/4) }),
		},
		{
			Name: "size-scaled",
			Summary: "bhope scaled by the request's size: sizes lognormal (median 16 KiB, σ = 1), every attempt ×size/16 KiB; " +
				"the label is the size's power-of-four bucket (tailcut.SizeLabel), the value its log2",
			Defaults: Defaults{Requests: 50000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 32},
			Label:    func(seed uint64, c Call) string { return tailcut.SizeLabel(int64(math.Exp2(sizeLog2(seed, c)))) },
			Value:    sizeLog2,
			Draw: func(r *rand.Rand, c Call) Service {
				return Service{Work: time.Duration(float64(drawBhope(r)) * math.Exp2(sizeAlpha*(c.Value-sizeMedianLog2)))}
			},
			CDF: plain(sizeScaledCDF),
		},
	}
}

// mmcScenario is the queueing check: M/M/c against Erlang C.
func mmcScenario() *Scenario {
	return &Scenario{
		Name:     "mmc",
		Summary:  "exponential service, mean 10 ms, one server of 4 workers at 75 % load (M/M/c check against Erlang C)",
		Defaults: Defaults{Requests: 100000, Rate: 300, Fanout: 1, Replicas: 1, Workers: 4},
		Draw: func(r *rand.Rand, _ Call) Service {
			return Service{Work: time.Duration(r.ExpFloat64() * float64(10*time.Millisecond))}
		},
		CDF: plain(func(t float64) float64 { return -math.Expm1(-max(t, 0) / float64(10*time.Millisecond)) }),
	}
}

// Scenarios returns the built-in scenarios in the order `tailcut lab --list`
// shows them. The custom scenario, built from a user's file, is made by
// [Custom].
func Scenarios() []*Scenario { return builtins() }

// ScenarioNames returns the names --scenario accepts, "custom" included.
func ScenarioNames() []string {
	var names []string
	for _, s := range builtins() {
		names = append(names, s.Name)
	}
	return append(names, "custom")
}

// Lookup returns the built-in scenario called name, or an error listing the
// valid names.
func Lookup(name string) (*Scenario, error) {
	for _, s := range builtins() {
		if s.Name == name {
			return s, nil
		}
	}
	if name == "custom" {
		return nil, fmt.Errorf("lab: scenario custom needs a file of samples or a spec (--samples FILE)")
	}
	return nil, fmt.Errorf("lab: unknown scenario %q (valid: %s)", name, strings.Join(ScenarioNames(), ", "))
}

// Calibrate draws n service times of s (for request index at, of a run of
// total requests) with a stream of its own and returns them sorted: the
// scenario's true distribution, against which a strategy's choices are
// judged.
func (s *Scenario) Calibrate(seed uint64, n, at, total int) []time.Duration {
	src := rand.NewPCG(seed, streamCalibrate)
	r := rand.New(src)
	out := make([]time.Duration, n)
	for i := range out {
		c := Call{Request: at, Requests: total}
		if s.Label != nil {
			// Labels and replicas vary by request: draw over as many
			// requests as samples.
			c.Request = at + i
			c.Replica = int(mix(seed, streamReplica, c.Request, 0, 0) % uint64(max(s.Defaults.Replicas, 1)))
			c.Label = s.Label(seed, c)
		}
		if s.Value != nil {
			c.Request = at + i
			c.Value = s.Value(seed, c)
		}
		out[i] = s.Draw(r, c).Total()
	}
	radixSort(out)
	return out
}

// quantileOf returns the nearest-rank q-quantile of sorted values.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return sorted[i]
}

// streamLabel is the stream of the predictable scenario's request sizes.
const streamLabel = 0x6c6162656c730000

const (
	labelLarge = "large"
	labelSmall = "small"
	labelCold  = "cold"
	labelWarm  = "warm"
)

// sizeLabel labels one request in ten (drawn from the seed) large.
func sizeLabel(seed uint64, c Call) string {
	if mix(seed, streamLabel, c.Request, c.Leg, 0)%10 == 0 {
		return labelLarge
	}
	return labelSmall
}

// coldLabel is the predictable scenario's label: one request in ten
// (drawn from the seed) carries the cache-miss hint.
func coldLabel(seed uint64, c Call) string {
	if mix(seed, streamLabel, c.Request, c.Leg, 0)%10 == 0 {
		return labelCold
	}
	return labelWarm
}

// The size-scaled scenario's request sizes: lognormal, median 2^14 bytes,
// σ = 1 in natural log; the service time scales as size^sizeAlpha.
const (
	sizeMedianLog2 = 14
	sizeSigma      = 1.0
	sizeAlpha      = 1.0
)

// sizeLog2 is the log2 of the size of a call of the size-scaled scenario,
// drawn from the seed, the request and the leg.
func sizeLog2(seed uint64, c Call) float64 {
	u := (float64(mix(seed, streamLabel, c.Request, c.Leg, 2)>>11) + 0.5) / (1 << 53)
	z := math.Sqrt2 * math.Erfinv(2*u-1)
	return sizeMedianLog2 + sizeSigma*z/math.Ln2
}

// replicaLabels are the replica-skew scenario's labels, by replica.
var replicaLabels = [...]string{"replica:0", "replica:1", "replica:2", "replica:3", "replica:4", "replica:5", "replica:6", "replica:7"}

// replicaLabel is the replica-skew scenario's label: the replica of the
// primary.
func replicaLabel(_ uint64, c Call) string {
	if c.Replica < len(replicaLabels) {
		return replicaLabels[c.Replica]
	}
	return "replica:" + strconv.Itoa(c.Replica)
}
