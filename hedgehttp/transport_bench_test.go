package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// instantRT answers every request at once from memory: what remains of a
// round trip through it is the cost of the layers above.
type instantRT struct{}

func (instantRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r,
	}, nil
}

// wrapperRT is a middleware over next that the Transport knows nothing
// of: over it the primary runs on a goroutine of its own.
type wrapperRT struct{ next http.RoundTripper }

func (w wrapperRT) RoundTrip(r *http.Request) (*http.Response, error) { return w.next.RoundTrip(r) }

// honouringRT is a middleware over next that declares it honours
// cancellation (CancelHonourer): over it the primary runs inline. Its
// next here is a wrapperRT over instantRT, which answers at once, and
// says so.
type honouringRT struct{ next http.RoundTripper }

func (h honouringRT) RoundTrip(r *http.Request) (*http.Response, error) { return h.next.RoundTrip(r) }

func (h honouringRT) HonoursCancellation() bool { return true }

// benchRoundTrips sends b.N GETs through rt and reads each body.
func benchRoundTrips(b *testing.B, rt http.RoundTripper, url string) {
	b.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// benchPolicyTransport returns a transport whose delay (1 s) is never
// reached: the no-hedge fast path.
func benchPolicyTransport(b *testing.B, base http.RoundTripper, opts ...Option) *Transport {
	b.Helper()
	p := fixedPolicy(b, time.Second)
	return NewTransport(base, p, opts...)
}

// BenchmarkOverhead is the pure cost of the Transport on the no-hedge path:
// an in-memory base transport, plain versus wrapped. The difference of the
// two is what hedgehttp adds per request (ns/op, allocs/op). The primary
// runs inline, as over an *http.Transport, except in
// hedgehttp-primary-goroutine: the cost over a base not known to return
// when cancelled (a middleware); hedgehttp-wrapped-honours is the same
// middleware under one that declares it honours cancellation
// (CancelHonourer), whose primary runs inline again.
func BenchmarkOverhead(b *testing.B) {
	inline := WithInlinePrimary(true) // instantRT returns at once
	b.Run("plain", func(b *testing.B) { benchRoundTrips(b, instantRT{}, "http://mem.test/x") })
	b.Run("hedgehttp", func(b *testing.B) {
		benchRoundTrips(b, benchPolicyTransport(b, instantRT{}, inline), "http://mem.test/x")
	})
	b.Run("hedgehttp-primary-goroutine", func(b *testing.B) {
		benchRoundTrips(b, benchPolicyTransport(b, wrapperRT{instantRT{}}), "http://mem.test/x")
	})
	b.Run("hedgehttp-wrapped-honours", func(b *testing.B) {
		benchRoundTrips(b, benchPolicyTransport(b, honouringRT{wrapperRT{instantRT{}}}), "http://mem.test/x")
	})
	b.Run("hedgehttp-firstbyte", func(b *testing.B) {
		benchRoundTrips(b, benchPolicyTransport(b, instantRT{}, inline, WithFirstByte()), "http://mem.test/x")
	})
	b.Run("core-Do-only", func(b *testing.B) {
		// The share of tailcut.Hedger.Do (a goroutine, a channel, a timer,
		// a context per attempt): the same policy and base transport called
		// through Do with no request cloning, body wrapping or classifying.
		p := fixedPolicy(b, time.Second)
		h := tailcut.Hedger[*http.Response]{Policy: p}
		req, _ := http.NewRequest(http.MethodGet, "http://mem.test/x", nil)
		call := func(ctx context.Context, a tailcut.Attempt) (*http.Response, error) {
			return instantRT{}.RoundTrip(req)
		}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := h.Do(context.Background(), "mem.test", call)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("hedgehttp-default-policy", func(b *testing.B) {
		// The real policy: the delay is learned (and hedges may go when a
		// round trip is slower than the p95 of the others).
		tr := NewTransport(instantRT{}, nil, inline)
		benchRoundTrips(b, tr, "http://mem.test/x")
		st := tr.Policy().Stats()
		b.ReportMetric(float64(st.Hedges)/float64(max(st.Requests, 1)), "hedges/op")
	})
}

// BenchmarkOverheadParallel is BenchmarkOverhead's plain and
// hedgehttp-default-policy cases from 8 goroutines per -cpu at once (16
// on two cores), all on one key: how the Transport and its policy scale
// with cores, beside the plain base transport's own scaling. With more
// goroutines than cores, a round trip waits for a core, and some outlive
// the learned delay and are hedged (hedges/op).
func BenchmarkOverheadParallel(b *testing.B) {
	run := func(b *testing.B, rt http.RoundTripper) {
		b.Helper()
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			req, err := http.NewRequest(http.MethodGet, "http://mem.test/x", nil)
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("plain", func(b *testing.B) { run(b, instantRT{}) })
	b.Run("hedgehttp-default-policy", func(b *testing.B) {
		tr := NewTransport(instantRT{}, nil, WithInlinePrimary(true))
		run(b, tr)
		st := tr.Policy().Stats()
		b.ReportMetric(float64(st.Hedges)/float64(max(st.Requests, 1)), "hedges/op")
	})
}

// BenchmarkLoopback compares the plain http.Transport with the Transport on
// its no-hedge path over a real loopback HTTP/1.1 connection.
func BenchmarkLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	b.Run("plain", func(b *testing.B) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		benchRoundTrips(b, tr, srv.URL)
	})
	b.Run("hedgehttp", func(b *testing.B) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		benchRoundTrips(b, benchPolicyTransport(b, tr), srv.URL)
	})
}

// BenchmarkLoopbackPaired is BenchmarkLoopback with the two transports
// taking turns, request by request (in the order plain, hedgehttp, then
// hedgehttp, plain), each over its own keep-alive connection to the same
// server: on a shared machine whose load drifts during a run, only pairing
// makes a difference of a few percent visible. It reports the median and
// the mean round trip of each (ns/op is the time of one pair) and how much
// slower hedgehttp is, in percent, by median and by mean.
func BenchmarkLoopbackPaired(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	plain := http.DefaultTransport.(*http.Transport).Clone()
	defer plain.CloseIdleConnections()
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	hedged := benchPolicyTransport(b, base)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	one := func(rt http.RoundTripper) time.Duration { return timedRoundTrip(b, rt, req) }
	var tp, th []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		if len(tp)%2 == 0 {
			tp = append(tp, one(plain))
			th = append(th, one(hedged))
		} else {
			th = append(th, one(hedged))
			tp = append(tp, one(plain))
		}
	}
	mp, mh := median(tp), median(th)
	ap, ah := mean(tp), mean(th)
	b.ReportMetric(mp, "plain-p50-ns")
	b.ReportMetric(mh, "hedgehttp-p50-ns")
	b.ReportMetric(ap, "plain-mean-ns")
	b.ReportMetric(ah, "hedgehttp-mean-ns")
	b.ReportMetric(100*(mh/mp-1), "%slower-p50")
	b.ReportMetric(100*(ah/ap-1), "%slower-mean")
}

