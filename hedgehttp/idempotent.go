package hedgehttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [IdempotencyOptions].
const (
	// DefaultIdempotencyTTL is how long a stored response is replayed.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultLockTimeout is how long a copy waits for a first run.
	DefaultLockTimeout = 10 * time.Second
	// DefaultLockLease is the lease of a running request's lock.
	DefaultLockLease = 10 * time.Second
	// DefaultMaxStoredResponse is the largest response body stored.
	DefaultMaxStoredResponse = 1 << 20
	// DefaultMaxKeyedBody is the largest request body of a keyed request.
	DefaultMaxKeyedBody = 1 << 20
	// DefaultMaxBuffered bounds the bytes of keyed request bodies held in
	// memory at once, across requests.
	DefaultMaxBuffered = 64 << 20
)

// IdempotencyOptions configures the idempotency middleware. The zero value
// keeps responses 24 h, lets copies wait 10 s, stores responses up to
// 1 MiB, holds at most 64 MiB of keyed request bodies at once, and scopes
// keys by method and path only.
type IdempotencyOptions struct {
	// TTL is how long a stored response is replayed to requests with its
	// key. Zero means DefaultIdempotencyTTL (24 h). Must not be negative.
	TTL time.Duration

	// LockTimeout is how long a copy that finds its key's first run still
	// going waits for it; past it the copy gets 409 Conflict with
	// Retry-After. The copy's own context bounds the wait too. Zero means
	// DefaultLockTimeout (10 s). Must not be negative.
	LockTimeout time.Duration

	// LockLease is the lease of a running request's lock in the store; it
	// is renewed every LockLease/3 while the handler runs, so it only
	// matters when a server dies mid-run: its keys are then locked (copies
	// get 409) for at most LockLease. Zero means DefaultLockLease (10 s).
	// Must be 0 or at least 30 ms.
	LockLease time.Duration

	// MaxStoredResponse is the largest response body, in bytes, that is
	// stored. A larger response is sent to its client but not stored: its
	// key is only locked while it runs, and a copy that comes after runs
	// the handler again. Zero means DefaultMaxStoredResponse (1 MiB). Must
	// not be negative.
	MaxStoredResponse int64

	// MaxBody is the largest request body, in bytes, of a keyed request:
	// the body is read in full to fingerprint it before the handler runs.
	// A keyed request with a larger body gets 413 Content Too Large. Zero
	// means DefaultMaxKeyedBody (1 MiB). Must not be negative.
	MaxBody int64

	// MaxBuffered bounds the bytes of keyed request bodies held in memory
	// at once, across every keyed request (read, waiting for a first run,
	// or running): a keyed request whose body would go past it gets 503
	// with Retry-After, its body read no further, unrun. A body counts for
	// the buffer it has taken so far, which grows by doubling as its
	// bytes arrive (64 KiB at most to start, whatever length it declares):
	// a body trickling in holds about what has come. What the
	// middleware holds is
	// then at most MaxBuffered of bodies, plus up to MaxStoredResponse of
	// response per run, plus a fixed cost per request that
	// BenchmarkIdempotentHeld measures. Zero means DefaultMaxBuffered
	// (64 MiB), or MaxBody if that is larger. Must not be negative, and
	// not below MaxBody (a body of MaxBody bytes must fit).
	MaxBuffered int64

	// Scope, if set, returns the caller's scope (a tenant, an API key's
	// account, the service a virtual host names): keys of different
	// scopes never meet. It is called for every keyed request; derive it
	// from authenticated data, not from a header the caller can choose
	// freely. Nil means one scope for all. The host is not part of the
	// key by itself — a hedging client's copies of one request may reach
	// replicas under different host names — so a server that answers for
	// several services with one store puts the service in Scope.
	Scope func(r *http.Request) string

	// Methods are the methods whose keyed requests are made idempotent.
	// Nil means POST, PUT, PATCH and DELETE; safe methods are served as
	// they come, key or not.
	Methods []string

	// RetryAfter is the pause asked, in Retry-After (whole seconds, rounded
	// up), of a request refused with 409 (its first run still going) or 503
	// (the store cannot be reached). Zero means DefaultRetryAfter (1 s).
	// Must not be negative.
	RetryAfter time.Duration

	// Logger receives one line when the store starts failing and one when
	// it recovers, and a line for each response that could not be stored
	// at once and for each given up. Nil means slog.Default().
	Logger *slog.Logger
}

