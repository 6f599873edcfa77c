package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cycle makes a scenario's open-loop arrival rate periodic: the rate at
// virtual time t is Rate × (1 − A·cos(2πt/Period)), with A chosen so that
// the peak is PeakToTrough times the trough. The mean over a period is
// Rate; a run starts at the trough. The service time stays the scenario's:
// latency rises at the peak only through the servers' queues.
type Cycle struct {
	Period       time.Duration
	PeakToTrough float64
}

// amplitude is A of the rate curve.
func (c *Cycle) amplitude() float64 { return (c.PeakToTrough - 1) / (c.PeakToTrough + 1) }

// RateFactor is the arrival rate at virtual time t as a multiple of the
// mean rate.
func (c *Cycle) RateFactor(t time.Duration) float64 {
	return 1 - c.amplitude()*math.Cos(2*math.Pi*float64(t%c.Period)/float64(c.Period))
}

// next returns the arrival after the one at t (ns) of a non-homogeneous
// Poisson process of mean rate (per second) following the cycle, by
// thinning: candidates at the peak rate, each kept with probability
// rate(t) ÷ peak. It draws only from r, so the arrivals depend on the
// seed alone.
func (c *Cycle) next(r *rand.Rand, t int64, rate float64) int64 {
	peak := 1 + c.amplitude()
	for {
		t += int64(r.ExpFloat64() / (rate * peak) * 1e9)
		if r.Float64()*peak < c.RateFactor(time.Duration(t)) {
			return t
		}
	}
}

// BatchLoad is a batch job that takes a growing share of every replica's
// workers for part of each period: from the start of the period it holds
// one worker, then one more every Window ÷ Workers, up to Workers, and
// frees them all at Window — a sawtooth of capacity. A worker the job
// takes is taken as soon as it is free: work in progress is not
// interrupted. Arrivals stay steady; latency rises while the job runs only
// through the servers' queues.
type BatchLoad struct {
	Period, Window time.Duration
	Workers        int
}

// Held returns how many workers of every replica the job holds at virtual
// time t.
func (b *BatchLoad) Held(t time.Duration) int {
	off := t % b.Period
	if off >= b.Window {
		return 0
	}
	return int(int64(off)*int64(b.Workers)/int64(b.Window)) + 1
}

// nextChange returns the first instant after t at which Held changes.
func (b *BatchLoad) nextChange(t time.Duration) time.Duration {
	start := t - t%b.Period
	off := t % b.Period
	if off >= b.Window {
		return start + b.Period
	}
	j := int64(off)*int64(b.Workers)/int64(b.Window) + 1 // next step
	if int(j) >= b.Workers {
		return start + b.Window
	}
	// The smallest offset at which the step index reaches j.
	at := time.Duration((j*int64(b.Window) + int64(b.Workers) - 1) / int64(b.Workers))
	return start + at
}

// Period returns the period of a periodic scenario (its Cycle's or its
// Batch's), or zero.
func (s *Scenario) Period() time.Duration {
	switch {
	case s.Cycle != nil:
		return s.Cycle.Period
	case s.Batch != nil:
		return s.Batch.Period
	}
	return 0
}

// WithPeriod returns a copy of a periodic scenario with its period set to
// p (the batch window scaled alike) and its default number of requests
// set to cover as many periods as before: a real run takes a shorter
// period than the simulation's default, and the simulation can run the
// same.
func (s *Scenario) WithPeriod(p time.Duration) (*Scenario, error) {
	old := s.Period()
	if old == 0 {
		return nil, fmt.Errorf("lab: scenario %s has no period", s.Name)
	}
	if p < time.Second || p > 24*time.Hour {
		return nil, fmt.Errorf("lab: period must be in [1s, 24h], got %v", p)
	}
	c := *s
	if s.Cycle != nil {
		cy := *s.Cycle
		cy.Period = p
		c.Cycle = &cy
	}
	if s.Batch != nil {
		b := *s.Batch
		b.Period = p
		b.Window = time.Duration(float64(s.Batch.Window) * float64(p) / float64(old))
		c.Batch = &b
	}
	c.Defaults.Requests = max(int(float64(s.Defaults.Requests)*float64(p)/float64(old)), 1)
	return &c, nil
}

