// Package p2c picks among the replicas of a service by their recent
// latency: the better of two drawn at random (power of two choices), each
// hedge of a request on a replica the request has not used yet, and now and
// then a probe to a replica not measured for a while. hedgehttp's
// WithEndpoints and hedgegrpc's balancer pick with it.
package p2c

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// alpha is the weight of a new sample in a replica's moving average of
// latency, when the previous sample is recent.
const alpha = 0.2

// Decay is how fast what is known of a replica fades when it is not tried
// (no sample, no cancelled attempt): its average decays toward the best
// replica's by a factor e per Decay of silence, and a sample after a
// silence weighs more (see Observe). Without it, a replica penalized once (Penalize doubles its
// average) would be measured again only when picked, and with three
// replicas or more it loses every draw to the others: it could starve long
// after it recovered. The decay lets it win draws again once its average
// has faded close enough to the others'; probes (below) measure it in the
// meantime.
const Decay = time.Second

// Probing. The decay alone does not bring a recovered replica back in every
// case: its cost tends to the best replica's without reaching it, so with
// two replicas (both are in every draw) and no requests queued, the one
// that was slow once loses every draw for ever. So every ProbeEvery-th pick
// is a probe: it goes to the replica measured least recently, if no sample
// of it and no probe to it is younger than ProbeAfter. Both bounds are
// deterministic: probes are at most 1/ProbeEvery of the picks (3.1 %), and a
// replica gets at most one probe per ProbeAfter (8 a second) however busy
// the client is; a replica that still fails costs at most that many failed
// attempts, each followed at once by a hedge. A probe's sample, taken after
// a silence, weighs more than a regular one (see Observe), so a replica
// that recovers gets its share of the traffic back within seconds, and one
// that stays slow keeps a small fraction of it
// (TestProbeBringsBackRecoveredReplica bounds both). The pick costs one
// atomic add more, on a counter with a cache line of its own; the counter is
// shared, so it costs most when two Ps pick in a tight loop (BenchmarkPick,
// serial and parallel).
const (
	ProbeEvery = 32
	ProbeAfter = 125 * time.Millisecond
)

// tieMargin: two replicas whose costs differ by less than 1/tieMargin (6 %)
// of the higher are a tie, settled by the random draw. Estimates that close
// are noise; and a replica measured again after a silence converges toward
// the best one's average without reaching it (its samples are as fast, but
// the old slow ones never quite leave the moving average): with strict
// comparison it would lose every draw against the best.
const tieMargin = 16

// Replica is one replica and what is known of its recent latency: a moving
// average of its attempts' latency, when it was last measured and probed,
// and its attempts in flight. The zero value is a replica with no sample
// yet. A Replica is safe for concurrent use; every method takes the current
// time.
type Replica struct {
	ewma   atomic.Uint64 // math.Float64bits of the moving average, ns; 0 = no sample yet
	seen   atomic.Int64  // when the last sample was folded in, Unix ns
	probed atomic.Int64  // when the last probe was sent to it, Unix ns
	// Inflight counts the attempts sent to the replica and not finished:
	// the caller adds 1 when it sends one and −1 when it ends.
	Inflight atomic.Int64
}

// Average returns the replica's moving average of latency, or 0 if it has
// no sample yet.
func (r *Replica) Average() time.Duration {
	return time.Duration(math.Float64frombits(r.ewma.Load()))
}

// cost is the replica's expected wait at now: its average latency scaled by
// the attempts already queued on it (the peak-EWMA load balancer's rule).
// An average above best, the best replica's, decays toward it with the
// time since the replica's last sample (Decay). A replica with no sample
// yet costs nothing, so every replica gets measured.
func (r *Replica) cost(best float64, now time.Time) float64 {
	v := math.Float64frombits(r.ewma.Load())
	if v > best {
		if idle := now.UnixNano() - r.seen.Load(); idle > 0 {
			v = best + (v-best)*math.Exp(-float64(idle)/float64(Decay))
		}
	}
	return v * float64(r.Inflight.Load()+1)
}

// Observe folds a latency sample taken at now into the moving average: with
// weight 0.2 right after the previous sample, more after a silence
// (1 − 0.8·e^(−silence/Decay)), so that a replica that was avoided for a
// while is judged on what it does now.
func (r *Replica) Observe(d time.Duration, now time.Time) {
	x, n := float64(d), now.UnixNano()
	for {
		old := r.ewma.Load()
		v := math.Float64frombits(old)
		if old == 0 {
			v = x
		} else {
			w := alpha
			if idle := n - r.seen.Load(); idle > 0 {
				w = 1 - (1-alpha)*math.Exp(-float64(idle)/float64(Decay))
			}
			v += w * (x - v)
		}
		if r.ewma.CompareAndSwap(old, math.Float64bits(v)) {
			r.seen.Store(n)
			return
		}
	}
}

// Censor learns from an attempt cancelled at now after d (another attempt
// won, or the caller gave up): d is a lower bound of its latency, learned
// as a sample if it is above the average. A cancellation sooner does not
// move the average — a loser is never taken for a fast answer — but the
// replica was tried and did not contradict it: its average stops fading
// (Decay is for replicas nobody tries). Without that, a slow replica whose
// attempts all lose, as hedges or as primaries rescued by a hedge, would
// fade toward the best and win ever more draws without ever being measured
// (in hedgegrpc's BenchmarkLoopbackBalancer the slow backend's share of
// originals falls from about 3.4 % to 2 %, its probes).
func (r *Replica) Censor(d time.Duration, now time.Time) {
	if float64(d) > math.Float64frombits(r.ewma.Load()) {
		r.Observe(d, now)
		return
	}
	if r.ewma.Load() != 0 {
		r.seen.Store(now.UnixNano())
	}
}

