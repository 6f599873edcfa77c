package hedgegrpc

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"
)

// StreamClientInterceptor returns a client interceptor that hedges
// streaming calls (server-streaming, client-streaming and bidirectional)
// as gRFC A6 hedges them, under policy p and the options of
// [UnaryClientInterceptor]: the service config's hedgingPolicy
// (maxAttempts, hedgingDelay, "0s" included, nonFatalStatusCodes) and
// retryThrottling, the per-call [WithoutHedging] and [WithDelay], the
// pushback trailer, the policy's delay, budget and fuses.
//
// The stream it returns sends the original attempt at once and, while no
// attempt has answered, another one after each hedge delay. Every message
// the caller sends is kept (a clone) and replayed, CloseSend included, on
// every attempt, each of which sends on a goroutine of its own: a slow
// attempt never holds up the others, and SendMsg does not wait for any of
// them. The stream commits to
// the first attempt that receives response headers — or with
// [WithFirstMessage], a response message — or that ends with an OK or a
// fatal status: the others are cancelled, no more are sent, and from then
// on the caller's messages go to the winner alone, unbuffered. A non-fatal
// status before the commit sends the next attempt at once; if every
// attempt fails, RecvMsg returns the original's error. The message that
// would take the buffered messages past [WithBufferLimit] (64 KiB by
// default) commits the stream to the attempt that has sent the most; so
// does a message that is not a protobuf message. A stream committed that
// way is not hedged any more, even if its attempt then fails with a
// non-fatal status (A6). A response message of the losers never reaches
// the caller.
//
// The caller's grpc.Header, grpc.Trailer and grpc.Peer options receive the
// winning attempt's values, once RecvMsg has returned an error (io.EOF
// included); Header, Trailer and Context are those of the winner. Other
// call options go to every attempt. The policy learns each attempt's time
// to its headers (or first message); the winner's failures after the
// commit are the caller's, not the policy's. Attempts carry the same
// metadata as unary ones ("hedge-attempt", "grpc-previous-rpc-attempts").
//
// Errors that grpc-go's NewStream would return, such as UNAVAILABLE from a
// connection that cannot be made, come from RecvMsg instead: attempts open
// their streams on their own goroutines. Each attempt costs two
// goroutines; a stream not hedged (WithoutHedging, maxAttempts 1) is one
// such attempt, committed from the start, so its messages are not
// buffered. A stream whose hedge does not fire costs a fixed number of
// allocations more than the plain stream, whatever its length
// (BenchmarkStream measures them).
// Methods the service config does not hedge go straight to the streamer,
// marked (one allocation) so that [BalancerName] does not take their
// lifetime for latency.
// Only hedge methods whose streams are safe to run more than once.
func StreamClientInterceptor(p *tailcut.Policy, opts ...Option) grpc.StreamClientInterceptor {
	return newClient(p, opts).streamIntercept
}

var _ grpc.StreamClientInterceptor = (*client)(nil).streamIntercept

func (c *client) streamIntercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if c.err != nil {
		return nil, c.err
	}
	sc := c.serviceConfig(cc)
	pl, opts, ok := c.callPlan(method, sc, opts)
	if !ok {
		return streamer(withStream(attemptContext(ctx, -1)), desc, cc, method, opts...) // BalancerName learns nothing from it
	}
	th := c.throttleOf(cc, sc)
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return c.newStream(ctx, desc, cc, method, streamer, opts, pl, th), nil
}

