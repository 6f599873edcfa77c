package hedgehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
)

// DefaultRetryAfter is the pause a [Handler] asks of the clients whose
// requests it sheds, when HandlerOptions.RetryAfter is zero.
const DefaultRetryAfter = time.Second

// Load is a server's own judgement of its load, returned by
// HandlerOptions.Load.
type Load uint8

const (
	// LoadNormal sheds nothing.
	LoadNormal Load = iota
	// LoadHigh sheds hedges: they are extra work by definition, and the
	// primary each of them backs up is still running.
	LoadHigh
	// LoadCritical sheds every request, primaries included.
	LoadCritical
)

// HandlerOptions configures a [Handler]. The zero value counts requests and
// sheds nothing.
type HandlerOptions struct {
	// HedgeLimit sheds hedges (requests with Hedge-Attempt ≥ 1) while more
	// than HedgeLimit requests of every kind, this one included, are in
	// the handler. Zero means no limit. Must not be negative.
	HedgeLimit int

	// HardLimit sheds every request, primaries included, while more than
	// HardLimit requests are in the handler. Zero means no limit. Must not
	// be negative, and must be at least HedgeLimit when both are set, so
	// that hedges always go first.
	HardLimit int

	// Load, if set, is the server's own load signal (CPU, queue depth, a
	// dependency's health): LoadHigh sheds hedges, LoadCritical sheds
	// primaries too. It is called once per request, concurrently, before
	// the in-flight limits are checked; it must be fast.
	Load func(r *http.Request) Load

	// RetryAfter is the pause asked of a client whose request was shed,
	// sent as Retry-After in whole seconds (rounded up; RFC 9110 has no
	// finer unit). Zero means DefaultRetryAfter (1 s). A tailcut client
	// pauses its hedges to this server for that long; its primaries are
	// not affected. Must not be negative.
	RetryAfter time.Duration

	// ShedStatus is the status of a shed hedge. Zero means 429 Too Many
	// Requests. A shed primary always gets 503 Service Unavailable: a
	// tailcut client (and most retrying clients) then sends its next
	// attempt at once, to another replica. Must be 429 or 503 when set.
	ShedStatus int

	// NoChainStop leaves the context of a hedge unmarked, so that the
	// calls its handler makes downstream are hedged again. By default a
	// hedge's context carries tailcut.WithChainStop: the handler's calls
	// through a [Transport] (or tailcut.Do, or a hedgegrpc client) go
	// once, their hedges counted as denied (tailcut.DenyChained), and
	// each pays a token of its policy's budget (tailcut.Policy.BeginChained),
	// so that in a chain of hedging services the hedges of one hop are
	// not hedged again at the next, and the hops' hedges together stay
	// within one budget.
	NoChainStop bool
}

// Handler is the server side of hedging: middleware that tells hedges from
// primaries by their Hedge-Attempt header, counts both, puts the attempt
// index in the request's context ([AttemptFromContext]), marks a hedge's
// context so that the calls it makes are not hedged again (chain stop:
// tailcut.WithChainStop, HandlerOptions.NoChainStop), and under
// overload sheds hedges before it ever sheds a primary.
//
// A request is a hedge when it carries "Hedge-Attempt: k" with k ≥ 1
// (hedgehttp and hedgegrpc clients, and `tailcut proxy`, send it). A
// missing or malformed header counts as a primary, so a bad header can
// never get a request shed as a hedge. A shed request gets a short answer
// with Retry-After; a tailcut client pauses its hedges when it sees one,
// and the primary the shed hedge backed up keeps running.
//
// Hedging only frees a server if the server stops the work of the losers:
// a client cancels every attempt but the winner, and net/http then cancels
// the loser's r.Context(). Handlers should pass r.Context() to everything
// they call and return when it is done (see the Handler example);
// [HandlerStats] counts the requests whose client had gone by the time
// their handler returned.
//
// A Handler is safe for concurrent use. On the path that sheds nothing it
// adds two allocations (the context value and the request copy that
// carries it) to a request, and one more to a hedge (the chain-stop
// mark); BenchmarkHandler measures its cost.
type Handler struct {
	next       http.Handler
	opts       HandlerOptions
	retryAfter string

	inflight atomic.Int64
	kinds    [2]handlerCounters // primary, hedge
}

