package redisrig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
)

// Key names of the data set.
const (
	keyPrefix = "key:"       // the GETs' keys: key:0 … key:Keys-1
	sortKey   = "noise:list" // a list of random numbers for SORT
	setKeyA   = "noise:setA" // two sets for SUNIONSTORE
	setKeyB   = "noise:setB"
	unionKey  = "noise:union"
)

// Options size the data set each replica holds.
type Options struct {
	// Keys is the number of string keys the GETs read (and the noisy
	// neighbour's KEYS scans). Zero means 30,000.
	Keys int
	// ValueSize is the size of each value in bytes. Zero means 64.
	ValueSize int
	// ListLen is the length of the list the noisy neighbour SORTs. Zero
	// means 5,000.
	ListLen int
	// SetSize is the size of each of the two sets the noisy neighbour
	// unions. Zero means 1,000.
	SetSize int
	// PoolSize is the connection pool size of each replica's GET client.
	// Zero means 64.
	PoolSize int
}

func (o Options) withDefaults() Options {
	if o.Keys == 0 {
		o.Keys = 30000
	}
	if o.ValueSize == 0 {
		o.ValueSize = 64
	}
	if o.ListLen == 0 {
		o.ListLen = 5000
	}
	if o.SetSize == 0 {
		o.SetSize = 1000
	}
	if o.PoolSize == 0 {
		o.PoolSize = 64
	}
	return o
}

// Cluster is a set of replicas holding the same data, with one GET client
// per replica and counters of the GET attempts sent through [Cluster.Get].
type Cluster struct {
	Replicas []*Replica
	// Clients[i] is the GET client of Replicas[i].
	Clients []*redis.Client
	Opts    Options

	dir      string
	attempts atomic.Int64 // GETs sent
	hedges   atomic.Int64 // GETs sent as hedges (Attempt index > 0)
	inflight atomic.Int64 // GETs sent and not yet answered
	idle     chan struct{}

	recording atomic.Bool // whether Get records each GET's latency in getHist
	histMu    sync.Mutex
	getHist   *hdrhistogram.Histogram
}

// RecordGETs starts (on) or stops recording the latency of every GET sent
// through [Cluster.Get], in µs; stopping returns what was recorded since
// the start.
func (c *Cluster) RecordGETs(on bool) *hdrhistogram.Histogram {
	c.histMu.Lock()
	defer c.histMu.Unlock()
	h := c.getHist
	if on {
		c.getHist = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	}
	c.recording.Store(on)
	return h
}

// Start starts n redis-server replicas on free loopback ports and seeds
// each with the same data. On error every replica started is stopped.
// The caller must call [Cluster.Stop], also on error paths and
// interrupts.
func Start(ctx context.Context, n int, opts Options) (*Cluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoServer
	}
	dir, err := os.MkdirTemp("", "redisrig-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Opts: opts.withDefaults(), dir: dir, idle: make(chan struct{}, 1)}
	for range n {
		r, err := startReplica(bin, dir)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Replicas = append(c.Replicas, r)
		c.Clients = append(c.Clients, newClient(r.Addr, c.Opts.PoolSize))
	}
	for i, cl := range c.Clients {
		if err := c.seed(ctx, cl); err != nil {
			c.Stop()
			return nil, fmt.Errorf("seeding replica %d: %w", i, err)
		}
	}
	return c, nil
}

