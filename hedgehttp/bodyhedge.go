package hedgehttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// BodyHedge configures [WithBodyHedge]. Its zero value is the defaults.
type BodyHedge struct {
	// MinSize is the smallest declared body length watched. Zero means
	// [DefaultBodyHedgeMinSize].
	MinSize int64
	// MinStall is the shortest stall that sends a Range hedge, however
	// fast the key's bodies usually arrive. Zero means
	// [DefaultBodyHedgeMinStall].
	MinStall time.Duration
	// MaxStall caps the learned stall bound, and is the bound of a key
	// that has not learned one yet (fewer than [BodyMinBlocks] blocks in
	// the policy's Window). Zero means [DefaultBodyHedgeMaxStall].
	MaxStall time.Duration
	// Quantile and Multiple set the learned bound: Multiple × the
	// Quantile of the time the key's bodies took to deliver a block of
	// [BodyBlock] bytes. Zero means 0.999 and 4: a 16 MiB body is 512
	// blocks, so a per-block quantile must be high for the bound to be
	// passed by few bodies that are not stalled.
	Quantile, Multiple float64
	// AssumeRanges watches the bodies of servers that do not send
	// Accept-Ranges: bytes. Their Range answers are checked all the
	// same: one that is not the requested range of the same object
	// version is dropped.
	AssumeRanges bool
}

// Defaults of [BodyHedge].
const (
	DefaultBodyHedgeMinSize  = 256 << 10
	DefaultBodyHedgeMinStall = 10 * time.Millisecond
	DefaultBodyHedgeMaxStall = time.Second
)

// BodyBlock is the unit of body progress [WithBodyHedge] measures: the
// time a body takes to deliver BodyBlock bytes (counting only the time
// the reader waited in Read, not the time the caller spent between
// reads) is the sample the stall bound is learned from, and a body that
// takes longer than the bound to deliver one block — no byte at all, or
// a trickle — is stalled.
const BodyBlock = 32 << 10

// BodyMinBlocks is how many blocks of [BodyBlock] bytes a key's bodies
// must have delivered before its stall bound is learned (2 MiB).
const BodyMinBlocks = 64

// WithBodyHedge makes a response body that stalls mid-way race a Range
// request for the rest of it. It watches the body of an answer to a GET
// whose declared length is at least MinSize, with no Content-Encoding and
// a strong ETag or a Last-Modified: a 200 with Accept-Ranges: bytes
// (unless AssumeRanges), or a 206 of a single range (a caller's own Range
// request, as S3 clients send for parts of an object). The reader learns,
// per key, how long a block of [BodyBlock] bytes takes to arrive, apart
// from the first-byte time the policy learns; when one takes longer than
// Multiple × its Quantile (between MinStall and MaxStall) while the caller
// waits in Read, and the policy's budget grants a token, the Transport
// sends "Range: bytes=N-" from the last byte received (N-M within a
// caller's range N0-M), pinned to the object version by If-Match and
// If-Range (the ETag, or else Last-Modified with If-Unmodified-Since),
// through the hedges' path ([WithHedgePath]). The caller's reader goes on
// from whichever delivers the next byte first, and the other is closed.
//
// The bytes the caller reads are always those of an unhedged read: a
// hedge's answer is used only if it is a 206 whose Content-Range is
// exactly the rest asked for (bytes N-M/size, of the first answer's size),
// whose length is that of the rest, without Content-Encoding, and whose
// ETag and Last-Modified are the first answer's; anything else (a 200 of a
// server that ignored the range, a 412, another ETag) is dropped, never
// spliced, and the first body read on. At most the policy's MaxHedges
// Range hedges go per body. A body whose read fails is resumed the same
// way, budget permitting. A request sent once ([WithoutHedging], chain
// stop) is not watched. [Transport.BodyStats] counts what happened.
func WithBodyHedge(o BodyHedge) Option {
	return func(c *config) {
		switch {
		case o.MinSize < 0:
			c.fail("WithBodyHedge: MinSize must not be negative, got %d", o.MinSize)
		case o.MinStall < 0 || o.MaxStall < 0:
			c.fail("WithBodyHedge: MinStall and MaxStall must not be negative, got %v and %v", o.MinStall, o.MaxStall)
		case o.Quantile != 0 && !(o.Quantile > 0 && o.Quantile < 1):
			c.fail("WithBodyHedge: Quantile must be in (0, 1), got %v", o.Quantile)
		case o.Multiple != 0 && !(o.Multiple >= 1 && o.Multiple < 1e6):
			c.fail("WithBodyHedge: Multiple must be at least 1, got %v", o.Multiple)
		default:
			if o.MinSize == 0 {
				o.MinSize = DefaultBodyHedgeMinSize
			}
			if o.MinStall == 0 {
				o.MinStall = DefaultBodyHedgeMinStall
			}
			if o.MaxStall == 0 {
				o.MaxStall = max(DefaultBodyHedgeMaxStall, o.MinStall)
			}
			if o.MaxStall < o.MinStall {
				c.fail("WithBodyHedge: MaxStall %v is below MinStall %v", o.MaxStall, o.MinStall)
				return
			}
			if o.Quantile == 0 {
				o.Quantile = 0.999
			}
			if o.Multiple == 0 {
				o.Multiple = 4
			}
			c.bodyHedge = &o
		}
	}
}

