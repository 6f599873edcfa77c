package tailcut

import (
	"time"
	"unsafe"

	"github.com/tailcut/tailcut/budget"
)

// BeginChained is [Policy.Begin] for a request made while serving a
// request that arrived as a hedge (a context marked by [WithChainStop]):
// it is marked with [Request.StopChain], so that it is sent once, its
// hedges denied with [DenyChained], and it pays for itself from the
// budget instead of depositing into it. Its primary's latency is learned
// as any primary's, by the key alone: a request never hedged carries no
// features ([Policy.BeginWith]).
//
// Such a request is extra load already: the hedge of the hop upstream,
// forwarded. It deposits nothing, and takes one token if the budget has
// one; if not, it is sent all the same and the policy owes the token:
// the next token one of its own hedges is granted pays the debt, and that
// hedge is denied as [DenyBudget]. So a hop's own hedges and the hedges
// it forwards together stay within its budget (for a ratio budget,
// Ratio × its primaries plus the burst and the floor), and a chain of
// hops with equal budgets sends the last one at most (1 + Ratio) ×
// requests plus those allowances, where a budget per hop would add one
// Ratio per hop. The debt is kept to the budget's burst
// (budget.DefaultBurst for a budget that does not state one): a token
// owed past it is forgiven, so that once the forwarded hedges stop, the
// hop's own hedges wait at most one burst's worth of deposits.
// Counts.Chained counts these requests, Counts.ChainOwed those that found
// no token.
func (p *Policy) BeginChained(key string, now time.Time) Request {
	return p.begin(key, now, true)
}

// payChained pays, at now, for a request to ks begun chain-stopped: one
// token of the budget, or owed (BeginChained).
func (p *Policy) payChained(ks *keyState, now time.Time) {
	ks.count(unsafe.Offsetof(Counts{}.Chained)).Add(1)
	if p.cfg.Budget.Withdraw(now) {
		return
	}
	ks.count(unsafe.Offsetof(Counts{}.ChainOwed)).Add(1)
	limit := debtLimit(p.cfg.Budget, now)
	for {
		d := p.chainDebt.Load()
		if d >= limit || p.chainDebt.CompareAndSwap(d, d+1) {
			return
		}
	}
}

// repay reports whether the token the budget just granted pays a debt of
// a request begun chain-stopped, and pays it.
func (p *Policy) repay() bool {
	for {
		d := p.chainDebt.Load()
		if d <= 0 {
			return false
		}
		if p.chainDebt.CompareAndSwap(d, d-1) {
			return true
		}
	}
}

// debtLimit is the most tokens a policy with budget b owes at now: the
// budget's burst, at least one token.
func debtLimit(b budget.Budget, now time.Time) int64 {
	burst := budget.DefaultBurst
	switch v := b.(type) {
	case interface {
		Limits() (ratio, burst, floor float64)
	}:
		_, burst, _ = v.Limits()
	case interface{ Burst(time.Time) float64 }:
		burst = v.Burst(now)
	}
	return max(1, int64(burst))
}