// validatePeriodic checks a scenario's Cycle and Batch.
func (s *Scenario) validatePeriodic() error {
	switch {
	case s.Cycle != nil && s.Batch != nil:
		return fmt.Errorf("lab: scenario %q: set Cycle or Batch, not both", s.Name)
	case s.Cycle != nil && s.Cycle.Period <= 0:
		return fmt.Errorf("lab: scenario %q: Cycle.Period must be positive, got %v", s.Name, s.Cycle.Period)
	case s.Cycle != nil && !(s.Cycle.PeakToTrough >= 1) || s.Cycle != nil && math.IsInf(s.Cycle.PeakToTrough, 0):
		return fmt.Errorf("lab: scenario %q: Cycle.PeakToTrough must be at least 1, got %v", s.Name, s.Cycle.PeakToTrough)
	case s.Batch != nil && (s.Batch.Period <= 0 || s.Batch.Window <= 0 || s.Batch.Window > s.Batch.Period):
		return fmt.Errorf("lab: scenario %q: Batch.Window %v must be in (0, period %v]", s.Name, s.Batch.Window, s.Batch.Period)
	case s.Batch != nil && s.Batch.Workers < 1:
		return fmt.Errorf("lab: scenario %q: Batch.Workers must be positive, got %d", s.Name, s.Batch.Workers)
	}
	return nil
}

// The periodic scenarios' service time: a lognormal body of mean 44 ms
// (sd 16 ms) and 5 % stragglers five times slower, a mean of 52.8 ms. At
// the diurnal peak of 300 requests/s on 3 replicas × 6 workers that is
// 88 % utilisation; at the trough of 100 requests/s, 29 %.
var periodicBody = newLognormal(44*time.Millisecond, 16*time.Millisecond)

const (
	periodicStragglerP = 0.05
	periodicStraggler  = 5
)

func drawPeriodic(r *rand.Rand) time.Duration {
	d := periodicBody.draw(r)
	if r.Float64() < periodicStragglerP {
		d *= periodicStraggler
	}
	return d
}

func periodicCDF(t float64) float64 {
	return (1-periodicStragglerP)*periodicBody.cdf(t) + periodicStragglerP*periodicBody.cdf(t/periodicStraggler)
}

// PeriodicPeriod is the default period of the diurnal and batch
// scenarios; their default run covers ten of them.
const PeriodicPeriod = 2 * time.Minute

// periodicScenarios are the scenarios of periodic load.
func periodicScenarios() []*Scenario {
	return []*Scenario{
		{
			Name: "diurnal",
			Summary: "a daily cycle compressed to a period (2 min; --period): open-loop arrivals at 200 req/s on average, 3× more at the peak than at the trough; " +
				"lognormal mean 44 ms (sd 16 ms), 5 % ×5, on 3 replicas × 6 workers (88 % utilised at the peak, 29 % at the trough); 10 cycles",
			Defaults: Defaults{Requests: periodicRequests, Rate: 200, Fanout: 1, Replicas: 3, Workers: 6},
			Cycle:    &Cycle{Period: PeriodicPeriod, PeakToTrough: 3},
			Draw:     func(r *rand.Rand, _ Call) Service { return Service{Work: drawPeriodic(r)} },
			CDF:      plain(periodicCDF),
		},
		{
			Name: "batch",
			Summary: "steady arrivals at 200 req/s (the diurnal service, 2 replicas × 9 workers, 59 % utilised); every period (2 min; --period) a batch job takes " +
				"1, then 2, then 3 of each replica's 9 workers over 60 % of it (88 % utilised at its height) and frees them; 10 cycles",
			Defaults: Defaults{Requests: periodicRequests, Rate: 200, Fanout: 1, Replicas: 2, Workers: 9},
			Batch:    &BatchLoad{Period: PeriodicPeriod, Window: PeriodicPeriod * 6 / 10, Workers: 3},
			Draw:     func(r *rand.Rand, _ Call) Service { return Service{Work: drawPeriodic(r)} },
			CDF:      plain(periodicCDF),
		},
	}
}

// PhaseOf returns the phase, in [0, phases), of virtual time t in a cycle
// of period p.
func PhaseOf(t, p time.Duration, phases int) int {
	return int(int64(t%p) * int64(phases) / int64(p))
}

// streamPhase is the stream that picks which calls of a phase take the
// Phased strategy's second delay.
const streamPhase = 0x7068617365730000

// phaseDelay is the Phased strategy's delay for leg of request index,
// started at t (ns): negative when it sends no hedge.
func (s *sim) phaseDelay(t int64, index, leg int) int64 {
	d := s.st.Phases.delay(time.Duration(t), s.sc.Period(), mix(s.cfg.Seed, streamPhase, index, leg, 0))
	if d < 0 {
		return -1
	}
	return max(int64(d), 1)
}

