package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// Cancellation says whether servers honour a client's cancellation.
type Cancellation uint8

const (
	// CancelDefault uses the scenario's default (Defaults.IgnoreCancel).
	CancelDefault Cancellation = iota
	// CancelHonoured: a cancelled attempt frees its worker at once, or
	// leaves the queue it waits in.
	CancelHonoured
	// CancelIgnored: the server finishes every attempt it received.
	CancelIgnored
)

// Config configures a simulation. Zero fields take the scenario's
// [Defaults] or the documented default; [Config.Resolve] fills them in and
// validates, naming the offending field.
type Config struct {
	// Scenario is the service-time model. Required.
	Scenario *Scenario
	// Requests is the number of requests to simulate.
	Requests int
	// Rate is the open-loop arrival rate (Poisson), requests per second.
	// Concurrency is the number of closed-loop clients, each sending its
	// next request as soon as the previous one finished. At most one of
	// them may be set; with neither, the scenario's default applies.
	Rate        float64
	Concurrency int
	// Fanout is the number of legs per request: a request finishes when
	// its last leg does. Each leg is hedged on its own.
	Fanout int
	// Replicas and Workers size the servers: Replicas replicas with
	// Workers workers and a FIFO queue each. The primary of a leg goes to
	// a replica drawn from the workload stream; attempt k to the k-th next
	// replica.
	Replicas, Workers int
	// Cancel says whether servers honour cancellation.
	Cancel Cancellation
	// RTT is the network round trip of every attempt: it reaches its
	// server RTT/2 after it is sent, and its answer reaches the client
	// RTT/2 after the server is done. Zero means none. Client-side
	// latencies include it; server utilisation does not.
	RTT time.Duration
	// Budget is the hedge budget as a fraction of traffic (ratio budget,
	// DESIGN.md): zero means 0.1, negative means no budget at all. It
	// applies to every strategy that sends extra attempts, the oracle
	// included, unless the strategy is marked Unbudgeted.
	Budget float64
	// Burst, if positive, makes the budget a budget.Ratio bucket of that
	// burst. Zero means the policy's default budget, a budget.Windowed
	// whose deposits live for TTL.
	Burst float64
	// TTL is how long the deposits of the default budget.Windowed live;
	// zero means budget.DefaultTTL (10 s). Ignored when Burst is set.
	TTL time.Duration
	// Quantile pins the adaptive policy's delay to this quantile, and is
	// the oracle's and the default static delay's threshold. Zero leaves
	// the policy on its auto delay (tailcut.Config.Quantile unset) and
	// makes the threshold 0.95 (see Threshold).
	Quantile float64
	// MaxHedges bounds the extra attempts per leg; zero means 1.
	MaxHedges int
	// Policy is the base configuration of the adaptive strategy's
	// tailcut.Policy. Its Budget is replaced by the lab's; a zero Quantile
	// or MaxHedges takes the lab's.
	Policy tailcut.Config
	// WarmStart, if positive, starts the adaptive and predictive
	// strategies' policy warm: its Policy.Warm (unless set) is a snapshot
	// of WarmStart service times drawn for the run's first request, from
	// a stream of their own, as a snapshot saved by an earlier run would
	// be. Zero starts it cold: its first requests hedge at WarmupDelay.
	// At most MaxWarmStart.
	WarmStart int
	// Seed makes the run reproducible: the same seed gives the same
	// numbers.
	Seed uint64
	// SeriesEvery, if positive, records the adaptive delay (and the
	// scenario's true quantile) every SeriesEvery of virtual time.
	SeriesEvery time.Duration
	// Progress, if set, is called now and then with the number of requests
	// finished so far.
	Progress func(done int)

	// arrivals, if set, are ArrivalTimes of this configuration, drawn
	// once for the runs of a seed that all draw the same (the periodic
	// experiment's 21).
	arrivals []time.Duration
}

