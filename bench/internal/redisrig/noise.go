package redisrig

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// busyScript runs for ARGV[1] µs of the server's own clock: a Lua busy
// loop, which blocks the server as a slow script does.
var busyScript = redis.NewScript(`
local t = redis.call('TIME')
local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
while true do
  local n = redis.call('TIME')
  if tonumber(n[1]) * 1000000 + tonumber(n[2]) >= stop then return 1 end
end`)

// NoiseConfig sets the noisy neighbour of each replica: slow commands at
// Poisson times, Rate a second per replica. Each is DEBUG SLEEP (35 %) or a
// Lua busy loop (35 %) of a Pareto-distributed length (scale Scale, shape
// Alpha, at most Cap), or a SORT of the seeded list, a KEYS over every key
// or a SUNIONSTORE of the two seeded sets (10 % each), whose lengths the
// data set's size sets.
type NoiseConfig struct {
	Rate  float64
	Scale time.Duration
	Alpha float64
	Cap   time.Duration
	Seed  uint64
}

// noiseKinds are the slow commands, in the order of Noise.Counts.
var noiseKinds = []string{"DEBUG SLEEP", "Lua busy loop", "SORT", "KEYS", "SUNIONSTORE"}

// noiseStats are the commandstats names whose time is the noisy
// neighbour's.
var noiseStats = []string{"debug", "evalsha", "sort", "keys", "sunionstore"}

// interval is a span of a replica's time taken by one slow command, unix ns.
type interval struct{ start, end int64 }

// Noise is the noisy neighbours of a cluster, running until Stop.
type Noise struct {
	cfg     NoiseConfig
	clients []*redis.Client
	// Cost is the measured length of SORT, KEYS and SUNIONSTORE on an
	// replica before the neighbours start (the fastest of ten).
	Cost map[string]time.Duration

	cancel context.CancelFunc
	wg     sync.WaitGroup
	rate   atomic.Uint64 // float64 bits: slow commands a second per replica

	mu        sync.Mutex
	intervals [][]interval // per replica
	counts    []int64      // per kind
	skipped   int64        // events dropped with 8 commands of a replica in flight
	errs      int64
}

// StartNoise measures the fixed-cost commands on the first replica and
// starts a noisy neighbour per replica of addrs, in this process. Its CPU
// then counts in the process's: [StartNoiseProcess] runs it in a process
// of its own.
func StartNoise(addrs []string, cfg NoiseConfig) (*Noise, error) {
	n := &Noise{cfg: cfg, Cost: map[string]time.Duration{},
		intervals: make([][]interval, len(addrs)), counts: make([]int64, len(noiseKinds))}
	for _, a := range addrs {
		n.clients = append(n.clients, newClient(a, 8))
	}
	if !(cfg.Rate > 0) {
		return nil, fmt.Errorf("redisrig: noise Rate %v, want > 0", cfg.Rate)
	}
	n.SetRate(cfg.Rate)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	for _, kind := range noiseKinds[2:] {
		best := time.Duration(math.MaxInt64)
		for range 10 {
			t0 := time.Now()
			if err := n.fixed(ctx, n.clients[0], kind); err != nil {
				n.Stop()
				return nil, fmt.Errorf("noise %s: %w", kind, err)
			}
			best = min(best, time.Since(t0))
		}
		n.Cost[kind] = best
	}
	for i := range n.clients {
		if err := busyScript.Load(ctx, n.clients[i]).Err(); err != nil {
			n.Stop()
			return nil, err
		}
		n.wg.Go(func() { n.loop(ctx, i, rand.New(rand.NewPCG(cfg.Seed, uint64(i)))) })
	}
	return n, nil
}

// Stop stops the neighbours and waits for their commands in flight.
func (n *Noise) Stop() {
	n.cancel()
	n.wg.Wait()
	for _, cl := range n.clients {
		_ = cl.Close()
	}
}

// Rate returns the slow commands a second per replica.
func (n *Noise) Rate() float64 { return math.Float64frombits(n.rate.Load()) }

// SetRate sets the slow commands a second per replica, from each
// neighbour's next event on; rate must be positive.
func (n *Noise) SetRate(rate float64) { n.rate.Store(math.Float64bits(rate)) }

// Counts returns how many commands of each kind were sent, by name.
func (n *Noise) Counts() map[string]int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int64{}
	for i, k := range noiseKinds {
		out[k] = n.counts[i]
	}
	return out
}

// Errors returns how many slow commands failed, and how many events were
// dropped because 8 of a replica's were in flight.
func (n *Noise) Errors() (failed, skipped int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.errs, n.skipped
}

// pareto draws a length: Scale / U^(1/Alpha), at most Cap.
func (n *Noise) pareto(r *rand.Rand) time.Duration {
	u := 1 - r.Float64() // (0, 1]
	d := time.Duration(float64(n.cfg.Scale) / math.Pow(u, 1/n.cfg.Alpha))
	return min(d, n.cfg.Cap)
}

