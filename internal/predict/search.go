package predict

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// exactLimit is the most combinations of the groups' candidates (the
// last group's aside) that allocateAt searches exhaustively — three
// groups about; past it, the Lagrangian relaxation.
const exactLimit = 4096

// search is allocateAt's state: the budget, the groups' candidates at
// the t under test, and what the bisection over t has learned so far.
// Its slices keep their storage from one allocation to the next.
type search struct {
	gs      []group
	hedges  int     // the most hedges a candidate has: 1 or 2
	grant   float64 // the probability each hedge is granted
	budget  float64 // the rate × the groups' traffic
	allowed float64 // the share of the traffic that may be slower than t
	top     float64 // an upper bound of the answer, in seconds
	exact   bool    // the combinations are searched exhaustively

	choice   []int // each group's candidate, as feasible leaves it
	hiChoice []int // the relaxation's choice at its upper bound of λ
	cur      []int // exhaust's combination under way

	// lookups holds, for each combination enumerated that is within the
	// budget, how many of the last group's candidates (by cost) fit in
	// what is left: it does not depend on t, so it is searched on the
	// first exhaust only (looked) and replayed after.
	lookups  []int
	looked   bool
	byCost   []int // the last group's candidates by cost
	bestUpTo []int // bestUpTo[i]: the candidate of least share among byCost[:i+1]

	// exhaust's best combination so far, its slow share and cost, and
	// the next of lookups to replay.
	best, bestCost float64
	next           int

	// The least t found feasible and the most found infeasible, and the
	// choice feasible left at chosenAt, the last t it found feasible:
	// the answer is mostly that t, whose choice is then not searched
	// again.
	yes, no  float64
	chosen   []int
	chosenAt float64
}

