package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// queuedServer is a loopback server with an Admission of one slot in
// front of three routes: /fast answers at once, /block holds the slot
// until release is closed, /work answers once the request queued beside
// it has left the queue (when waitLeave), so that the test sees the
// Admission's decision for both.
type queuedServer struct {
	adm     *Admission
	url     string
	base    *http.Transport
	blocked chan struct{} // /block has the slot
	release chan struct{}
	free    sync.Once     // closes release
	queued  chan struct{} // one per request that queues
	left    chan struct{} // one per request that left the queue
	worked  chan struct{} // one per run of /work, once answered
}

func startQueued(t *testing.T, h2 bool, opts AdmissionOptions, waitLeave bool) *queuedServer {
	t.Helper()
	q := &queuedServer{
		blocked: make(chan struct{}, 1), release: make(chan struct{}),
		queued: make(chan struct{}, 8), left: make(chan struct{}, 8), worked: make(chan struct{}, 8),
	}
	app := http.NewServeMux()
	app.HandleFunc("/fast", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fast") })
	app.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		q.blocked <- struct{}{}
		<-q.release
		io.WriteString(w, "block")
	})
	app.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		if waitLeave {
			select {
			case <-q.left:
			case <-time.After(10 * time.Second): // a broken test still ends
			}
		}
		io.WriteString(w, "work")
		q.worked <- struct{}{}
	})
	opts.Limit = 1
	adm, err := NewAdmission(app, opts)
	if err != nil {
		t.Fatal(err)
	}
	adm.q.OnWait = func() { q.queued <- struct{}{} }
	adm.q.OnLeave = func() { q.left <- struct{}{} }
	q.adm = adm
	srv, base := startServer(t, h2, adm)
	q.url, q.base = srv.URL, base
	t.Cleanup(q.unblock) // before the server closes, on a failed test too
	return q
}

// block takes the server's slot with a plain request, and returns a
// channel that yields once it has been answered.
func (q *queuedServer) block(t *testing.T) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := (&http.Client{Transport: q.base}).Get(q.url + "/block")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	wait(t, q.queued, "the blocker to queue")
	wait(t, q.blocked, "the blocker to start")
	return done
}

// tiedWork sends GET /work through tr while the slot is held: it waits
// for n of its attempts to queue, frees the slot, and returns the answer.
func (q *queuedServer) tiedWork(t *testing.T, tr *Transport, n int) (int, string) {
	t.Helper()
	blockDone := q.block(t)
	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		code, body := get(t, &http.Client{Transport: tr}, context.Background(), q.url+"/work")
		got <- answer{code, body}
	}()
	for range n {
		wait(t, q.queued, "an attempt to queue")
	}
	q.unblock()
	a := <-got
	<-blockDone
	return a.code, a.body
}

// wait receives from c, or fails the test after 10 s.
func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
	}
}

// unblock lets /block answer.
func (q *queuedServer) unblock() { q.free.Do(func() { close(q.release) }) }

// teach sends one unhedged request, whose start signal (if the server
// sends one) ties its key.
func (q *queuedServer) teach(t *testing.T, tr *Transport) {
	t.Helper()
	if code, body := get(t, &http.Client{Transport: tr}, tailcut.WithoutHedging(context.Background()), q.url+"/fast"); code != 200 || body != "fast" {
		t.Fatalf("GET /fast = %d %q", code, body)
	}
	<-q.queued
}

// A tied request whose attempts both queue behind a busy slot: the first
// to start cancels the other, which leaves the queue without running.
func TestTiedLoopback(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			q := startQueued(t, proto.h2, AdmissionOptions{}, true)
			tr := NewTransport(q.base, fixedPolicy(t, time.Hour), WithTied(0))
			q.teach(t, tr)
			code, body := q.tiedWork(t, tr, 2)
			if code != 200 || body != "work" {
				t.Fatalf("GET /work = %d %q", code, body)
			}
			st := q.adm.Stats()
			if st.Started != 3 || st.Left != 1 {
				t.Errorf("admission stats = %+v, want 3 started (fast, block, one work) and 1 left", st)
			}
			if ts := tr.Tied().Stats(); ts.Requests != 1 || ts.Twins != 1 || ts.Canceled != 1 || ts.Duplicated != 0 {
				t.Errorf("tied stats = %+v, want 1 request, 1 twin, 1 cancelled", ts)
			}
		})
	}
}