// Idempotent is middleware that runs each keyed write once: of the copies
// of a request carrying one Idempotency-Key (a client's retries, a hedging
// client's hedges), the first runs the next handler and every other copy
// gets its response — the same status, header and body, byte for byte —
// from a [Store] shared by the servers that may receive a copy. Hedging a
// POST then costs no duplicate side effects: a hedge that reaches a replica
// while the primary still runs there or elsewhere waits for the primary's
// answer instead of running it again.
//
// A request is keyed when its method is one of IdempotencyOptions.Methods
// (POST, PUT, PATCH, DELETE by default) and it carries an Idempotency-Key
// header (or X-Idempotency-Key) with one value of 1–255 bytes; an RFC 8941
// string ("abc", with quotes, as the IETF httpapi-idempotency-key draft
// writes it) is the same key as abc. A key is scoped by method, escaped
// path (without the query: /a%2Fb is not /a/b) and
// IdempotencyOptions.Scope: the same key under
// another method, path or scope is another key. Within its scope a key
// names one request, identified by its fingerprint, the SHA-256 of its
// raw query and its body (as Stripe compares parameters): a keyed
// request's body (at most MaxBody bytes; at most MaxBuffered across
// requests, past it 503) is read before the handler runs, and the handler
// reads it from memory, without GetBody (see below).
//
// What a keyed request gets:
//   - the key is new, or its last run failed: the handler runs, and its
//     response goes to the client as it is written (streaming works) and,
//     if it is worth keeping, into the store for TTL;
//   - the key's response is stored: the stored response, with the header
//     "Idempotent-Replayed: true" added (the only difference; the Date is
//     the first run's);
//   - the key's first run is still going: the copy waits for it, up to
//     LockTimeout and its own context, then gets its response; past
//     LockTimeout, 409 Conflict with Retry-After;
//   - the key was used with another query or body: 422 Unprocessable
//     Content, never the other request's answer;
//   - the store cannot be reached: 503 with Retry-After — fail closed, the
//     handler is not run without the guarantee; one log line when the
//     store starts failing, one when it answers again.
//
// A response that could not be stored when its run ended (the store went
// down mid-run) is not given up: its key stays locked in this process —
// copies that reach it get the response from memory, as a replay — while
// a background goroutine, one per Idempotent, stores it again with backoff
// (from 20 ms, doubling up to a second or LockLease/3), extending the
// store's lease meanwhile, until the store answers or TTL passes. So while
// the process lives no key runs twice. What remains is a lock whose holder
// is gone: the process died before the store took the response (the lock
// ends with its lease, then a copy runs again), or — for copies sent to
// other servers — the store was down longer than LockLease. What waits in
// memory is bounded by the runs going when the store failed: while it
// fails, no new run starts (Begin fails first). [Idempotent.Close] stops
// the retrying.
//
// Errors are application/problem+json (RFC 9457) with a title and a detail
// that say what happened.
//
// A keyed request whose body the client was too slow to send (a read
// error wrapping os.ErrDeadlineExceeded or a net.Error timeout) gets 408,
// any other body read error 400. The response kept has no hop-by-hop
// header (Connection and those it names, Keep-Alive, Transfer-Encoding,
// Upgrade, ...): a replay does not close its client's connection because
// the first answer's did.
//
// A response is kept unless its status is 5xx, 408, 425 or 429 (the request
// may not have been done), the handler panicked, the client went away
// before the handler wrote anything, or its body is larger than
// MaxStoredResponse; in all those cases the key is released at once and
// the next copy runs the handler again — a failure never poisons a key.
// So a handler that stops on r.Context().Done() should answer 5xx (or
// nothing) when it did not do the work, and anything else only when it did.
// A response larger than MaxStoredResponse is not stored: its key is locked
// only while it runs, and a copy that arrives after it ran runs again.
// Trailers are not stored. A response the handler finishes after its
// client went away is stored all the same (writes to the gone client are
// dropped, not failed, up to MaxStoredResponse), so the copies get it.
//
// A handler that cannot tell whether the work was done — a proxy that
// sent the request on and lost the answer: a timeout, a connection cut
// after the request was written, a body cut short — calls
// [MarkOutcomeUnknown]. From then on no outcome releases the key: what
// the handler answers is stored whatever its status, and a run that
// panics, ends without an answer or with one too large to store is
// recorded as a 502 problem ("Outcome unknown") that every copy gets for
// TTL. The key never runs twice; the client checks what happened and
// sends the write again under a new key if it was not done.
//
// The request the handler gets has no GetBody, but it keeps its
// Idempotency-Key header: net/http's Transport replays a request carrying
// that header by itself when a reused connection fails and the request
// has GetBody or no body — a keyed DELETE, or any request whose
// ContentLength is 0 (httputil.ReverseProxy then sends it with no body).
// A handler that forwards keyed writes sends them through [SendOnce], so
// that each reaches the next hop once.
//
// Requests that are not keyed pass through: a request without the header
// costs a header lookup or two and no allocation (BenchmarkIdempotent).
//
// Place it inside [Handler] (NewHandler(idem, …)), so that shed hedges never
// reach the store, and inside authentication, so that a 401 is never
// stored as a key's answer (4xx answers are kept: they are the result of
// the request as sent). An Idempotent is safe for concurrent use; call
// Close when done with it.
type Idempotent struct {
	next       http.Handler
	store      Store
	opts       IdempotencyOptions
	retryAfter string
	log        *slog.Logger
	retryMax   time.Duration // the retrier's largest pause

	down     atomic.Bool  // the store is failing: an episode is open
	buffered atomic.Int64 // bytes of keyed request bodies held now (MaxBuffered)
	stats    struct {
		runs, replays, waits, conflicts, mismatches, unavailable, notStored, canceled atomic.Int64
		overloaded, unknown                                                           atomic.Int64
		waiting                                                                       atomic.Int64
	}

	// The keys this process holds: their run is going, or their response
	// waits in pending to be stored. Copies that reach this process wait
	// for them here whatever the store says (its lock may have ended
	// with its lease while it was down).
	mu       sync.Mutex
	held     map[string]*holding
	pending  []*holding // oldest first, the retrier's queue
	retrying bool       // the retrier goroutine runs
	closed   bool
	ctx      context.Context // ends at Close: the retrier's store calls
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// holding is a key held by a run of this process.
type holding struct {
	key string
	// lock is the store's lock, under Idempotent.mu: its token changes
	// when a copy of this process takes the key again for it (the old
	// lock ended with its lease while the store was down).
	lock Lock
	done chan struct{} // closed when the run has answered or the key is let go
	// Set before done is closed, under Idempotent.mu.
	rec      *Record   // the response, if the run answered one worth keeping
	gone     bool      // no longer in Idempotent.held
	deadline time.Time // pending: give up storing at this time (the TTL's end)
}

var _ http.Handler = (*Idempotent)(nil)

// NewIdempotent returns middleware that makes next run once per keyed
// request, keeping state in store; a nil store means a new [MemoryStore]
// with default options. It returns an error, naming the field, for invalid
// options.
func NewIdempotent(next http.Handler, store Store, opts IdempotencyOptions) (*Idempotent, error) {
	switch {
	case next == nil:
		return nil, errors.New("hedgehttp: NewIdempotent: nil next handler")
	case opts.TTL < 0:
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.TTL must not be negative, got %v", opts.TTL)
	case opts.LockTimeout < 0:
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.LockTimeout must not be negative, got %v", opts.LockTimeout)
	case opts.LockLease != 0 && opts.LockLease < 30*time.Millisecond:
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.LockLease must be 0 or at least 30ms, got %v", opts.LockLease)
	case opts.MaxStoredResponse < 0:
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.MaxStoredResponse must not be negative, got %d", opts.MaxStoredResponse)
	case opts.MaxBody < 0:
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.MaxBody must not be negative, got %d", opts.MaxBody)
	case opts.MaxBuffered < 0:
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.MaxBuffered must not be negative, got %d", opts.MaxBuffered)
	case opts.RetryAfter < 0:
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.RetryAfter must not be negative, got %v", opts.RetryAfter)
	}
	for _, m := range opts.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t\r\n") {
			return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.Methods: invalid method %q (want an upper-case token such as \"POST\")", m)
		}
	}
	if store == nil {
		ms, err := NewMemoryStore(MemoryStoreOptions{})
		if err != nil {
			return nil, err
		}
		store = ms
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultIdempotencyTTL
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.LockLease == 0 {
		opts.LockLease = DefaultLockLease
	}
	if opts.MaxStoredResponse == 0 {
		opts.MaxStoredResponse = DefaultMaxStoredResponse
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = DefaultMaxKeyedBody
	}
	if opts.MaxBuffered == 0 {
		opts.MaxBuffered = max(DefaultMaxBuffered, opts.MaxBody)
	}
	if opts.MaxBuffered < opts.MaxBody {
		return nil, fmt.Errorf("hedgehttp: IdempotencyOptions.MaxBuffered (%d) must not be below MaxBody (%d)", opts.MaxBuffered, opts.MaxBody)
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	opts.Methods = slices.Clone(opts.Methods)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	secs := int64((opts.RetryAfter + time.Second - 1) / time.Second)
	h := &Idempotent{next: next, store: store, opts: opts, retryAfter: strconv.FormatInt(secs, 10), log: log,
		retryMax: min(time.Second, opts.LockLease/3), held: make(map[string]*holding)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h, nil
}

// Headers the middleware reads and writes.
const (
	// IdempotencyKeyHeader carries the key of a keyed request.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader marks a response replayed from the store.
	ReplayedHeader = "Idempotent-Replayed"
)

// maxKeyLen bounds an Idempotency-Key, as Stripe does.
const maxKeyLen = 255

// storeCallTimeout bounds the store calls made after the handler ran
// (Complete, Release), which run without the request's cancellation.
const storeCallTimeout = 5 * time.Second

// Poll backoff of a waiting copy: it doubles from pollMin up to pollMax.
const (
	pollMin = 2 * time.Millisecond
	pollMax = 100 * time.Millisecond
)

// ServeHTTP serves r, once per key. Requests that are not keyed take the
// fast path: no allocation.
func (h *Idempotent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.keyedMethod(r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	vs, ok := r.Header[IdempotencyKeyHeader]
	if !ok {
		if vs, ok = r.Header["X-Idempotency-Key"]; !ok {
			h.next.ServeHTTP(w, r)
			return
		}
	}
	h.serveKeyed(w, r, vs)
}

func (h *Idempotent) keyedMethod(m string) bool {
	if h.opts.Methods == nil {
		switch m {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			return true
		}
		return false
	}
	return slices.Contains(h.opts.Methods, m)
}

// serveKeyed serves a keyed request, whose key header has the values vs.
func (h *Idempotent) serveKeyed(w http.ResponseWriter, r *http.Request, vs []string) {
	ikey, ok := h.idempotencyKey(w, vs)
	if !ok {
		return
	}
	body, ok := h.readKeyedBody(w, r)
	defer h.buffered.Add(-int64(cap(body)))
	if !ok {
		return
	}
	k := keyedRequest{h: h, w: w, r: r, ctx: r.Context(), body: body, fp: fingerprint(r.URL.RawQuery, body), backoff: pollMin}
	scope := ""
	if h.opts.Scope != nil {
		scope = h.opts.Scope(r)
	}
	// The escaped path: with encoded slashes kept, /a%2Fb and /a/b are
	// different resources.
	k.key = storeKey(scope, r.Method, r.URL.EscapedPath(), ikey)
	k.lock = Lock{Token: newToken(), Fingerprint: k.fp, Lease: h.opts.LockLease}
	defer k.endWait()
	k.serve()
}

// idempotencyKey returns the key the header values vs carry, without the
// quotes of an RFC 8941 string, or answers 400 and reports false.
func (h *Idempotent) idempotencyKey(w http.ResponseWriter, vs []string) (string, bool) {
	if len(vs) != 1 {
		h.problem(w, http.StatusBadRequest, false, "Invalid Idempotency-Key", "The request must carry exactly one Idempotency-Key header.")
		return "", false
	}
	ikey := vs[0]
	if len(ikey) >= 2 && ikey[0] == '"' && ikey[len(ikey)-1] == '"' {
		ikey = ikey[1 : len(ikey)-1]
	}
	if ikey == "" || len(ikey) > maxKeyLen {
		h.problem(w, http.StatusBadRequest, false, "Invalid Idempotency-Key", "The Idempotency-Key must be 1 to 255 characters long.")
		return "", false
	}
	return ikey, true
}

// readKeyedBody reads a keyed request's body, to fingerprint it, counting
// the memory it takes in h.buffered (the caller takes cap(body) out when
// it is done with the request, also when ok is false), or answers 400
// (unreadable), 413 (larger than MaxBody) or 503 (MaxBuffered reached)
// and reports false. The buffer grows as bytes arrive, by doubling from
// 512 bytes, or from the declared length up to 64 KiB, up to the
// declared length while below it, each step counted before it is made:
// a body trickling in holds about what has come, not what it declares.
func (h *Idempotent) readKeyedBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	limit := h.opts.MaxBody
	if r.ContentLength > limit {
		h.tooLarge(w)
		return nil, false
	}
	size := int64(512)
	if r.ContentLength > 0 {
		size = min(r.ContentLength, firstBodyBuffer)
	}
	var err error
	for err == nil {
		if len(body) < cap(body) {
			var n int
			n, err = r.Body.Read(body[len(body):cap(body)])
			body = body[:len(body)+n]
			continue
		}
		// Full: look for the end before growing, so that a body of
		// declared length takes no more than its length.
		var one [1]byte
		if _, err = io.ReadFull(r.Body, one[:]); err != nil {
			continue
		}
		if int64(len(body)) >= limit {
			h.tooLarge(w)
			return body, false
		}
		size = max(size, 2*int64(cap(body)))
		if n := int64(cap(body)); n < r.ContentLength {
			size = min(size, r.ContentLength)
		}
		size = min(size, limit)
		if !h.reserve(size - int64(cap(body))) {
			h.stats.overloaded.Add(1)
			h.problem(w, http.StatusServiceUnavailable, true, "Too many keyed request bodies in memory",
				"The request was not processed: the server holds as many keyed request bodies as it may; retry later.")
			return body, false
		}
		body = append(append(make([]byte, 0, size), body...), one[0])
	}
	if err != io.EOF {
		h.unreadable(w, err)
		return body, false
	}
	return body, true
}

// firstBodyBuffer is the most a keyed body's buffer takes before bytes
// past it arrive, whatever length the request declares.
const firstBodyBuffer = 64 << 10

// unreadable answers a request whose body could not be read: 408 if the
// client was too slow to send it (a read deadline, such as a server's
// ReadTimeout or tailcut proxy's body_timeout, wrapping
// os.ErrDeadlineExceeded or a net.Error whose Timeout is true), else
// 400.
func (h *Idempotent) unreadable(w http.ResponseWriter, err error) {
	if ne := net.Error(nil); errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		// The rest of the body will not be read: the connection cannot
		// serve another request.
		w.Header().Set("Connection", "close")
		h.problem(w, http.StatusRequestTimeout, false, "Request body timed out", "The request body did not arrive in time: "+err.Error())
		return
	}
	h.problem(w, http.StatusBadRequest, false, "Unreadable request body", "The request body could not be read: "+err.Error())
}

// reserve counts n more bytes of bodies held, unless that would pass
// MaxBuffered.
func (h *Idempotent) reserve(n int64) bool {
	if h.buffered.Add(n) > h.opts.MaxBuffered {
		h.buffered.Add(-n)
		return false
	}
	return true
}

func (h *Idempotent) tooLarge(w http.ResponseWriter) {
	h.problem(w, http.StatusRequestEntityTooLarge, false, "Request body too large for an idempotent request",
		"A request with an Idempotency-Key may carry at most "+strconv.FormatInt(h.opts.MaxBody, 10)+" bytes.")
}

// keyedRequest is a keyed request on its way to an answer: it asks the store for
// its key until it runs the handler, replays the key's response, or is
// refused, waiting in between for the key's first run.
type keyedRequest struct {
	h    *Idempotent
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context // r's
	body []byte          // r's, read by readKeyedBody
	fp   Fingerprint
	key  string // the store's key
	lock Lock   // the lock this request takes in the store

	// The wait for the key's first run: the timers are made when the
	// request first waits, and waited says it counts in stats.waiting.
	timeout, poll *time.Timer
	backoff       time.Duration // the next poll's pause
	waited        bool
}

// keyedStep is what a keyed request does after it asked the store.
type keyedStep int

const (
	stepAnswered keyedStep = iota // the request has its answer
	stepAskAgain                  // ask the store again at once
	stepWait                      // wait for the key's first run, then ask again
)

// serve asks the store for the key, and waits, until the request has its
// answer.
func (k *keyedRequest) serve() {
	for {
		step, wake := k.claim()
		switch step {
		case stepAnswered:
			return
		case stepAskAgain:
			continue
		}
		if !k.wait(wake) {
			return
		}
	}
}

// claim asks the store for the key once and answers the request if that
// decides it. Otherwise it says whether to ask again at once or to wait,
// and what for: wake is closed when the key's first run may have ended
// (nil: only the poll tells).
func (k *keyedRequest) claim() (step keyedStep, wake <-chan struct{}) {
	wake, local, done := k.begin()
	if done {
		return stepAnswered, nil
	}
	if local == nil {
		return stepWait, wake
	}
	// A run of this process holds the key: its answer, or its end, comes
	// from memory without a poll.
	if local.lock.Fingerprint != k.fp {
		k.h.mismatch(k.w)
		return stepAnswered, nil
	}
	select {
	case <-local.done:
		if local.rec != nil { // its response, not stored yet
			k.h.stats.replays.Add(1)
			replay(k.w, local.rec)
			return stepAnswered, nil
		}
		return stepAskAgain, nil // let go without a response: ask the store again
	default:
	}
	return stepWait, local.done
}

// begin calls the store's Begin and answers the request when the result
// decides it (done). Otherwise the key's first run is going: wake is the
// store's signal of its end, if it gives one, and local the run's holding
// if it is a run of this process.
func (k *keyedRequest) begin() (wake <-chan struct{}, local *holding, done bool) {
	h := k.h
	claim, err := h.store.Begin(k.ctx, k.key, k.lock)
	if err != nil {
		if k.ctx.Err() != nil { // the client went away, not the store
			h.stats.canceled.Add(1)
			h.refuse(k.w)
			return nil, nil, true
		}
		h.storeFailed("Begin", err)
		if local = h.holder(k.key); local == nil {
			h.unavailable(k.w)
			return nil, nil, true
		}
		return nil, local, false
	}
	h.storeAnswered()
	switch claim.State {
	case ClaimCompleted:
		if claim.Record == nil {
			h.storeFailed("Begin", errors.New("completed claim without a record"))
			h.unavailable(k.w)
			return nil, nil, true
		}
		if claim.Record.Fingerprint != k.fp {
			h.mismatch(k.w)
			return nil, nil, true
		}
		h.stats.replays.Add(1)
		replay(k.w, claim.Record)
		return nil, nil, true
	case ClaimAcquired:
		return k.acquired()
	case ClaimInProgress:
		if claim.Fingerprint != k.fp {
			h.mismatch(k.w)
			return nil, nil, true
		}
		// A run of this process may hold it.
		return claim.Wake, h.holder(k.key), false
	default:
		h.storeFailed("Begin", fmt.Errorf("unknown claim state %v", claim.State))
		h.unavailable(k.w)
		return nil, nil, true
	}
}

// acquired runs the handler under the lock just taken in the store,
// unless a run of this process holds the key already: that run's holding
// is then returned, to wait for.
func (k *keyedRequest) acquired() (wake <-chan struct{}, local *holding, done bool) {
	h := k.h
	hd, holder := h.hold(k.key, k.lock)
	if hd != nil {
		if k.waited {
			h.stats.waiting.Add(-1)
			k.waited = false
		}
		st := &runState{}
		r2 := k.r.WithContext(context.WithValue(k.ctx, runStateKey{}, st))
		if k.body != nil {
			r2.Body = io.NopCloser(bytes.NewReader(k.body))
		}
		r2.GetBody = nil // see Idempotent: a keyed write goes on once
		h.run(k.w, r2, hd, st)
		return nil, nil, true
	}
	// A run of this process still holds the key (its lock ended with its
	// lease while the store was down): the lock just taken is now that
	// run's (hold gave it the token), and this copy waits for it.
	if holder == nil { // another request (query or body): the lock is not that run's
		h.release(k.ctx, k.key, k.lock.Token)
		h.mismatch(k.w)
		return nil, nil, true
	}
	return nil, holder, false
}

// wait waits for wake, the next poll (its pause doubling from pollMin up
// to pollMax), LockTimeout or the request's end. It reports false when the
// request got its answer, a 409, at LockTimeout or at its end.
func (k *keyedRequest) wait(wake <-chan struct{}) bool {
	h := k.h
	if !k.waited {
		k.waited = true
		h.stats.waits.Add(1)
		h.stats.waiting.Add(1)
		k.timeout = time.NewTimer(h.opts.LockTimeout)
		k.poll = time.NewTimer(k.backoff)
	} else {
		k.poll.Reset(k.backoff)
	}
	k.backoff = min(2*k.backoff, pollMax)
	select {
	case <-wake:
	case <-k.poll.C:
	case <-k.timeout.C:
		h.stats.conflicts.Add(1)
		h.problem(k.w, http.StatusConflict, true, "Request with this Idempotency-Key still in progress",
			"A request with the same Idempotency-Key is still being processed; retry later.")
		return false
	case <-k.ctx.Done():
		h.stats.canceled.Add(1)
		h.problem(k.w, http.StatusConflict, true, "Request with this Idempotency-Key still in progress",
			"A request with the same Idempotency-Key was still being processed when this one ended.")
		return false
	}
	k.poll.Stop() // Go ≥ 1.23: Reset after Stop never sees a stale tick
	return true
}

// endWait stops the wait's timers and takes the request out of
// stats.waiting, if it waited.
func (k *keyedRequest) endWait() {
	if k.timeout != nil {
		k.timeout.Stop()
		k.poll.Stop()
	}
	if k.waited {
		k.h.stats.waiting.Add(-1)
	}
}

// tokenPrefix makes lock tokens unique across processes (80 random bits);
// a counter makes them unique within one.
var (
	tokenPrefix = sync.OnceValue(func() string { return rand.Text()[:16] })
	tokenSeq    atomic.Uint64
)

// newToken returns a lock token never returned before, by any process.
func newToken() string {
	return tokenPrefix() + "-" + strconv.FormatUint(tokenSeq.Add(1), 36)
}

// fingerprint is the fingerprint of a keyed request with this raw query
// and body: the SHA-256 of the body alone when there is no query (the
// fingerprint keys stored before queries counted have, so that a retry
// after an upgrade, or a copy handled by an older replica sharing the
// store, still matches), else of the query length-prefixed and the body.
// A body-only and a query-and-body pair meet only when the body is the
// other's prefix, query and body: under one key, a client's own doing.
func fingerprint(query string, body []byte) Fingerprint {
	if query == "" {
		return sha256.Sum256(body)
	}
	hs := sha256.New()
	var n [binary.MaxVarintLen64]byte
	hs.Write(n[:binary.PutUvarint(n[:], uint64(len(query)))])
	_, _ = io.WriteString(hs, query) // a hash.Hash never fails to write
	hs.Write(body)
	var fp Fingerprint
	hs.Sum(fp[:0])
	return fp
}

// storeKey is the store's key of a keyed request: the hex SHA-256 of its
// parts, each length-prefixed so that no two tuples meet.
func storeKey(scope, method, path, ikey string) string {
	hs := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, s := range [...]string{scope, method, path, ikey} {
		hs.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		_, _ = io.WriteString(hs, s)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(hs.Sum(sum[:0]))
}

// runStateKey is the context key of a run's runState.
type runStateKey struct{}

// runState is what the handler of a run tells the middleware through its
// request's context.
type runState struct {
	unknown atomic.Bool // MarkOutcomeUnknown was called
}

// MarkOutcomeUnknown tells the [Idempotent] middleware running the request
// of ctx (a handler's r.Context(), or one derived from it) that the request
// may have taken effect whatever the handler answers: a proxy calls it
// when it sent the request on and lost the answer. The key is then never
// released for another run: the handler's answer is stored whatever its
// status, and a run that panics, ends without an answer or with one too
// large to store is recorded as a 502 problem ("Outcome unknown") that the
// copies get. It reports false, and does nothing, when ctx is not a keyed
// request's run.
func MarkOutcomeUnknown(ctx context.Context) bool {
	st, _ := ctx.Value(runStateKey{}).(*runState)
	if st == nil {
		return false
	}
	st.unknown.Store(true)
	return true
}

// run runs the handler for the request holding hd's key, then stores its
// response or releases the key (or, when st says the outcome is unknown,
// stores what stands for it).
func (h *Idempotent) run(w http.ResponseWriter, r *http.Request, hd *holding, st *runState) {
	h.stats.runs.Add(1)
	hb := h.startHeartbeat(hd)
	cw := &captureWriter{w: w, max: h.opts.MaxStoredResponse}
	done := false
	defer func() {
		hb.stop()
		if !done { // the handler panicked: settle the key, let the panic go on
			h.fail(r, hd, st, nil)
		}
	}()
	h.next.ServeHTTP(cw, r)
	done = true
	hb.stop()

	if cw.status == 0 {
		if r.Context().Err() != nil { // abandoned before a word was written
			h.fail(r, hd, st, nil)
			return
		}
		cw.WriteHeader(http.StatusOK) // what net/http would send
	}
	rec := &Record{Status: cw.status, Header: cw.header, Body: cw.buf, Fingerprint: hd.lock.Fingerprint}
	switch {
	case cw.overflow:
		h.stats.notStored.Add(1)
		h.fail(r, hd, st, nil)
	case !keepStatus(cw.status):
		h.fail(r, hd, st, rec)
	default:
		h.keep(r, hd, rec)
	}
}

// fail ends a run that gave no response worth keeping: rec, the response
// it gave if it was complete, or nil. The key is released, so that a
// copy runs again, unless the handler marked the outcome unknown: then
// rec is stored, or, without one, an "Outcome unknown" problem.
func (h *Idempotent) fail(r *http.Request, hd *holding, st *runState, rec *Record) {
	if !st.unknown.Load() {
		h.release(r.Context(), hd.key, h.letGo(hd))
		return
	}
	h.stats.unknown.Add(1)
	if rec == nil {
		rec = unknownRecord(hd.lock.Fingerprint)
	}
	h.log.Warn("hedgehttp: outcome of a keyed request unknown; its key is not run again",
		"method", r.Method, "path", r.URL.Path, "status", rec.Status)
	h.keep(r, hd, rec)
}

// unknownRecord is the response stored for a run whose outcome is
// unknown and that gave no complete response.
func unknownRecord(fp Fingerprint) *Record {
	b, _ := json.Marshal(problemBody{"about:blank", "Outcome unknown", http.StatusBadGateway,
		"A request with this Idempotency-Key was processed and no complete answer came back: it may have taken effect, so it is not run again. " +
			"Check whether it took effect; send it with a new Idempotency-Key if it did not."})
	return &Record{Status: http.StatusBadGateway, Header: http.Header{
		"Content-Type":           {"application/problem+json"},
		"X-Content-Type-Options": {"nosniff"},
		"Date":                   {time.Now().UTC().Format(http.TimeFormat)},
	}, Body: append(b, '\n'), Fingerprint: fp}
}

// keep makes rec the answer of hd's key: copies that reach this process
// replay it at once, and it is stored, or stored again later while the
// store fails.
func (h *Idempotent) keep(r *http.Request, hd *holding, rec *Record) {
	h.answered(hd, rec) // copies that reach this process replay it from now on
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), storeCallTimeout)
	defer cancel()
	err := h.withToken(hd, func(token string) error { return h.store.Complete(ctx, hd.key, token, rec, h.opts.TTL) })
	switch {
	case err == nil:
		h.storeAnswered()
		h.letGo(hd)
	case errors.Is(err, ErrLockLost):
		h.stats.notStored.Add(1)
		h.letGo(hd)
		h.log.Warn("hedgehttp: idempotency lock lost before the response was stored; a copy may run again",
			"method", r.Method, "path", r.URL.Path, "status", rec.Status)
	default:
		h.storeFailed("Complete", err)
		if h.storeLater(hd, time.Now().Add(h.opts.TTL)) {
			h.log.Warn("hedgehttp: response not stored yet; its key stays locked and it is stored again until the store answers",
				"method", r.Method, "path", r.URL.Path, "status", rec.Status, "err", err)
			return
		}
		h.stats.notStored.Add(1)
		h.letGo(hd)
		h.log.Error("hedgehttp: response not stored (the middleware is closed); its key stays locked until the lease ends, then a copy runs again",
			"method", r.Method, "path", r.URL.Path, "status", rec.Status, "err", err)
	}
}

