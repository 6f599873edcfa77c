package hedgegrpc

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// DefaultPushback is the pause a [Server] asks of a client whose call it
// sheds, when Server.Pushback is zero.
const DefaultPushback = time.Second

// Server is the server side of hedging: a unary interceptor that tells
// hedges from originals, counts both, and under overload sheds hedges
// before it ever sheds an original.
//
// A call is a hedge when its metadata carries "hedge-attempt: k" with
// k ≥ 1 (hedgegrpc and hedgehttp clients) or, failing that,
// "grpc-previous-rpc-attempts: k" with k ≥ 1 (gRPC's own hedging and
// retries in grpc-java, C++ and .NET). A shed call gets RESOURCE_EXHAUSTED
// and the trailer "grpc-retry-pushback-ms", which makes a hedgegrpc client
// (or any A6 client) pause its hedges; the original attempt it hedged keeps
// running, so shedding a hedge costs its caller nothing but the hedge. A
// retry from gRPC's own retry policy also carries
// grpc-previous-rpc-attempts and is treated as a hedge: it too is extra
// load, and it too is shed first. A hedge's handler runs under a context
// marked with tailcut.WithChainStop, so that the calls it makes are sent
// once, not hedged again (see NoChainStop).
//
// The zero Server counts and sheds nothing. Set the fields before the first
// call and do not change them afterwards; a Server is safe for concurrent
// use. Its stream interceptor tells stream hedges apart the same way, and
// unary calls and streams share the counters and limits.
type Server struct {
	// HedgeLimit sheds hedges while more than HedgeLimit calls (of every
	// kind) are in flight through this interceptor, this one included.
	// Zero means no limit.
	HedgeLimit int

	// HardLimit sheds every call, originals included, while more than
	// HardLimit calls are in flight. Zero means no limit. Set it above
	// HedgeLimit: hedges then always go first.
	HardLimit int

	// Overloaded, if set, is a load signal (CPU, queue length, a
	// dependency's health): while it returns true, hedges are shed.
	// Originals are never shed because of it. It is called once per hedge,
	// concurrently.
	Overloaded func(ctx context.Context) bool

	// Pushback is the pause asked of clients whose call was shed, sent in
	// milliseconds in grpc-retry-pushback-ms. Zero means DefaultPushback;
	// a negative value asks A6 clients not to send further hedges of that
	// call at all.
	Pushback time.Duration

	// NoChainStop leaves the context of a hedge unmarked, so that the
	// calls its handler makes are hedged again. By default a hedge's
	// context carries tailcut.WithChainStop: its handler's calls through
	// a hedgegrpc client (or hedgehttp's Transport, or tailcut.Do) go
	// once, their hedges counted as denied (tailcut.DenyChained), each
	// paying a token of its policy's budget (tailcut.Policy.BeginChained).
	NoChainStop bool

	inFlight                          atomic.Int64
	primaries, hedges                 atomic.Int64
	shedPrimaries, shedHedges         atomic.Int64
	canceledPrimaries, canceledHedges atomic.Int64
}

// ServerStats are a [Server]'s counters, from [Server.Stats].
type ServerStats struct {
	// Primaries and Hedges count the calls handled (not shed), by kind.
	Primaries, Hedges int64
	// ShedPrimaries and ShedHedges count the calls rejected with
	// RESOURCE_EXHAUSTED, by kind.
	ShedPrimaries, ShedHedges int64
	// CanceledPrimaries and CanceledHedges count the handled calls whose
	// client had cancelled them by the time the handler returned: mostly
	// hedging's losers, whose work was wasted unless the handler stopped
	// early on ctx.Done().
	CanceledPrimaries, CanceledHedges int64
	// InFlight is the number of calls in the handler now.
	InFlight int64
}

// Stats returns a snapshot of the counters (each read atomically).
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Primaries:         s.primaries.Load(),
		Hedges:            s.hedges.Load(),
		ShedPrimaries:     s.shedPrimaries.Load(),
		ShedHedges:        s.shedHedges.Load(),
		CanceledPrimaries: s.canceledPrimaries.Load(),
		CanceledHedges:    s.canceledHedges.Load(),
		InFlight:          s.inFlight.Load(),
	}
}

// UnaryServerInterceptor returns the interceptor; install it with
// grpc.ChainUnaryInterceptor (or grpc.UnaryInterceptor). Handlers read the
// attempt index with [AttemptFromContext].
//
// On the path that sheds nothing it costs two atomic adds and a metadata
// lookup.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return s.intercept
}