// setCapacity sets the workers every replica may use now, and starts
// queued attempts on those that came free.
func (s *sim) setCapacity() {
	b := s.sc.Batch
	s.workers = s.cfg.Workers - b.Held(time.Duration(s.now))
	for r := range s.replicas {
		rp := &s.replicas[r]
		for rp.busy < s.workers {
			next, ok := rp.queue.pop()
			if !ok {
				break
			}
			if s.attempts[next].dropped {
				s.freeAttempt(next)
				continue
			}
			s.startWork(next)
		}
	}
	if s.completed < s.cfg.Requests {
		s.schedule(int64(b.nextChange(time.Duration(s.now))), evCapacity, 0, 0, 0)
	}
}

// ArrivalTimes returns the arrival instants, since the start, of the
// open-loop requests of cfg: those the simulation draws, whatever the
// strategy (the arrivals have a stream of their own). For a closed loop
// it returns nil.
func ArrivalTimes(cfg Config) ([]time.Duration, error) {
	cfg, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	if cfg.Concurrency > 0 {
		return nil, nil
	}
	r := rand.New(rand.NewPCG(splitmix64(cfg.Seed^streamArrivals), streamArrivals))
	out := make([]time.Duration, cfg.Requests)
	var t int64
	for i := range out {
		if c := cfg.Scenario.Cycle; c != nil {
			t = c.next(r, t, cfg.Rate)
		} else {
			t += int64(r.ExpFloat64() / cfg.Rate * 1e9)
		}
		out[i] = time.Duration(t)
	}
	return out, nil
}

// realQueues reports whether the real server of s puts a fixed pool of
// workers per replica in front of the service time, as the simulation
// does: the periodic scenarios, whose latency rises only by queueing.
func (s *Scenario) realQueues() bool { return s.Cycle != nil || s.Batch != nil }

// workerPool is a real server replica's workers: a FIFO queue in front of
// a number of slots that a batch job may shrink. A worker is busy for the
// sampled service time from the instant it was free for its attempt (the
// later of the attempt's arrival and its predecessor's scheduled end), not
// from whenever the goroutines involved were woken: on a loaded machine
// the scheduler's lateness would otherwise lengthen every service time
// and, near saturation, the queues far more than the simulation's.
type workerPool struct {
	mu      sync.Mutex
	slots   int
	busy    int
	waiting []*poolWaiter
}

type poolWaiter struct {
	ready   chan struct{}
	granted bool
	at      time.Time // when its worker was free
}