// holder returns the holding of key, or nil if no run of this process
// holds it.
func (h *Idempotent) holder(key string) *holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[key]
}

// hold records that this process holds key with lock, just acquired in
// the store, and returns the new holding. If a run of this process holds
// key already (the store's lock of that run ended with its lease), it
// returns that one instead, as holder, and gives it lock's token: the
// store's lock is that run's from now on. A holder with another
// fingerprint is not given the lock: both results are nil.
func (h *Idempotent) hold(key string, lock Lock) (hd, holder *holding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.held[key]; old != nil {
		if old.lock.Fingerprint != lock.Fingerprint {
			return nil, nil
		}
		old.lock.Token = lock.Token
		return nil, old
	}
	hd = &holding{key: key, lock: lock, done: make(chan struct{})}
	h.held[key] = hd
	return hd, nil
}

// lockOf returns hd's lock as it is now.
func (h *Idempotent) lockOf(hd *holding) Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	return hd.lock
}

// withToken calls op with the token of hd's lock, and again if op found
// the lock lost because a copy of this process took the key over for hd
// meanwhile (the token changed).
func (h *Idempotent) withToken(hd *holding, op func(token string) error) error {
	for {
		tok := h.lockOf(hd).Token
		err := op(tok)
		if !errors.Is(err, ErrLockLost) || h.lockOf(hd).Token == tok {
			return err
		}
	}
}