// BodyStats counts what [WithBodyHedge] did.
type BodyStats struct {
	Watched int64 // bodies watched
	Stalls  int64 // stalls seen (and read errors resumed)
	Denied  int64 // stalls the budget granted no hedge
	Sent    int64 // Range hedges sent
	Won     int64 // Range hedges the caller's reader went on from
	Dropped int64 // Range answers refused: not the same bytes of the same version
}

// BodyStats returns the counts of [WithBodyHedge]; all zero without it.
func (t *Transport) BodyStats() BodyStats {
	w := t.bodies
	if w == nil {
		return BodyStats{}
	}
	return BodyStats{
		Watched: w.watched.Load(), Stalls: w.stalls.Load(), Denied: w.denied.Load(),
		Sent: w.sent.Load(), Won: w.won.Load(), Dropped: w.dropped.Load(),
	}
}

// bodyWatch is a Transport's body hedging: the options, the learned
// block times and the counts.
type bodyWatch struct {
	o         BodyHedge
	blocks    *timeouts // Multiple × Quantile of block times per key, capped at MaxStall
	budget    budget.Budget
	maxHedges int

	watched, stalls, denied, sent, won, dropped atomic.Int64
}

func newBodyWatch(o *BodyHedge, p *tailcut.Policy) *bodyWatch {
	pc := p.Config()
	bc := pc
	bc.MinSamples = BodyMinBlocks
	return &bodyWatch{
		o:         *o,
		blocks:    newTimeouts(bc, o.Quantile, o.Multiple, o.MaxStall),
		budget:    pc.Budget,
		maxHedges: pc.MaxHedges,
	}
}

// watchBody returns resp with its body watched for stalls (see
// WithBodyHedge) when body hedging is on and resp can be resumed by a
// Range request; otherwise resp as it is.
func (rt *roundTrip) watchBody(resp *http.Response) *http.Response {
	w := rt.t.bodies
	if w == nil || resp == nil || rt.once || tailcut.ChainStopped(rt.req.Context()) {
		return resp
	}
	b, ok := resp.Body.(*body)
	if !ok || b.released.Load() {
		return resp
	}
	sp, ok := resumable(rt.req, resp, w.o)
	if !ok {
		return resp
	}
	rb := &rangeBody{
		w: w, t: rt.t, key: rt.key, tmpl: resp.Request, ctx: rt.ctx,
		span: sp, etag: resp.Header.Get("Etag"), lastMod: resp.Header.Get("Last-Modified"),
		cancelTimeout: b.cancelTimeout,
		cur:           &bodySource{rc: b, close: b.Close},
	}
	b.cancelTimeout = nil // the watched body outlives the first one
	rb.bound = max(w.blocks.get(rt.key, time.Now()), w.o.MinStall)
	rb.timer = time.AfterFunc(time.Hour, rb.onTimer)
	rb.timer.Stop()
	w.watched.Add(1)
	resp.Body = rb
	return resp
}

// span is where a watched body lies in its object: bytes first to
// last of total.
type span struct{ first, last, total int64 }