// hstream is one hedged stream: the caller's grpc.ClientStream over the
// attempts. Its hcall schedules the attempts and decides the winner (the
// commit) as for a unary call; everything here is guarded by the hcall's
// mu, on which cond waits.
//
// Each attempt runs two goroutines: run opens its stream and then sends
// (replays the buffer, and CloseSend, as the caller adds to them), watch
// waits for its first signal — response headers, its first message with
// WithFirstMessage, or its end. The winner's sender stops once it has
// caught up with the buffer (through): the caller's SendMsg and CloseSend
// then go straight to the winner; its watcher stops at its first signal,
// and the caller's RecvMsg then goes straight to the winner.
type hstream struct {
	h        *hcall
	desc     *grpc.StreamDesc
	streamer grpc.Streamer
	limit    int
	// respType is the response type when the stream commits at its
	// first message (WithFirstMessage); nil when it commits at headers.
	respType                protoreflect.MessageType
	headerAddr, trailerAddr *metadata.MD
	peerAddr                *peer.Peer
	stop                    func() bool // the caller's context.AfterFunc

	cond    sync.Cond
	subs    [MaxAttemptsLimit]sub
	buf     []proto.Message // clones of the messages sent, until through
	size    int             // their proto.Size, summed
	closing bool            // CloseSend was called
	pending bool            // commit asked for: to the attempt furthest along, or the next to start
	winner  *sub
	through bool // the winner has caught up: SendMsg and CloseSend go to it
	ended   bool // the caller has seen the end of the stream
}

// sub is one attempt of a stream.
type sub struct {
	index     int
	cs        grpc.ClientStream // nil until opened
	sent      int               // messages of buf sent
	closeSent bool
	sending   bool          // its sender runs
	watching  bool          // its first signal has not come yet
	commit    bool          // it wins as it starts: the stream committed while none ran
	observed  bool          // the policy has learned it
	first     proto.Message // its first message, not given to the caller yet
	final     error         // its end as its watcher saw it (io.EOF: OK)
	sendErr   error         // why its sender stopped early
}

var _ grpc.ClientStream = (*hstream)(nil)

func (c *client) newStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption, pl plan, th *throttle) *hstream {
	h := &hcall{
		c: c, ctx: ctx, method: method, cc: cc,
		pl: pl, th: th, key: c.key(method), max: min(pl.maxAttempts, MaxAttemptsLimit),
	}
	s := &hstream{h: h, desc: desc, streamer: streamer, limit: c.bufferLimit}
	h.stream = s
	s.cond.L = &h.mu
	h.base, s.headerAddr, s.trailerAddr, s.peerAddr = splitCallOptions(opts)
	if c.firstMsg {
		s.respType = responseType(method)
	}

	start := time.Now()
	h.mu.Lock()
	h.beginLocked(nil, start) // a stream has no request message yet: features see nil
	// A single attempt commits as it starts: nothing is buffered.
	s.pending = h.max <= 1
	s.startLocked(h.launchLocked(start, tailcut.SentPrimary), 0)
	switch {
	case h.max <= 1:
	case h.delay == 0:
		h.tryHedgeLocked(start, tailcut.SentAfterDelay) // hedgingDelay "0s": every attempt now
	default:
		h.armLocked(start, h.delay)
	}
	h.mu.Unlock()
	s.stop = context.AfterFunc(ctx, s.callerDone)
	return s
}

// responseType returns the message type of fullMethod's responses from the
// protobuf registries, where generated code registers its files and
// types, or nil.
func responseType(fullMethod string) protoreflect.MessageType {
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil
	}
	return mt
}

// startLocked starts attempt k, whose context the hcall made.
func (s *hstream) startLocked(ctx context.Context, k int) {
	u := &s.subs[k]
	*u = sub{index: k, sending: true, watching: true}
	if s.pending && s.winner == nil {
		// The stream committed while no attempt ran: this one wins as
		// it starts, and no other goes.
		u.commit = true
		s.h.stopped = true
	}
	go s.run(ctx, u)
}

// run opens attempt u's stream, starts its watcher and sends.
func (s *hstream) run(ctx context.Context, u *sub) {
	h := s.h
	if u.commit {
		h.mu.Lock()
		if !h.decided {
			s.commitLocked(u, time.Now())
		}
		h.mu.Unlock()
	}
	cs, err := s.streamer(ctx, s.desc, h.cc, h.method, h.base...)
	if err != nil {
		s.attemptEnded(u, nil, err)
		return
	}
	if u.index > 0 {
		h.c.checkPick(&h.picks, u.index, h.method) // the stream is open: its attempt was picked
	}
	h.mu.Lock()
	u.cs = cs
	s.cond.Broadcast()
	h.mu.Unlock()
	go s.watch(u)
	s.send(u)
}

