package budget

import (
	"math"
	"sync"
	"time"
)

// GrantModel is a budget that predicts the share of hedges it grants. A
// hedging policy decides what to ask for; the model answers what the
// budget would grant, so that a policy can rank schedules with the
// budget's denials counted. [Ratio] and [Windowed] implement it.
type GrantModel interface {
	// Grants predicts, when a share first of primaries asks for a first
	// hedge and a share later for a later hedge, each independently, the
	// share of first hedges granted and the share of later hedges that
	// find room: a later hedge is asked for only while the balance
	// exceeds reserve × the budget's burst, so that it leaves the rest
	// to first hedges.
	Grants(first, later, reserve float64) (grant, room float64)
}

var (
	_ GrantModel = (*Ratio)(nil)
	_ GrantModel = (*Windowed)(nil)
)

// Grants predicts the grants of b (see [GrantModel]): the exact
// stationary law of the bucket's Markov chain, the balance counted in
// deposits, when the bucket holds at most grantChainStates of them, and a
// continuous approximation (grantFluid) otherwise. The floor, which
// matters only to a client too quiet for the ratio, is left out.
func (b *Ratio) Grants(first, later, reserve float64) (grant, room float64) {
	return ratioGrants(first, later, b.ratio, b.burst, reserve)
}

// ratioGrants is [Ratio.Grants] for a bucket of the given ratio and burst.
func ratioGrants(r, later, ratio, burst, reserve float64) (grant, room float64) {
	switch {
	case r <= 0 && later <= 0:
		return 1, 1
	case ratio <= 0 || burst <= 0:
		return 0, 0
	}
	m := max(math.Round(1/ratio), 1)
	if n := math.Round(burst * m); n <= grantChainStates {
		// A pooled buffer: a fresh one would be zeroed, 16 KiB, on
		// every call, which costs more than the chain.
		buf := chainBufs.Get().(*[2 * (grantChainStates + 1)]float64)
		k := int(n) + 1
		grant, room = grantChain(r/ratio/m, later/ratio/m, int(m), int(n), int(math.Floor(reserve*n)), buf[:k], buf[k:2*k])
		chainBufs.Put(buf)
		return grant, room
	}
	return grantFluid(r+later, ratio, burst, reserve)
}

// chainBufs pools grantChain's buffers.
var chainBufs = sync.Pool{New: func() any { return new([2 * (grantChainStates + 1)]float64) }}

// grantChainStates bounds the states of the bucket's chain solved exactly:
// a bucket of up to that many deposits (burst ÷ ratio; 100 at the default
// ratio 10 % and burst 10).
const grantChainStates = 1024

// grantChain returns the share of first hedges granted by a bucket counted
// in deposits, and the share of the time it holds more than h: each
// request adds one deposit (up to n), then asks with probability q1 for a
// first hedge, granted when the bucket holds at least m, or with
// probability q2 for a later one, granted only when it holds more than
// h (one of the two at most: a later hedge is rare). A granted hedge
// takes m. The chain moves up one state at a time, so its stationary law
// π follows from the top down by balancing the flow across each cut (from
// k to k+1, against the hedges that take a state above k to k or below),
// with w(y) the chance of a withdrawal from y = min(x+1, n):
//
//	π(k) · (1 − w(k+1)) = Σ π(x) · w(y), over x > k with y − m ≤ k.
//
// suf and sufW must have n+1 entries; they are overwritten with the sums
// of π and of π·w from each state to n−1.
func grantChain(q1, q2 float64, m, n, h int, suf, sufW []float64) (grant, room float64) {
	if m > n {
		return 0, 0 // the bucket never holds a whole hedge
	}
	q1, q2 = min(q1, 1-1e-9), min(q1+q2, 1-1e-9)-q1
	// w(y), the chance of a withdrawal from y: 0 below m, q1 up to h,
	// q1 + q2 above; inv the matching 1/(1 − w).
	w := func(y int) (w, inv float64) {
		switch {
		case y < m:
			return 0, 1
		case y > h:
			return q1 + q2, 1 / (1 - q1 - q2)
		}
		return q1, 1 / (1 - q1)
	}
	top := 1.0 // π(n), unnormalised
	suf[n], sufW[n] = 0, 0
	wn, _ := w(n)
	for k := n - 1; k >= 0; k-- {
		var s float64
		if a, b := max(k+1, m-1), min(k+m-1, n-1); a <= b {
			s = sufW[a] - sufW[b+1]
		}
		if n-m <= k {
			s += top * wn // the full bucket withdraws to n − m
		}
		wk, inv := w(k + 1) // k+1 ≤ n
		pk := s * inv
		suf[k] = suf[k+1] + pk
		sufW[k] = sufW[k+1] + pk*wk
		if suf[k] > 1e200 {
			// Above the ratio π grows towards the empty bucket: rescale
			// what is known (rarely: every few hundred states at most).
			for j := k; j <= n; j++ {
				suf[j] *= 1e-200
				sufW[j] *= 1e-200
			}
			top *= 1e-200
		}
	}
	total := suf[0] + top
	// A first hedge is denied in the states x with min(x+1, n) < m,
	// x < m − 1. A later hedge belongs to a request whose first hedge
	// was granted, which left the bucket m lower: it finds room when the
	// bucket held more than h + m then, x ≥ h + m, among the
	// states that granted the first.
	denied := suf[0] - suf[max(m-1, 0)]
	granted := total - denied
	roomy := top
	if j := h + m; j < n {
		roomy += suf[j]
	}
	return min(max(0, granted/total), 1), min(max(0, roomy/granted), 1)
}