// resumable reports whether resp, the answer to req, may be watched —
// the rest of it can be asked for by a Range request pinned to its
// version — and where its body lies in the object.
func resumable(req *http.Request, resp *http.Response, o BodyHedge) (span, bool) {
	n := resp.ContentLength
	if methodOf(req) != http.MethodGet || n < max(o.MinSize, 1) ||
		resp.Uncompressed || !identity(resp.Header) || resp.Request == nil {
		return span{}, false
	}
	var sp span
	switch resp.StatusCode {
	case http.StatusOK:
		if !o.AssumeRanges && !acceptsRanges(resp.Header) {
			return span{}, false
		}
		sp = span{0, n - 1, n}
	case http.StatusPartialContent:
		first, last, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || last-first+1 != n {
			return span{}, false
		}
		sp = span{first, last, total}
	default:
		return span{}, false
	}
	if etag := resp.Header.Get("Etag"); etag != "" {
		return sp, strongETag(etag)
	}
	return sp, resp.Header.Get("Last-Modified") != ""
}

// identity reports whether h declares no content coding but identity.
func identity(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		if s := strings.TrimSpace(v); s != "" && !strings.EqualFold(s, "identity") {
			return false
		}
	}
	return true
}

// acceptsRanges reports whether h advertises byte ranges.
func acceptsRanges(h http.Header) bool {
	for _, v := range h.Values("Accept-Ranges") {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "bytes") {
				return true
			}
		}
	}
	return false
}

// strongETag reports whether etag is a strong entity tag: a quoted
// string without the W/ prefix, which If-Range and If-Match compare.
func strongETag(etag string) bool {
	return len(etag) >= 2 && etag[0] == '"' && etag[len(etag)-1] == '"' && !strings.ContainsAny(etag[1:len(etag)-1], "\"\r\n")
}

// parseContentRange parses a Content-Range header of a single byte range,
// "bytes first-last/size" with a known size, as RFC 9110 §14.4 writes
// it; ok is false for anything else (an unsatisfied range "bytes */n",
// an unknown size, a last before first or past the size).
func parseContentRange(v string) (first, last, size int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	r, s, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(r, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err error
	if first, err = parseDigits(a); err != nil {
		return 0, 0, 0, false
	}
	if last, err = parseDigits(b); err != nil {
		return 0, 0, 0, false
	}
	if size, err = parseDigits(s); err != nil {
		return 0, 0, 0, false
	}
	if last < first || last >= size {
		return 0, 0, 0, false
	}
	return first, last, size, true
}

// parseDigits parses a non-empty string of ASCII digits (no sign, no
// space) as an int64.
func parseDigits(s string) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseInt(s, 10, 64)
}

// rangeBody is a watched response body (WithBodyHedge). The caller's
// goroutine reads from the current source; a timer armed while it waits
// in Read sends a Range hedge when the current block is overdue, and the
// hedge, once it has its first bytes, takes over if the current source
// has delivered nothing since.
type rangeBody struct {
	w             *bodyWatch
	t             *Transport
	key           string
	tmpl          *http.Request   // the winning attempt's request
	ctx           context.Context // the call's context (the hard timeout's): the hedges' parent
	cancelTimeout context.CancelFunc
	span          // where the body lies in the object
	etag, lastMod string
	bound         time.Duration
	timer         *time.Timer

	mu         sync.Mutex
	cur        *bodySource
	off        int64         // bytes handed to the caller
	blockBytes int64         // of the block being measured, from cur
	blockTime  time.Duration // the time Read waited for them
	readStart  time.Time     // zero when the caller is not waiting in Read
	waited     time.Duration // blockTime when that read began
	pending    *rangeHedge   // a hedge in flight, not decided yet
	hedges     int
	closed     bool
}

// bodySource is one response the body is read from, at offset pos.
type bodySource struct {
	rc    io.Reader
	close func() error
	pos   int64  // offset of the next byte read returns: head's first, if any
	head  []byte // bytes read ahead (a hedge's first), the next ones
}

// rangeHedge is a Range hedge in flight.
type rangeHedge struct {
	start   int64
	k       int
	cancel  context.CancelFunc
	decided chan struct{} // closed once it won or lost
}

// hedgeSource returns the source of a Range answer from offset start,
// whose first bytes, head, were read already from rc.
func hedgeSource(rc io.Reader, start int64, head []byte, close func() error) *bodySource {
	return &bodySource{rc: rc, pos: start, head: head, close: close}
}

