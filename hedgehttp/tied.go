package hedgehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/admit"
)

// StartedHeader is the header of the informational response that tells a
// client its attempt has started executing: an [Admission] sends
// "103 Early Hints" carrying "Tailcut-Started: 1" when a request leaves
// its queue, and a [Transport] in tied mode ([WithTied]) takes a 103
// carrying it as the attempt's start signal (a 103 without it, such as a
// CDN's hints, is not one).
//
// Why 103: Go's server writes any 1xx but 101 as an informational response
// (w.WriteHeader(103)) over HTTP/1.1 and HTTP/2 alike, and Go's client
// hands every 1xx but 101 to httptrace.ClientTrace.Got1xxResponse with its
// header (100 is also taken as "continue" by a request sending
// Expect: 100-continue, so it cannot be used). 103 is a registered
// status that proxies forward (RFC 8297), where an unregistered 1xx would
// be treated as 100 by a recipient that does not know it (RFC 9110,
// 15.1). Browsers act on 103's Link headers only, and an Admission sends
// none. RFC 9110 forbids 1xx responses to HTTP/1.0 clients: they get none.
const StartedHeader = "Tailcut-Started"

// startedValue is the StartedHeader's value, shared by every signal.
var startedValue = []string{"1"}

// AdmissionOptions configures an [Admission].
type AdmissionOptions struct {
	// Limit is the most requests the next handler executes at once; the
	// others wait their turn in arrival order, and leave the queue without
	// running when their client cancels them. Zero means no limit: every
	// request starts at once. Must not be negative.
	Limit int

	// SignalAll sends the start signal to every HTTP/1.1 or HTTP/2
	// request. By default only requests that carry Hedge-Attempt (those
	// of a hedgehttp Transport, of hedgegrpc's gateway-free clients, of
	// `tailcut proxy`) get it: other clients see exactly the responses
	// they saw without an Admission.
	SignalAll bool

	// NoSignal sends no start signal: the Admission only bounds
	// concurrency.
	NoSignal bool
}

// Admission is the server half of tied requests: middleware that bounds
// how many requests its next handler executes at once (AdmissionOptions.Limit,
// a FIFO queue in front of it), and tells the client when a request
// leaves the queue and starts executing, with a 103 informational response
// carrying [StartedHeader]. A tied client ([WithTied]) then cancels the
// request's twin still queued at another replica, which leaves its queue
// without running: the queueing delay is hedged, the work is not.
//
// Put it inside a [Handler] (which sheds before the queue) and around the
// application: NewHandler(NewAdmission(app, opts), hopts). An attempt
// whose client cancels it while it waits never runs the next handler, and
// gets no answer (its client is gone). A handler that needs no bound
// still gains from the signal: a tied client then never hedges its work.
//
// An Admission is safe for concurrent use.
type Admission struct {
	next http.Handler
	opts AdmissionOptions
	q    *admit.Queue
}

// NewAdmission returns an Admission serving requests with next under
// opts. It returns an error, naming the field, for invalid options.
func NewAdmission(next http.Handler, opts AdmissionOptions) (*Admission, error) {
	switch {
	case next == nil:
		return nil, errors.New("hedgehttp: NewAdmission: nil next handler")
	case opts.Limit < 0:
		return nil, fmt.Errorf("hedgehttp: AdmissionOptions.Limit must not be negative, got %d", opts.Limit)
	case opts.NoSignal && opts.SignalAll:
		return nil, errors.New("hedgehttp: AdmissionOptions.NoSignal and SignalAll are exclusive")
	}
	return &Admission{next: next, opts: opts, q: admit.New(opts.Limit)}, nil
}

// ServeHTTP queues r for a slot, signals its start and serves it with
// the next handler, unless its client cancels it first.
func (a *Admission) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !a.q.Enter(r.Context()) {
		return // its client is gone, and nobody reads an answer
	}
	defer a.q.Release()
	if a.signals(r) {
		h := w.Header()
		h[StartedHeader] = startedValue
		w.WriteHeader(http.StatusEarlyHints)
		delete(h, StartedHeader) // Go's server keeps the header map for the final answer
	}
	defer a.q.Run()()
	a.next.ServeHTTP(w, r)
}

// signals reports whether r gets the start signal.
func (a *Admission) signals(r *http.Request) bool {
	if a.opts.NoSignal || !r.ProtoAtLeast(1, 1) {
		return false
	}
	return a.opts.SignalAll || len(r.Header[AttemptHeader]) > 0
}

// AdmissionStats are an [Admission]'s counters, from [Admission.Stats]:
// the requests the next handler began to execute (Started), those
// cancelled by their client while queued, never executed (Left), those
// queued and executing now (Waiting, Running), and the total time the
// next handler spent on the requests that returned, the work executed
// (Busy).
type AdmissionStats = admit.Stats

// Stats returns a snapshot of the counters, each read atomically.
func (a *Admission) Stats() AdmissionStats { return a.q.Stats() }

// WithTied sends tied requests (see tailcut.Tied) to the keys whose
// servers signal an attempt's start (an [Admission] in front of them, or
// any server sending [StartedHeader] in a 103): the twin goes delay after
// the primary (zero: at once) unless the primary has started by then, and
// the first attempt to start cancels the other, still queued. A key whose
// server sends no signal is hedged as without WithTied.
//
// Over HTTP/1.1 a twin cancelled before its answer closes its connection
// (HTTP/1.1 has no other way to abort a request): with delay 0, about one
// connection per tied request. Over HTTP/2 it costs a RST_STREAM frame. A
// delay of about the servers' usual queueing time sends twins only for the
// requests that queue longer. A negative delay is an invalid option.
func WithTied(delay time.Duration) Option {
	return func(c *config) {
		t, err := tailcut.NewTied(delay)
		if err != nil {
			c.fail("WithTied: delay must not be negative, got %v", delay)
			return
		}
		c.tied = t
	}
}

// Tied returns the tied-request state of the transport ([WithTied]), nil
// without it; its Stats count twins, cancellations and duplicated work.
func (t *Transport) Tied() *tailcut.Tied { return t.cfg.tied }

// tiedAttempt is what a tied attempt's transport learns of its start.
type tiedAttempt struct{ started atomic.Bool }

// unstarted reports whether the attempt, whose context is ctx, was
// cancelled before its server started it: a tied sibling's loser, which
// says nothing about its replica's latency, and must not keep the
// replica's estimate from decaying (WithEndpoints). False for a nil a.
func (a *tiedAttempt) unstarted(ctx context.Context) bool {
	return a != nil && ctx.Err() != nil && !a.started.Load()
}

// tiedRequest returns r listening for its attempt's start signal, which it
// reports to tailcut.AttemptStarted under ctx, the attempt's context.
func tiedRequest(ctx context.Context, r *http.Request) (*http.Request, *tiedAttempt) {
	a := new(tiedAttempt)
	trace := &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints && len(h[StartedHeader]) > 0 {
				a.started.Store(true)
				tailcut.AttemptStarted(ctx)
			}
			return nil
		},
	}
	return r.WithContext(httptrace.WithClientTrace(r.Context(), trace)), a
}