// Resolve returns c with defaults filled in from its scenario, or an error
// naming the invalid field.
func (c Config) Resolve() (Config, error) {
	if err := c.Scenario.Validate(); err != nil {
		return c, err
	}
	d := c.Scenario.Defaults
	if c.Requests == 0 {
		c.Requests = d.Requests
	}
	if c.Rate == 0 && c.Concurrency == 0 {
		c.Rate, c.Concurrency = d.Rate, d.Concurrency
		if c.Concurrency > 0 {
			c.Rate = 0
		}
	}
	if c.Fanout == 0 {
		c.Fanout = max(d.Fanout, 1)
	}
	if c.Replicas == 0 {
		c.Replicas = max(d.Replicas, 1)
	}
	if c.Workers == 0 {
		c.Workers = max(d.Workers, 1)
	}
	if c.Cancel == CancelDefault {
		c.Cancel = CancelHonoured
		if d.IgnoreCancel {
			c.Cancel = CancelIgnored
		}
	}
	if c.Budget == 0 {
		c.Budget = budget.DefaultRatio
	}
	if c.Burst == 0 && c.TTL == 0 {
		c.TTL = budget.DefaultTTL
	}
	if c.MaxHedges == 0 {
		c.MaxHedges = tailcut.DefaultMaxHedges
	}
	switch {
	case c.Requests <= 0:
		return c, fmt.Errorf("lab: requests must be positive, got %d", c.Requests)
	case c.Requests > 100_000_000:
		return c, fmt.Errorf("lab: requests must be at most 100000000, got %d", c.Requests)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return c, fmt.Errorf("lab: rate must be a positive number of requests per second, got %v", c.Rate)
	case c.Concurrency < 0:
		return c, fmt.Errorf("lab: concurrency must be positive, got %d", c.Concurrency)
	case c.Rate > 0 && c.Concurrency > 0:
		return c, fmt.Errorf("lab: set rate (open loop) or concurrency (closed loop), not both")
	case c.Rate == 0 && c.Concurrency == 0:
		return c, fmt.Errorf("lab: scenario %q needs a rate or a concurrency", c.Scenario.Name)
	case c.Fanout < 1 || c.Fanout > 10000:
		return c, fmt.Errorf("lab: fanout must be in [1, 10000], got %d", c.Fanout)
	case c.Replicas < 1 || c.Replicas > 100000:
		return c, fmt.Errorf("lab: replicas must be in [1, 100000], got %d", c.Replicas)
	case c.Workers < 1 || c.Workers > 1_000_000:
		return c, fmt.Errorf("lab: workers must be in [1, 1000000], got %d", c.Workers)
	case c.Cancel > CancelIgnored:
		return c, fmt.Errorf("lab: cancel must be CancelHonoured or CancelIgnored, got %d", c.Cancel)
	case math.IsNaN(c.Budget) || c.Budget > 1:
		return c, fmt.Errorf("lab: budget must be a fraction in (0, 1] (or negative for none), got %v", c.Budget)
	case c.Burst != 0 && !(c.Burst >= 1) || math.IsInf(c.Burst, 0):
		return c, fmt.Errorf("lab: burst must be at least 1 (or zero for the default windowed budget), got %v", c.Burst)
	case c.TTL < 0:
		return c, fmt.Errorf("lab: ttl must not be negative, got %v", c.TTL)
	case c.Quantile != 0 && !(c.Quantile > 0 && c.Quantile < 1):
		return c, fmt.Errorf("lab: quantile must be in (0, 1), got %v", c.Quantile)
	case c.MaxHedges < 1 || c.MaxHedges > tailcut.MaxHedgesLimit:
		return c, fmt.Errorf("lab: max-hedges must be in [1, %d], got %d", tailcut.MaxHedgesLimit, c.MaxHedges)
	case c.RTT < 0:
		return c, fmt.Errorf("lab: rtt must not be negative, got %v", c.RTT)
	case c.SeriesEvery < 0:
		return c, fmt.Errorf("lab: SeriesEvery must not be negative, got %v", c.SeriesEvery)
	case c.WarmStart < 0 || c.WarmStart > MaxWarmStart:
		return c, fmt.Errorf("lab: warm start must be in [0, %d] draws, got %d", MaxWarmStart, c.WarmStart)
	}
	return c, nil
}

// Threshold returns the quantile that static, speculative and oracle
// strategies use when they are given no delay: Quantile, or 0.95 when it is
// zero. (A zero Quantile leaves the adaptive policy on its auto delay.)
func (c Config) Threshold() float64 {
	if c.Quantile == 0 {
		return tailcut.DefaultQuantile
	}
	return c.Quantile
}

// Streams of the seeded generators. Each concern draws from its own stream,
// so a change in one (a strategy sending more attempts) never shifts
// another (the arrivals, the service times of other attempts).
const (
	streamArrivals  = 0x6172726976616c73
	streamService   = 0x7365727669636573
	streamReplica   = 0x7265706c69636173
	streamLock      = 0x6c6f636b73000000
	streamGC        = 0x6763706861736573
	streamCalibrate = 0x63616c6962726174
	streamWarm      = 0x7761726d73746172
)

// splitmix64 is a fast, well-mixing hash of 64 bits.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func mix(seed, stream uint64, a, b, c int) uint64 {
	h := splitmix64(seed ^ stream)
	h = splitmix64(h ^ uint64(a))
	h = splitmix64(h ^ uint64(b)<<32 ^ uint64(c))
	return h
}