// read reads the source's bytes at offset off onwards into p, skipping
// those before off (delivered by a source it took over from).
func (s *bodySource) read(p []byte, off int64) (int, error) {
	if skip := off - s.pos; skip > 0 {
		d := min(skip, int64(len(s.head)))
		s.head = s.head[d:]
		s.pos += d
		if skip -= d; skip > 0 {
			n, err := io.CopyN(io.Discard, s.rc, skip)
			s.pos += n
			if err != nil {
				return 0, err
			}
		}
	}
	if len(s.head) > 0 {
		n := copy(p, s.head)
		s.head = s.head[n:]
		s.pos += int64(n)
		return n, nil
	}
	n, err := s.rc.Read(p)
	s.pos += int64(n)
	return n, err
}

// Read reads the body, from whichever source is current.
func (rb *rangeBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		rb.mu.Lock()
		if rb.closed {
			rb.mu.Unlock()
			return 0, errBodyClosed
		}
		s, off := rb.cur, rb.off
		start := time.Now()
		rb.readStart, rb.waited = start, rb.blockTime
		if rb.pending == nil && rb.hedges < rb.w.maxHedges {
			rb.timer.Reset(max(rb.bound-rb.blockTime, 0))
		}
		rb.mu.Unlock()

		n, err := s.read(p, off)
		now := time.Now()

		rb.mu.Lock()
		rb.readStart = time.Time{}
		rb.timer.Stop()
		if s != rb.cur {
			// A hedge took over while this read waited. Bytes it
			// returned are the ones at off all the same.
			if n > 0 {
				rb.off += int64(n)
				rb.mu.Unlock()
				return n, nil
			}
			rb.mu.Unlock()
			continue
		}
		rb.off += int64(n)
		rb.account(n, now.Sub(start), now)
		if h := rb.pending; n > 0 && h != nil {
			h.cancel() // the current source delivered first
			rb.decide(h)
		}
		if n == 0 && err != nil && !errors.Is(err, io.EOF) && !rb.closed {
			// A failed read: go on from a hedge in flight, or resume
			// with one, budget permitting.
			h := rb.pending
			if h == nil && rb.ctx.Err() == nil && rb.hedges < rb.w.maxHedges && rb.grant(now) {
				h = rb.launch()
			}
			if h != nil {
				rb.mu.Unlock()
				<-h.decided
				rb.mu.Lock()
				if rb.cur != s {
					rb.mu.Unlock()
					continue
				}
			}
		}
		rb.mu.Unlock()
		if errors.Is(err, io.EOF) && rb.cancelTimeout != nil {
			rb.cancelTimeout() // read to the end: the hard timeout is over, as for an unwatched body
		}
		return n, err
	}
}

// errBodyClosed is what a read after Close returns, as net/http's body
// does.
var errBodyClosed = errors.New("http: read on closed response body")

// account adds a read of n bytes that waited d to the block being
// measured, and learns the block's time once it is whole; rb.mu is
// held.
func (rb *rangeBody) account(n int, d time.Duration, now time.Time) {
	rb.blockBytes += int64(n)
	rb.blockTime += d
	if rb.blockBytes >= BodyBlock {
		rb.w.blocks.observe(rb.key, rb.blockTime, now)
		rb.blockBytes, rb.blockTime = 0, 0
	}
}

// onTimer runs when a read may have stalled.
func (rb *rangeBody) onTimer() {
	now := time.Now()
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if !rb.stalled(now) || rb.pending != nil || rb.hedges >= rb.w.maxHedges || rb.ctx.Err() != nil {
		return
	}
	if !rb.grant(now) {
		rb.timer.Reset(rb.bound) // ask again one bound later
		return
	}
	rb.launch()
}

// stalled reports whether, at now, the caller waits in Read for a block
// overdue by the bound. A timer that fired for an earlier read finds it
// not so.
func (rb *rangeBody) stalled(now time.Time) bool {
	return !rb.closed && !rb.readStart.IsZero() && rb.waited+now.Sub(rb.readStart) >= rb.bound
}

// grant counts a stall and asks the budget for a hedge's token.
func (rb *rangeBody) grant(now time.Time) bool {
	rb.w.stalls.Add(1)
	if !rb.w.budget.Withdraw(now) {
		rb.w.denied.Add(1)
		return false
	}
	return true
}

