package hedgegrpc

import (
	"context"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// WithTied sends tied unary calls (see tailcut.Tied) to the methods whose
// servers signal a call's start (an [Admission] in front of them, or any
// server sending response headers carrying [StartedKey] as a call
// starts): the twin goes t.Delay() after the original (zero: at once)
// unless the original has started by then, and the first attempt to
// start cancels the other, still queued. Its budget pays only for work
// done twice (a twin whose start crossed its sibling's cancellation). A
// method whose server sends no signal is hedged as without WithTied: a
// key is tied only once an answer has come after its attempt's start
// signal. t may serve several interceptors; its Stats count twins,
// cancellations and duplicated work.
//
// The start signal reaches the interceptor through the [StartSignal]
// stats handler, which the ClientConn needs: [DialOptions] adds it when
// given WithTied; with the interceptors alone (or hedgegrpcotel's
// DialOptions) add it to the ClientConn's options. Without it no key is
// ever tied, and calls are hedged as without WithTied. Every attempt of a
// call or stream carries [TiedKey], which asks an [Admission] for the
// signal. A stream is not tied: it is hedged as without WithTied, and
// since it commits to the first attempt that receives response headers
// (unless [WithFirstMessage]), an Admission's signal commits it as soon
// as one attempt starts, cancelling the others before they run.
//
// A per-call [WithDelay] and a hedgingPolicy's hedgingDelay do not apply
// to tied calls; [WithoutHedging] and a service config that does not
// hedge the method do: such a call is sent once. A nil t is an invalid
// option.
func WithTied(t *tailcut.Tied) Option {
	return func(c *client) {
		if t == nil {
			c.fail("WithTied(nil)")
			return
		}
		c.tied = t
	}
}

// StartSignal returns the dial option that installs the stats handler
// through which attempts learn their start: response headers carrying
// [StartedKey]. It reports the start to the tied call the attempt belongs
// to ([WithTied]) and to tailcut.AttemptStarted, so that a call made in a
// tailcut.Hedger's attempt with tailcut.Tied is tied too. It costs a type
// switch per RPC event.
func StartSignal() grpc.DialOption { return grpc.WithStatsHandler(startHandler{}) }

// startHandler is the stats handler of [StartSignal].
type startHandler struct{}

func (startHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (startHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (startHandler) HandleConn(context.Context, stats.ConnStats) {}

func (startHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	in, ok := s.(*stats.InHeader)
	if !ok || !in.Client || len(in.Header[StartedKey]) == 0 {
		return
	}
	tailcut.AttemptStarted(ctx)
	if a, ok := ctx.Value(attemptKey{}).(*tiedAttempt); ok {
		a.h.started(a.k)
	}
}

// attemptKey is the context key of a unary attempt's *tiedAttempt.
type attemptKey struct{}

// tiedAttempt is where the start of attempt k of call h is reported.
type tiedAttempt struct {
	h *hcall
	k int
}

// beginTieLocked begins the call's tie at now under WithTied, and says
// whether the call is sent tied: its key speaks the start signal, the
// call may be hedged at all and is not a hedge's own call.
func (h *hcall) beginTieLocked(now time.Time) bool {
	c := h.c
	if c.tied == nil {
		return false
	}
	h.tie = c.tied.Begin(c.p, h.key, now)
	h.learn = true
	if !h.tie.Tied() || h.max <= 1 || tailcut.ChainStopped(h.ctx) || h.r.MaxHedges() < 1 {
		return false
	}
	h.tied = true
	h.max = 2 // the original and its twin
	return true
}

// startTiedLocked schedules the twin of a tied call begun at now.
func (h *hcall) startTiedLocked(now time.Time) {
	if d := h.tie.TwinAt(); d > 0 {
		h.armLocked(now, d)
		return
	}
	h.twinLocked(now, tailcut.SentAfterDelay)
}

// twinLocked sends the twin at now for reason r, if the tie lets it go
// (no attempt has started, none has gone yet) and the service config's
// retry throttling allows a hedge.
func (h *hcall) twinLocked(now time.Time, r tailcut.SendReason) {
	if h.stopped || (h.th != nil && !h.th.allow()) {
		return
	}
	if h.tie.Twin(now) {
		h.startHedgeLocked(now, r)
	}
}

// started handles the start signal of attempt k. Under a tied call the
// first attempt to start cancels its siblings that have not started, and
// one that starts after it is cancelled (its work is duplicated, and the
// tie withdraws it from the budget).
func (h *hcall) started(k int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	bit := uint8(1) << uint(k)
	if h.seen&bit != 0 {
		return
	}
	h.seen |= bit
	if !h.tied {
		return
	}
	// A start reported after the attempt was cancelled is duplicated work
	// all the same: the cancellation reached its server too late.
	now := time.Now()
	switch d := h.tie.Start(k, now); {
	case h.decided || !h.slots[k].running:
	case d == tailcut.StartFirst:
		h.disarmLocked() // no attempt goes for slowness once one works
		for j := range h.launched {
			if j != k && h.slots[j].running && !h.tie.HasStarted(j) {
				h.tie.Cancel(j)
				h.dropLocked(j, now)
			}
		}
	case d == tailcut.StartDuplicate:
		h.dropLocked(k, now)
	}
}

// dropLocked cancels running attempt k at now, learned as cancelled; its
// end, when it comes, is ignored.
func (h *hcall) dropLocked(k int, now time.Time) {
	a := &h.slots[k]
	a.cancel()
	a.running = false
	h.running--
	h.c.p.Observe(&h.r, k, now.Sub(a.start), tailcut.Canceled, now)
	h.endedLocked(k, tailcut.Canceled, now, false, context.Canceled)
}

// answeredLocked records, under WithTied, that attempt k answered: its
// key is tied from then on if its start signal came, and hedged as usual
// if not.
func (h *hcall) answeredLocked(k int, now time.Time) {
	if !h.learn {
		return
	}
	if !h.tied && h.seen&(1<<uint(k)) != 0 {
		h.tie.Start(k, now) // the one start of an untied call: not duplicated
	}
	h.tie.Answered(k)
}