// grantFluid is the continuous approximation of the chain: below the
// ratio the token deficit is a random walk drifting back to zero, whose
// stationary law is close to exponential with the rate θ > 0 solving
// r·e^{θ(1−ratio)} + (1 − r)·e^{−θ·ratio} = 1; a hedge is denied when the
// deficit reaches the burst, with probability about θ / (e^{θ·burst} − 1).
// At the ratio that is 1/burst, and above it the budget grants at most
// ratio per request. The deficit is below (1 − reserve) × the burst with
// probability 1 − e^{−θ·burst·(1 − reserve)}: the room of a later hedge.
func grantFluid(r, ratio, burst, reserve float64) (grant, room float64) {
	if r >= ratio {
		return 1 - max(1-ratio/r, 1/burst), 0
	}
	f := func(th float64) float64 { return r*math.Exp(th*(1-ratio)) + (1-r)*math.Exp(-th*ratio) - 1 }
	hi := 1.0
	for f(hi) < 0 && hi < 1e3 {
		hi *= 2
	}
	lo := 0.0
	for range 40 { // θ to 2⁻⁴⁰ of its bracket
		mid := (lo + hi) / 2
		if f(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	th := (lo + hi) / 2
	if th*burst < 1e-9 {
		return 1 - 1/burst, 1 - reserve
	}
	return 1 - min(th/math.Expm1(th*burst), 1), -math.Expm1(-th * burst * (1 - reserve))
}

// Grants predicts the grants of b (see [GrantModel]) from the primaries
// counted in its window as of the last call that took a time
// ([Windowed.Deposits]); b's burst, for the reserve, is [Windowed.Burst].
func (b *Windowed) Grants(first, later, reserve float64) (grant, room float64) {
	return windowGrants(first, later, b.ratio, float64(b.Deposits()), b.reserve, reserve*burstShare(b.ttl))
}

// Burst returns the part of b's capacity at now that stands for the burst
// of a [Ratio] when a later hedge leaves a reserve for first hedges
// ([GrantModel]): what one second of traffic earns, a tenth of the
// capacity at the default TTL.
func (b *Windowed) Burst(now time.Time) float64 {
	return b.Capacity(now) * burstShare(b.ttl)
}

// burstShare is the share of a windowed budget's capacity that is its
// burst ([Windowed.Burst]).
func burstShare(ttl time.Duration) float64 {
	return min(float64(time.Second)/float64(ttl), 1)
}

// windowGrants predicts the grants of a windowed budget ([Windowed])
// that holds the deposits of n primaries and a reserve of tokens: its
// capacity is C = ratio × n + reserve, and the hedges it grants over any
// window are at most C. Counted window by window, the hedges asked for in
// one are K ~ Binomial(n, q), q = r + later, close to normal with mean
// μ = n·q and variance σ² = n·q(1 − q); those beyond C are denied, so the
// share granted is E[min(K, C)] / μ = 1 − (σ·φ(z) − (C − μ)·(1 − Φ(z))) / μ
// with z = (C − μ)/σ: 1 well below the ratio, C/μ ≈ ratio/r well above
// it, and in between what the window's slack absorbs. A later hedge finds
// room while the balance exceeds reserveShare × C, when the hedges
// granted in the window, G, number fewer than (1 − reserveShare)·C:
// probability Φ(((1 − reserveShare)·C − E[G])/σ_G), with the later hedges
// in G only as often as they find room.
//
// The windows slide: the one that binds a first hedge is the worst of
// many overlapping ones, whose count strays further from μ than one
// window's. For the grants the model takes σ windowSlide times the
// binomial's (the room is the balance of one window at a random time):
// one window's σ makes the grants optimistic just above the ratio. How
// close the grants and the room come to the real budget's, below, at and
// above the ratio, is pinned by TestWindowedGrants and
// TestWindowedGrantsLaterRoom; the room is rougher than the grants, the
// balance being a reflected walk that a window of independent draws only
// approximates.
func windowGrants(r, later, ratio, n, reserve, reserveShare float64) (grant, room float64) {
	switch {
	case r+later <= 0:
		return 1, 1
	case ratio <= 0:
		return 0, 0
	}
	n = max(n, 1)
	c := ratio*n + reserve
	// grantAt is the share of first hedges granted when a share q of
	// requests asks for a token.
	grantAt := func(q float64) float64 {
		mu := n * q
		sd := windowSlide * math.Sqrt(mu*max(1-q, 0))
		if sd < 1e-9 {
			return min(c/mu, 1)
		}
		z := (c - mu) / sd
		over := sd*normPDF(z) - (c-mu)*(1-normCDF(z)) // E[(K − C)⁺]
		return min(max(1-over/mu, 0), 1)
	}
	// roomAt is the share of the time the balance of one window exceeds
	// the reserve when the hedges granted are a share g of the requests.
	roomAt := func(g float64) float64 {
		mu := n * g
		if sd := math.Sqrt(mu * max(1-g, 0)); sd >= 1e-9 {
			return normCDF(((1-reserveShare)*c - mu) / sd)
		}
		return b2f(mu < (1-reserveShare)*c)
	}
	// The later hedges take tokens only as often as they find room: two
	// rounds of the fixed point.
	grant, room = grantAt(r), 1
	for range 2 {
		room = roomAt(r*grant + later*room)
		grant = grantAt(r + later*room)
	}
	return grant, room
}

// windowSlide is the factor on the standard deviation of the hedges asked
// for in a window that stands for the sliding of the windows (windowGrants).
const windowSlide = 2

// normPDF and normCDF are the standard normal density and distribution.
func normPDF(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) }
func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
