package tailcut

import (
	"time"
	"unsafe"

	"github.com/tailcut/tailcut/internal/gain"
	"github.com/tailcut/tailcut/latency"
)

// The gain fuse checks what hedges buy against what not hedging gives, on
// the key's own traffic, and switches a key's hedges off where they do not
// improve its tail ([DenyGain], Config.Gain): it measures, now and then, a
// pair of adjacent rounds of a key's requests, one hedged and one held out,
// and compares the time their requests spent beyond the key's
// [GainQuantile]. internal/gain's doc says how.

// GainState is the state of a key's gain fuse.
type GainState uint32

const (
	// GainClosed means hedges are allowed: they paid, or have not been
	// measured yet.
	GainClosed GainState = iota
	// GainOpen means hedges are denied ([DenyGain]): in the last two
	// measured pairs (or the last probe), the requests hedged spent more
	// time in the tail than those held out.
	GainOpen
)

// String returns "closed" or "open".
func (s GainState) String() string {
	switch s {
	case GainClosed:
		return "closed"
	case GainOpen:
		return "open"
	}
	return "unknown"
}

// GainQuantile is the quantile of a key's primaries beyond which the gain
// fuse compares rounds: deep enough to be the tail, shallow enough that a
// round of the default GainConfig.Round requests holds about twenty
// requests beyond it without hedging.
const GainQuantile = 0.95

// GainFigures is the last verdict of a key's gain fuse: the pair of rounds
// it measured.
type GainFigures struct {
	// Threshold is the latency the pair's requests were compared with:
	// the key's GainQuantile at the pair's start.
	Threshold time.Duration
	// Hedged and HeldOut are the shares of the pair's requests, hedged
	// and held out, whose end-to-end latency exceeded Threshold.
	Hedged, HeldOut float64
	// HedgedExcess and HeldOutExcess are the mean time by which the
	// pair's requests, hedged and held out, exceeded Threshold (a request
	// faster than it counting zero): the tail's weight, which the verdict
	// compares.
	HedgedExcess, HeldOutExcess time.Duration
	// Wins is the number of the hedged round's requests a hedge
	// answered, and SavedPerWin the time each saved, as measured: the
	// tail time the hedged round was spared against the held-out one
	// (HeldOutExcess − HedgedExcess, times the hedged round's requests),
	// shared among its winning hedges. A winning hedge's primary is
	// cancelled, so what it would have taken is not observed; this
	// figure needs no model of it, and is conservative: it counts only
	// time beyond Threshold. Negative when the hedged round's tail was
	// the heavier; zero without a winning hedge.
	Wins        int64
	SavedPerWin time.Duration
	// Pays reports the verdict: HedgedExcess below HeldOutExcess.
	Pays bool
}

// gainFuse is one key's gain fuse (internal/gain's Fuse). Its zero value
// is a fuse that is off (a policy without it); init turns it on.
type gainFuse struct{ gain.Fuse }

// init turns the fuse on. It must be called before the key is shared.
func (f *gainFuse) init() { f.Init() }

// record counts a request begun in phase ph that took lat (ns) end to end.
func (f *gainFuse) record(ph uint64, lat int64, won bool) { f.Record(ph, lat, won) }

// figures returns the fuse's state, its last verdict and the number of
// verdicts taken; zeros for a fuse that is off.
func (f *gainFuse) figures() (GainState, GainFigures, int64) {
	s, g, n := f.Figures()
	return GainState(s), GainFigures(g), n
}

// heldOut reports whether a request that began in phase ph is held out.
func heldOut(ph uint64) bool { return gain.HeldOut(ph) }

// rollGain begins the next gain round of ks at now (gain.Fuse.Roll), count
// being the key's requests.
func (p *Policy) rollGain(ks *keyState, count int64, now time.Time) {
	threshold := func() (time.Duration, bool) {
		var sc latency.Scratch
		defer sc.Release()
		dist, ok := ks.Est().DistributionWith(&sc, now)
		if !ok {
			return 0, false
		}
		return dist.Hedged(GainQuantile), true
	}
	if ks.gain.Roll(p.cfg.Gain.Round, p.cfg.Gain.OpenFor, count, now.UnixNano(), threshold) {
		ks.count(unsafe.Offsetof(Counts{}.GainTrips)).Add(1)
	}
}

// gainPhase returns the phase of a request begun on ks as its count-th
// request at now, rolling the round first when it is due.
func (p *Policy) gainPhase(ks *keyState, count int64, now time.Time) uint64 {
	if count >= ks.gain.Next() {
		p.rollGain(ks, count, now)
	}
	return ks.gain.Phase()
}