// timedRoundTrip sends req through rt, reads and closes the body, and
// returns how long it all took.
func timedRoundTrip(b *testing.B, rt http.RoundTripper, req *http.Request) time.Duration {
	start := time.Now()
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start)
}

func median(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2])
}

func mean(d []time.Duration) float64 {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return float64(sum) / float64(max(len(d), 1))
}

// coldBuf is what BenchmarkColdCache walks between requests to evict the
// caches.
var coldBuf []byte

// BenchmarkColdCache is BenchmarkOverhead with the CPU caches flushed
// (8 MiB walked) before each request, plain and hedgehttp taking turns; it
// reports each one's median round trip. Over a network the code and data a
// request touches are no longer in cache when the next request comes, which
// is why hedgehttp's extra time over loopback is several times its extra
// time in a hot loop: measured here, 1.5 µs hot but about 10 µs cold. It is
// slow (about 2 ms a pair): run it with -benchtime 5000x. Not part of the
// 'Overhead|Loopback' set.
func BenchmarkColdCache(b *testing.B) {
	if coldBuf == nil {
		coldBuf = make([]byte, 8<<20)
	}
	hedged := benchPolicyTransport(b, instantRT{}, WithInlinePrimary(true))
	req, err := http.NewRequest(http.MethodGet, "http://mem.test/x", nil)
	if err != nil {
		b.Fatal(err)
	}
	one := func(rt http.RoundTripper) time.Duration {
		for i := 0; i < len(coldBuf); i += 64 {
			coldBuf[i]++
		}
		return timedRoundTrip(b, rt, req)
	}
	var tp, th []time.Duration
	for b.Loop() {
		tp = append(tp, one(instantRT{}))
		th = append(th, one(hedged))
	}
	b.ReportMetric(median(tp), "plain-p50-ns")
	b.ReportMetric(median(th), "hedgehttp-p50-ns")
}