// Attempt states.
const (
	stQueued    uint8 = iota // waiting for a worker
	stWorking                // on a worker, work phase
	stLockWait               // on a worker, waiting for its lock
	stHolding                // on a worker, in the critical section
	stInFlight               // sent, not yet at its server (Config.RTT)
	stReturning              // done on the server, its answer on the way back
	stFree                   // finished or dropped; the slot may be reused
)

type attempt struct {
	call     int32
	replica  int32
	gen      uint32
	k        uint8
	state    uint8
	canceled bool  // the client gave up on it
	dropped  bool  // the server dropped it from a queue (cancellation honoured)
	lock     int32 // lock index when svc.Hold > 0
	sent     int64 // when the client sent it
	busyFrom int64 // when it took its worker
	waitFrom int64 // when it started waiting for its lock
	svc      Service
}

type call struct {
	req     int32
	gen     uint32
	leg     int32
	n       uint8 // attempts sent
	done    bool
	start   int64
	r0      int32  // replica of the primary
	label   string // the scenario's feature label (Scenario.Label)
	lock    int32
	att     [tailcut.MaxHedgesLimit + 1]int32
	pr      tailcut.Request
	hasPol  bool
	running uint8       // attempts outstanding (sent, not finished, not cancelled)
	tie     tailcut.Tie // Tied (tied.go)

	value float64 // the scenario's numeric feature (Scenario.Value)
}

type request struct {
	index    int
	start    int64
	legsLeft int
}

type replica struct {
	busy  int
	queue fifo
}

type lock struct {
	held  bool
	queue fifo
}

// SeriesPoint is one sample of the adaptive delay over a run.
type SeriesPoint struct {
	T     time.Duration // virtual time since the start
	Delay time.Duration // the policy's delay at T
	True  time.Duration // the scenario's true Quantile of service time at T
	at    int           // request index at T
}

// sim is the state of one run.
type sim struct {
	cfg Config
	sc  *Scenario
	st  Strategy

	now  int64
	heap eventHeap
	seq  uint64

	svcSrc *rand.PCG
	svcRng *rand.Rand
	arrRng *rand.Rand

	replicas []replica
	locks    []lock
	gcPhase  []int64

	attempts  []attempt
	freeAtt   []int32
	calls     []call
	freeCall  []int32
	reqs      []request
	freeReq   []int32
	issued    int
	completed int
	lat       []int64
	extra     []uint16 // extra attempts per request index

	nCalls, nAttempts, nHedges int64
	nTriggered                 int64 // calls that asked for an extra attempt
	busyNS, lockWaitNS         int64
	lockWaits                  int64

	policy    *tailcut.Policy
	tied      *tailcut.Tied // Tied only
	bud       budget.Budget
	delay     int64
	oracleThr int64
	maxHedges int
	lastDelay int64 // adaptive: the delay of the latest request
	workers   int   // workers per replica available now (Scenario.Batch takes some)
	series    []SeriesPoint

	progressEvery int
}

const policyKey = "downstream"

// Run simulates cfg under strategy st and returns its figures (without a
// verdict: see [Compare]).
func Run(cfg Config, st Strategy) (*Result, error) {
	cfg, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, sc: cfg.Scenario, st: st, maxHedges: cfg.MaxHedges, workers: cfg.Workers}
	if err := s.setup(); err != nil {
		return nil, err
	}
	s.run()
	return s.result(), nil
}

