package hedgegrpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/tailcut/tailcut/internal/admit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata keys of tied requests on the wire.
const (
	// TiedKey is the request metadata ("tailcut-tied: 1") by which a
	// client in tied mode ([WithTied]) asks the server for the start
	// signal. An [Admission] sends the signal to the calls that carry it
	// (every call with AdmissionOptions.SignalAll).
	TiedKey = "tailcut-tied"
	// StartedKey is the response header metadata ("tailcut-started: 1")
	// by which a server tells the client that a call has started
	// executing. An [Admission] sends the response headers carrying it as
	// a call leaves its queue, and a client with [StartSignal] takes
	// headers carrying it as the attempt's start signal.
	StartedKey = "tailcut-started"
)

// startedMD is the header metadata of the start signal, shared by every
// call: grpc-go does not modify the metadata it sends.
var startedMD = metadata.Pairs(StartedKey, "1")

// AdmissionOptions configures an [Admission].
type AdmissionOptions struct {
	// Limit is the most calls the handlers execute at once; the others
	// wait their turn in arrival order, and leave the queue without
	// running when their client cancels them. Zero means no limit: every
	// call starts at once. Must not be negative.
	Limit int

	// SignalAll sends the start signal to every call. By default only
	// calls carrying [TiedKey] (those of a client with [WithTied]) get it:
	// other clients see exactly the responses they saw without an
	// Admission.
	SignalAll bool

	// NoSignal sends no start signal: the Admission only bounds
	// concurrency.
	NoSignal bool
}

// Admission is the server half of tied requests for gRPC: unary and stream
// server interceptors that bound how many calls the handlers execute at
// once (AdmissionOptions.Limit, a FIFO queue in front of them), and tell
// the client when a call leaves the queue and starts executing, by sending
// the response headers at once, carrying [StartedKey]. A tied client
// ([WithTied]) then cancels the call's twin still queued at another
// replica, which leaves its queue without running: the queueing delay is
// hedged, the work is not.
//
// Chain it after a [Server] (which sheds before the queue) and before the
// application's own interceptors:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(srv.UnaryServerInterceptor(), adm.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(srv.StreamServerInterceptor(), adm.StreamServerInterceptor()))
//
// A call whose client cancels it while it waits never runs its handler,
// and ends with the client's cancellation (its client is gone). A handler
// that needs no bound still gains from the signal: a tied client then
// never hedges its work.
//
// The start signal sends the response headers when the call starts: a
// signalled call's handler cannot send headers of its own after that
// (grpc.SetHeader and grpc.SendHeader return an error); it sends its
// metadata in trailers instead. Calls that do not get the signal are
// untouched.
//
// An Admission is safe for concurrent use.
type Admission struct {
	opts AdmissionOptions
	q    *admit.Queue
}

// NewAdmission returns an Admission under opts. It returns an error,
// naming the field, for invalid options.
func NewAdmission(opts AdmissionOptions) (*Admission, error) {
	switch {
	case opts.Limit < 0:
		return nil, fmt.Errorf("hedgegrpc: AdmissionOptions.Limit must not be negative, got %d", opts.Limit)
	case opts.NoSignal && opts.SignalAll:
		return nil, errors.New("hedgegrpc: AdmissionOptions.NoSignal and SignalAll are exclusive")
	}
	return &Admission{opts: opts, q: admit.New(opts.Limit)}, nil
}

// UnaryServerInterceptor returns the interceptor for unary calls; install
// it with grpc.ChainUnaryInterceptor.
func (a *Admission) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return a.intercept
}

// StreamServerInterceptor returns the interceptor for streams; install it
// with grpc.ChainStreamInterceptor. A stream holds its place until its
// handler returns.
func (a *Admission) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return a.interceptStream
}

var (
	_ grpc.UnaryServerInterceptor  = (*Admission)(nil).intercept
	_ grpc.StreamServerInterceptor = (*Admission)(nil).interceptStream
)

func (a *Admission) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !a.q.Enter(ctx) {
		return nil, status.FromContextError(ctx.Err()).Err() // its client is gone
	}
	defer a.q.Release()
	if a.signals(ctx) {
		_ = grpc.SendHeader(ctx, startedMD) // fails only if the stream is gone
	}
	defer a.q.Run()()
	return handler(ctx, req)
}

func (a *Admission) interceptStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if !a.q.Enter(ctx) {
		return status.FromContextError(ctx.Err()).Err()
	}
	defer a.q.Release()
	if a.signals(ctx) {
		_ = ss.SendHeader(startedMD)
	}
	defer a.q.Run()()
	return handler(srv, ss)
}

// signals reports whether the call of ctx gets the start signal.
func (a *Admission) signals(ctx context.Context) bool {
	if a.opts.NoSignal {
		return false
	}
	return a.opts.SignalAll || len(metadata.ValueFromIncomingContext(ctx, TiedKey)) > 0
}

// AdmissionStats are an [Admission]'s counters, from [Admission.Stats]:
// the calls whose handler began to execute (Started), those cancelled by
// their client while queued, never executed (Left), those queued and
// executing now (Waiting, Running), and the total time the handlers
// spent on the calls that returned, the work executed (Busy). It is
// hedgehttp's AdmissionStats.
type AdmissionStats = admit.Stats

// Stats returns a snapshot of the counters, each read atomically.
func (a *Admission) Stats() AdmissionStats { return a.q.Stats() }