// answered sets the response of hd's run, which copies that reach this
// process replay.
func (h *Idempotent) answered(hd *holding, rec *Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd.rec = rec
	close(hd.done)
}

// letGo ends hd: the key is no longer held by this process. It returns
// the token of hd's last lock (for a Release: no copy can take the lock
// over once hd is gone). It may be called more than once.
func (h *Idempotent) letGo(hd *holding) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !hd.gone {
		hd.gone = true
		delete(h.held, hd.key)
		if hd.rec == nil {
			close(hd.done)
		}
	}
	return hd.lock.Token
}

// Backoff of the retrier: from retryMin, doubling up to h.retryMax.
const retryMin = 20 * time.Millisecond

// storeLater queues hd, whose response the store did not take, for the
// retrier, which stores it until deadline. It reports false, and queues
// nothing, once the middleware is closed.
func (h *Idempotent) storeLater(hd *holding, deadline time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	hd.deadline = deadline
	h.pending = append(h.pending, hd)
	if !h.retrying {
		h.retrying = true
		h.wg.Add(1)
		go h.retry()
	}
	return true
}

// retry is the retrier: one goroutine, while responses wait to be stored.
// Each round tries every pending response, oldest first, and stops at the
// first one for which the store cannot be asked at all (it is down: one
// probe per round is enough); after a round that left any, it pauses.
func (h *Idempotent) retry() {
	defer h.wg.Done()
	pause := retryMin
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		h.mu.Lock()
		h.pending = slices.DeleteFunc(h.pending, func(hd *holding) bool { return hd.gone })
		batch := slices.Clone(h.pending)
		if len(batch) == 0 || h.closed {
			h.retrying = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		left := false
		for _, hd := range batch {
			reached, stored := h.storePending(hd)
			left = left || !stored
			if !reached {
				break
			}
		}
		if !left {
			pause = retryMin
			continue
		}
		if t == nil {
			t = time.NewTimer(pause)
		} else {
			t.Reset(pause)
		}
		select {
		case <-t.C:
		case <-h.ctx.Done():
		}
		pause = min(2*pause, h.retryMax)
	}
}