func (s *sim) setup() error {
	cfg := s.cfg
	s.svcSrc = rand.NewPCG(0, 0)
	s.svcRng = rand.New(s.svcSrc)
	s.arrRng = rand.New(rand.NewPCG(splitmix64(cfg.Seed^streamArrivals), streamArrivals))
	s.replicas = make([]replica, cfg.Replicas)
	if n := s.sc.Locks; n > 0 {
		s.locks = make([]lock, n)
	}
	if gc := s.sc.GC; gc != nil {
		s.gcPhase = make([]int64, cfg.Replicas)
		for r := range s.gcPhase {
			s.gcPhase[r] = int64(mix(cfg.Seed, streamGC, r, 0, 0) % uint64(gc.Period))
		}
	}
	if b := s.sc.Batch; b != nil && b.Workers >= cfg.Workers {
		return fmt.Errorf("lab: scenario %s: its batch job takes %d workers, so each replica needs more than that, got %d", s.sc.Name, b.Workers, cfg.Workers)
	}
	if s.st.Kind == Phased {
		if s.st.Phases == nil {
			return fmt.Errorf("lab: strategy phased needs its phases' delays")
		}
		if err := s.st.Phases.validate(); err != nil {
			return fmt.Errorf("lab: strategy %s: %w", s.st, err)
		}
		if s.sc.Period() == 0 {
			return fmt.Errorf("lab: strategy %s needs a periodic scenario (diurnal, batch), not %s", s.st, s.sc.Name)
		}
	}
	s.lat = make([]int64, cfg.Requests)
	s.extra = make([]uint16, cfg.Requests)
	s.progressEvery = max(cfg.Requests/200, 1000)

	if cfg.Budget > 0 && !s.st.Unbudgeted {
		b, err := cfg.newBudget()
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		s.bud = b
	}
	var trueQ []time.Duration
	if s.st.Delay == 0 || s.st.Kind == Oracle {
		trueQ = s.sc.Calibrate(cfg.Seed, 20000, 0, cfg.Requests)
	}
	switch s.st.Kind {
	case Static, Speculative, Retry:
		s.delay = int64(s.st.Delay)
		if s.delay == 0 {
			q := cfg.Threshold()
			if s.st.Kind == Retry {
				q = 0.99
			}
			s.delay = int64(quantileOf(trueQ, q))
		}
		s.delay = max(s.delay, 1)
	case Oracle:
		s.oracleThr = int64(quantileOf(trueQ, cfg.Threshold()))
	case Adaptive, Predictive, Tied:
		pc, err := s.st.runConfig(cfg, s.bud)
		if err != nil {
			return err
		}
		s.maxHedges = pc.MaxHedges
		p, err := tailcut.New(pc)
		if err != nil {
			return fmt.Errorf("lab: adaptive policy: %w", err)
		}
		s.policy = p
		if s.st.Kind == Tied {
			if s.tied, err = tailcut.NewTied(s.st.Delay); err != nil {
				return fmt.Errorf("lab: %w", err)
			}
		}
	}
	return nil
}

func (s *sim) vnow() time.Time { return time.Unix(0, s.now) }

func (s *sim) schedule(t int64, kind uint8, id int32, gen uint32, k uint8) {
	s.seq++
	s.heap.push(event{t: t, seq: s.seq, kind: kind, id: id, gen: gen, k: k})
}

func (s *sim) run() {
	cfg := s.cfg
	if cfg.Concurrency > 0 {
		for range min(cfg.Concurrency, cfg.Requests) {
			s.startRequest()
		}
	} else {
		s.schedule(s.interarrival(), evArrival, 0, 0, 0)
	}
	if cfg.SeriesEvery > 0 {
		s.schedule(0, evSeries, 0, 0, 0)
	}
	if s.sc.Batch != nil {
		s.setCapacity()
	}
	// end is the time of the last event of the run itself: a series
	// sample after the last answer must not lengthen the span (and so
	// lower the utilisation) of a run recorded for a chart.
	var end int64
	for s.heap.len() > 0 {
		e := s.heap.pop()
		s.now = e.t
		if e.kind != evSeries && e.kind != evCapacity {
			end = e.t
		}
		switch e.kind {
		case evArrival:
			s.startRequest()
			if s.issued < cfg.Requests {
				s.schedule(s.now+s.interarrival(), evArrival, 0, 0, 0)
			}
		case evTimer:
			s.onTimer(e.id, e.gen, int(e.k))
		case evWorkDone:
			if a := &s.attempts[e.id]; a.gen == e.gen {
				s.onWorkDone(e.id)
			}
		case evHoldDone:
			if a := &s.attempts[e.id]; a.gen == e.gen {
				s.onHoldDone(e.id)
			}
		case evArrive:
			if a := &s.attempts[e.id]; a.gen == e.gen {
				s.arrive(e.id)
			}
		case evDeliver:
			if a := &s.attempts[e.id]; a.gen == e.gen {
				s.deliver(e.id)
			}
		case evCapacity:
			s.setCapacity()
		case evStarted:
			if a := &s.attempts[e.id]; a.gen == e.gen {
				s.onStarted(e.id)
			}
		case evSeries:
			s.recordSeries()
			if s.completed < cfg.Requests {
				s.schedule(s.now+int64(cfg.SeriesEvery), evSeries, 0, 0, 0)
			}
		}
	}
	s.now = end
}

func (s *sim) interarrival() int64 {
	if a := s.cfg.arrivals; len(a) == s.cfg.Requests {
		return int64(a[s.issued]) - s.now
	}
	if c := s.sc.Cycle; c != nil {
		return c.next(s.arrRng, s.now, s.cfg.Rate) - s.now
	}
	return int64(s.arrRng.ExpFloat64() / s.cfg.Rate * 1e9)
}