// StreamServerInterceptor returns the interceptor for streaming calls;
// install it with grpc.ChainStreamInterceptor (or grpc.StreamInterceptor).
// A stream counts as in flight, for HedgeLimit and HardLimit, until its
// handler returns; a shed stream ends before its handler runs, with
// RESOURCE_EXHAUSTED and the pushback trailer.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return s.interceptStream
}

var (
	_ grpc.UnaryServerInterceptor  = (*Server)(nil).intercept
	_ grpc.StreamServerInterceptor = (*Server)(nil).interceptStream
)

func (s *Server) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	hedge := AttemptFromContext(ctx) > 0
	defer s.inFlight.Add(-1)
	if err := s.admit(ctx, hedge); err != nil {
		return nil, err
	}
	resp, err := handler(s.chainStop(ctx, hedge), req)
	s.countCanceled(ctx, hedge)
	return resp, err
}

func (s *Server) interceptStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	hedge := AttemptFromContext(ctx) > 0
	defer s.inFlight.Add(-1)
	if err := s.admit(ctx, hedge); err != nil {
		return err
	}
	if c := s.chainStop(ctx, hedge); c != ctx {
		ss = &chainStream{ServerStream: ss, ctx: c}
	}
	err := handler(srv, ss)
	s.countCanceled(ctx, hedge)
	return err
}

// chainStop returns the context a call's handler runs under: a hedge's
// marked with tailcut.WithChainStop, unless NoChainStop is set.
func (s *Server) chainStop(ctx context.Context, hedge bool) context.Context {
	if !hedge || s.NoChainStop {
		return ctx
	}
	return tailcut.WithChainStop(ctx)
}

// chainStream is a server stream whose handler runs under ctx.
type chainStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *chainStream) Context() context.Context { return s.ctx }

// admit counts a call in flight (the caller takes it out when the call
// ends), and returns the error that sheds it, or nil and counts it
// handled.
func (s *Server) admit(ctx context.Context, hedge bool) error {
	n := s.inFlight.Add(1)
	switch {
	case s.HardLimit > 0 && n > int64(s.HardLimit):
		if hedge {
			s.shedHedges.Add(1)
		} else {
			s.shedPrimaries.Add(1)
		}
		return s.shed(ctx, "in-flight calls over the hard limit")
	case hedge && s.HedgeLimit > 0 && n > int64(s.HedgeLimit):
		s.shedHedges.Add(1)
		return s.shed(ctx, "in-flight calls over the hedge limit")
	case hedge && s.Overloaded != nil && s.Overloaded(ctx):
		s.shedHedges.Add(1)
		return s.shed(ctx, "server overloaded")
	}
	if hedge {
		s.hedges.Add(1)
	} else {
		s.primaries.Add(1)
	}
	return nil
}

// countCanceled counts a handled call whose client had cancelled it by the
// time its handler returned.
func (s *Server) countCanceled(ctx context.Context, hedge bool) {
	if ctx.Err() == nil {
		return
	}
	if hedge {
		s.canceledHedges.Add(1)
	} else {
		s.canceledPrimaries.Add(1)
	}
}

// shed sets the pushback trailer and returns the RESOURCE_EXHAUSTED error.
func (s *Server) shed(ctx context.Context, why string) error {
	d := s.Pushback
	if d == 0 {
		d = DefaultPushback
	}
	ms := int64(-1)
	if d > 0 {
		ms = min(d.Milliseconds(), 1<<31-1) // A6: a signed 32-bit integer
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, strconv.FormatInt(ms, 10)))
	return status.Error(codes.ResourceExhausted, "hedgegrpc: call shed: "+why)
}

// AttemptFromContext returns the attempt index of the incoming call in a
// server handler's context: 0 for an original (or a call from a client that
// does not hedge), k ≥ 1 for a hedge. It reads "hedge-attempt", falling
// back to A6's "grpc-previous-rpc-attempts"; a malformed value counts as an
// original, so a bad header can never get a call shed as a hedge.
func AttemptFromContext(ctx context.Context) int {
	if k, ok := attemptValue(metadata.ValueFromIncomingContext(ctx, AttemptKey)); ok {
		return k
	}
	if k, ok := attemptValue(metadata.ValueFromIncomingContext(ctx, PreviousAttemptsKey)); ok {
		return k
	}
	return 0
}

func attemptValue(v []string) (int, bool) {
	if len(v) == 0 {
		return 0, false
	}
	k, err := strconv.Atoi(v[0])
	if err != nil || k < 0 {
		return 0, false
	}
	return k, true
}