// storePending tries to store hd's response once. It reports whether the
// store answered (the response was stored, refused, or at least its lease
// extended) and whether hd is settled (stored, or given up).
func (h *Idempotent) storePending(hd *holding) (reached, settled bool) {
	now := time.Now()
	if !now.Before(hd.deadline) {
		h.stats.notStored.Add(1)
		h.letGo(hd)
		h.log.Error("hedgehttp: response not stored before its TTL passed; a copy runs again", "status", hd.rec.Status)
		return true, true
	}
	ctx, cancel := context.WithTimeout(h.ctx, storeCallTimeout)
	defer cancel()
	err := h.withToken(hd, func(token string) error {
		return h.store.Complete(ctx, hd.key, token, hd.rec, hd.deadline.Sub(now))
	})
	switch {
	case err == nil:
		h.storeAnswered()
		h.letGo(hd)
		return true, true
	case errors.Is(err, ErrLockLost):
		h.stats.notStored.Add(1)
		h.letGo(hd)
		h.log.Warn("hedgehttp: idempotency key taken by another request before the response was stored; it may run again",
			"status", hd.rec.Status)
		return true, true
	case h.ctx.Err() != nil:
		return false, false
	}
	h.storeFailed("Complete", err)
	// Keep the lease alive: a store that refuses the record (out of
	// memory) may still extend the lock.
	if err := h.store.Extend(ctx, hd.key, h.lockOf(hd)); err != nil && !errors.Is(err, ErrLockLost) {
		return false, false
	}
	return true, false
}

