package s3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
)

// fault is what the injector does to one primary GET.
type fault struct {
	firstByte time.Duration // wait before the answer
	stallAt   int64         // offset of a mid-body stall; -1: none
	stall     time.Duration // its length
}

// noFault is a GET served as it is.
var noFault = fault{stallAt: -1}

// injector stands in front of a server: it delays the first bytes and
// stalls the bodies of primary GETs (Hedge-Attempt: 0) as plan says,
// paces every body at rate, and counts the Range hedges and the body
// bytes written.
type injector struct {
	h    http.Handler
	plan func(n int64) fault // n: the primary's index, from 0
	rate float64             // body bytes per second per answer; 0: unpaced
	// noRanges hides byte ranges: the Range header is taken off requests
	// and Accept-Ranges off answers.
	noRanges bool

	primaries, ranges, written atomic.Int64
}

func (in *injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := noFault
	if r.Method == http.MethodGet {
		primary := r.Header.Get(hedgehttp.AttemptHeader) == "0"
		if r.Header.Get("Range") != "" && !primary {
			in.ranges.Add(1)
		}
		if in.noRanges {
			r.Header.Del("Range")
		}
		if primary {
			if n := in.primaries.Add(1) - 1; in.plan != nil {
				f = in.plan(n)
			}
		}
	}
	if f.firstByte > 0 && !wait(r.Context(), f.firstByte) {
		return
	}
	iw := &injectWriter{ResponseWriter: w, in: in, r: r, f: f, start: time.Now()}
	in.h.ServeHTTP(iw, r)
}

// wait waits d or until ctx ends, and reports whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

type injectWriter struct {
	http.ResponseWriter
	in    *injector
	r     *http.Request
	f     fault
	pos   int64
	start time.Time
	sent  bool // the header was written
}

// WriteHeader writes the header once: gofakes3 writes an error status
// after a body write failed (a stalled body whose request ended), which
// net/http would log as superfluous.
func (w *injectWriter) WriteHeader(code int) {
	if w.sent {
		return
	}
	w.sent = true
	if w.in.noRanges {
		w.Header().Del("Accept-Ranges")
	}
	w.ResponseWriter.WriteHeader(code)
}

// chunk is the unit the injector writes and paces a body in.
const chunk = 16 << 10

func (w *injectWriter) Write(p []byte) (int, error) {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), chunk)
		if at := w.f.stallAt; at >= w.pos && at < w.pos+int64(n) {
			n = int(at - w.pos)
			if n == 0 {
				http.NewResponseController(w.ResponseWriter).Flush()
				if !wait(w.r.Context(), w.f.stall) {
					return written, w.r.Context().Err()
				}
				w.f.stallAt = -1
				continue
			}
		}
		m, err := w.ResponseWriter.Write(p[:n])
		w.pos += int64(m)
		w.in.written.Add(int64(m))
		written += m
		if err != nil {
			return written, err
		}
		p = p[m:]
		if w.in.rate > 0 {
			http.NewResponseController(w.ResponseWriter).Flush()
			due := w.start.Add(time.Duration(float64(w.pos) / w.in.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 && !wait(w.r.Context(), d) {
				return written, w.r.Context().Err()
			}
		}
	}
	return written, nil
}

// objectData returns size pseudo-random bytes, seeded by size.
func objectData(size int) []byte {
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), 46))
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// contentServer serves objects by path with http.ServeContent: net/http's
// own Range, If-Range and If-Match handling, with a strong ETag.
type contentServer struct {
	mu   sync.Mutex
	objs map[string][]byte
}

func (s *contentServer) put(name string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objs == nil {
		s.objs = make(map[string][]byte)
	}
	s.objs[name] = data
}

func (s *contentServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	data, ok := s.objs[strings.TrimPrefix(r.URL.Path, "/")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	sum := sha256.Sum256(data)
	w.Header().Set("Etag", `"`+hex.EncodeToString(sum[:8])+`"`)
	http.ServeContent(w, r, "", time.Unix(1700000000, 0), bytes.NewReader(data))
}

// policy returns a policy whose header hedge goes at delay and whose
// budget grants every hedge.
func policy(tb testing.TB, delay time.Duration) *tailcut.Policy {
	tb.Helper()
	b, err := budget.NewRatio(1, 1e6, -1)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := tailcut.New(tailcut.Config{WarmupDelay: delay, MinSamples: 1 << 30, MaxHedges: 1, Budget: b})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// start starts a loopback server for h, closed at the end of the test,
// and returns its URL and a transport of its own for it.
func start(tb testing.TB, h http.Handler) (string, *http.Transport) {
	tb.Helper()
	srv := httptest.NewServer(h)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = hedgehttp.HedgingIdleConnsPerHost
	tb.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return srv.URL, tr
}

// bucket is the bucket every test reads from.
const bucket = "objects"

// s3Server starts gofakes3 behind in, and returns a minio client that
// reads through rt (given the server's own transport) and a function that
// stores an object in the bucket. Objects are stored in the backend
// directly: gofakes3 would keep the Content-Encoding (aws-chunked) of
// minio-go's streaming upload and send it back on every GET, where S3
// sends none.
func s3Server(tb testing.TB, in *injector, rt func(base http.RoundTripper) http.RoundTripper) (*minio.Client, func(name string, data []byte)) {
	tb.Helper()
	be := s3mem.New()
	if err := be.CreateBucket(bucket); err != nil {
		tb.Fatal(err)
	}
	in.h = gofakes3.New(be).Server()
	url, base := start(tb, in)
	c, err := minio.New(strings.TrimPrefix(url, "http://"), &minio.Options{
		Creds:        credentials.NewStaticV4("key", "secret", ""),
		Region:       "us-east-1",
		Transport:    rt(base),
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return c, func(name string, data []byte) {
		meta := map[string]string{
			"Content-Type":  "application/octet-stream",
			"Last-Modified": time.Now().UTC().Format(http.TimeFormat),
		}
		if _, err := be.PutObject(bucket, name, meta, bytes.NewReader(data), int64(len(data)), nil); err != nil {
			tb.Fatal(err)
		}
	}
}