// launch sends a Range hedge from the caller's offset; rb.mu is held.
func (rb *rangeBody) launch() *rangeHedge {
	rb.hedges++
	ctx, cancel := context.WithCancel(rb.ctx)
	h := &rangeHedge{start: rb.off, k: rb.hedges, cancel: cancel, decided: make(chan struct{})}
	rb.pending = h
	rb.w.sent.Add(1)
	go rb.race(ctx, h)
	return h
}

// decide ends h's race, won or lost; rb.mu is held.
func (rb *rangeBody) decide(h *rangeHedge) {
	if rb.pending == h {
		rb.pending = nil
		close(h.decided)
	}
}

// race sends hedge h, waits for its first bytes and takes over if the
// current source has delivered nothing meanwhile.
func (rb *rangeBody) race(ctx context.Context, h *rangeHedge) {
	s, err := rb.open(ctx, h)
	rb.mu.Lock()
	won := err == nil && rb.pending == h && !rb.closed && rb.off == h.start
	rb.decide(h)
	if !won {
		if !rb.closed && !rb.readStart.IsZero() && rb.hedges < rb.w.maxHedges {
			rb.timer.Reset(rb.bound) // still waiting: ask again one bound later
		}
		rb.mu.Unlock()
		if s != nil {
			_ = s.close()
		} else {
			h.cancel()
		}
		return
	}
	old := rb.cur
	rb.cur = s
	rb.blockBytes, rb.blockTime = 0, 0
	rb.w.won.Add(1)
	rb.mu.Unlock()
	go func() { _ = old.close() }() // ends the stalled read, if any, which goes on from s
}

// errDropped is the error of a Range answer that is not the rest of
// the same object.
var errDropped = errors.New("hedgehttp: the Range answer is not the rest of the same object")

// open sends h's Range request and returns its source once it has
// delivered its first bytes.
func (rb *rangeBody) open(ctx context.Context, h *rangeHedge) (*bodySource, error) {
	r := rb.tmpl.Clone(ctx)
	r.Body, r.GetBody, r.ContentLength = nil, nil, 0
	r.Header.Set("Range", "bytes="+strconv.FormatInt(rb.first+h.start, 10)+"-"+strconv.FormatInt(rb.last, 10))
	r.Header.Del("If-None-Match")
	r.Header.Del("If-Modified-Since")
	if rb.etag != "" {
		r.Header.Set("If-Match", rb.etag)
		r.Header.Set("If-Range", rb.etag)
	} else {
		r.Header.Set("If-Unmodified-Since", rb.lastMod)
		r.Header.Set("If-Range", rb.lastMod)
	}
	r.Header[AttemptHeader] = attemptValues[min(h.k, len(attemptValues)-1)]
	resp, err := rb.t.baseFor(h.k).RoundTrip(r) //nolint:bodyclose // closed below, or by the source's close
	if err != nil {
		return nil, err
	}
	if !rb.sameRest(resp, h.start) {
		rb.w.dropped.Add(1)
		resp.Body.Close()
		h.cancel()
		return nil, errDropped
	}
	buf := make([]byte, BodyBlock)
	n, err := io.ReadAtLeast(resp.Body, buf, 1)
	s := hedgeSource(resp.Body, h.start, buf[:n], func() error {
		err := resp.Body.Close()
		h.cancel()
		return err
	})
	if err != nil {
		_ = s.close()
		return nil, err
	}
	return s, nil
}

// sameRest reports whether resp is the rest of the watched body from
// its offset start, of the same version.
func (rb *rangeBody) sameRest(resp *http.Response, start int64) bool {
	if resp.StatusCode != http.StatusPartialContent || resp.Uncompressed || !identity(resp.Header) {
		return false
	}
	first, last, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
	if !ok || first != rb.first+start || last != rb.last || total != rb.total || resp.ContentLength != last-first+1 {
		return false
	}
	return resp.Header.Get("Etag") == rb.etag && resp.Header.Get("Last-Modified") == rb.lastMod
}

// Close closes the body and any hedge of it.
func (rb *rangeBody) Close() error {
	rb.mu.Lock()
	if rb.closed {
		rb.mu.Unlock()
		return nil
	}
	rb.closed = true
	rb.timer.Stop()
	s := rb.cur
	if h := rb.pending; h != nil {
		h.cancel()
		rb.decide(h)
	}
	rb.mu.Unlock()
	err := s.close()
	if rb.cancelTimeout != nil {
		rb.cancelTimeout()
	}
	return err
}
