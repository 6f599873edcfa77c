package hedgehttp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// arrival is what a server received: one request, its framing and how much
// of its body could be read.
type arrival struct {
	attempt       int
	contentLength int64
	chunked       bool
	n             int   // body bytes read
	err           error // reading the body
}

// recorder is a handler that records every request it receives. The
// primary (Hedge-Attempt 0) stalls, so that a hedge goes; a hedge is
// answered once the primary has arrived, a request without Hedge-Attempt
// at once.
type recorder struct {
	mu       sync.Mutex
	arrivals []arrival
	once     sync.Once
	primary  chan struct{} // closed when the primary arrives
}

func newRecorder() *recorder { return &recorder{primary: make(chan struct{})} }

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	k := attemptOf(r)
	rec.mu.Lock()
	rec.arrivals = append(rec.arrivals, arrival{attempt: k, contentLength: r.ContentLength,
		chunked: len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked", n: int(n), err: err})
	rec.mu.Unlock()
	switch {
	case k == 0:
		rec.once.Do(func() { close(rec.primary) })
		stall(r)
		return
	case k > 0:
		select {
		case <-rec.primary:
		case <-r.Context().Done():
			return
		}
	}
	io.WriteString(w, "ok")
}

func (rec *recorder) got() []arrival {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]arrival(nil), rec.arrivals...)
}

// streamBody is a request body without GetBody (a stream, as far as
// net/http can tell) that records whether it was closed.
type streamBody struct {
	io.Reader
	closed atomic.Bool
}

func newStreamBody(n int) *streamBody {
	return &streamBody{Reader: io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("b"), n)))}
}

func (b *streamBody) Close() error { b.closed.Store(true); return nil }

// connClosed reports whether err is a read on a closed connection, which
// net/http's HTTP/1 transport can report instead of its own error about a
// request it failed to write (the server closed the connection meanwhile).
func connClosed(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && errors.Is(err, net.ErrClosed)
}

// innerErr returns the error inside http.Client's *url.Error.
func innerErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// A body shorter or longer than its declared length, buffered to be
// replayed, fails the request with net/http's own error before any attempt
// is sent: no server ever receives a request that differs from the
// caller's, primary or hedge.
func TestBodyOfWrongLengthSendsNothing(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		key      bool // an Idempotency-Key header
		declared int64
		actual   int
	}{
		{"PUT short", http.MethodPut, false, 60000, 40000},
		{"PUT long", http.MethodPut, false, 40000, 50000},
		{"keyed POST short", http.MethodPost, true, 60000, 40000},
		{"keyed POST long", http.MethodPost, true, 40000, 50000},
		{"PUT short to nothing", http.MethodPut, false, 100, 0},
	}
	for _, proto := range protocols {
		for _, tt := range tests {
			t.Run(proto.name+"/"+tt.name, func(t *testing.T) {
				rec := newRecorder()
				srv, base := startServer(t, proto.h2, rec)
				c := &http.Client{Transport: NewTransport(base, fixedPolicy(t, 5*time.Millisecond), WithMethods(http.MethodPut))}
				body := newStreamBody(tt.actual)
				req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL, body)
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = tt.declared
				if tt.key {
					req.Header.Set("Idempotency-Key", "k-1")
				}
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
					t.Fatalf("status %d with a %d-byte body declared as %d bytes; want an error", resp.StatusCode, tt.actual, tt.declared)
				}
				want := fmt.Sprintf("http: ContentLength=%d with Body length %d", tt.declared, tt.actual)
				if got := innerErr(err).Error(); got != want {
					t.Errorf("error %q, want %q (net/http's)", got, want)
				}
				if got := rec.got(); len(got) != 0 {
					t.Errorf("the server received %+v, want nothing", got)
				}
				if !body.closed.Load() {
					t.Error("the request body was not closed")
				}
			})
		}
	}
}

// The paths where the base transport sees the caller's body itself (a
// body with GetBody, one declared longer than the buffer limit, a declared
// body that is missing) end as they do without hedging: with the base
// transport's error or answer, and no complete request reaches the server
// that the base transport alone would not have sent. (Over HTTP/2 net/http
// sends a short body and a missing one as they are. A body longer than
// declared is not compared: net/http sends its declared length as a
// complete request, then races the server's answer against its own error.)
func TestBodyOfWrongLengthFailsAsWithoutHedging(t *testing.T) {
	tests := []struct {
		name     string
		declared int64
		body     func() io.Reader // nil: no body
	}{
		{"GetBody short", 60000, func() io.Reader { return bytes.NewReader(make([]byte, 40000)) }},
		{"past the buffer limit, short", 100000, func() io.Reader { return newStreamBody(90000) }},
		{"missing body", 5, nil},
	}
	for _, proto := range protocols {
		for _, tt := range tests {
			t.Run(proto.name+"/"+tt.name, func(t *testing.T) {
				// send returns the answer's status, the lengths of the
				// complete requests the server received, and the error.
				send := func(hedged bool) (string, map[int]bool, error) {
					rec := newRecorder()
					srv, base := startServer(t, proto.h2, rec)
					var body io.Reader
					if tt.body != nil {
						body = tt.body()
					}
					req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, body)
					if err != nil {
						t.Fatal(err)
					}
					req.ContentLength = tt.declared
					var rt http.RoundTripper = base
					if hedged {
						rt = NewTransport(base, fixedPolicy(t, 5*time.Millisecond), WithMethods(http.MethodPut))
					}
					status := ""
					resp, err := (&http.Client{Transport: rt}).Do(req)
					if err == nil {
						resp.Body.Close()
						status = resp.Status
					}
					complete := map[int]bool{}
					for _, a := range rec.got() {
						if a.err == nil {
							complete[a.n] = true
						}
					}
					return status, complete, innerErr(err)
				}
				wantStatus, wantComplete, wantErr := send(false)
				gotStatus, gotComplete, gotErr := send(true)
				switch {
				case (gotErr == nil) != (wantErr == nil) || gotStatus != wantStatus:
					t.Errorf("status %q, error %v; want the plain transport's: %q, %v", gotStatus, gotErr, wantStatus, wantErr)
				case gotErr != nil && gotErr.Error() != wantErr.Error() && !connClosed(gotErr) && !connClosed(wantErr):
					t.Errorf("error %v, want the plain transport's: %v", gotErr, wantErr)
				}
				for n := range gotComplete {
					if !wantComplete[n] {
						t.Errorf("the server received a complete %d-byte request; without hedging it receives complete requests of %v bytes", n, keys(wantComplete))
					}
				}
			})
		}
	}
}

