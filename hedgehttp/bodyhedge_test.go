package hedgehttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// object is a test object served with real Range semantics
// (http.ServeContent), whose first primary can be made to stall or break
// at an offset of its body.
type object struct {
	data []byte
	etag string
	// stallAt is the offset at which the first primary stops writing
	// until release is closed or its request ends; -1: no stall.
	stallAt int64
	// breakAt is the offset at which the first primary aborts its
	// connection; -1: no break.
	breakAt int64
	release chan struct{}
	once    sync.Once // the first primary claims the stall or break
	// ranged answers Range requests when set, instead of ServeContent.
	ranged   func(w http.ResponseWriter, r *http.Request)
	noRanges bool // no Accept-Ranges, Range ignored
	ranges   atomic.Int32
	written  atomic.Int64
}

func newObject(size int) *object {
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	return &object{data: data, etag: `"v1"`, stallAt: -1, breakAt: -1, release: make(chan struct{})}
}

func (o *object) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ranged := r.Header.Get("Range") != ""
	if ranged {
		o.ranges.Add(1)
	}
	cw := &countingWriter{ResponseWriter: w, o: o, stallAt: -1, breakAt: -1, r: r}
	if attemptOf(r) == 0 { // the primary: Range hedges carry 1 and up
		o.once.Do(func() { cw.stallAt, cw.breakAt = o.stallAt, o.breakAt })
	}
	switch {
	case o.noRanges:
		w.Header().Set("Etag", o.etag)
		w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
		cw.Write(o.data)
	case ranged && o.ranged != nil:
		o.ranged(cw, r)
	default:
		w.Header().Set("Etag", o.etag)
		http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(o.data))
	}
}

// countingWriter counts the body bytes written, and stalls or breaks at
// its offsets.
type countingWriter struct {
	http.ResponseWriter
	o                *object
	r                *http.Request
	pos              int64
	stallAt, breakAt int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	written := 0
	for _, at := range []int64{c.stallAt, c.breakAt} {
		if at < c.pos || at >= c.pos+int64(len(p)) {
			continue
		}
		n, err := c.ResponseWriter.Write(p[:at-c.pos])
		c.add(n)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
		http.NewResponseController(c.ResponseWriter).Flush()
		if at == c.breakAt {
			panic(http.ErrAbortHandler)
		}
		select {
		case <-c.o.release:
		case <-c.r.Context().Done():
			return written, c.r.Context().Err()
		}
	}
	n, err := c.ResponseWriter.Write(p)
	c.add(n)
	return written + n, err
}

func (c *countingWriter) add(n int) {
	c.pos += int64(n)
	c.o.written.Add(int64(n))
}

// bodyClient returns a client whose Transport watches bodies, over base,
// with a policy that never hedges headers and grants every hedge.
func bodyClient(t *testing.T, base http.RoundTripper, o BodyHedge) (*http.Client, *Transport) {
	t.Helper()
	if o.MinSize == 0 {
		o.MinSize = 64 << 10
	}
	if o.MinStall == 0 {
		o.MinStall = 20 * time.Millisecond
	}
	if o.MaxStall == 0 {
		o.MaxStall = 50 * time.Millisecond
	}
	tr, err := New(base, fixedPolicy(t, time.Hour), WithBodyHedge(o))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}, tr
}

// readAll GETs url through c within 10 s and returns the body's SHA-256.
func readAll(t *testing.T, c *http.Client, url string) [32]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return [32]byte(h.Sum(nil))
}

// TestBodyHedgeResumesAStall: a body that stops mid-way is read on from
// a Range request, bytes identical, the stalled response ended.
func TestBodyHedgeResumesAStall(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			obj := newObject(1 << 20)
			obj.stallAt = 300 << 10
			srv, base := startServer(t, proto.h2, obj)
			c, tr := bodyClient(t, base, BodyHedge{})
			if got := readAll(t, c, srv.URL); got != sha256.Sum256(obj.data) {
				t.Fatal("the body read is not the object")
			}
			s := tr.BodyStats()
			if s.Watched != 1 || s.Sent != 1 || s.Won != 1 || s.Dropped != 0 {
				t.Errorf("BodyStats = %+v, want 1 watched, 1 sent, 1 won", s)
			}
			if n := obj.ranges.Load(); n != 1 {
				t.Errorf("%d Range requests, want 1", n)
			}
			// The stalled primary wrote its first 300 KiB; the rest came
			// once, from the hedge.
			if w := obj.written.Load(); w > int64(len(obj.data))+BodyBlock+(300<<10) {
				t.Errorf("%d bytes written for a %d-byte object", w, len(obj.data))
			}
		})
	}
}