func (s *sim) recordSeries() {
	p := SeriesPoint{T: time.Duration(s.now), at: max(s.issued-1, 0)}
	switch {
	case s.policy != nil:
		// The delay given to the latest request: asking the policy here
		// could refresh its cache at other instants than a run without
		// the series, and change the run.
		p.Delay = time.Duration(s.lastDelay)
	default:
		p.Delay = time.Duration(s.delay)
	}
	s.series = append(s.series, p)
}

// startRequest begins the next request at s.now.
func (s *sim) startRequest() {
	i := s.issued
	s.issued++
	var slot int32
	if n := len(s.freeReq); n > 0 {
		slot = s.freeReq[n-1]
		s.freeReq = s.freeReq[:n-1]
	} else {
		s.reqs = append(s.reqs, request{})
		slot = int32(len(s.reqs) - 1)
	}
	s.reqs[slot] = request{index: i, start: s.now, legsLeft: s.cfg.Fanout}
	for leg := range s.cfg.Fanout {
		s.startCall(slot, i, leg)
	}
}

func (s *sim) startCall(req int32, index, leg int) {
	var c int32
	if n := len(s.freeCall); n > 0 {
		c = s.freeCall[n-1]
		s.freeCall = s.freeCall[:n-1]
	} else {
		s.calls = append(s.calls, call{})
		c = int32(len(s.calls) - 1)
	}
	cl := &s.calls[c]
	gen := cl.gen
	*cl = call{req: req, gen: gen, leg: int32(leg), start: s.now}
	cl.r0 = int32(mix(s.cfg.Seed, streamReplica, index, leg, 0) % uint64(s.cfg.Replicas))
	if len(s.locks) > 0 {
		cl.lock = int32(mix(s.cfg.Seed, streamLock, index, leg, 0) % uint64(len(s.locks)))
	}
	if s.sc.Label != nil {
		cl.label = s.sc.Label(s.cfg.Seed, Call{Request: index, Requests: s.cfg.Requests, Leg: leg, Replica: int(cl.r0)})
	}
	if s.sc.Value != nil {
		cl.value = s.sc.Value(s.cfg.Seed, Call{Request: index, Requests: s.cfg.Requests, Leg: leg, Replica: int(cl.r0)})
	}
	s.nCalls++

	var delay int64
	switch s.st.Kind {
	case Predictive:
		if f := s.st.features(s.sc, cl.label, cl.value); f.Len()+f.NumValues() > 0 {
			cl.pr = s.policy.BeginWith(policyKey, &f, s.vnow())
		} else {
			cl.pr = s.policy.Begin(policyKey, s.vnow())
		}
		cl.hasPol = true
		delay = int64(cl.pr.Delay())
		s.lastDelay = delay
	case Adaptive, Tied:
		cl.pr = s.policy.Begin(policyKey, s.vnow())
		cl.hasPol = true
		delay = int64(cl.pr.Delay())
		s.lastDelay = delay
		if s.tied != nil {
			delay = s.beginTie(cl, delay) // tied.go
		}
	case Static, Retry, Speculative, Oracle:
		if s.bud != nil {
			s.bud.Deposit(s.vnow())
		}
		delay = s.delay
	case Phased:
		if s.bud != nil {
			s.bud.Deposit(s.vnow())
		}
		delay = s.phaseDelay(s.now, index, leg)
	}
	svc := s.draw(c, index, leg, 0)
	s.launch(c, svc)
	switch s.st.Kind {
	case Oracle:
		if s.oracleSlow(c, svc) {
			s.nTriggered++
		}
		if s.oracleSlow(c, svc) && s.grant() {
			s.nHedges++
			s.extra[index]++
			s.launch(c, s.draw(c, index, leg, 1))
		}
	case Static, Adaptive, Predictive, Retry, Speculative, Tied:
		s.schedule(s.now+max(delay, 0), evTimer, c, gen, 1)
	case Phased:
		if delay >= 0 {
			s.schedule(s.now+delay, evTimer, c, gen, 1)
		}
	}
}

// oracleSlow reports whether the primary of call c, of service svc, will
// take longer than the oracle's threshold: the oracle knows the service
// time and the replica's GC pauses (not the queue it may meet).
func (s *sim) oracleSlow(c int32, svc Service) bool {
	d := int64(svc.Total())
	if s.sc.GC != nil {
		r := int(s.calls[c].r0)
		d = s.gcFinish(r, s.now, int64(svc.Work)) - s.now + int64(svc.Hold)
	}
	return d > s.oracleThr
}

// grant asks the budget for one extra attempt.
func (s *sim) grant() bool { return s.bud == nil || s.bud.Withdraw(s.vnow()) }