func (n *Noise) loop(ctx context.Context, i int, r *rand.Rand) {
	sem := make(chan struct{}, 8)
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		t.Reset(time.Duration(r.ExpFloat64() / n.Rate() * float64(time.Second)))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var kind int
		switch u := r.Float64(); {
		case u < 0.35:
			kind = 0
		case u < 0.70:
			kind = 1
		default:
			kind = 2 + r.IntN(3)
		}
		d := n.pareto(r)
		select {
		case sem <- struct{}{}:
		default:
			n.mu.Lock()
			n.skipped++
			n.mu.Unlock()
			continue
		}
		n.wg.Go(func() {
			defer func() { <-sem }()
			n.send(i, kind, d)
		})
	}
}

// send issues one slow command to replica i and records the span of the
// replica's time it took: its length (drawn, or measured for the
// fixed-cost kinds) up to its answer, within the time since it was sent.
func (n *Noise) send(i, kind int, d time.Duration) {
	// The command runs to its end even when the run stops: the server
	// cannot abandon it, and the neighbour waits for it in Stop.
	ctx := context.Background()
	cl := n.clients[i]
	t0 := time.Now()
	var err error
	switch kind {
	case 0:
		err = cl.Do(ctx, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 6, 64)).Err()
	case 1:
		err = busyScript.EvalSha(ctx, cl, nil, d.Microseconds()).Err()
	default:
		d = n.Cost[noiseKinds[kind]]
		err = n.fixed(ctx, cl, noiseKinds[kind])
	}
	end := time.Now()
	start := max(end.Add(-d).UnixNano(), t0.UnixNano())
	n.mu.Lock()
	defer n.mu.Unlock()
	n.counts[kind]++
	if err != nil {
		n.errs++
		return
	}
	n.intervals[i] = append(n.intervals[i], interval{start, end.UnixNano()})
}

// fixed runs one of the fixed-cost slow commands.
func (n *Noise) fixed(ctx context.Context, cl *redis.Client, kind string) error {
	switch kind {
	case "SORT":
		return cl.Sort(ctx, sortKey, &redis.Sort{Offset: 0, Count: 1}).Err()
	case "KEYS":
		return cl.Keys(ctx, "nomatch:*").Err()
	case "SUNIONSTORE":
		return cl.SUnionStore(ctx, unionKey, setKeyA, setKeyB).Err()
	}
	return fmt.Errorf("unknown slow command %q", kind)
}

// Send is one GET's primary: the replica it went to and when, unix ns.
type Send struct {
	Replica int
	At      int64
}

// WaitedShare returns the share of sends that reached their replica while
// one of the neighbour's slow commands held it (by the spans recorded so
// far); the error is always nil.
func (n *Noise) WaitedShare(sends []Send) (float64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return waitedShare(n.intervals, sends), nil
}

// waitedShare returns the share of sends that fall in a span of their
// replica's intervals.
func waitedShare(intervals [][]interval, sends []Send) float64 {
	if len(sends) == 0 || len(intervals) == 0 {
		return 0
	}
	merged := make([][]interval, len(intervals))
	for i, iv := range intervals {
		merged[i] = mergeIntervals(iv)
	}
	waited := 0
	for _, s := range sends {
		iv := merged[s.Replica%len(merged)]
		// The first span ending at or after s.At holds it if it started
		// by then.
		k, _ := slices.BinarySearchFunc(iv, s.At, func(x interval, t int64) int {
			switch {
			case x.end < t:
				return -1
			case x.end > t:
				return 1
			}
			return 0
		})
		if k < len(iv) && iv[k].start <= s.At {
			waited++
		}
	}
	return float64(waited) / float64(len(sends))
}

// mergeIntervals returns the union of iv as disjoint spans sorted by time.
func mergeIntervals(iv []interval) []interval {
	s := slices.Clone(iv)
	slices.SortFunc(s, func(a, b interval) int { return int(min(max(a.start-b.start, -1), 1)) })
	var out []interval
	for _, x := range s {
		if len(out) > 0 && x.start <= out[len(out)-1].end {
			out[len(out)-1].end = max(out[len(out)-1].end, x.end)
			continue
		}
		out = append(out, x)
	}
	return out
}

// NoiseUsec returns the time the replicas spent, in total, executing the
// noisy neighbour's commands (INFO commandstats), µs.
func (c *Cluster) NoiseUsec(ctx context.Context) (int64, error) {
	var total int64
	for _, cl := range c.Clients {
		st, err := c.commandStats(ctx, cl)
		if err != nil {
			return 0, err
		}
		for _, k := range noiseStats {
			total += st[k].Usec
		}
	}
	return total, nil
}