// BenchmarkLoopbackLayers splits hedgehttp's cost over loopback into the
// layers it adds to a plain transport, each measured with all those below
// it, request by request in turn (the order rotates), each layer over its
// own keep-alive connection to the same server:
//
//   - header: the request copied with its Hedge-Attempt header;
//   - context: and given a cancellable context, cancelled when the body is
//     read (context.WithCancel: the core's cheaper one is unexported);
//   - policy: and the policy's bookkeeping, Begin, Observe and End, with
//     the two clock reads they need;
//   - Do: the same call through tailcut.Hedger.Do, as hedgehttp makes it;
//   - hedgehttp: the Transport;
//   - hedgehttp-primary-goroutine: the Transport over a base it does not
//     recognise (the http.Transport behind a function), whose primary runs
//     on a goroutine of its own (WithInlinePrimary).
//
// It reports, for each, how much slower than plain its median round trip
// is, in percent. The first two are what the issue's own rules cost: every
// attempt carries the header, and a primary that loses must be cancelled.
func BenchmarkLoopbackLayers(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var bases []*http.Transport
	base := func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		bases = append(bases, tr)
		return tr
	}
	defer func() {
		for _, tr := range bases {
			tr.CloseIdleConnections()
		}
	}()
	p := fixedPolicy(b, time.Second)
	// layer sends r through tr with the header, and with a cancellable
	// context and the policy's bookkeeping if asked.
	layer := func(tr http.RoundTripper, cancellable, policy bool) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			var start time.Time
			var pr tailcut.Request
			if policy {
				start = time.Now()
				pr = p.Begin("k", start)
			}
			ctx, cancel := r.Context(), context.CancelFunc(nil)
			if cancellable {
				ctx, cancel = context.WithCancel(ctx)
			}
			r2 := r.WithContext(ctx)
			r2.Header = withAttempt(r.Header, 0)
			resp, err := tr.RoundTrip(r2)
			if policy {
				end := time.Now()
				p.Observe(&pr, 0, end.Sub(start), tailcut.Completed, end)
				p.End(&pr, 0, end)
			}
			if err != nil {
				if cancel != nil {
					cancel()
				}
				return nil, err
			}
			resp.Body = &body{rc: resp.Body, release: cancel}
			return resp, nil
		})
	}
	h := tailcut.Hedger[*http.Response]{Policy: p, Classify: classify, Discard: discard, Keep: keep, InlinePrimary: true}
	trDo := base()
	viaDo := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		hdr := withAttempt(r.Header, 0)
		return h.Do(r.Context(), "k", func(ctx context.Context, a tailcut.Attempt) (*http.Response, error) {
			r2 := r.WithContext(ctx)
			r2.Header = hdr
			resp, err := trDo.RoundTrip(r2)
			if err != nil {
				return nil, err
			}
			resp.Body = &body{rc: resp.Body}
			return resp, nil
		})
	})
	layers := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"plain", base()},
		{"header", layer(base(), false, false)},
		{"context", layer(base(), true, false)},
		{"policy", layer(base(), true, true)},
		{"Do", viaDo},
		{"hedgehttp", NewTransport(base(), p)},
		{"hedgehttp-primary-goroutine", NewTransport(roundTripFunc(base().RoundTrip), p)},
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	times := make([][]time.Duration, len(layers))
	turn := 0
	for b.Loop() {
		for j := range layers {
			k := (turn + j) % len(layers)
			times[k] = append(times[k], timedRoundTrip(b, layers[k].rt, req))
		}
		turn++
	}
	plain := median(times[0])
	b.ReportMetric(plain, "plain-p50-ns")
	for k, l := range layers[1:] {
		b.ReportMetric(100*(median(times[k+1])/plain-1), "%slower-"+l.name)
	}
}