// Stop closes the clients and stops every replica by its PID.
func (c *Cluster) Stop() {
	for _, cl := range c.Clients {
		_ = cl.Close()
	}
	for _, r := range c.Replicas {
		r.Stop()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// seed writes the data set through cl: the GET keys, the list and the
// two sets of the noisy neighbour.
func (c *Cluster) seed(ctx context.Context, cl *redis.Client) error {
	o := c.Opts
	val := strings.Repeat("v", o.ValueSize)
	const batch = 1000
	for lo := 0; lo < max(o.Keys, o.ListLen, o.SetSize); lo += batch {
		pipe := cl.Pipeline()
		var nums, a, b []any
		for i := lo; i < lo+batch; i++ {
			if i < o.Keys {
				pipe.Set(ctx, keyPrefix+strconv.Itoa(i), val, 0)
			}
			if i < o.ListLen {
				nums = append(nums, (i*7919)%1000003) // a fixed permutation-like sequence
			}
			if i < o.SetSize {
				a = append(a, "a"+strconv.Itoa(i))
				b = append(b, "b"+strconv.Itoa(i))
			}
		}
		if len(nums) > 0 {
			pipe.RPush(ctx, sortKey, nums...)
		}
		if len(a) > 0 {
			pipe.SAdd(ctx, setKeyA, a...)
			pipe.SAdd(ctx, setKeyB, b...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Addrs returns the replicas' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		out[i] = r.Addr
	}
	return out
}

// Key returns the name of GET key i (mod the number of keys).
func (c *Cluster) Key(i int) string { return keyPrefix + strconv.Itoa(i%c.Opts.Keys) }

// Get sends one GET of key to replica r (mod the number of replicas) and
// counts it: index is the attempt's index (0 for the primary, k for the
// k-th hedge). An attempt whose context has ended before go-redis writes it
// is not sent, and not counted: a hedge a hedger launched as its request
// ended. go-redis checks the context only before it writes a command (it
// cannot abandon a read), so a GET that fails with the context's error
// was never sent.
func (c *Cluster) Get(ctx context.Context, r int, key string, index int) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	c.inflight.Add(1)
	rec := c.recording.Load()
	var t0 time.Time
	if rec {
		t0 = time.Now()
	}
	v, err := c.Clients[r%len(c.Clients)].Get(ctx, key).Result()
	if rec {
		d := time.Since(t0)
		c.histMu.Lock()
		_ = c.getHist.RecordValue(int64(d / time.Microsecond))
		c.histMu.Unlock()
	}
	if err == nil || !(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		c.attempts.Add(1)
		if index > 0 {
			c.hedges.Add(1)
		}
	}
	if c.inflight.Add(-1) == 0 {
		select {
		case c.idle <- struct{}{}:
		default:
		}
	}
	return v, err
}

// Sent returns the GETs sent through [Cluster.Get] so far, and how many of
// them were hedges.
func (c *Cluster) Sent() (attempts, hedges int64) { return c.attempts.Load(), c.hedges.Load() }

// awaitIdle waits until no GET sent through [Cluster.Get] is unanswered:
// the losers of hedged requests, which go-redis cannot abandon once
// written, still run after their request returned.
func (c *Cluster) awaitIdle(ctx context.Context) error {
	for c.inflight.Load() != 0 {
		select {
		case <-c.idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// GetCalls returns each replica's count of GET commands executed
// (cmdstat_get calls of INFO commandstats).
func (c *Cluster) GetCalls(ctx context.Context) ([]int64, error) {
	out := make([]int64, len(c.Clients))
	for i, cl := range c.Clients {
		st, err := c.commandStats(ctx, cl)
		if err != nil {
			return nil, err
		}
		out[i] = st["get"].Calls
	}
	return out, nil
}

func (c *Cluster) commandStats(ctx context.Context, cl *redis.Client) (map[string]CommandStat, error) {
	s, err := cl.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return ParseCommandStats(s)
}

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls int64
	Usec  int64 // total time spent executing it, µs
}

// ParseCommandStats parses the reply of INFO commandstats: lines such as
// "cmdstat_get:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0",
// keyed by command name ("get"; a subcommand as "config|get"). Other lines
// (the section header, blank lines) are skipped; a cmdstat line without a
// valid calls or usec field is an error.
func ParseCommandStats(info string) (map[string]CommandStat, error) {
	out := map[string]CommandStat{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, fields, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		var st CommandStat
		var haveCalls, haveUsec bool
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls", "usec":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("redisrig: commandstats line %q: bad %s", line, k)
				}
				if k == "calls" {
					st.Calls, haveCalls = n, true
				} else {
					st.Usec, haveUsec = n, true
				}
			}
		}
		if !haveCalls || !haveUsec {
			return nil, fmt.Errorf("redisrig: commandstats line %q: no calls or usec", line)
		}
		if name == "" {
			return nil, errors.New("redisrig: commandstats line with no command name")
		}
		out[name] = st
	}
	return out, nil
}
