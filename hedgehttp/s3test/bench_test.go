package s3test

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
)

// BenchmarkStalledReads reads a 16 MiB object from gofakes3 through
// minio-go, a stalledEvery-th of the reads (5 %) stalling for 2 s at a
// random offset of their body, over loopback as fast as it goes and with
// every body paced at 64 MiB/s (an S3 GET's throughput). Three clients
// take turns read by read: "unstalled" (no stall, body hedging on),
// "hedged" (stalls, hedgehttp.WithBodyHedge with its defaults) and
// "unhedged" (stalls, header hedging only). It reports each one's p50,
// p99 and max, the hedged p99 over the unstalled p50 and p99
// (p99/unstalled-p50, p99/unstalled-p99), the body bytes the server
// wrote beyond the objects' (extra-%), and the Range hedges sent and won.
// Every read's SHA-256 is checked.
//
//	go test -run '^$' -bench StalledReads -benchtime=1x ./hedgehttp/s3test
func BenchmarkStalledReads(b *testing.B) {
	for _, rate := range []float64{0, 64 << 20} {
		name := "loopback"
		if rate > 0 {
			name = fmt.Sprintf("paced-%dMiBps", int(rate)>>20)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				stalledReads(b, rate)
			}
		})
	}
}

const (
	objectSize   = 16 << 20
	stalledEvery = 20 // 5 %
	stallFor     = 2 * time.Second
	warmReads    = 10
	timedReads   = 200
)

// client is one of BenchmarkStalledReads' clients.
type client struct {
	name  string
	in    *injector
	tr    *hedgehttp.Transport
	read  func() [32]byte
	times []time.Duration
}

func stalledReads(b *testing.B, rate float64) {
	data := objectData(objectSize)
	want := sha256.Sum256(data)
	stalls := func(n int64) fault {
		if n%stalledEvery != stalledEvery/2 {
			return noFault
		}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		return fault{stallAt: objectSize/10 + rng.Int64N(objectSize*8/10), stall: stallFor}
	}
	bodyHedge := hedgehttp.WithBodyHedge(hedgehttp.BodyHedge{})
	mk := func(name string, plan func(int64) fault, opts ...hedgehttp.Option) *client {
		cl := &client{name: name, in: &injector{plan: plan, rate: rate}}
		c, put := s3Server(b, cl.in, func(base http.RoundTripper) http.RoundTripper {
			cl.tr = hedgehttp.NewTransport(base, nil, opts...)
			return cl.tr
		})
		put("obj", data)
		cl.read = func() [32]byte { return minioRead(b, c, "obj") }
		return cl
	}
	clients := []*client{
		mk("unstalled", nil, bodyHedge),
		mk("hedged", stalls, bodyHedge),
		mk("unhedged", stalls),
	}
	for i := range warmReads + timedReads {
		for _, c := range clients {
			start := time.Now()
			if c.read() != want {
				b.Fatalf("%s: read %d is not the object", c.name, i)
			}
			if i >= warmReads {
				c.times = append(c.times, time.Since(start))
			}
		}
	}
	q := func(ts []time.Duration, p float64) time.Duration {
		s := slices.Sorted(slices.Values(ts))
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	for _, c := range clients {
		b.ReportMetric(float64(q(c.times, 0.5).Milliseconds()), c.name+"-p50-ms")
		b.ReportMetric(float64(q(c.times, 0.99).Milliseconds()), c.name+"-p99-ms")
		b.ReportMetric(float64(q(c.times, 1).Milliseconds()), c.name+"-max-ms")
	}
	un, h := clients[0], clients[1]
	p99 := q(h.times, 0.99)
	b.ReportMetric(float64(p99)/float64(q(un.times, 0.5)), "p99/unstalled-p50")
	b.ReportMetric(float64(p99)/float64(q(un.times, 0.99)), "p99/unstalled-p99")
	reads := int64(warmReads+timedReads) * objectSize
	b.ReportMetric(100*float64(h.in.written.Load()-reads)/float64(reads), "extra-%")
	b.ReportMetric(100*float64(un.in.written.Load()-reads)/float64(reads), "unstalled-extra-%")
	bs := h.tr.BodyStats()
	b.ReportMetric(float64(bs.Sent), "range-hedges")
	b.ReportMetric(float64(bs.Won), "range-wins")
	b.ReportMetric(float64(un.tr.BodyStats().Sent), "unstalled-range-hedges")
}