// A buffered body of unknown length is replayed as the caller sent it: of
// unknown length (chunked over HTTP/1.1), on the primary and on the hedge.
func TestUnknownLengthBodyKeepsItsFraming(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			rec := newRecorder()
			srv, base := startServer(t, proto.h2, rec)
			c := &http.Client{Transport: NewTransport(base, fixedPolicy(t, 5*time.Millisecond), WithMethods(http.MethodPut))}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, newStreamBody(1000))
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = -1
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := rec.got()
			if len(got) != 2 {
				t.Fatalf("the server received %+v, want the primary and a hedge", got)
			}
			for _, a := range got {
				if a.err != nil || a.n != 1000 {
					t.Errorf("attempt %d: %d bytes, %v; want the 1000 bytes", a.attempt, a.n, a.err)
				}
				if a.contentLength != -1 || a.chunked == proto.h2 {
					t.Errorf("attempt %d: Content-Length %d, chunked %v; want an unknown length, as the caller sent it", a.attempt, a.contentLength, a.chunked)
				}
			}
		})
	}
}

// endless is a body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

// readBody keeps a body of its declared length, or of unknown length up to
// the limit, and words a wrong length as net/http does; the rest of an
// endless body is counted only up to DrainLimit.
func TestReadBody(t *testing.T) {
	tests := []struct {
		name      string
		r         io.Reader
		declared  int64
		wantLen   int
		wantWhole bool
		wantErr   string
	}{
		{"declared, exact", bytes.NewReader(make([]byte, 10)), 10, 10, true, ""},
		{"declared, short", bytes.NewReader(make([]byte, 7)), 10, 0, false, "http: ContentLength=10 with Body length 7"},
		{"declared, long", bytes.NewReader(make([]byte, 200)), 10, 0, false, "http: ContentLength=10 with Body length 200"},
		{"declared, endless", endless{}, 10, 0, false, fmt.Sprintf("http: ContentLength=10 with Body length over %d", 11+DrainLimit)},
		{"unknown, within the limit", bytes.NewReader(make([]byte, 100)), -1, 100, true, ""},
		{"unknown, past the limit", bytes.NewReader(make([]byte, 200)), 0, 101, false, ""},
		{"unknown, empty", bytes.NewReader(nil), -1, 0, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf, whole, err := readBody(tt.r, tt.declared, 100)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(buf) != tt.wantLen || whole != tt.wantWhole {
				t.Errorf("%d bytes, whole %v; want %d, %v", len(buf), whole, tt.wantLen, tt.wantWhole)
			}
		})
	}
}

// A request that declares a body it does not have goes to the base
// transport once, which fails it as it would without hedging; no hedge
// repeats the failure.
func TestMissingBodyGoesOnce(t *testing.T) {
	srv, base := startServer(t, false, newRecorder())
	var calls atomic.Int32
	counted := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		return base.RoundTrip(r)
	})
	// The hedge is due long after the primary fails, so a second call can
	// only come from the failure being taken for one a hedge may repeat.
	tr := NewTransport(counted, fixedPolicy(t, time.Hour), WithMethods(http.MethodPut))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 5
	want := "http: Request.ContentLength=5 with nil Body"
	if _, err := tr.RoundTrip(req); err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the base transport was called %d times, want once", n)
	}
}

// A body replayed through GetBody whose length differs from its
// ContentLength fails in the base transport, and every attempt would send
// the same body: the failure is final, so no hedge repeats it (for a body
// longer than declared that repeat would send the declared prefix again).
func TestGetBodyOfWrongLengthGoesOnce(t *testing.T) {
	srv, base := startServer(t, false, newRecorder())
	var calls atomic.Int32
	counted := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		return base.RoundTrip(r)
	})
	// The hedge is due long after the primary fails, so a second call can
	// only come from the failure being taken for one a hedge may repeat.
	tr := NewTransport(counted, fixedPolicy(t, time.Hour), WithMethods(http.MethodPut))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL, bytes.NewReader(make([]byte, 400)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 600 // GetBody (set by NewRequest) replays 400 bytes
	_, err = tr.RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), "with Body length 400") {
		t.Errorf("error %v, want net/http's ContentLength=600 with Body length 400", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the base transport was called %d times, want once", n)
	}
}