// draw returns the service time of attempt k of leg of request index (call
// c), from a generator seeded by those three numbers alone.
func (s *sim) draw(c int32, index, leg, k int) Service {
	cl := &s.calls[c]
	s.svcSrc.Seed(mix(s.cfg.Seed, streamService, index, leg, k), streamService)
	return s.sc.Draw(s.svcRng, Call{Request: index, Requests: s.cfg.Requests, Leg: leg, Attempt: k,
		Replica: (int(cl.r0) + k) % s.cfg.Replicas, Label: cl.label, Value: cl.value})
}

// launch sends the next attempt of call c to its replica.
func (s *sim) launch(c int32, svc Service) {
	cl := &s.calls[c]
	var a int32
	if n := len(s.freeAtt); n > 0 {
		a = s.freeAtt[n-1]
		s.freeAtt = s.freeAtt[:n-1]
	} else {
		s.attempts = append(s.attempts, attempt{})
		a = int32(len(s.attempts) - 1)
	}
	k := cl.n
	cl.att[k] = a
	cl.n++
	cl.running++
	s.nAttempts++
	at := &s.attempts[a]
	*at = attempt{
		call:    c,
		replica: int32((int(cl.r0) + int(k)) % s.cfg.Replicas),
		gen:     at.gen,
		k:       k,
		state:   stQueued,
		lock:    cl.lock,
		sent:    s.now,
		svc:     svc,
	}
	if rtt := int64(s.cfg.RTT); rtt > 0 {
		at.state = stInFlight
		s.schedule(s.now+rtt/2, evArrive, a, at.gen, 0)
		return
	}
	s.arrive(a)
}

// arrive puts attempt a in its replica: on a free worker, or in the queue.
func (s *sim) arrive(a int32) {
	at := &s.attempts[a]
	if at.dropped {
		s.freeAttempt(a) // cancelled on the way: the server drops it
		return
	}
	at.state = stQueued
	rp := &s.replicas[at.replica]
	if rp.busy < s.workers {
		s.startWork(a)
	} else {
		rp.queue.push(a)
	}
}

// startWork puts attempt a on a worker of its replica.
func (s *sim) startWork(a int32) {
	at := &s.attempts[a]
	s.replicas[at.replica].busy++
	at.state = stWorking
	at.busyFrom = s.now
	if s.tied != nil {
		s.signalStart(a) // tied.go
	}
	end := s.now + int64(at.svc.Work)
	if gc := s.sc.GC; gc != nil {
		end = s.gcFinish(int(at.replica), s.now, int64(at.svc.Work))
	}
	s.schedule(end, evWorkDone, a, at.gen, 0)
}

// gcFinish returns when work started at t on replica r ends, stretched by
// the replica's pauses.
func (s *sim) gcFinish(r int, t, work int64) int64 {
	period, pause := int64(s.sc.GC.Period), int64(s.sc.GC.Pause)
	phase := s.gcPhase[r]
	for {
		off := ((t-phase)%period + period) % period
		if off < pause {
			t += pause - off
			off = pause
		}
		avail := period - off
		if work <= avail {
			return t + work
		}
		work -= avail
		t += avail
	}
}

// releaseWorker frees the worker of a and starts the next queued attempt.
func (s *sim) releaseWorker(a int32) {
	at := &s.attempts[a]
	s.busyNS += s.now - at.busyFrom
	rp := &s.replicas[at.replica]
	rp.busy--
	if rp.busy >= s.workers {
		return // a batch job takes the worker (Scenario.Batch)
	}
	for {
		next, ok := rp.queue.pop()
		if !ok {
			return
		}
		if s.attempts[next].dropped {
			s.freeAttempt(next)
			continue
		}
		s.startWork(next)
		return
	}
}

func (s *sim) freeAttempt(a int32) {
	s.attempts[a].gen++
	s.attempts[a].state = stFree
	s.freeAtt = append(s.freeAtt, a)
}

func (s *sim) onWorkDone(a int32) {
	at := &s.attempts[a]
	if at.svc.Hold <= 0 {
		s.finish(a)
		return
	}
	lk := &s.locks[at.lock]
	if !lk.held {
		lk.held = true
		at.state = stHolding
		s.schedule(s.now+int64(at.svc.Hold), evHoldDone, a, at.gen, 0)
		return
	}
	at.state = stLockWait
	at.waitFrom = s.now
	lk.queue.push(a)
}