// TestBodyHedgeResumesACallersRange: the body of a 206 to the caller's
// own Range request is resumed within that range.
func TestBodyHedgeResumesACallersRange(t *testing.T) {
	obj := newObject(1 << 20)
	obj.stallAt = 200 << 10
	srv, base := startServer(t, false, obj)
	c, tr := bodyClient(t, base, BodyHedge{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Header.Set("Range", "bytes=100000-899999")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(got, obj.data[100000:900000]) {
		t.Fatalf("%s, %d bytes, %v: not bytes 100000-899999 of the object", resp.Status, len(got), err)
	}
	if s := tr.BodyStats(); s.Won != 1 || obj.ranges.Load() != 2 {
		t.Errorf("BodyStats = %+v, %d Range requests; want 1 won, 2 requests", s, obj.ranges.Load())
	}
}

// TestBodyHedgeResumesABrokenBody: a body whose connection breaks is
// resumed from where it broke.
func TestBodyHedgeResumesABrokenBody(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			obj := newObject(1 << 20)
			obj.breakAt = 500 << 10
			srv, base := startServer(t, proto.h2, obj)
			c, tr := bodyClient(t, base, BodyHedge{MinStall: time.Hour, MaxStall: time.Hour})
			if got := readAll(t, c, srv.URL); got != sha256.Sum256(obj.data) {
				t.Fatal("the body read is not the object")
			}
			if s := tr.BodyStats(); s.Won != 1 {
				t.Errorf("BodyStats = %+v, want the resume won", s)
			}
		})
	}
}

// TestBodyHedgeDropsOtherBytes: a Range answer that is not the rest of
// the same version is dropped, never spliced, and the first body read on.
func TestBodyHedgeDropsOtherBytes(t *testing.T) {
	const size, at = 1 << 20, 300 << 10
	other := newObject(size + 7).data[:size] // another version's bytes
	partial := func(etag string, first, last, total int64, enc string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Etag", etag)
			w.Header().Set("Content-Range", "bytes "+strconv.FormatInt(first, 10)+"-"+strconv.FormatInt(last, 10)+"/"+strconv.FormatInt(total, 10))
			w.Header().Set("Content-Length", strconv.FormatInt(last-first+1, 10))
			if enc != "" {
				w.Header().Set("Content-Encoding", enc)
			}
			w.WriteHeader(http.StatusPartialContent)
			w.Write(other[first : last+1])
		}
	}
	cases := []struct {
		name   string
		ranged func(http.ResponseWriter, *http.Request)
	}{
		{"range ignored, 200", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Etag", `"v1"`)
			w.Write(other)
		}},
		{"412", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusPreconditionFailed) }},
		{"another etag", partial(`"v2"`, at, size-1, size, "")},
		{"no etag", partial(``, at, size-1, size, "")},
		{"short range", partial(`"v1"`, at, size-2, size, "")},
		{"range from elsewhere", partial(`"v1"`, at+1, size-1, size, "")},
		{"another size", partial(`"v1"`, at, size, size+1, "")},
		{"content coding", partial(`"v1"`, at, size-1, size, "gzip")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := newObject(size)
			obj.stallAt = at
			obj.ranged = tc.ranged
			srv, base := startServer(t, false, obj)
			// The stalled body goes on once the hedge's answer was
			// closed: dropped, or, were it spliced, at the end.
			var once sync.Once
			c, tr := bodyClient(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := base.RoundTrip(r)
				if err == nil && r.Header.Get("Range") != "" {
					resp.Body = &onClose{ReadCloser: resp.Body, f: func() { once.Do(func() { close(obj.release) }) }}
				}
				return resp, err
			}), BodyHedge{})
			if got := readAll(t, c, srv.URL); got != sha256.Sum256(obj.data) {
				t.Fatal("the body read is not the object")
			}
			if s := tr.BodyStats(); s.Sent != 1 || s.Dropped != 1 || s.Won != 0 {
				t.Errorf("BodyStats = %+v, want 1 sent, 1 dropped, none won", s)
			}
		})
	}
}

type onClose struct {
	io.ReadCloser
	f func()
}

func (o *onClose) Close() error {
	err := o.ReadCloser.Close()
	o.f()
	return err
}

