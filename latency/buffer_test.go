package latency

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/tailcut/tailcut/internal/shard"
)

// TestConcurrentAddExact hammers one estimator (and a second one sharing
// its lock, through AddBoth) from several goroutines while others read it,
// and checks that every observation is counted once: Added, Counts and the
// distribution equal those of the same observations added from one
// goroutine.
func TestConcurrentAddExact(t *testing.T) {
	const writers, per = 8, 5000
	cfg := Config{Window: time.Hour, MaxBins: 512}
	e, _ := New(cfg)
	b, _ := New(cfg)
	b.ShareLock(e)
	var wg, readers sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = e.Quantile(0.99, t0)
				_, _ = b.Distribution(t0)
				if c, p := e.Counts(t0); uint64(c+p) > e.Added() {
					t.Errorf("Counts %d + %d beyond Added %d", c, p, e.Added())
				}
			}
		}()
	}
	// feed gives e (and b) writer w's i-th observation.
	feed := func(e, b *Estimator, w, i int) {
		lat := time.Duration(1+(w*per+i)%997) * 10 * time.Microsecond
		switch i % 3 {
		case 0:
			e.Add(lat, t0)
		case 1:
			e.AddCensored(lat, t0)
		default:
			e.AddBoth(b, lat, false, t0)
		}
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if i%100 == 0 {
					// As if a writer had found the lock taken: buffer
					// (a reader goes back to the lock when at most one
					// shard was used).
					e.buf.spread.Store(true)
				}
				feed(e, b, w, i)
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	ref, _ := New(cfg)
	refB, _ := New(cfg)
	for w := range writers {
		for i := range per {
			feed(ref, refB, w, i)
		}
	}
	if got := e.Added(); got != writers*per {
		t.Errorf("Added %d, want %d", got, writers*per)
	}
	if got, want := b.Added(), refB.Added(); got != want {
		t.Errorf("sharing estimator's Added %d, want %d", got, want)
	}
	if c, p := e.Counts(t0); c != writers*per || p != 0 {
		t.Errorf("Counts %d, %d; want %d, 0", c, p, writers*per)
	}
	for _, pair := range [][2]*Estimator{{e, ref}, {b, refB}} {
		x, _ := pair[0].Distribution(t0)
		y, _ := pair[1].Distribution(t0)
		if x.Count() != y.Count() {
			t.Fatalf("distribution of %v observations, want %v", x.Count(), y.Count())
		}
		for q := 0.0; q <= 1; q += 0.01 {
			if x.Quantile(q) != y.Quantile(q) {
				t.Fatalf("q%.2f %v, want %v", q, x.Quantile(q), y.Quantile(q))
			}
		}
	}
}

// unbuffered adds an observation as an estimator without buffers would:
// rotate to now, then count it in the current window.
func unbuffered(e *Estimator, i int32, fl uint8, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rotate(now)
	o := &obs{i: i, fl: fl}
	addBin(e.cur, o)
	if fl&obsCensored != 0 {
		addBin(e.ccur, o)
	}
}