// A server without the signal: a tied client hedges as without WithTied,
// at the policy's delay, and both attempts run.
func TestTiedLoopbackSilentServer(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			q := startQueued(t, proto.h2, AdmissionOptions{NoSignal: true}, false)
			p := fixedPolicy(t, time.Millisecond)
			tr := NewTransport(q.base, p, WithTied(0))
			q.teach(t, tr)
			if code, body := q.tiedWork(t, tr, 2); code != 200 || body != "work" {
				t.Fatalf("GET /work = %d %q", code, body)
			}
			if st := q.settled(t); st.Started+st.Left != 4 {
				t.Errorf("admission stats = %+v, want both attempts at the server", st)
			}
			if ts := tr.Tied().Stats(); ts.Requests != 0 {
				t.Errorf("tied requests = %d, want 0", ts.Requests)
			}
			if c := p.Stats().Counts; c.Hedges != 1 {
				t.Errorf("policy hedges = %d, want 1", c.Hedges)
			}
		})
	}
}

// A client without WithTied ignores the signal: it hedges as before, and
// both attempts reach the server. The loser, queued behind the winner, may
// start before its cancellation arrives or leave the queue, but the
// winner's start never cancels it.
func TestTiedLoopbackPlainClient(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			q := startQueued(t, proto.h2, AdmissionOptions{}, false)
			p := fixedPolicy(t, time.Millisecond)
			tr := NewTransport(q.base, p)
			q.teach(t, tr)
			if code, body := q.tiedWork(t, tr, 2); code != 200 || body != "work" {
				t.Fatalf("GET /work = %d %q", code, body)
			}
			if st := q.settled(t); st.Started+st.Left != 4 || st.Started < 3 {
				t.Errorf("admission stats = %+v, want both attempts at the server", st)
			}
			if c := p.Stats().Counts; c.Hedges != 1 || tr.Tied() != nil {
				t.Errorf("policy counts %+v (tied %v), want one hedge, untied", c, tr.Tied() != nil)
			}
		})
	}
}

// settled waits for the loser of a hedged /work, after its winner ran:
// it either runs too or leaves the queue; it returns the Admission's stats
// then.
func (q *queuedServer) settled(t *testing.T) AdmissionStats {
	t.Helper()
	wait(t, q.worked, "the winner's run")
	select {
	case <-q.worked:
	case <-q.left:
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for the loser to run or leave")
	}
	return q.adm.Stats()
}

// The signal goes only to requests with Hedge-Attempt (or to all with
// SignalAll), as a 103 with Tailcut-Started, and the final answer carries
// no Tailcut-Started.
func TestAdmissionSignal(t *testing.T) {
	for _, proto := range protocols {
		for _, all := range []bool{false, true} {
			t.Run(proto.name, func(t *testing.T) {
				q := startQueued(t, proto.h2, AdmissionOptions{SignalAll: all}, false)
				for _, attempt := range []bool{false, true} {
					var got atomic.Int32
					trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
						if code == http.StatusEarlyHints && h.Get(StartedHeader) == "1" {
							got.Add(1)
						}
						return nil
					}}
					ctx := httptrace.WithClientTrace(context.Background(), trace)
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, q.url+"/fast", nil)
					if attempt {
						req.Header.Set(AttemptHeader, "0")
					}
					resp, err := (&http.Client{Transport: q.base}).Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					<-q.queued
					if resp.StatusCode != 200 || string(b) != "fast" || resp.Header.Get(StartedHeader) != "" {
						t.Errorf("answer = %d %q %v", resp.StatusCode, b, resp.Header)
					}
					want := int32(0)
					if all || attempt {
						want = 1
					}
					if got.Load() != want {
						t.Errorf("SignalAll %v, Hedge-Attempt %v: %d signals, want %d", all, attempt, got.Load(), want)
					}
				}
			})
		}
	}
}

func TestNewAdmissionRejects(t *testing.T) {
	ok := http.NotFoundHandler()
	for _, c := range []struct {
		name string
		next http.Handler
		opts AdmissionOptions
	}{
		{"nil", nil, AdmissionOptions{}},
		{"Limit", ok, AdmissionOptions{Limit: -1}},
		{"NoSignal", ok, AdmissionOptions{NoSignal: true, SignalAll: true}},
	} {
		if _, err := NewAdmission(c.next, c.opts); err == nil {
			t.Errorf("%s: nil error", c.name)
		}
	}
	if _, err := New(nil, nil, WithTied(-time.Second)); err == nil {
		t.Error("WithTied(-1s): nil error")
	}
}

// A request cancelled as its turn comes leaves the queue and gives its
// slot back: cancelled requests never eat the Admission's slots.
func TestAdmissionCancelledKeepsNoSlot(t *testing.T) {
	adm, err := NewAdmission(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), AdmissionOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 64 {
		// A free slot and a done context: select picks either.
		adm.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
	}
	done := make(chan string)
	go func() {
		rec := httptest.NewRecorder()
		adm.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		done <- rec.Body.String()
	}()
	select {
	case body := <-done:
		if body != "ok" {
			t.Errorf("body = %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a live request waited 10s for the one slot: a cancelled request kept it")
	}
	if st := adm.Stats(); st.Left != 64 || st.Started != 1 {
		t.Errorf("stats = %+v, want 64 left, 1 started", st)
	}
}