// allocateAt chooses the schedule of every group that minimises the
// Target percentile of their mixed latency with their trigger rates
// within rate of their traffic, each hedge granted with probability
// grant; it returns that percentile, in seconds.
//
// Where the search is exact its feasibility is monotone in t, and two
// shortcuts give the same answer as the plain bisection at a fraction of
// its cost: a Target percentile above ceiling is of no use to the caller
// (Allocate), so if ceiling itself is not feasible the search stops
// there and returns a value above it; and *guess (the previous answer,
// which the key's next recomputation mostly finds again) is probed
// first, below and above at growing distances, so that the bisection
// evaluates only the t inside the bracket found. *guess is set to the
// answer.
func (a *Allocator) allocateAt(rate, grant, ceiling float64, guess *float64) float64 {
	s := &a.s
	s.start(a, rate, grant)
	if s.exact && !s.bracket(guess, ceiling) {
		return math.Inf(1) // above ceiling: no search needed
	}
	lo, hi := 0.0, s.top
	for range 18 {
		mid := (lo + hi) / 2
		if s.known(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	*guess = hi
	if hi != s.chosenAt {
		s.feasible(hi) // the choice at the best t
		copy(s.chosen, s.choice)
	}
	gs := s.gs
	for i := range gs {
		gs[i].delay, gs[i].limit = gs[i].cand[s.chosen[i]].d, gs[i].cand[s.chosen[i]].k
	}
	return hi
}

// start sets up the search of a's groups: their candidates, the budget,
// and whether the search is exact.
//
// With few groups the relaxation's duality gap is large — each group's
// choice is a jump in cost, and with two groups the best schedule within
// the budget is often no choice at any λ (it spends more on one group
// and less on the other than any λ would) — so up to exactLimit
// combinations are searched exhaustively. The last group's candidates
// are looked up (by cost, the best share within what is left), the
// others' combinations enumerated.
func (s *search) start(a *Allocator, rate, grant float64) {
	gs := a.gs
	var total, top float64
	hedges := 1
	if a.p.MaxHedges >= 2 {
		hedges = 2
	}
	for i := range gs {
		g := &gs[i]
		total += g.share
		g.n = 0
		g.delays(&a.p)
		g.candidates(hedges)
		top = max(top, g.dist.Quantile(1).Seconds()*2)
	}
	s.gs, s.hedges, s.grant, s.top = gs, hedges, grant, top
	s.budget = rate * total
	s.allowed = (1 - a.p.Target) * total
	s.choice = zeroed(s.choice, len(gs))
	s.hiChoice = zeroed(s.hiChoice, len(gs))
	s.cur = zeroed(s.cur, len(gs))
	s.chosen = zeroed(s.chosen, len(gs))
	s.exact = a.exact()
	s.lookups, s.looked = s.lookups[:0], false
	s.byCost, s.bestUpTo = s.byCost[:0], s.bestUpTo[:0]
	if s.exact {
		g := &gs[len(gs)-1]
		for j := range g.cand[:g.n] {
			s.byCost = append(s.byCost, j)
		}
		slices.SortFunc(s.byCost, func(a, b int) int { return cmp.Compare(g.cand[a].cost, g.cand[b].cost) })
		s.bestUpTo = zeroed(s.bestUpTo, len(s.byCost))
	}
	s.yes, s.no = math.Inf(1), math.Inf(-1)
	s.chosenAt = math.NaN()
}

// exact reports whether the groups' combinations, the last group's
// aside, are few enough (exactLimit) to be searched exhaustively.
func (a *Allocator) exact() bool {
	combos := 1
	for i := range a.gs[:len(a.gs)-1] {
		combos *= a.gs[i].n
		if combos > exactLimit {
			break
		}
	}
	return combos <= exactLimit
}

// zeroed returns s resliced to n zeros, reusing its storage.
func zeroed(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// bracket probes the exact search's feasibility at ceiling, and around
// *guess from the bisection's resolution (just under it: the answer found
// again leaves no t inside to evaluate) by growing steps, eight times
// each; *guess is cleared. It reports false when the answer is above
// ceiling.
func (s *search) bracket(guess *float64, ceiling float64) bool {
	g := *guess
	*guess = 0
	top := s.top
	if (g <= 0 || g > ceiling) && ceiling < top && !s.known(ceiling) {
		return false
	}
	if g > 0 && g < top {
		d := top / (1 << 18) * (1 - 1e-6)
		if s.known(g) {
			for ; g-d > 0 && s.known(g-d); d *= 8 {
			}
		} else {
			for ; g+d < top && !s.known(g+d); d *= 8 {
			}
		}
	}
	return !(s.no >= ceiling)
}

// known answers feasible(t) from the t found feasible and infeasible so
// far where the search is exact (monotone), and evaluates it otherwise.
func (s *search) known(t float64) bool {
	switch {
	case s.exact && t >= s.yes:
		return true
	case s.exact && t <= s.no:
		return false
	}
	if s.feasible(t) {
		s.yes = min(s.yes, t)
		copy(s.chosen, s.choice)
		s.chosenAt = t
		return true
	}
	s.no = max(s.no, t)
	return false
}

// feasible reports whether some schedule within the budget has at most
// the allowed share slower than t (seconds), and leaves the cheapest such
// (as far as the relaxation finds) in choice.
func (s *search) feasible(t float64) bool {
	tt := secondsDur(t)
	for i := range s.gs {
		s.gs[i].survivals(tt, s.hedges, s.grant)
	}
	if s.exact {
		return s.exhaust() <= s.allowed+1e-12
	}
	return s.relax() <= s.allowed+1e-12
}

// pick sets each group's choice at λ and returns the cost and the share
// of requests slower than the t under test.
func (s *search) pick(lambda float64) (cost, slow float64) {
	for i := range s.gs {
		g := &s.gs[i]
		best := g.pick(lambda)
		s.choice[i] = best
		cost += g.share * g.cand[best].cost
		slow += g.share * g.cand[best].surv
	}
	return cost, slow
}

// relax leaves in choice the relaxation's schedule within the budget and
// returns its share slower than the t under test. The largest λ whose
// choice still fits the budget is the best spending of it; a larger λ
// spends less. The choice at the answer, lo or the last hi, is kept from
// the pick that found it (hiChoice, hiSlow), not picked again.
func (s *search) relax() float64 {
	lo, hi := 0.0, 1.0
	var hiSlow float64
	for {
		c, sl := s.pick(hi)
		if c <= s.budget || hi > 1e9 {
			hiSlow = sl
			break
		}
		lo, hi = hi, hi*4
	}
	copy(s.hiChoice, s.choice)
	c, slow := s.pick(lo)
	if c > s.budget {
		for range 16 {
			mid := (lo + hi) / 2
			if c, sl := s.pick(mid); c <= s.budget {
				hi, hiSlow = mid, sl
				copy(s.hiChoice, s.choice)
			} else {
				lo = mid
			}
		}
		copy(s.choice, s.hiChoice)
		slow = hiSlow
	}
	return slow
}

// exhaust leaves in choice the combination of least slow share within
// the budget (of two within 1e-12, the cheaper) and returns that share.
func (s *search) exhaust() float64 {
	last := &s.gs[len(s.gs)-1]
	for i, j := range s.byCost {
		s.bestUpTo[i] = j
		if i > 0 && last.cand[s.bestUpTo[i-1]].surv <= last.cand[j].surv {
			s.bestUpTo[i] = s.bestUpTo[i-1]
		}
	}
	s.best, s.bestCost = math.Inf(1), math.Inf(1)
	s.next = 0
	s.enumerate(0, 0, 0)
	s.looked = true
	return s.best
}

// enumerate tries every candidate of group i on from the partial
// combination cur[:i] of the given cost and slow share, and the last
// group's best within what is left.
func (s *search) enumerate(i int, cost, slow float64) {
	if cost > s.budget+1e-15 {
		return
	}
	if i == len(s.gs)-1 {
		s.complete(i, cost, slow)
		return
	}
	g := &s.gs[i]
	for j, c := range g.cand[:g.n] {
		s.cur[i] = j
		s.enumerate(i+1, cost+g.share*c.cost, slow+g.share*c.surv)
	}
}

// complete takes for the last group, i, its candidate of least share
// among those that fit in what the combination cur[:i] left of the
// budget, and keeps the combination if it is the best so far.
func (s *search) complete(i int, cost, slow float64) {
	last := &s.gs[i]
	var k int
	if s.looked {
		k = s.lookups[s.next]
		s.next++
	} else {
		// The most the last group may cost.
		left := (s.budget + 1e-15 - cost) / last.share
		k = sort.Search(len(s.byCost), func(x int) bool { return last.cand[s.byCost[x]].cost > left }) - 1
		s.lookups = append(s.lookups, k)
	}
	if k < 0 {
		return
	}
	c := last.cand[s.bestUpTo[k]]
	v, w := slow+last.share*c.surv, cost+last.share*c.cost
	if v < s.best-1e-12 || (v <= s.best+1e-12 && w < s.bestCost) {
		s.best, s.bestCost = v, w
		copy(s.choice, s.cur)
		s.choice[i] = s.bestUpTo[k]
	}
}