// TestBufferedAcrossShards: observations buffered in several shards, at
// times crossing window boundaries (and sometimes earlier than the last,
// within a shard), and moved into the sketches shard by shard in any
// order — by a writer finding its shard full, or by a reader — land in
// the windows an unbuffered estimator puts them in, as long as the times
// across shards increase.
func TestBufferedAcrossShards(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 9))
		e, ref, now := startedPair()
		for range 3000 {
			var i int32
			var fl uint8
			now, i, fl = drawObservation(r, now)
			k := r.IntN(shard.N)
			s := &e.buf.shards()[k]
			s.mu.Lock()
			if len(s.buf) == cap(s.buf) && s.buf != nil {
				e.mu.Lock()
				e.buf.drain(k)
				e.mu.Unlock()
			}
			e.buf.append(s, e, nil, i, fl, now)
			s.mu.Unlock()
			unbuffered(ref, i, fl, now)
			if r.IntN(300) == 0 {
				at := now.Add(time.Duration(r.IntN(1500)-500) * time.Millisecond)
				compareWindows(t, e, ref, at)
				if at.After(now) {
					now = at
				}
			}
		}
		compareWindows(t, e, ref, now)
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// TestTalliedAcrossShards is TestBufferedAcrossShards through the
// writers' own path: an observation goes into its shard's tally when it
// can, else into its buffer (a full one moved first when the sketches'
// lock is free), with readers now and then, and still lands in the
// window an unbuffered estimator puts it in.
func TestTalliedAcrossShards(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		e, ref, now := startedPair()
		tallied := 0
		for range 3000 {
			// Bins 300 apart do not fit one tally: some go to the buffer.
			var i int32
			var fl uint8
			now, i, fl = drawObservation(r, now)
			k := r.IntN(shard.N)
			set := e.buf
			s := &set.shards()[k]
			s.mu.Lock()
			if fl == 0 && set.tallied(s, e, k, i, now) {
				tallied++
			} else {
				set.room(s, e, k, 1)
				set.append(s, e, nil, i, fl, now)
			}
			s.mu.Unlock()
			unbuffered(ref, i, fl, now)
			if r.IntN(300) == 0 {
				compareWindows(t, e, ref, now)
			}
		}
		compareWindows(t, e, ref, now)
		// Windows of about 50 observations, a tally refused from a
		// window's end until a drain or a reader rotates, bins out of
		// a tally's range and censored ones: a fifth are tallied.
		if tallied < 300 {
			t.Errorf("%d observations of 3000 tallied, want at least 300", tallied)
		}
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// startedPair returns two estimators of one-second windows, each given
// one observation at t0, which starts their windows, and t0: the one
// under test and the unbuffered reference of TestBufferedAcrossShards and
// TestTalliedAcrossShards.
func startedPair() (e, ref *Estimator, now time.Time) {
	cfg := Config{Window: time.Second, MinSamples: 1}
	e, _ = New(cfg)
	ref, _ = New(cfg)
	e.Add(time.Millisecond, t0)
	ref.Add(time.Millisecond, t0)
	return e, ref, t0
}

// drawObservation draws the next observation of TestBufferedAcrossShards
// and TestTalliedAcrossShards after one at now: its time (0 to 40 ms
// later, and now and then a gap of windows), its bin among 300, and its
// flags (a fifth censored).
func drawObservation(r *rand.Rand, now time.Time) (time.Time, int32, uint8) {
	now = now.Add(time.Duration(r.IntN(40)) * time.Millisecond)
	if r.IntN(500) == 0 {
		now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond) // a gap of windows
	}
	i, fl := int32(r.IntN(300)), uint8(0)
	if r.IntN(5) == 0 {
		fl = obsCensored
	}
	return now, i, fl
}

// compareWindows checks that e's windows at now equal ref's, bin by bin.
func compareWindows(t *testing.T, e, ref *Estimator, now time.Time) {
	t.Helper()
	c, p := e.Counts(now)
	rc, rp := ref.Counts(now)
	if c != rc || p != rp {
		t.Errorf("at %v: counts %d, %d; want %d, %d", now.Sub(t0), c, p, rc, rp)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, pair := range [][2]*ddsketch.DDSketch{{e.cur, ref.cur}, {e.prev, ref.prev}, {e.ccur, ref.ccur}, {e.cprev, ref.cprev}} {
		if a, b := pair[0].GetCount(), pair[1].GetCount(); a != b {
			t.Errorf("at %v: sketch %d holds %v, want %v", now.Sub(t0), k, a, b)
			continue
		}
		want := map[int]float64{}
		pair[1].GetPositiveValueStore().ForEach(func(i int, n float64) bool { want[i] = n; return false })
		pair[0].GetPositiveValueStore().ForEach(func(i int, n float64) bool {
			if want[i] != n {
				t.Errorf("at %v: sketch %d bin %d holds %v, want %v", now.Sub(t0), k, i, n, want[i])
			}
			return false
		})
	}
}

// TestBufferedRestart: what is buffered after a Restart, at a time
// earlier than the Restart's, counts in the restarted window, as it
// would unbuffered.
func TestBufferedRestart(t *testing.T) {
	e, _ := New(Config{Window: time.Second, MinSamples: 1})
	e.Add(time.Millisecond, t0)
	e.Restart(t0.Add(5 * time.Second))
	e.Add(2*time.Millisecond, t0.Add(4*time.Second))
	if c, p := e.Counts(t0.Add(5 * time.Second)); c != 1 || p != 0 {
		t.Errorf("after Restart: counts %d, %d; want 1, 0", c, p)
	}
}

// BenchmarkAddParallel is an Add per request from every core at once into
// one Estimator, with a Distribution read every 256 requests of each
// goroutine (as the tailcut policy recomputes a busy key) or every 4,096
// (as a client reading its quantiles now and then): -cpu 1,2 compares
// one core with two.
func BenchmarkAddParallel(b *testing.B) {
	for _, every := range []int{256, 4096} {
		b.Run("read"+strconv.Itoa(every), func(b *testing.B) {
			e, _ := New(Config{})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) { addRequests(pb, e, every) })
		})
	}
}

// BenchmarkAddOwn is BenchmarkAddParallel with an Estimator per
// goroutine: the same work sharing nothing, so that how it scales from
// -cpu 1 to -cpu 2 is what the machine lets Add gain from a core, the
// bar for BenchmarkAddParallel's.
func BenchmarkAddOwn(b *testing.B) {
	for _, every := range []int{256, 4096} {
		b.Run("read"+strconv.Itoa(every), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				e, _ := New(Config{})
				addRequests(pb, e, every)
			})
		})
	}
}