func (s *sim) onHoldDone(a int32) {
	at := &s.attempts[a]
	lk := &s.locks[at.lock]
	lk.held = false
	for {
		next, ok := lk.queue.pop()
		if !ok {
			break
		}
		nt := &s.attempts[next]
		if nt.dropped {
			s.freeAttempt(next)
			continue
		}
		lk.held = true
		s.lockWaitNS += s.now - nt.waitFrom
		s.lockWaits++
		nt.state = stHolding
		s.schedule(s.now+int64(nt.svc.Hold), evHoldDone, next, nt.gen, 0)
		break
	}
	s.finish(a)
}

// finish ends attempt a on the server and sends its answer back.
func (s *sim) finish(a int32) {
	s.releaseWorker(a)
	if rtt := int64(s.cfg.RTT); rtt > 0 {
		at := &s.attempts[a]
		at.state = stReturning
		s.schedule(s.now+rtt-rtt/2, evDeliver, a, at.gen, 0)
		return
	}
	s.deliver(a)
}

// deliver hands attempt a's answer to the client: the first answer of its
// call wins.
func (s *sim) deliver(a int32) {
	at := &s.attempts[a]
	if at.canceled {
		s.freeAttempt(a) // a loser the server ran to the end
		return
	}
	c := at.call
	cl := &s.calls[c]
	cl.running--
	k := int(at.k)
	if cl.hasPol {
		s.policy.Observe(&cl.pr, k, time.Duration(s.now-at.sent), tailcut.Completed, s.vnow())
	}
	if s.tied != nil {
		cl.tie.Answered(k)
	}
	s.freeAttempt(a)
	// The first answer wins: every other attempt is cancelled.
	for j := range int(cl.n) {
		if j != k {
			s.cancel(c, cl.att[j])
		}
	}
	cl.done = true
	if cl.hasPol {
		s.policy.End(&cl.pr, k, s.vnow())
	}
	s.legDone(c)
}

// cancel gives up attempt a of call c, if it is still outstanding.
func (s *sim) cancel(c int32, a int32) {
	at := &s.attempts[a]
	if at.call != c || at.canceled || at.dropped {
		return
	}
	cl := &s.calls[c]
	if cl.att[at.k] != a {
		return // slot reused: a finished earlier
	}
	// An attempt still referenced by its call and not finished.
	if at.state == stFree {
		return
	}
	at.canceled = true
	cl.running--
	if cl.hasPol {
		s.policy.Observe(&cl.pr, int(at.k), time.Duration(s.now-at.sent), tailcut.Canceled, s.vnow())
	}
	if s.cfg.Cancel != CancelHonoured {
		return
	}
	switch at.state {
	case stInFlight:
		at.dropped = true // freed when it reaches the server
	case stReturning:
		// The server is done; the answer is freed when it arrives.
	case stQueued:
		at.dropped = true // freed when the queue reaches it
	case stWorking:
		s.releaseWorker(a)
		s.freeAttempt(a) // its pending event is now stale
	case stLockWait:
		at.dropped = true // leaves the lock queue when the lock reaches it
		s.releaseWorker(a)
	case stHolding:
		// A critical section runs to its end; the worker is freed then.
	}
}

// legDone records that call c has its answer.
func (s *sim) legDone(c int32) {
	cl := &s.calls[c]
	r := cl.req
	cl.gen++
	s.freeCall = append(s.freeCall, c)
	rq := &s.reqs[r]
	rq.legsLeft--
	if rq.legsLeft > 0 {
		return
	}
	s.lat[rq.index] = s.now - rq.start
	s.completed++
	s.freeReq = append(s.freeReq, r)
	if s.cfg.Progress != nil && s.completed%s.progressEvery == 0 {
		s.cfg.Progress(s.completed)
	}
	if s.cfg.Concurrency > 0 && s.issued < s.cfg.Requests {
		s.startRequest()
	}
}