// TestBodyHedgeNeedsAcceptRanges: a server that does not advertise
// Accept-Ranges is not watched unless AssumeRanges; then its 200 to a
// Range request is dropped and the body is read intact.
func TestBodyHedgeNeedsAcceptRanges(t *testing.T) {
	obj := newObject(1 << 20)
	obj.noRanges = true
	srv, base := startServer(t, false, obj)
	c, tr := bodyClient(t, base, BodyHedge{})
	if got := readAll(t, c, srv.URL); got != sha256.Sum256(obj.data) {
		t.Fatal("the body read is not the object")
	}
	if s := tr.BodyStats(); s.Watched != 0 {
		t.Errorf("BodyStats = %+v, want nothing watched", s)
	}

	obj = newObject(1 << 20)
	obj.noRanges, obj.stallAt = true, 100<<10
	srv, base = startServer(t, false, obj)
	var once sync.Once
	c, tr = bodyClient(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		if err == nil && r.Header.Get("Range") != "" {
			resp.Body = &onClose{ReadCloser: resp.Body, f: func() { once.Do(func() { close(obj.release) }) }}
		}
		return resp, err
	}), BodyHedge{AssumeRanges: true})
	if got := readAll(t, c, srv.URL); got != sha256.Sum256(obj.data) {
		t.Fatal("the body read is not the object")
	}
	if s := tr.BodyStats(); s.Watched != 1 || s.Dropped != 1 || s.Won != 0 {
		t.Errorf("BodyStats = %+v, want 1 watched, 1 dropped", s)
	}
}

// denyAll is a budget that grants nothing, and closes twice when asked
// the second time.
type denyAll struct {
	asked atomic.Int32
	twice chan struct{}
}

func (*denyAll) Deposit(time.Time) {}
func (d *denyAll) Withdraw(time.Time) bool {
	if d.asked.Add(1) == 2 {
		close(d.twice)
	}
	return false
}

// TestBodyHedgeIsBudgeted: a stall the budget grants no token waits for
// the body, and asks again one bound later.
func TestBodyHedgeIsBudgeted(t *testing.T) {
	obj := newObject(1 << 20)
	obj.stallAt = 200 << 10
	srv, base := startServer(t, false, obj)
	deny := &denyAll{twice: make(chan struct{})}
	p, err := tailcut.New(tailcut.Config{WarmupDelay: time.Hour, MinSamples: 1 << 30, Budget: deny})
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(base, p, WithBodyHedge(BodyHedge{MinSize: 1, MinStall: time.Millisecond, MaxStall: time.Millisecond}))
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1<<20)
	n, _ := io.ReadFull(resp.Body, buf[:200<<10])
	// The next read stalls: the budget is asked, refuses, and is asked
	// again; the stall is released once it has refused twice.
	go func() {
		<-deny.twice
		close(obj.release)
	}()
	m, err := io.ReadFull(resp.Body, buf[n:])
	if err != nil || !bytes.Equal(buf[:n+m], obj.data) {
		t.Fatalf("read %d bytes, %v; want the object", n+m, err)
	}
	if s := tr.BodyStats(); s.Sent != 0 || s.Denied < 2 || obj.ranges.Load() != 0 {
		t.Errorf("BodyStats = %+v, %d Range requests; want none sent, 2 or more denied", s, obj.ranges.Load())
	}
}

// TestBodyHedgeLearnsItsBound: a key's first body waits MaxStall; once
// BodyMinBlocks blocks have come fast the bound is learned, at least
// MinStall.
func TestBodyHedgeLearnsItsBound(t *testing.T) {
	obj := newObject(4 << 20)
	srv, base := startServer(t, false, obj)
	const minStall, maxStall = 5 * time.Millisecond, 10 * time.Second
	_, tr := bodyClient(t, base, BodyHedge{MinStall: minStall, MaxStall: maxStall})
	bound := func() time.Duration { return readWatched(t, tr, srv.URL).bound }
	if b := bound(); b != maxStall {
		t.Errorf("first bound %v, want MaxStall %v", b, maxStall)
	}
	if b := bound(); b < minStall || b >= maxStall {
		t.Errorf("learned bound %v, want in [%v, %v)", b, minStall, maxStall)
	}
}