// addRequests is a goroutine's loop of BenchmarkAddParallel and
// BenchmarkAddOwn: an Add per request into e, 100 µs apart, and a
// Distribution read every so many.
func addRequests(pb *testing.PB, e *Estimator, every int) {
	var sc Scratch
	i := 0
	for pb.Next() {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		e.Add(time.Duration(1+i%10)*time.Millisecond, now)
		if i%every == 0 {
			_, _ = e.DistributionWith(&sc, now)
			sc.Release()
		}
		i++
	}
}

// TestBackToLock: once writers buffer, a single goroutine's observations
// through one shard send writers back to the lock (shard.Quiet of them),
// and every observation is counted.
func TestBackToLock(t *testing.T) {
	e, _ := New(Config{Window: time.Hour})
	e.Add(time.Millisecond, t0)
	e.buf.spread.Store(true)
	n := 1
	for ; n < 2*shard.Quiet && e.buf.spread.Load(); n++ {
		e.Add(time.Millisecond, t0)
	}
	if e.buf.spread.Load() {
		t.Fatalf("writers still buffer after %d observations from one goroutine", n)
	}
	for range 100 {
		e.Add(time.Millisecond, t0)
		n++
	}
	if c, _ := e.Counts(t0); c != n || e.Added() != uint64(n) {
		t.Errorf("Counts %d, Added %d; want %d", c, e.Added(), n)
	}
}

// TestContended: an estimator is contended once a writer finds its lock
// taken, and not while one goroutine at a time writes.
func TestContended(t *testing.T) {
	e, _ := New(Config{Window: time.Hour})
	for range 100 {
		e.Add(time.Millisecond, t0)
	}
	if e.Contended() {
		t.Fatal("contended with one writer")
	}
	e.mu.Lock() // another writer, or a reader, holds the lock
	e.Add(time.Millisecond, t0)
	e.mu.Unlock()
	if !e.Contended() {
		t.Error("not contended after a writer found the lock taken")
	}
}

// TestWritersDoNotWaitForReader: while a reader holds the sketches' lock
// (as if descheduled with it), buffering writers still complete, however
// many observations they make: none waits for the lock, and once it is
// free every observation is counted.
func TestWritersDoNotWaitForReader(t *testing.T) {
	const writers, per = 4, 40 * bufLen
	e, _ := New(Config{Window: time.Hour})
	e.Add(time.Millisecond, t0)
	e.buf.spread.Store(true)
	e.mu.Lock() // the reader
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range per {
				e.Add(2*time.Millisecond, t0)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		e.mu.Unlock()
		<-done
		t.Fatal("writers waited for the reader's lock")
	}
	e.mu.Unlock()
	const want = 1 + writers*per
	if c, _ := e.Counts(t0); c != want || e.Added() != want {
		t.Errorf("Counts %d, Added %d; want %d", c, e.Added(), want)
	}
	// A shard grown while the lock was held is given back once drained.
	sh := e.buf.s.Load()
	for k := range sh {
		if c := cap(sh[k].buf); c > maxBufLen {
			t.Errorf("shard %d keeps %d observations' room after the drain", k, c)
		}
	}
}

// TestStaysSpreadWithTwoWriters: while another writer's shard holds
// observations, one writer moving its own shard's into the sketches
// again and again does not send writers back to the lock — they are not
// down to one.
func TestStaysSpreadWithTwoWriters(t *testing.T) {
	e, _ := New(Config{Window: time.Hour})
	e.Add(time.Millisecond, t0)
	set := e.buf
	set.spread.Store(true)
	// Another writer's observation, buffered in the shard after this
	// goroutine's.
	other := &set.shards()[(shard.Hint()+1)%shard.N]
	other.mu.Lock()
	set.append(other, e, nil, 0, obsZero, t0)
	other.mu.Unlock()
	n := 2
	for ; n < 4*shard.Quiet; n++ {
		e.Add(time.Millisecond, t0)
	}
	if !set.spread.Load() {
		t.Fatal("writers went back to the lock while another shard held observations")
	}
	if c, _ := e.Counts(t0); c != n || e.Added() != uint64(n) {
		t.Errorf("Counts %d, Added %d; want %d", c, e.Added(), n)
	}
}

// TestShardLayout: a shard of an estimator's buffer fills two cache
// lines, so that writers on different cores, each in its own shard, do
// not write one line.
func TestShardLayout(t *testing.T) {
	if n := unsafe.Sizeof(obsShard{}); n != 2*shard.Line {
		t.Errorf("obsShard is %d bytes, want %d", n, 2*shard.Line)
	}
}