// onTimer fires the timer of call c for attempt k.
func (s *sim) onTimer(c int32, gen uint32, k int) {
	cl := &s.calls[c]
	if cl.gen != gen || cl.done || int(cl.n) > s.maxHedges {
		return
	}
	req := &s.reqs[cl.req]
	index, leg := req.index, int(cl.leg)
	next := int64(-1)
	if k == 1 {
		s.nTriggered++ // still unanswered at its delay: it needs a hedge
	}
	switch s.st.Kind {
	case Tied:
		if cl.tie.Tied() {
			s.twin(c, index, leg) // tied.go: one twin, no later timer
			return
		}
		fallthrough
	case Adaptive, Predictive:
		switch s.policy.Hedge(&cl.pr, s.vnow()) {
		case tailcut.Send:
			s.nHedges++
			s.extra[index]++
			s.launch(c, s.draw(c, index, leg, int(cl.n)))
		case tailcut.DenyEarly:
			// Re-timed (a request begun before its key's first
			// answer): its first hedge at its new slot, its new delay,
			// where it is counted as a trigger if still unanswered.
			s.nTriggered--
			k = 0
		}
		next = cl.start + int64(cl.pr.HedgeAt(k+1))
	case Static:
		if s.grant() {
			s.nHedges++
			s.extra[index]++
			s.launch(c, s.draw(c, index, leg, int(cl.n)))
		}
		next = cl.start + int64(k+1)*s.delay
	case Phased:
		if s.grant() {
			s.nHedges++
			s.extra[index]++
			s.launch(c, s.draw(c, index, leg, int(cl.n)))
		}
		next = cl.start + int64(k+1)*s.phaseDelay(cl.start, index, leg)
	case Retry, Speculative:
		if s.grant() {
			for j := range int(cl.n) {
				s.cancel(c, cl.att[j])
			}
			s.nHedges++
			s.extra[index]++
			s.launch(c, s.draw(c, index, leg, int(cl.n)))
		}
		next = s.now + s.delay
	}
	if k+1 <= s.maxHedges && next >= 0 {
		s.schedule(max(next, s.now), evTimer, c, gen, uint8(k+1))
	}
}

// result computes the run's figures.
func (s *sim) result() *Result {
	cfg := s.cfg
	r := &Result{
		Strategy:  s.st.String(),
		Scenario:  s.sc.Name,
		Requests:  cfg.Requests,
		Calls:     s.nCalls,
		Attempts:  s.nAttempts,
		Hedges:    s.nHedges,
		Span:      time.Duration(s.now),
		LockWaits: s.lockWaits,
		LockWait:  time.Duration(s.lockWaitNS),
	}
	sorted := slices.Clone(s.lat)
	radixSort(sorted)
	r.sorted = sorted
	r.byIndex = s.lat
	r.extra = s.extra
	r.fanout = cfg.Fanout
	var sum float64
	slow := 0
	for _, v := range sorted {
		sum += float64(v)
		if s.sc.SlowThreshold > 0 && v > int64(s.sc.SlowThreshold) {
			slow++
		}
	}
	n := len(sorted)
	r.Mean = time.Duration(sum / float64(n))
	r.P50 = pct(sorted, 0.50)
	r.P90 = pct(sorted, 0.90)
	r.P95 = pct(sorted, 0.95)
	r.P99 = pct(sorted, 0.99)
	r.P999 = pct(sorted, 0.999)
	r.Max = time.Duration(sorted[n-1])
	r.Slow = float64(slow) / float64(n)
	r.ExtraLoad = float64(s.nAttempts-s.nCalls) / float64(s.nCalls)
	r.HedgeRate = float64(s.nHedges) / float64(s.nCalls)
	r.TriggerRate = float64(s.nTriggered) / float64(s.nCalls)
	if s.now > 0 {
		r.Utilization = float64(s.busyNS) / (float64(cfg.Replicas*cfg.Workers) * float64(s.now))
	}
	r.Work = time.Duration(s.busyNS)
	switch {
	case s.policy != nil:
		r.Delay = s.policy.Delay(policyKey, s.vnow())
		st := s.policy.Stats()
		r.Denied = st.Denials()
		r.PolicyStats = &st
	case s.st.Kind == Static || s.st.Kind == Retry || s.st.Kind == Speculative:
		r.Delay = time.Duration(s.delay)
	case s.st.Kind == Oracle:
		r.Delay = 0
	}
	if len(s.series) > 0 {
		// The true quantile at each point, from the scenario's own
		// distribution at that request index.
		cache := map[int]time.Duration{}
		q := cfg.Threshold()
		if s.policy != nil && s.policy.Config().Quantile != 0 {
			q = s.policy.Config().Quantile
		}
		for i := range s.series {
			at := s.series[i].at
			// Quantise the index so the calibration runs a bounded
			// number of times.
			key := at * 100 / cfg.Requests
			v, ok := cache[key]
			if !ok {
				v = s.sc.trueQuantile(cfg.Seed, q, Call{Request: at, Requests: cfg.Requests}, 100000)
				cache[key] = v
			}
			s.series[i].True = v
		}
		r.Series = s.series
	}
	return r
}

func pct(sorted []int64, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return time.Duration(sorted[i])
}

// newBudget returns the hedge budget of a run: a budget.Ratio bucket when
// Burst is set, else a budget.Windowed of TTL; both at the Budget's ratio.
func (c Config) newBudget() (budget.Budget, error) {
	if c.Burst > 0 {
		return budget.NewRatio(c.Budget, c.Burst, 0)
	}

	return budget.NewWindowed(c.Budget, c.TTL, 0)
}