// send replays the buffer on attempt u and follows it as it grows, until
// u loses, fails or, as the winner, catches up.
func (s *hstream) send(u *sub) {
	h := s.h
	h.mu.Lock()
	defer func() {
		u.sending = false
		s.cond.Broadcast()
		h.mu.Unlock()
	}()
	for {
		switch {
		case s.winner != u && !h.slots[u.index].running:
			return // lost, failed, or the caller gave up
		case u.sent < len(s.buf):
			m := s.buf[u.sent]
			h.mu.Unlock()
			err := u.cs.SendMsg(m)
			h.mu.Lock()
			if err != nil {
				u.sendErr = err // io.EOF: the stream ended; its watcher sees how
				return
			}
			u.sent++
		case s.closing && !u.closeSent:
			u.closeSent = true
			h.mu.Unlock()
			_ = u.cs.CloseSend() // grpc-go's CloseSend always returns nil
			h.mu.Lock()
		case s.winner == u:
			s.through = true
			s.buf = nil // A6: a committed stream keeps no buffer
			return
		default:
			s.cond.Wait()
		}
	}
}

// watch waits for attempt u's first signal: its headers, or with
// WithFirstMessage its first message; or its end.
func (s *hstream) watch(u *sub) {
	cs := u.cs
	if s.respType != nil {
		m := s.respType.New().Interface()
		if err := cs.RecvMsg(m); err != nil {
			s.attemptEnded(u, cs, err)
			return
		}
		s.signal(u, m)
		return
	}
	if md, _ := cs.Header(); md == nil {
		// No headers: the stream ended (trailers-only). RecvMsg returns
		// its status and decodes nothing.
		s.attemptEnded(u, cs, cs.RecvMsg(new(emptypb.Empty)))
		return
	}
	s.signal(u, nil)
}

// signal handles attempt u's first signal, at which it wins unless another
// did; m is its first message (WithFirstMessage) or nil.
func (s *hstream) signal(u *sub, m proto.Message) {
	h := s.h
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	u.watching = false
	switch {
	case s.winner == u:
		s.learnLocked(u, tailcut.Completed, now, nil)
		u.first = m
	case !h.decided:
		s.learnLocked(u, tailcut.Completed, now, nil)
		u.first = m
		s.commitLocked(u, now)
	}
	s.cond.Broadcast()
}

// attemptEnded handles the end of attempt u before its first signal: err is how
// it ended (io.EOF: OK), cs its stream or nil if it could not be opened.
func (s *hstream) attemptEnded(u *sub, cs grpc.ClientStream, err error) {
	h := s.h
	res := &result{index: u.index, err: err, end: time.Now()}
	if errors.Is(err, io.EOF) {
		res.err = nil
	}
	if cs != nil {
		res.trailer = cs.Trailer()
		if s.headerAddr != nil {
			res.header, _ = cs.Header() // the stream is over: this does not block
		}
		res.peer, _ = peer.FromContext(cs.Context())
	}
	// As for a unary attempt, a loser's pushback still stands.
	res.pushback, res.hasPushback = pushback(res.trailer)
	if res.hasPushback && res.pushback >= 0 {
		h.c.p.Pushback(h.key, res.end.Add(res.pushback))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	u.final, u.watching = err, false
	if cs == nil {
		u.sending = false
	}
	switch {
	case s.winner == u:
		o, _ := h.c.judge(h.ctx, res.err, res.hasPushback, h.pl.nonFatal)
		s.learnLocked(u, o, res.end, res.err)
	case !h.decided:
		u.observed = true // by eventLocked
		h.eventLocked(res)
	}
	s.cond.Broadcast()
}

// learnLocked teaches the policy the winner u's latency up to now, when it
// ended with err, unless it has learned u already.
func (s *hstream) learnLocked(u *sub, o tailcut.Outcome, now time.Time, err error) {
	if u.observed {
		return
	}
	u.observed = true
	h := s.h
	h.c.p.Observe(&h.r, u.index, now.Sub(h.slots[u.index].start), o, now)
	h.endedLocked(u.index, o, now, true, err)
	if o == tailcut.Completed && h.th != nil {
		h.th.success()
	}
}

// commitLocked makes u the winner: the others are cancelled, no more are
// sent.
func (s *hstream) commitLocked(u *sub, now time.Time) {
	h := s.h
	h.slots[u.index].running = false
	h.running--
	h.decideLocked(&result{index: u.index}, u.index, now)
}

// winLocked records the winner the hcall decided.
func (s *hstream) winLocked(k int) { s.winner = &s.subs[k] }

// commitFurthestLocked commits the stream to the running attempt that has
// sent the most messages, the earliest of those (A6); if none runs, the
// next attempt to start wins.
func (s *hstream) commitFurthestLocked(now time.Time) {
	h := s.h
	var best *sub
	for k := range h.launched {
		if u := &s.subs[k]; h.slots[k].running && (best == nil || u.sent > best.sent) {
			best = u
		}
	}
	if best != nil {
		s.commitLocked(best, now)
	}
}

// callerDone ends an undecided stream when the caller's context ends.
func (s *hstream) callerDone() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.decided {
		h.abortLocked(time.Now())
	}
}

