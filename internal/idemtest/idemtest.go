// Package idemtest holds the helpers that the idempotency tests of
// hedgehttp, hedgehttp/idemredis and proxy share: a client that sends
// keyed requests, a log that counts messages, a signal that copies of a
// request are waiting, and upstreams that count what they run. Only tests import it. It does not import hedgehttp,
// so that hedgehttp's own tests can use it.
package idemtest

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// KeyHeader is the request header that carries an idempotency key
// (hedgehttp.IdempotencyKeyHeader).
const KeyHeader = "Idempotency-Key"

// Answer is a response as a client saw it.
type Answer struct {
	Status int
	Header http.Header
	Body   string
}

// Send sends a request with body to url through c, with key in KeyHeader
// unless key is empty, and returns the answer. A failure is reported with
// t.Errorf (Send may run in goroutines of the test) and gives the zero
// Answer.
func Send(t testing.TB, c *http.Client, ctx context.Context, method, url, key, body string) Answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return Answer{}
	}
	if key != "" {
		req.Header.Set(KeyHeader, key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return Answer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading body: %v", method, url, err)
	}
	return Answer{resp.StatusCode, resp.Header, string(b)}
}

// SendCopies sends n copies of one request at once, each from its own
// goroutine, as [Send] does, and returns their answers in the order of the
// copies.
func SendCopies(t testing.TB, c *http.Client, ctx context.Context, n int, method, url, key, body string) []Answer {
	t.Helper()
	answers := make([]Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = Send(t, c, ctx, method, url, key, body) })
	}
	wg.Wait()
	return answers
}

// Without returns a with the header fields names removed (from a copy of
// its Header).
func (a Answer) Without(names ...string) Answer {
	a.Header = a.Header.Clone()
	for _, n := range names {
		a.Header.Del(n)
	}
	return a
}

// Equal reports whether a and b have the same status, body and header
// fields, each with the same values in the same order.
func (a Answer) Equal(b Answer) bool {
	return a.Status == b.Status && a.Body == b.Body && maps.EqualFunc(a.Header, b.Header, slices.Equal)
}

// Log is a slog.Handler that keeps the messages of the records it is
// given, whatever their level. It is safe for concurrent use.
type Log struct {
	mu   sync.Mutex
	msgs []string
}

// Enabled implements slog.Handler: every level is.
func (l *Log) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler: it keeps r's message.
func (l *Log) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

// WithAttrs implements slog.Handler; the attributes are dropped.
func (l *Log) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup implements slog.Handler; the group is dropped.
func (l *Log) WithGroup(string) slog.Handler { return l }

// Lines returns the messages kept so far, in order.
func (l *Log) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// Count returns how many messages kept so far contain s.
func (l *Log) Count(s string) int {
	n := 0
	for _, m := range l.Lines() {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// Waiting closes Ready once N distinct requests (lock tokens) have been
// told that their key is in progress, that is once N copies wait. A test's
// Store wrapper calls Saw from Begin on every in-progress claim.
type Waiting struct {
	// Ready is closed when the N-th distinct token is seen.
	Ready chan struct{}

	n    int
	mu   sync.Mutex
	seen map[string]bool
}

// NewWaiting returns a Waiting for n copies.
func NewWaiting(n int) *Waiting {
	return &Waiting{Ready: make(chan struct{}), n: n, seen: map[string]bool{}}
}

// Saw records that the request holding token was told its key is in
// progress.
func (w *Waiting) Saw(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen[token] {
		w.seen[token] = true
		if len(w.seen) == w.n {
			close(w.Ready)
		}
	}
}

// CutAfterWrite is an upstream whose reused connections die after a
// write: a loopback HTTP/1.1 server that answers the first request of each
// connection (200 "ok") and, for each later request on a connection, reads
// it in full, counts it as run and closes the connection without a word.
// A client that sends a write on a reused connection so sees the
// connection fail after the upstream applied the write; net/http's
// Transport then replays it on a new connection if it deems it
// replayable, and the upstream runs it twice. GET requests are not
// counted.
type CutAfterWrite struct {
	// URL is the server's base URL, http://127.0.0.1:port.
	URL string

	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	runs map[string]int // by Idempotency-Key value
}

// StartCutAfterWrite starts a CutAfterWrite; the test's cleanup stops it.
func StartCutAfterWrite(t testing.TB) *CutAfterWrite {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &CutAfterWrite{URL: "http://" + ln.Addr().String(), ln: ln, runs: map[string]int{}}
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *CutAfterWrite) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; ; i++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if req.Method != http.MethodGet {
			s.mu.Lock()
			s.runs[req.Header.Get(KeyHeader)]++
			s.mu.Unlock()
		}
		if i > 0 {
			return // applied, and the connection dies
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

// Runs returns how many requests with this Idempotency-Key ran.
func (s *CutAfterWrite) Runs(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[key]
}