// Close stops the retrying of responses that could not be stored yet and
// waits for the retrier to end. It does not close the Store, and the
// middleware serves requests after it as before, except that a response
// the store does not take is then given up at once. A response given up
// leaves its key locked until the lease ends, then a copy runs again: the
// same as if the process had died. Close may be called more than once; it
// returns nil.
func (h *Idempotent) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	left := slices.DeleteFunc(h.pending, func(hd *holding) bool { return hd.gone })
	h.pending = nil
	h.mu.Unlock()
	for _, hd := range left {
		h.stats.notStored.Add(1)
		h.letGo(hd)
	}
	if len(left) > 0 {
		h.log.Error("hedgehttp: idempotency middleware closed with responses not stored; their keys run again once their leases end",
			"responses", len(left))
	}
	return nil
}

// keepStatus reports whether a response with this final status is stored:
// not one that says the request may not have been done.
func keepStatus(status int) bool {
	switch {
	case status < 200 || status >= 500:
		return false
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return false
	}
	return true
}

func (h *Idempotent) release(ctx context.Context, key, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	if err := h.store.Release(ctx, key, token); err != nil && !errors.Is(err, ErrLockLost) {
		h.storeFailed("Release", err)
		return
	}
	h.storeAnswered()
}

// replay writes a stored response.
func replay(w http.ResponseWriter, rec *Record) {
	hd := w.Header()
	for k, v := range rec.Header {
		hd[k] = slices.Clone(v)
	}
	hd.Set(ReplayedHeader, "true")
	if _, ok := rec.Header["Content-Length"]; !ok && bodyAllowed(rec.Status) {
		hd.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Body)
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// storeFailed opens a failure episode, logging once.
func (h *Idempotent) storeFailed(op string, err error) {
	if !h.down.Load() && h.down.CompareAndSwap(false, true) {
		h.log.Error("hedgehttp: idempotency store failing; keyed requests get 503 until it answers again",
			"op", op, "err", err)
	}
}

// storeAnswered closes a failure episode, logging once.
func (h *Idempotent) storeAnswered() {
	if h.down.Load() && h.down.CompareAndSwap(true, false) {
		h.log.Info("hedgehttp: idempotency store answers again")
	}
}

func (h *Idempotent) unavailable(w http.ResponseWriter) {
	h.stats.unavailable.Add(1)
	h.refuse(w)
}

// refuse answers 503: the key could not be checked.
func (h *Idempotent) refuse(w http.ResponseWriter) {
	h.problem(w, http.StatusServiceUnavailable, true, "Idempotency store unavailable",
		"The request was not processed: its Idempotency-Key cannot be checked now; retry later.")
}

func (h *Idempotent) mismatch(w http.ResponseWriter) {
	h.stats.mismatches.Add(1)
	h.problem(w, http.StatusUnprocessableEntity, false, "Idempotency-Key is already used",
		"This Idempotency-Key was used with a different request (query or body); a key must not be reused across different requests.")
}

// problem writes an RFC 9457 problem (application/problem+json).
func (h *Idempotent) problem(w http.ResponseWriter, status int, retry bool, title, detail string) {
	hd := w.Header()
	if retry {
		hd.Set("Retry-After", h.retryAfter)
	}
	hd.Set("Content-Type", "application/problem+json")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	b, _ := json.Marshal(problemBody{"about:blank", title, status, detail})
	_, _ = w.Write(append(b, '\n'))
}

// problemBody is an RFC 9457 problem.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// IdempotencyStats are an [Idempotent]'s counters, from [Idempotent.Stats].
type IdempotencyStats struct {
	// Runs counts keyed requests that ran the handler.
	Runs int64
	// Replays counts keyed requests answered from the store.
	Replays int64
	// Waits counts keyed requests that found their key's first run going
	// and waited for it (they then count in Replays, Runs, Conflicts or
	// Canceled).
	Waits int64
	// Waiting is the number of copies waiting now.
	Waiting int64
	// Conflicts counts 409 answers to copies still waiting at LockTimeout.
	Conflicts int64
	// Mismatches counts 422 answers: a key reused with another query or
	// body.
	Mismatches int64
	// Unavailable counts 503 answers: the store could not be asked.
	Unavailable int64
	// Canceled counts keyed requests whose own context ended (their
	// client went away, a hedge lost) before the store answered or while
	// they waited: neither Unavailable nor Conflicts.
	Canceled int64
	// Pending is the number of responses waiting now to be stored again
	// (the store did not take them when their run ended).
	Pending int64
	// NotStored counts responses worth keeping that were never stored:
	// too large, the key taken by another request, given up at the TTL's
	// end or at Close.
	NotStored int64
	// Overloaded counts 503 answers to keyed requests refused because
	// MaxBuffered bytes of bodies were held.
	Overloaded int64
	// Unknown counts runs whose handler marked the outcome unknown
	// ([MarkOutcomeUnknown]) and that ended without a response worth
	// keeping: their key keeps what they answered, or a 502 "Outcome
	// unknown", instead of running again.
	Unknown int64
}

// Stats returns a snapshot of the counters, each read atomically.
func (h *Idempotent) Stats() IdempotencyStats {
	s := &h.stats
	h.mu.Lock()
	pending := 0
	for _, hd := range h.pending {
		if !hd.gone {
			pending++
		}
	}
	h.mu.Unlock()
	return IdempotencyStats{
		Runs: s.runs.Load(), Replays: s.replays.Load(), Waits: s.waits.Load(), Waiting: s.waiting.Load(),
		Conflicts: s.conflicts.Load(), Mismatches: s.mismatches.Load(), Unavailable: s.unavailable.Load(),
		Canceled: s.canceled.Load(), Pending: int64(pending), NotStored: s.notStored.Load(),
		Overloaded: s.overloaded.Load(), Unknown: s.unknown.Load(),
	}
}

// heartbeat extends a running request's lock every lease/3, and takes
// the key again if the lock ended meanwhile (the store was down longer
// than the lease) and no one else took it.
type heartbeat struct {
	h       *Idempotent
	hd      *holding
	mu      sync.Mutex
	stopped bool
	t       *time.Timer
	wg      sync.WaitGroup
	lost    bool
}

func (h *Idempotent) startHeartbeat(hd *holding) *heartbeat {
	hb := &heartbeat{h: h, hd: hd}
	hb.mu.Lock() // a first beat waits for hb.t to be set
	hb.t = time.AfterFunc(hd.lock.Lease/3, hb.beat)
	hb.mu.Unlock()
	return hb
}

func (hb *heartbeat) beat() {
	hb.mu.Lock()
	if hb.stopped {
		hb.mu.Unlock()
		return
	}
	hb.wg.Add(1)
	hb.mu.Unlock()
	defer hb.wg.Done()

	h, key, lock := hb.h, hb.hd.key, hb.h.lockOf(hb.hd)
	ctx, cancel := context.WithTimeout(context.Background(), lock.Lease/3)
	defer cancel()
	err := h.store.Extend(ctx, key, lock)
	if errors.Is(err, ErrLockLost) {
		var c Claim
		if c, err = h.store.Begin(ctx, key, lock); err == nil && c.State != ClaimAcquired {
			err = ErrLockLost
		}
	}
	switch {
	case err == nil:
		h.storeAnswered()
	case errors.Is(err, ErrLockLost):
		if !hb.lost && h.lockOf(hb.hd).Token == lock.Token {
			hb.lost = true
			h.log.Warn("hedgehttp: idempotency lock lost while the request ran (lease passed); a copy may run again")
		}
	default:
		h.storeFailed("Extend", err)
	}
	hb.mu.Lock()
	if !hb.stopped {
		hb.t.Reset(lock.Lease / 3)
	}
	hb.mu.Unlock()
}

// stop stops the heartbeat and waits for a beat in progress. It may be
// called more than once.
func (hb *heartbeat) stop() {
	hb.mu.Lock()
	hb.stopped = true
	hb.t.Stop()
	hb.mu.Unlock()
	hb.wg.Wait()
}

// captureWriter passes a response through to the client and keeps a copy
// of its status, header and body (up to max bytes). Once a write to the
// client fails (it went away), the rest is only kept: the handler's writes
// succeed while the copy may still be stored, so that a handler that
// stops at a write error (httputil.ReverseProxy) finishes the answer the
// copies will get.
type captureWriter struct {
	w        http.ResponseWriter
	max      int64
	status   int
	header   http.Header
	buf      []byte
	overflow bool
	gone     bool // a write to the client failed
}

func (c *captureWriter) Header() http.Header { return c.w.Header() }

func (c *captureWriter) WriteHeader(status int) {
	if c.status != 0 {
		c.w.WriteHeader(status) // superfluous: let net/http say so
		return
	}
	if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		c.w.WriteHeader(status) // informational: not the response
		return
	}
	hd := c.w.Header()
	if _, ok := hd["Date"]; !ok {
		// Fix the Date now, so that replays carry the first answer's.
		hd.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	c.status = status
	c.header = hd.Clone()
	dropHopHeaders(c.header)
	c.w.WriteHeader(status)
}

// dropHopHeaders removes from h, a header about to be stored, the
// hop-by-hop fields (RFC 9110 §7.6.1): Connection, the fields it names,
// Keep-Alive, Proxy-Connection, TE, Transfer-Encoding and Upgrade. They
// describe the connection the first answer went out on (a server closing
// it after a request), not the answer that replays repeat.
func dropHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, f := range [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Transfer-Encoding", "Upgrade"} {
		h.Del(f)
	}
}

func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.overflow {
		if int64(len(c.buf)+len(p)) > c.max {
			c.overflow, c.buf = true, nil
		} else {
			c.buf = append(c.buf, p...)
		}
	}
	if c.gone {
		if c.overflow {
			return 0, errClientGone
		}
		return len(p), nil
	}
	n, err := c.w.Write(p)
	if err != nil && !c.overflow && !handlerError(err) {
		c.gone = true
		return len(p), nil
	}
	return n, err
}

// handlerError reports whether err, from a ResponseWriter's Write, is the
// handler's mistake (a body where none is allowed, more than the declared
// Content-Length, a hijacked connection) rather than a client gone.
func handlerError(err error) bool {
	return errors.Is(err, http.ErrBodyNotAllowed) || errors.Is(err, http.ErrContentLength) || errors.Is(err, http.ErrHijacked)
}

// errClientGone is the error of a write to a client that went away, once
// the response is no longer kept.
var errClientGone = errors.New("hedgehttp: the client went away")

// Flush flushes the response to the client, if the writer underneath can.
func (c *captureWriter) Flush() {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.gone {
		_ = http.NewResponseController(c.w).Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.w }
