package hedgedhttp

import (
	"sync/atomic"

	"github.com/tailcut/tailcut"
)

// Stats are the statistics of a hedged client or RoundTripper, read from
// the counters of its policies (see the package documentation for the
// mapping). Each method reads them afresh; the zero Stats reads zeros.
type Stats struct {
	src *hedgedTransport // nil for the zero Stats

	// Attempts the policies learned as Failed and Canceled (Policy.OnAttempt).
	failed, canceled atomic.Uint64
}

// attempt counts one attempt the policy of a leg recorded.
func (s *Stats) attempt(e tailcut.AttemptEvent) {
	switch e.Outcome {
	case tailcut.Failed:
		s.failed.Add(1)
	case tailcut.Canceled:
		s.canceled.Add(1)
	}
}

// totals are the sums of the policies' counters that Stats reports.
type totals struct {
	requests, attempts, originalWins, hedgedWins, abandoned uint64
}

// totals reads the counters of every policy once.
func (s *Stats) totals() totals {
	var t totals
	if s.src == nil {
		return t
	}
	for i := range s.src.legs {
		l := s.src.legs[i].Load()
		if l == nil {
			continue
		}
		c := l.p.Counts()
		t.requests += uint64(c.Requests)
		t.attempts += uint64(c.Attempts)
		t.originalWins += uint64(c.Wins[0])
		for _, w := range c.Wins[1:] {
			t.hedgedWins += uint64(w)
		}
		t.abandoned += uint64(c.Abandoned)
	}
	return t
}

// RequestedRoundTrips returns the number of requests hedged or sent once
// under a policy (an upto of 1 or more, a method tailcut may repeat).
func (s *Stats) RequestedRoundTrips() uint64 { return s.totals().requests }

// ActualRoundTrips returns the number of attempts sent: the requests'
// first attempts and their hedges.
func (s *Stats) ActualRoundTrips() uint64 { return s.totals().attempts }

// FailedRoundTrips returns the number of attempts that failed without a
// final answer: a transport error, or a 502, 503 or 504.
func (s *Stats) FailedRoundTrips() uint64 { return s.failed.Load() }

// OriginalRequestWins returns the number of requests answered by their
// first attempt.
func (s *Stats) OriginalRequestWins() uint64 { return s.totals().originalWins }

// HedgedRequestWins returns the number of requests answered by a hedge.
func (s *Stats) HedgedRequestWins() uint64 { return s.totals().hedgedWins }

// CanceledByUserRoundTrips returns the number of requests whose caller
// gave up (cancelled the request's context or let its deadline pass)
// before an answer.
func (s *Stats) CanceledByUserRoundTrips() uint64 { return s.totals().abandoned }

// CanceledSubRequests returns the number of attempts cancelled because
// another attempt of their request won.
func (s *Stats) CanceledSubRequests() uint64 { return s.canceled.Load() }

// StatsSnapshot is a snapshot of [Stats].
type StatsSnapshot struct {
	RequestedRoundTrips      uint64 // requests hedged or sent once under a policy
	ActualRoundTrips         uint64 // attempts sent
	FailedRoundTrips         uint64 // attempts failed without a final answer
	CanceledByUserRoundTrips uint64 // requests whose caller gave up
	CanceledSubRequests      uint64 // attempts cancelled because another won
}

// Snapshot returns the statistics, the policies' counters read once.
func (s *Stats) Snapshot() StatsSnapshot {
	t := s.totals()
	return StatsSnapshot{
		RequestedRoundTrips:      t.requests,
		ActualRoundTrips:         t.attempts,
		FailedRoundTrips:         s.FailedRoundTrips(),
		CanceledByUserRoundTrips: t.abandoned,
		CanceledSubRequests:      s.CanceledSubRequests(),
	}
}