// Penalize records an attempt that failed at now after elapsed: the replica
// is treated as at least twice as slow as it was (and at least elapsed, at
// least 1 ms), so the next picks avoid it while others answer.
func (r *Replica) Penalize(elapsed time.Duration, now time.Time) {
	for {
		old := r.ewma.Load()
		v := max(2*math.Float64frombits(old), float64(elapsed), float64(time.Millisecond))
		if r.ewma.CompareAndSwap(old, math.Float64bits(v)) {
			r.seen.Store(now.UnixNano())
			return
		}
	}
}

// Set is the replicas to pick among. Replicas is set before the first
// Pick and not changed after; a Set is then safe for concurrent use.
type Set struct {
	Replicas []*Replica
	_        [64]byte // picks, written by every pick, on a cache line of its own
	// picks counts the picks so far: every ProbeEvery-th may be a probe.
	picks atomic.Uint64
	_     [56]byte
}

// best returns the lowest moving average of the replicas that have one, or
// 0 if none has.
func (s *Set) best() float64 {
	b := 0.0
	for _, r := range s.Replicas {
		if v := math.Float64frombits(r.ewma.Load()); v > 0 && (b == 0 || v < b) {
			b = v
		}
	}
	return b
}

// Pick returns the index in s.Replicas of the replica for the next attempt,
// at now, of a request that has already used the replicas in the bit set
// used (bit i: s.Replicas[i]; replicas past the 64th are never marked): a
// probe to a stale replica on every ProbeEvery-th pick (see ProbeEvery),
// else what [Set.Draw] returns. s must hold at least one replica.
func (s *Set) Pick(used uint64, now time.Time) int {
	if len(s.Replicas) > 1 && s.picks.Add(1)%ProbeEvery == 0 {
		if i := s.probe(s.free(used), now); i >= 0 {
			return i
		}
	}
	return s.Draw(used, now)
}

// Used is the replicas one request's attempts have used, for attempts
// that pick at the same time. The zero Used is ready for use.
type Used struct {
	mu   sync.Mutex
	bits uint64 // bit i: s.Replicas[i] (past the 64th, never marked)
}

// Use picks the replica for a request's next attempt at now ([Set.Pick],
// avoiding the replicas in u), marks it in u and counts the attempt in its
// Inflight: the caller takes it out (Inflight.Add(-1)) when the attempt
// ends, deferred, so that a panicking attempt does not leave it counted.
func (s *Set) Use(u *Used, now time.Time) int {
	u.mu.Lock()
	i := s.Pick(u.bits, now)
	if i < 64 {
		u.bits |= 1 << i
	}
	u.mu.Unlock()
	s.Replicas[i].Inflight.Add(1)
	return i
}

// free returns used, or 0 if it leaves no replica free.
func (s *Set) free(used uint64) uint64 {
	n := len(s.Replicas)
	if n > 64 || n-bits.OnesCount64(used&(1<<n-1)) == 0 {
		return 0
	}
	return used
}

// Draw is Pick without probes: the better of two replicas not in used drawn
// at random, the only one not in used, or — once every replica has been
// used — the better of two drawn from all of them.
func (s *Set) Draw(used uint64, now time.Time) int {
	n := len(s.Replicas)
	if n == 1 {
		return 0
	}
	used = s.free(used)
	free := n
	if n <= 64 {
		free = n - bits.OnesCount64(used&(1<<n-1))
	}
	// Draw the i-th and j-th free replicas (i != j when two are free).
	i := rand.IntN(free)
	if free == 1 {
		return nth(used, i, n)
	}
	j := rand.IntN(free - 1)
	if j >= i {
		j++
	}
	a, b := nth(used, i, n), nth(used, j, n)
	best := s.best()
	if cb, ca := s.Replicas[b].cost(best, now), s.Replicas[a].cost(best, now); cb < ca-ca/tieMargin {
		return b
	}
	return a // a is a random one of the two: near-ties split evenly
}

// probe returns the index of the replica not in used whose last sample or
// probe is the oldest, if that is at least ProbeAfter before now, and
// records the probe; or −1. Of concurrent probes, one wins a replica.
func (s *Set) probe(used uint64, now time.Time) int {
	n := now.UnixNano()
	k, oldest := -1, n-int64(ProbeAfter)
	for i, r := range s.Replicas {
		if i < 64 && used&(1<<i) != 0 {
			continue
		}
		if t := max(r.seen.Load(), r.probed.Load()); t <= oldest {
			k, oldest = i, t
		}
	}
	if k < 0 {
		return -1
	}
	r := s.Replicas[k]
	if p := r.probed.Load(); p > oldest || !r.probed.CompareAndSwap(p, n) {
		return -1 // probed meanwhile
	}
	return k
}

// nth returns the index of the k-th (from 0) replica not in used.
func nth(used uint64, k, n int) int {
	for i := 0; i < n; i++ {
		if i < 64 && used&(1<<i) != 0 {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	return n - 1 // unreachable: k < number of free replicas
}