// SendMsg buffers m for every attempt until the stream commits, and sends
// it to the winner afterwards. Past the buffer limit, or for a message that
// is not a protobuf message, it commits the stream and waits for the
// winner to have replayed the buffer.
func (s *hstream) SendMsg(m any) error {
	h := s.h
	h.mu.Lock()
	if !s.pending && !h.decided {
		if s.closing {
			h.mu.Unlock()
			return status.Error(codes.Internal, "SendMsg called after CloseSend")
		}
		if pm, ok := m.(proto.Message); ok {
			if n := proto.Size(pm); n <= s.limit-s.size {
				s.buf = append(s.buf, proto.Clone(pm))
				s.size += n
				s.cond.Broadcast()
				h.mu.Unlock()
				return nil
			}
		}
		// A6: the message that does not fit commits the stream; it goes
		// to the winner once the winner has replayed the buffer.
		s.pending = true
		s.commitFurthestLocked(time.Now())
	}
	for !s.through {
		if h.decided && (s.winner == nil || !s.winner.sending) {
			// The stream failed, the caller gave up, or the winner
			// stopped sending: RecvMsg tells the status.
			err := io.EOF
			if s.winner != nil && s.winner.sendErr != nil {
				err = s.winner.sendErr
			}
			h.mu.Unlock()
			return err
		}
		s.cond.Wait()
	}
	cs := s.winner.cs
	h.mu.Unlock()
	return cs.SendMsg(m)
}

// CloseSend closes the sending side of every attempt (replayed on later
// ones), or of the winner.
func (s *hstream) CloseSend() error {
	h := s.h
	h.mu.Lock()
	if s.through {
		cs := s.winner.cs
		h.mu.Unlock()
		return cs.CloseSend()
	}
	s.closing = true
	s.cond.Broadcast()
	h.mu.Unlock()
	return nil
}

// RecvMsg waits for the stream to commit, then receives from the winner.
func (s *hstream) RecvMsg(m any) error {
	h := s.h
	h.mu.Lock()
	for !h.decided || (s.winner != nil && s.winner.watching) {
		s.cond.Wait()
	}
	u := s.winner
	var err error
	switch {
	case u == nil && h.aborted:
		err = status.FromContextError(h.ctx.Err()).Err()
	case u == nil:
		err = h.outcome.err // every attempt failed
	case u.first != nil:
		f := u.first
		u.first = nil
		h.mu.Unlock()
		err := deliver(f, m)
		s.endOne()
		return err
	case u.final != nil:
		err = u.final
	default:
		cs := u.cs
		h.mu.Unlock()
		if err := cs.RecvMsg(m); err != nil {
			s.end()
			return err
		}
		s.endOne()
		return nil
	}
	h.mu.Unlock()
	s.end()
	return err
}

