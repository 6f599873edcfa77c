package hedgegrpc

import (
	"context"
	"sync"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// hcall is one hedged call in flight.
//
// The original attempt runs on the caller's goroutine and decodes straight
// into the caller's reply; only hedges get a goroutine and a fresh reply
// message each. So a call answered before its hedge delay — most calls —
// costs no goroutine hand-off, no extra message and no merge. When a hedge
// wins, the original is cancelled, the caller's goroutine comes back from
// it (grpc-go's invoker returns at once on cancellation), and only then is
// the winner merged into the reply: no two attempts ever write the same
// message.
//
// Every event — an attempt's end, the hedge timer, the caller giving up —
// is handled under mu, by whichever goroutine it happens on; the policy's
// Request is only touched under mu.
type hcall struct {
	c      *client
	ctx    context.Context
	method string
	req    any
	// replyType makes the hedges' messages. It is taken from the caller's
	// reply before the original starts: a hedge must not touch that
	// message, which the original may be decoding into.
	replyType protoreflect.MessageType
	cc        *grpc.ClientConn
	invoker   grpc.UnaryInvoker
	base      []grpc.CallOption // the caller's options minus Header, Trailer, Peer
	wantHdr   bool
	wantPr    bool
	pl        plan
	th        *throttle
	key       string
	delay     time.Duration
	max       int // attempt cap

	mu       sync.Mutex
	r        tailcut.Request
	slots    [MaxAttemptsLimit]slot
	launched int
	would    int // hedges a dry run would have sent: they take their slots of maxAttempts
	running  int
	stopped  bool // no more hedges: cap reached or a pushback said so
	timer    *time.Timer
	armed    bool
	due      time.Time // when the armed timer is meant to fire
	failure  *result   // the error to return if every attempt fails
	decided  bool
	outcome  *result       // the winner, or the failure returned
	aborted  bool          // the caller's context ended the call
	done     chan struct{} // closed when decided; made only if the caller waits

	// stream is the stream this call hedges (stream.go), nil for a unary
	// call: its attempts start through it, and its winner goes on after
	// the decision.
	stream *hstream

	picks picks // the endpoints the attempts went to, for the balancer (withPick)

	// tie is the call's tied-request record under WithTied (tied.go):
	// learn is set then, tied when the call is sent tied; seen has bit k
	// set once attempt k reported its start.
	tie         tailcut.Tie
	learn, tied bool
	seen        uint8
}

// hedged runs one call as a hedged request.
func (c *client) hedged(ctx context.Context, method string, req any, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, pl plan, th *throttle) error {
	h := &hcall{
		c: c, ctx: ctx, method: method, req: req, replyType: reply.ProtoReflect().Type(),
		cc: cc, invoker: invoker,
		pl: pl, th: th, key: c.key(method), max: min(pl.maxAttempts, MaxAttemptsLimit),
	}
	var headerAddr, trailerAddr *metadata.MD
	var peerAddr *peer.Peer
	h.base, headerAddr, trailerAddr, peerAddr = splitCallOptions(opts)
	h.wantHdr, h.wantPr = headerAddr != nil, peerAddr != nil

	start := time.Now()
	h.mu.Lock()
	h.beginLocked(req, start)
	tied := h.beginTieLocked(start)
	actx := h.launchLocked(start, tailcut.SentPrimary)
	switch {
	case tied:
		h.startTiedLocked(start)
	case h.delay == 0:
		h.tryHedgeLocked(start, tailcut.SentAfterDelay) // hedgingDelay "0s": every attempt now
	default:
		h.armLocked(start, h.delay)
	}
	h.mu.Unlock()

	// The original, on this goroutine, into the caller's reply.
	res := h.attempt(actx, 0, req, reply)
	h.event(&res)
	if res.err == nil {
		h.mu.Lock()
		hedged := h.launched > 1
		h.mu.Unlock()
		if hedged {
			c.checkPick(&h.picks, 0, method) // an answer: the original was picked
		}
	}

	h.mu.Lock()
	if !h.decided {
		// The original failed and hedges are running (or due): wait.
		h.done = make(chan struct{})
		h.mu.Unlock()
		select {
		case <-h.done:
		case <-ctx.Done():
			h.mu.Lock()
			if !h.decided {
				h.abortLocked(time.Now())
			}
			h.mu.Unlock()
		}
		h.mu.Lock()
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	out, aborted := h.outcome, h.aborted
	h.mu.Unlock()
	if aborted {
		return status.FromContextError(ctx.Err()).Err()
	}
	if out.err == nil && out.index != 0 {
		// A hedge won. The original has returned (it ran on this
		// goroutine), so nothing else writes into reply now.
		proto.Reset(reply)
		proto.Merge(reply, out.msg)
	}
	if headerAddr != nil {
		*headerAddr = out.header
	}
	if trailerAddr != nil {
		*trailerAddr = out.trailer
	}
	if peerAddr != nil && out.peer != nil {
		*peerAddr = *out.peer
	}
	return out.err
}

// beginLocked begins the call in the policy at now and sets its hedge
// delay: the policy's, or the plan's fixed one.
func (h *hcall) beginLocked(req any, now time.Time) {
	h.r = h.c.begin(h.ctx, h.key, h.method, req, now)
	h.delay = h.r.Delay()
	if h.pl.fixed {
		h.delay = h.pl.delay
		h.r.UseDelay(h.delay) // the key's stats report the delay in use
	}
}

// launchLocked registers attempt number h.launched, started at now for
// reason r, and returns its context. The caller starts it.
func (h *hcall) launchLocked(now time.Time, r tailcut.SendReason) context.Context {
	k := h.launched
	actx, cancel := context.WithCancel(h.startedLocked(k, r, now))
	actx = attemptContext(actx, k)
	if h.c.tied != nil {
		actx = metadata.AppendToOutgoingContext(actx, TiedKey, "1")
		if h.stream == nil {
			actx = context.WithValue(actx, attemptKey{}, &tiedAttempt{h: h, k: k})
		}
	}
	actx = withPick(actx, &h.picks, k, h.stream != nil) // BalancerName sends it elsewhere than the others
	h.slots[k].cancel, h.slots[k].start, h.slots[k].running = cancel, now, true
	h.launched++
	h.running++
	return actx
}

// startHedgeLocked launches the next attempt, sent for reason r, as a
// hedge on its own goroutine, decoding into a fresh message of the reply's
// type.
//
// The request is copied here, under mu, while the call is undecided: the
// caller waits in the interceptor until the call is decided and may reuse
// its message as soon as it returns, and a hedge launched just before the
// answer may start on its goroutine only then, while grpc-go marshals a
// losing hedge's request as it runs (TestLateHedgeLeavesTheRequestAlone).
// Such a hedge is still invoked, on its already cancelled context, which
// ends it before it reaches the network: every hedge the policy granted is
// a call gRPC's own metrics and stats handlers see, and the counts agree
// (hedgegrpcotel's TestPluginCountsCalls).
func (h *hcall) startHedgeLocked(now time.Time, r tailcut.SendReason) {
	k := h.launched
	actx := h.launchLocked(now, r)
	if h.stream != nil {
		h.stream.startLocked(actx, k)
		return
	}
	req := h.hedgeRequestLocked()
	go func() {
		res := h.attempt(actx, k, req, h.replyType.New().Interface())
		h.event(&res)
	}()
}

// hedgeRequestLocked returns the request message a hedge sends: a copy of
// the caller's. A request that is not a protobuf message cannot be copied
// and is sent as it is.
func (h *hcall) hedgeRequestLocked() any {
	if m, ok := h.req.(proto.Message); ok {
		return proto.Clone(m)
	}
	return h.req
}

// attempt runs attempt k, sending req and decoding into msg, and returns
// how it ended. It does not touch the call's state, only the policy's
// pushback, which is safe for concurrent use.
func (h *hcall) attempt(ctx context.Context, k int, req any, msg proto.Message) result {
	res := result{index: k, msg: msg}
	o := make([]grpc.CallOption, len(h.base), len(h.base)+3)
	copy(o, h.base)
	o = append(o, grpc.Trailer(&res.trailer))
	if h.wantHdr {
		o = append(o, grpc.Header(&res.header))
	}
	if h.wantPr {
		res.peer = new(peer.Peer)
		o = append(o, grpc.Peer(res.peer))
	}
	res.err = h.invoker(ctx, h.method, req, msg, h.cc, o...)
	res.end = time.Now()
	if k > 0 && res.err == nil {
		h.c.checkPick(&h.picks, k, h.method) // an answer: the hedge was picked
	}
	// The pushback is applied here rather than in event: a loser's answer
	// may arrive after the call was decided, and the server's request for
	// less traffic still stands.
	res.pushback, res.hasPushback = pushback(res.trailer)
	if res.hasPushback && res.pushback >= 0 {
		h.c.p.Pushback(h.key, res.end.Add(res.pushback))
	}
	return res
}

// event handles the end of an attempt.
func (h *hcall) event(res *result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.eventLocked(res)
}

func (h *hcall) eventLocked(res *result) {
	if h.decided || !h.slots[res.index].running {
		return // a loser finishing after the call was decided, or a tied twin dropped
	}
	now := time.Now()
	pb, hasPB := res.pushback, res.hasPushback
	outcome, v := h.c.judge(h.ctx, res.err, hasPB, h.pl.nonFatal)
	if v == gaveUp {
		// This attempt failed because the caller gave up: no answer.
		h.abortLocked(now)
		return
	}
	p := h.c.p
	s := &h.slots[res.index]
	s.running = false
	h.running--
	if v == answered {
		// The winner: an OK or a fatal status.
		p.Observe(&h.r, res.index, res.end.Sub(s.start), outcome, res.end)
		h.endedLocked(res.index, outcome, res.end, true, res.err)
		h.answeredLocked(res.index, now)
		if h.th != nil {
			switch {
			case res.err == nil:
				h.th.success()
			case hasPB && pb < 0:
				h.th.failure()
			}
		}
		h.decideLocked(res, res.index, now)
		return
	}

	// A non-fatal failure.
	p.Observe(&h.r, res.index, res.end.Sub(s.start), outcome, res.end)
	h.endedLocked(res.index, outcome, res.end, false, res.err)
	s.cancel()
	if h.th != nil && (pb < 0 || h.c.nonFatalErr(h.ctx, res.err, h.pl.nonFatal)) {
		h.th.failure() // A6: non-fatal codes and "do not retry" pushbacks
	}
	if h.failure == nil || res.index == 0 {
		h.failure = res // the original's error, or else the first one
	}
	if h.tied {
		h.tie.Failed(res.index)
	}
	switch {
	case hasPB && pb < 0:
		h.stopped = true // A6: no further hedged requests for this call
		h.disarmLocked()
	case hasPB:
		// A6: the next hedge goes after the pushback delay, and later
		// ones hedgingDelay after that. Wait for it even if nothing runs.
		if !h.stopped && h.launched+h.would < h.max {
			h.armLocked(now, pb)
			return
		}
	case h.tied:
		h.twinLocked(now, tailcut.SentAfterError) // the twin retries a failure at once
	default:
		h.tryHedgeLocked(now, tailcut.SentAfterError)
	}
	if h.running == 0 {
		// Nothing running and no attempt granted now: as in A6, the
		// failure goes back to the caller.
		h.decideLocked(h.failure, -1, now)
	}
}

// decideLocked ends the call with out; winner is its attempt index, or -1
// if every attempt failed. Attempts still running are cancelled and
// learned as such.
func (h *hcall) decideLocked(out *result, winner int, now time.Time) {
	h.cancelRunningLocked(now, tailcut.Canceled)
	switch {
	case winner < 0:
	case h.stream != nil:
		h.stream.winLocked(winner) // a stream goes on with its winner
	default:
		h.slots[winner].cancel() // its call is over: release the context
	}
	h.c.p.End(&h.r, winner, now)
	h.outcome = out
	h.finishLocked()
}

// abortLocked ends the call because the caller's context is done: its
// attempts are abandoned, and so is the request (tailcut.CallerGone).
func (h *hcall) abortLocked(now time.Time) {
	h.cancelRunningLocked(now, gaveUpOutcome)
	h.c.p.Abandon(&h.r, now)
	h.aborted = true
	h.finishLocked()
}

// cancelRunningLocked cancels the attempts still running, learned as o.
func (h *hcall) cancelRunningLocked(now time.Time, o tailcut.Outcome) {
	for i := range h.slots[:h.launched] {
		if a := &h.slots[i]; a.running {
			a.cancel()
			a.running = false
			h.c.p.Observe(&h.r, i, now.Sub(a.start), o, now)
			h.endedLocked(i, o, now, false, context.Canceled)
		}
	}
	h.running = 0
}

func (h *hcall) finishLocked() {
	h.decided = true
	h.disarmLocked()
	if h.done != nil {
		close(h.done)
	}
	if h.stream != nil {
		h.stream.cond.Broadcast()
	}
}

// tryHedgeLocked sends the next attempt(s) the policy grants at now, for
// reason r, and arms the timer for the one after.
func (h *hcall) tryHedgeLocked(now time.Time, r tailcut.SendReason) {
	p := h.c.p
	for !h.stopped && h.launched+h.would < h.max {
		if h.th != nil && !h.th.allow() {
			break // throttled: try again at the next slot
		}
		d := p.Hedge(&h.r, now)
		if d == tailcut.Send {
			h.startHedgeLocked(now, r)
			if h.delay > 0 {
				break
			}
			continue // hedgingDelay "0s": send them all now
		}
		if d == tailcut.DenyEarly {
			// Re-timed (a call begun before its key's first answer):
			// the first hedge at the call's new delay from its start,
			// and one delay apart after it.
			h.delay = h.r.Delay()
			h.armLocked(now, max(h.slots[0].start.Add(h.delay).Sub(now), 0))
			return
		}
		if d == tailcut.DryRun {
			h.would++
		}
		if d == tailcut.DenyMaxHedges || d == tailcut.DenyChained {
			h.stopped = true
		}
		break // denied (or a dry run): try again at the next slot
	}
	if h.stopped || h.launched+h.would >= h.max || h.delay == 0 {
		// With a zero delay there is no later slot to try again at; a
		// non-fatal failure still tries at once.
		h.disarmLocked()
		return
	}
	h.armLocked(now, h.delay)
}

func (h *hcall) armLocked(now time.Time, d time.Duration) {
	h.armed, h.due = true, now.Add(d)
	if h.timer == nil {
		h.timer = time.AfterFunc(d, h.onTimer)
		return
	}
	h.timer.Reset(d)
}

func (h *hcall) disarmLocked() {
	h.armed = false
	if h.timer != nil {
		h.timer.Stop()
	}
}

// onTimer is the hedge timer's callback.
func (h *hcall) onTimer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	// A callback already under way when the timer was re-armed or stopped
	// is stale: the state says when the timer is really due.
	if h.decided || !h.armed || now.Before(h.due) {
		return
	}
	h.armed = false
	r := tailcut.SentAfterDelay
	if h.failure != nil && h.running == 0 {
		r = tailcut.SentAfterError // after a pushback: nothing was outstanding
	}
	if h.tied {
		h.twinLocked(now, r)
	} else {
		h.tryHedgeLocked(now, r)
	}
	if h.running == 0 {
		// Every attempt failed and no hedge is granted now: the failure
		// goes back to the caller.
		h.decideLocked(h.failure, -1, now)
	}
}