type handlerCounters struct {
	served, shed, canceled atomic.Int64
	inflight               atomic.Int64
	nanos                  atomic.Int64
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler that serves requests with next under opts.
// It returns an error, naming the field, for invalid options.
func NewHandler(next http.Handler, opts HandlerOptions) (*Handler, error) {
	switch {
	case next == nil:
		return nil, errors.New("hedgehttp: NewHandler: nil next handler")
	case opts.HedgeLimit < 0:
		return nil, fmt.Errorf("hedgehttp: HandlerOptions.HedgeLimit must not be negative, got %d", opts.HedgeLimit)
	case opts.HardLimit < 0:
		return nil, fmt.Errorf("hedgehttp: HandlerOptions.HardLimit must not be negative, got %d", opts.HardLimit)
	case opts.HardLimit > 0 && opts.HedgeLimit > opts.HardLimit:
		return nil, fmt.Errorf("hedgehttp: HandlerOptions.HardLimit (%d) must be at least HedgeLimit (%d): hedges are shed first", opts.HardLimit, opts.HedgeLimit)
	case opts.RetryAfter < 0:
		return nil, fmt.Errorf("hedgehttp: HandlerOptions.RetryAfter must not be negative, got %v", opts.RetryAfter)
	case opts.ShedStatus != 0 && opts.ShedStatus != http.StatusTooManyRequests && opts.ShedStatus != http.StatusServiceUnavailable:
		return nil, fmt.Errorf("hedgehttp: HandlerOptions.ShedStatus must be 429 or 503, got %d", opts.ShedStatus)
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.ShedStatus == 0 {
		opts.ShedStatus = http.StatusTooManyRequests
	}
	secs := int64((opts.RetryAfter + time.Second - 1) / time.Second)
	return &Handler{next: next, opts: opts, retryAfter: strconv.FormatInt(secs, 10)}, nil
}

// handlerCtxKey is the context key of the attempt index.
type handlerCtxKey struct{}

// AttemptFromContext returns the attempt index of the request being served,
// from the context of a request that passed through a [Handler]: 0 for a
// primary (or a request from a client that does not hedge), k ≥ 1 for the
// k-th hedge. ok is false outside a Handler.
func AttemptFromContext(ctx context.Context) (k int, ok bool) {
	k, ok = ctx.Value(handlerCtxKey{}).(int)
	return k, ok
}

// ParseAttempt returns the attempt index carried by a request's
// Hedge-Attempt header: k for "k" (decimal, 0 ≤ k ≤ 1,000,000), and 0 — a
// primary — when the header is missing, repeated or malformed.
func ParseAttempt(h http.Header) int {
	v := h[AttemptHeader]
	if len(v) != 1 {
		return 0
	}
	s := v[0]
	if s == "" || len(s) > 7 {
		return 0
	}
	k := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		k = k*10 + int(c-'0')
	}
	if k > 1_000_000 {
		return 0
	}
	return k
}

// ServeHTTP serves r with the next handler, or sheds it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := ParseAttempt(r.Header)
	kind := 0
	if k > 0 {
		kind = 1
	}
	c := &h.kinds[kind]
	n := h.inflight.Add(1)
	defer h.inflight.Add(-1)

	load := LoadNormal
	if h.opts.Load != nil {
		load = h.opts.Load(r)
	}
	switch {
	case load >= LoadCritical,
		h.opts.HardLimit > 0 && n > int64(h.opts.HardLimit):
		h.shed(w, c, kind)
		return
	case kind == 1 && (load >= LoadHigh || h.opts.HedgeLimit > 0 && n > int64(h.opts.HedgeLimit)):
		h.shed(w, c, kind)
		return
	}

	ctx := context.WithValue(r.Context(), handlerCtxKey{}, k)
	if kind == 1 && !h.opts.NoChainStop {
		ctx = tailcut.WithChainStop(ctx)
	}
	c.inflight.Add(1)
	start := time.Now()
	h.next.ServeHTTP(w, r.WithContext(ctx))
	c.nanos.Add(int64(time.Since(start)))
	c.inflight.Add(-1)
	c.served.Add(1)
	if ctx.Err() != nil {
		c.canceled.Add(1)
	}
}

// shed answers a request the handler will not serve.
func (h *Handler) shed(w http.ResponseWriter, c *handlerCounters, kind int) {
	c.shed.Add(1)
	status := http.StatusServiceUnavailable
	msg := "hedgehttp: overloaded, request shed\n"
	if kind == 1 {
		status = h.opts.ShedStatus
		msg = "hedgehttp: overloaded, hedge shed\n"
	}
	hd := w.Header()
	hd.Set("Retry-After", h.retryAfter)
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg))
}

// HandlerStats are a [Handler]'s counters, from [Handler.Stats].
type HandlerStats struct {
	// Primary counts primaries: requests with Hedge-Attempt: 0 or none.
	Primary HandlerCounts
	// Hedge counts hedges: requests with Hedge-Attempt ≥ 1.
	Hedge HandlerCounts
	// Inflight is the number of requests in the handler now, the figure
	// the limits are checked against (shed requests count while they are
	// answered).
	Inflight int64
}

// HandlerCounts are the counters of one kind of request.
type HandlerCounts struct {
	// Served counts the requests passed to the next handler that have
	// returned.
	Served int64
	// Shed counts the requests answered with 429 or 503 and Retry-After.
	Shed int64
	// Canceled counts the served requests whose context was done by the
	// time the next handler returned: mostly hedging's losers, cancelled
	// by the client. Their work was wasted unless the handler stopped
	// early on r.Context().Done().
	Canceled int64
	// Inflight is the number of requests of this kind in the next handler
	// now.
	Inflight int64
	// Time is the total time the next handler spent on the served
	// requests; Time ÷ Served is the mean.
	Time time.Duration
}

// Stats returns a snapshot of the handler's counters, each read atomically.
func (h *Handler) Stats() HandlerStats {
	load := func(c *handlerCounters) HandlerCounts {
		return HandlerCounts{
			Served:   c.served.Load(),
			Shed:     c.shed.Load(),
			Canceled: c.canceled.Load(),
			Inflight: c.inflight.Load(),
			Time:     time.Duration(c.nanos.Load()),
		}
	}
	return HandlerStats{Primary: load(&h.kinds[0]), Hedge: load(&h.kinds[1]), Inflight: h.inflight.Load()}
}