// endOne ends a stream whose server sends one message (client-streaming),
// once it is received: the caller calls RecvMsg once (CloseAndRecv), and
// grpc-go ends such a stream there too.
func (s *hstream) endOne() {
	if !s.desc.ServerStreams {
		s.end()
	}
}

// deliver copies the winner's first message f into the caller's m.
func deliver(f proto.Message, m any) error {
	dst, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "hedgegrpc: RecvMsg(%T): not a protobuf message", m)
	}
	if dst.ProtoReflect().Descriptor() == f.ProtoReflect().Descriptor() {
		proto.Reset(dst)
		proto.Merge(dst, f)
		return nil
	}
	b, err := proto.Marshal(f)
	if err == nil {
		err = proto.Unmarshal(b, dst)
	}
	if err != nil {
		return status.Errorf(codes.Internal, "hedgegrpc: RecvMsg(%T): %v", m, err)
	}
	return nil
}

// end is the end of the stream as the caller sees it, the first time
// RecvMsg returns an error: the caller's Header, Trailer and Peer options
// get the winner's (or the failure's) values, and the winner's context is
// released.
func (s *hstream) end() {
	h := s.h
	h.mu.Lock()
	if s.ended {
		h.mu.Unlock()
		return
	}
	s.ended = true
	u, out, aborted := s.winner, h.outcome, h.aborted
	var cs grpc.ClientStream
	var cancel context.CancelFunc
	seen := false // the winner's end was seen by its watcher
	if u != nil {
		cs, cancel, seen = u.cs, h.slots[u.index].cancel, u.final != nil
	}
	h.mu.Unlock()
	s.stop()
	if cancel != nil {
		defer cancel()
	}
	if cs == nil {
		if out == nil || aborted {
			return // the caller gave up before any attempt won
		}
		s.fill(out.header, out.trailer, out.peer)
		return
	}
	trailer := cs.Trailer()
	if pb, ok := pushback(trailer); ok && pb >= 0 && !seen {
		h.c.p.Pushback(h.key, time.Now().Add(pb))
	}
	var header metadata.MD
	if s.headerAddr != nil {
		header, _ = cs.Header() // the stream is over: this does not block
	}
	pr, _ := peer.FromContext(cs.Context())
	s.fill(header, trailer, pr)
}

// fill sets the caller's grpc.Header, grpc.Trailer and grpc.Peer options.
func (s *hstream) fill(header, trailer metadata.MD, pr *peer.Peer) {
	if s.headerAddr != nil {
		*s.headerAddr = header
	}
	if s.trailerAddr != nil {
		*s.trailerAddr = trailer
	}
	if s.peerAddr != nil && pr != nil {
		*s.peerAddr = *pr
	}
}

// Header returns the winner's header metadata, waiting for the stream to
// commit. As with grpc-go, nil and no error mean the stream ended without
// headers: RecvMsg tells its status.
func (s *hstream) Header() (metadata.MD, error) {
	h := s.h
	h.mu.Lock()
	for !h.decided || (s.winner != nil && s.winner.cs == nil && s.winner.final == nil) {
		s.cond.Wait()
	}
	h.mu.Unlock()
	cs, _ := s.winnerStream()
	if cs == nil {
		return nil, nil
	}
	return cs.Header()
}

// Trailer returns the winner's trailer metadata, or the failure's. Like
// grpc-go's, it is meant to be called once RecvMsg has returned an error.
func (s *hstream) Trailer() metadata.MD {
	cs, out := s.winnerStream()
	switch {
	case cs != nil:
		return cs.Trailer()
	case out != nil:
		return out.trailer
	}
	return nil
}

// Context returns the winner's stream context once the stream has
// committed, the caller's before.
func (s *hstream) Context() context.Context {
	if cs, _ := s.winnerStream(); cs != nil {
		return cs.Context()
	}
	return s.h.ctx
}

// winnerStream returns the winner's stream, nil if there is none or it is
// not open, and the call's outcome.
func (s *hstream) winnerStream() (grpc.ClientStream, *result) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.winner == nil {
		return nil, h.outcome
	}
	return s.winner.cs, h.outcome
}