// TestBodyHedgeNotForRequestsSentOnce: a request under WithoutHedging is
// not watched.
func TestBodyHedgeNotForRequestsSentOnce(t *testing.T) {
	obj := newObject(1 << 20)
	srv, base := startServer(t, false, obj)
	_, tr := bodyClient(t, base, BodyHedge{})
	for _, ctx := range []context.Context{WithoutHedging(context.Background()), tailcut.WithChainStop(context.Background())} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := resp.Body.(*rangeBody); ok {
			t.Error("a request sent once has its body watched")
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func TestWithBodyHedgeRejectsBadOptions(t *testing.T) {
	for _, o := range []BodyHedge{
		{MinSize: -1}, {MinStall: -1}, {MaxStall: -1}, {Quantile: 1}, {Quantile: -0.5}, {Multiple: 0.5},
		{MinStall: time.Second, MaxStall: time.Millisecond},
	} {
		if _, err := New(nil, nil, WithBodyHedge(o)); err == nil {
			t.Errorf("WithBodyHedge(%+v): no error", o)
		}
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		v                 string
		first, last, size int64
		ok                bool
	}{
		{"bytes 0-9/10", 0, 9, 10, true},
		{"bytes 5-9/10", 5, 9, 10, true},
		{"bytes 5-10/10", 0, 0, 0, false},
		{"bytes 6-5/10", 0, 0, 0, false},
		{"bytes */10", 0, 0, 0, false},
		{"bytes 0-9/*", 0, 0, 0, false},
		{"bytes +0-9/10", 0, 0, 0, false},
		{"bytes 0-9 /10", 0, 0, 0, false},
		{"bits 0-9/10", 0, 0, 0, false},
		{"bytes 0-99999999999999999999/10", 0, 0, 0, false},
	} {
		f, l, s, ok := parseContentRange(tc.v)
		if f != tc.first || l != tc.last || s != tc.size || ok != tc.ok {
			t.Errorf("parseContentRange(%q) = %d, %d, %d, %v", tc.v, f, l, s, ok)
		}
	}
}

func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-9/10", "bytes */10", "bytes 1-1/2", "bytes 00-01/0002", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		first, last, size, ok := parseContentRange(v)
		if !ok {
			return
		}
		if first < 0 || last < first || size <= last {
			t.Fatalf("%q: %d-%d/%d accepted", v, first, last, size)
		}
		if got := "bytes " + strconv.FormatInt(first, 10) + "-" + strconv.FormatInt(last, 10) + "/" + strconv.FormatInt(size, 10); !equalNumbers(got, v) {
			t.Fatalf("%q parsed as %q", v, got)
		}
	})
}

// equalNumbers reports whether a and b are the same but for leading
// zeros in their numbers.
func equalNumbers(a, b string) bool {
	trim := func(s string) string {
		var out []byte
		for i := 0; i < len(s); i++ {
			if s[i] == '0' && (i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9') && (i == 0 || s[i-1] < '0' || s[i-1] > '9') {
				j := i
				for j+1 < len(s) && s[j] == '0' && s[j+1] >= '0' && s[j+1] <= '9' {
					j++
				}
				i = j
			}
			out = append(out, s[i])
		}
		return string(out)
	}
	return trim(a) == trim(b)
}

// TestHedgeSourceSkipsWhatWasDelivered: a Range answer that took over
// after the first body delivered some more bytes goes on from the
// caller's offset, whether that is inside the bytes it read ahead or
// past them.
func TestHedgeSourceSkipsWhatWasDelivered(t *testing.T) {
	data := newObject(1000).data
	const start, ahead = 300, 100
	for _, off := range []int64{start, start + 1, start + ahead - 1, start + ahead, start + ahead + 50} {
		s := hedgeSource(bytes.NewReader(data[start+ahead:]), start, slices.Clone(data[start:start+ahead]), nil)
		var got []byte
		buf := make([]byte, 64)
		for o := off; ; {
			n, err := s.read(buf, o)
			got = append(got, buf[:n]...)
			o += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data[off:]) {
			t.Errorf("from offset %d: read %d bytes, not the object's from there", off, len(got))
		}
	}
}

// TestBodyHedgeEndsTheHardTimeoutAtEOF: a watched body read to the end
// ends its hard timeout's context, as an unwatched body does.
func TestBodyHedgeEndsTheHardTimeoutAtEOF(t *testing.T) {
	obj := newObject(1 << 20)
	srv, base := startServer(t, false, obj)
	tr, err := New(base, fixedPolicy(t, time.Hour), WithTimeout(time.Hour), WithBodyHedge(BodyHedge{MinSize: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if rb := readWatched(t, tr, srv.URL); rb.ctx.Err() == nil {
		t.Error("the hard timeout's context lives on after the body's end")
	}
}

// readWatched GETs url through tr, reads the watched body to its end,
// closes it and returns it.
func readWatched(t *testing.T, tr *Transport, url string) *rangeBody {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, ok := resp.Body.(*rangeBody)
	if !ok {
		t.Fatalf("body %T not watched", resp.Body)
	}
	if _, err := io.Copy(io.Discard, rb); err != nil {
		t.Fatal(err)
	}
	return rb
}