// acquire takes a worker, waiting in line for one, and returns when the
// worker was free for it; with honour set it gives up when ctx ends
// (reporting false), as a simulated server drops a cancelled attempt from
// its queue.
func (p *workerPool) acquire(ctx context.Context, honour bool) (time.Time, bool) {
	p.mu.Lock()
	arrived := time.Now()
	if p.busy < p.slots && len(p.waiting) == 0 {
		p.busy++
		p.mu.Unlock()
		return arrived, true
	}
	w := &poolWaiter{ready: make(chan struct{})}
	p.waiting = append(p.waiting, w)
	p.mu.Unlock()
	start := func() time.Time {
		if w.at.After(arrived) {
			return w.at
		}
		return arrived
	}
	if !honour {
		<-w.ready
		return start(), true
	}
	select {
	case <-w.ready:
		return start(), true
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.granted {
		// Granted as the context ended: hand the worker on.
		p.busy--
		p.grant(time.Now())
		return time.Time{}, false
	}
	for i, o := range p.waiting {
		if o == w {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			break
		}
	}
	return time.Time{}, false
}

// release frees a worker whose work was due to end at end.
func (p *workerPool) release(end time.Time) {
	p.mu.Lock()
	p.busy--
	p.grant(end)
	p.mu.Unlock()
}

// setSlots changes the number of workers (a batch job taking or freeing
// some).
func (p *workerPool) setSlots(n int) {
	p.mu.Lock()
	p.slots = n
	p.grant(time.Now())
	p.mu.Unlock()
}

// grant hands free workers, free since at, to the first in line; p.mu is
// held.
func (p *workerPool) grant(at time.Time) {
	for p.busy < p.slots && len(p.waiting) > 0 {
		w := p.waiting[0]
		p.waiting = p.waiting[1:]
		w.granted, w.at = true, at
		p.busy++
		close(w.ready)
	}
}

// runBatch follows the batch job's schedule from start in wall time until
// stop is closed, resizing every pool.
func runBatch(b *BatchLoad, workers int, pools []*workerPool, start time.Time, stop <-chan struct{}) {
	for {
		t := time.Since(start)
		for _, p := range pools {
			p.setSlots(workers - b.Held(t))
		}
		timer := time.NewTimer(time.Until(start.Add(b.nextChange(t))))
		select {
		case <-timer.C:
		case <-stop:
			timer.Stop()
			return
		}
	}
}

// maxPhases bounds the phases of a Phased strategy.
const maxPhases = 1000

// parsePhases reads the Phased strategy's schedule: one entry per phase,
// separated by "/"; an entry is a delay ("40ms"), "off" for no hedge, or
// a mixture "40ms+60ms@0.25" (a quarter of the phase's calls take 60ms).
func parsePhases(arg string) (*PhaseSchedule, error) {
	parts := strings.Split(arg, "/")
	if len(parts) > maxPhases {
		return nil, fmt.Errorf("at most %d phases, got %d", maxPhases, len(parts))
	}
	one := func(i int, p string) (time.Duration, error) {
		p = strings.TrimSpace(p)
		if p == "off" {
			return -1, nil
		}
		d, err := time.ParseDuration(p)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("phase %d: bad delay %q (want a positive duration like 40ms, or off)", i+1, p)
		}
		return d, nil
	}
	ps := &PhaseSchedule{Delays: make([]time.Duration, len(parts))}
	for i, p := range parts {
		first, rest, mixed := strings.Cut(p, "+")
		d, err := one(i, first)
		if err != nil {
			return nil, err
		}
		ps.Delays[i] = d
		if !mixed {
			continue
		}
		alt, share, ok := strings.Cut(rest, "@")
		f, err := strconv.ParseFloat(share, 64)
		if !ok || err != nil || !(f >= 0 && f <= 1) {
			return nil, fmt.Errorf("phase %d: bad mixture %q (want like 40ms+60ms@0.25)", i+1, p)
		}
		a, err := one(i, alt)
		if err != nil {
			return nil, err
		}
		if ps.Share == nil {
			ps.Share, ps.Alt = make([]float64, len(parts)), make([]time.Duration, len(parts))
		}
		ps.Alt[i], ps.Share[i] = a, f
	}
	return ps, nil
}

// PhaseSchedule is the Phased strategy's delays: Delays[i] is the hedge
// delay of the calls that start in the i-th of len(Delays) equal phases of
// the scenario's period, counted from its start; a negative delay sends no
// hedge in that phase. If Share is set, a share Share[i] of the calls of
// phase i, picked by a hash of the seed and the request, takes Alt[i]
// instead: a mixture of two delays reaches the points between them.
type PhaseSchedule struct {
	Delays []time.Duration
	Alt    []time.Duration
	Share  []float64
}

// delay returns the delay of a call started at t, h the hash that picks
// its delay when the phase mixes two.
func (p *PhaseSchedule) delay(t, period time.Duration, h uint64) time.Duration {
	i := PhaseOf(t, period, len(p.Delays))
	if i < len(p.Share) && p.Share[i] > 0 && float64(h>>11)/(1<<53) < p.Share[i] {
		return p.Alt[i]
	}
	return p.Delays[i]
}

// validate reports whether the schedule is complete.
func (p *PhaseSchedule) validate() error {
	switch {
	case len(p.Delays) == 0:
		return errors.New("no phases")
	case p.Share != nil && (len(p.Share) != len(p.Delays) || len(p.Alt) != len(p.Delays)):
		return errors.New("the schedule's Share and Alt must have one entry per phase")
	}
	for _, f := range p.Share {
		if !(f >= 0 && f <= 1) {
			return fmt.Errorf("a share must be in [0, 1], got %v", f)
		}
	}
	return nil
}

// String spells the schedule as the phased strategy takes it:
// 40ms/off/60ms.
func (p *PhaseSchedule) String() string {
	if p == nil {
		return ""
	}
	one := func(d time.Duration) string {
		if d < 0 {
			return "off"
		}
		return d.String()
	}
	parts := make([]string, len(p.Delays))
	for i, d := range p.Delays {
		parts[i] = one(d)
		if i < len(p.Share) && p.Share[i] > 0 {
			parts[i] += "+" + one(p.Alt[i]) + "@" + strconv.FormatFloat(p.Share[i], 'g', 3, 64)
		}
	}
	return strings.Join(parts, "/")
}
