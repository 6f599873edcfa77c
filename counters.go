package tailcut

import (
	"sync/atomic"
	"unsafe"

	"github.com/tailcut/tailcut/internal/shard"
)

// Counts are the counters shared by the policy totals and each key.
//
// Each field is declared once, with what publishes it in its tags:
// json, its key in the JSON of Counts; metric and otel, the names of the
// Prometheus metric (package hedgeprom, after the namespace) and of the
// OpenTelemetry instrument (package hedgeotel, after the prefix) that
// export it; unit, what one count is; help, the metrics' help text; and
// for an array, index, what indexes it (see [Counters]). The exporters,
// the JSON and [Counts.Each] read the fields through these tags only.
type Counts struct {
	Requests int64 `json:"requests" metric:"requests_total" otel:"requests.started" unit:"request" help:"Requests begun (primaries sent)."`
	Attempts int64 `json:"attempts" metric:"attempts_total" otel:"attempts" unit:"attempt" help:"Attempts sent: primaries plus hedges."`
	Hedges   int64 `json:"hedges" metric:"hedges_total" otel:"hedges.sent" unit:"hedge" help:"Hedges sent."`
	// Wins[k] counts requests answered by attempt k (0 is the primary);
	// the metrics count those a hedge answered.
	Wins [MaxHedgesLimit + 1]int64 `json:"wins_by_attempt" metric:"hedge_wins_total" otel:"hedge.wins" unit:"hedge" index:"attempt" help:"Requests answered by a hedge rather than the primary."`
	// Failed counts requests whose every attempt failed.
	Failed int64 `json:"failed" metric:"requests_failed_total" otel:"requests.failed" unit:"request" help:"Requests whose every attempt failed."`
	// Abandoned counts requests whose caller gave up — cancelled its
	// context, or let its deadline pass — before an answer was returned
	// ([Policy.Abandon]). They are neither answered nor failed: a caller's
	// choice counts in no error figure (Failed, the circuit breaker).
	Abandoned int64 `json:"abandoned" metric:"requests_abandoned_total" otel:"requests.abandoned" unit:"request" help:"Requests whose caller gave up (cancelled, or its deadline passed) before an answer; not failures."`
	// Denied counts hedges not sent, by cause (indexed by Decision; the
	// Send and DryRun entries are always zero). [Counts.DeniedBy] reads
	// it by name: c.DeniedBy(DenyBudget). The DenyEarly entry counts
	// slots moved later while a key warms up, which may come to a hedge
	// after all.
	Denied [numDecisions]int64 `json:"denied" metric:"hedges_denied_total" otel:"hedges.denied" unit:"hedge" index:"decision" help:"Hedges asked for and not sent, by reason (budget, max_hedges, pushback, breaker, load, sampling, inflight; chained: the call was made while serving a hedge; early: a slot moved later while the key warms up; gain: the gain fuse is open, or the request is held out to measure it)."`
	// Triggered counts requests that asked for a hedge at least once: still
	// unanswered at their hedge delay, or failed. Granted or not, each
	// counts once. It is the numerator of the diagnosis (see [Diagnosis]).
	Triggered int64 `json:"triggered" metric:"hedge_triggers_total" otel:"hedge.triggers" unit:"hedge" help:"Requests that asked for a hedge (slower than the delay, or failed), granted or not."`
	// WouldHedge counts hedges that would have been sent had Config.DryRun
	// not been set.
	WouldHedge int64 `json:"would_hedge" metric:"dry_run_hedges_total" otel:"dry_run.hedges" unit:"hedge" help:"Hedges that would have been sent in a dry run."`
	// Chained counts requests begun chain-stopped ([Policy.BeginChained]):
	// made while serving a request that arrived as a hedge, sent once,
	// each paying one token of the budget instead of depositing.
	Chained int64 `json:"chained" metric:"requests_chained_total" otel:"requests.chained" unit:"request" help:"Requests made while serving a hedge (chain stop): sent once, each paying a token of the hedge budget."`
	// ChainOwed counts the requests begun chain-stopped that found no
	// token in the budget: the policy owes it, and the next tokens its
	// own hedges are granted pay the debt instead (those hedges are
	// denied as budget).
	ChainOwed int64 `json:"chain_owed" metric:"requests_chain_owed_total" otel:"requests.chain_owed" unit:"request" help:"Requests made while serving a hedge that found the hedge budget empty: the token is owed, paid by the next hedges' tokens."`
	// BreakerTrips counts how many times the circuit breaker opened.
	BreakerTrips int64 `json:"breaker_trips" metric:"breaker_trips_total" otel:"breaker.trips" unit:"trip" help:"Times the circuit breaker on hedges opened."`
	// GainTrips counts how many times the gain fuse opened: two measured
	// pairs of rounds in a row in which the hedged requests spent more
	// time in the tail than those held out (see [GainConfig]).
	GainTrips int64 `json:"gain_trips" metric:"gain_trips_total" otel:"gain.trips" unit:"trip" help:"Times the gain fuse opened: hedged requests were measured slower in the tail than requests held out unhedged."`
}

// TriggerRate is triggered ÷ requests: the share of requests that needed a
// hedge, whether one was sent or not.
func (c Counts) TriggerRate() float64 { return ratio(c.Triggered, c.Requests) }

// WouldHedgeRate is would-hedges ÷ requests: in a dry run, the hedge rate
// that hedging would have had.
func (c Counts) WouldHedgeRate() float64 { return ratio(c.WouldHedge, c.Requests) }

// HedgeRate is hedges ÷ requests: with MaxHedges 1, the fraction of
// requests that were hedged (a request with two hedges counts twice).
func (c Counts) HedgeRate() float64 { return ratio(c.Hedges, c.Requests) }

// ExtraLoad is the load hedging added: attempts ÷ requests − 1.
func (c Counts) ExtraLoad() float64 { return ratio(c.Attempts-c.Requests, c.Requests) }

// HedgeWinRate is the fraction of hedges that won their request.
func (c Counts) HedgeWinRate() float64 { return ratio(c.hedgeWins(), c.Hedges) }

// Denials returns the total number of hedges denied, whatever the cause:
// every entry of Denied but DenyEarly's, which counts slots moved later,
// not hedges refused.
func (c Counts) Denials() int64 {
	var n int64
	for _, d := range c.Denied {
		n += d
	}
	return n - c.Denied[DenyEarly]
}

// DeniedBy returns the number of hedges denied for reason d ([DenyBudget],
// [DenyMaxHedges], [DenyPushback], [DenyBreaker], [DenyLoad],
// [DenySampling], [DenyInflight], [DenyEarly]; d.String() is its metric
// label). It is zero for [Send], [DryRun] and any value out of range, so
// a loop over every Decision below NumDecisions lists each denial once.
func (c Counts) DeniedBy(d Decision) int64 {
	if int(d) >= len(c.Denied) {
		return 0
	}
	return c.Denied[d]
}

// hedgeWins is the number of requests a hedge answered.
func (c *Counts) hedgeWins() int64 {
	var w int64
	for _, n := range c.Wins[1:] {
		w += n
	}
	return w
}

// countSlots is the number of int64 counters in Counts. Every field is an
// int64 or an array of them (countersOf panics otherwise), so Counts is
// laid out as an array of countSlots int64s: add and Combine walk it
// without naming a field.
const countSlots = unsafe.Sizeof(Counts{}) / 8

// slots is c as its array of counters.
func (c *Counts) slots() *[countSlots]int64 { return (*[countSlots]int64)(unsafe.Pointer(c)) }

// add adds o's counts to c.
func (c *Counts) add(o *Counts) {
	a, b := c.slots(), o.slots()
	for i := range a {
		a[i] += b[i]
	}
}

// counters are a key's Counts as atomics, slot for slot (Counts.slots):
// an increment names its field, ks.count(unsafe.Offsetof(Counts{}.F)),
// so that a counter is declared once, in Counts, with its tags. The slots
// of Attempts (Requests + Hedges) and of Denied[Send] and Denied[DryRun]
// (a dry run counts WouldHedge) stay zero.
type counters [countSlots]atomic.Int64

// count returns the counter of the Counts field at offset off:
// unsafe.Offsetof(Counts{}.F), plus 8 × i for entry i of an array.
func (c *counters) count(off uintptr) *atomic.Int64 { return &c[off/8] }

// add adds o's counts to c.
func (c *counters) add(o *counters) {
	for i := range c {
		if v := o[i].Load(); v != 0 {
			c[i].Add(v)
		}
	}
}

// load returns c's counts, each read atomically.
func (c *counters) load() Counts {
	var s Counts
	c.sumInto(&s)
	s.Attempts = s.Requests + s.Hedges // every attempt is a primary or a hedge
	return s
}

// sumInto adds c's counts to s, each read atomically, Attempts left as
// it is.
func (c *counters) sumInto(s *Counts) {
	slots := s.slots()
	for i := range c {
		slots[i] += c[i].Load()
	}
}

// stripeSize is the size of one stripe of a key's counters: countSlots
// counters rounded up to whole cache lines, so that no two stripes share
// a line.
const stripeSize = (countSlots*8 + shard.Line - 1) / shard.Line * shard.Line

// counterStripe is one stripe of a key's counters, alone on its lines.
type counterStripe struct {
	counters
	_ [stripeSize - countSlots*8]byte
}

// keyCounts are a key's counters. While one goroutine at a time counts,
// they count in own; once the key's requests have met on two cores
// (spread: key.State.Spread), a request counts in the stripe of its
// goroutine's shard.Hint, so that requests on different cores do not
// write one cache line, and a read sums own and the stripes. The sums
// are exact; only their order of arrival differs. The stripes, allocated
// when first used, cost shard.N × stripeSize bytes (BenchmarkKeyMemory
// measures a key without them).
type keyCounts struct {
	own     counters
	stripes shard.Lazy[counterStripe]
}

// count returns the counter of the Counts field at offset off, in own or,
// when spread, in the calling goroutine's stripe:
// unsafe.Offsetof(Counts{}.F), plus 8 × i for entry i of an array.
func (c *keyCounts) count(off uintptr, spread bool) *atomic.Int64 {
	if spread {
		return c.stripes.Get()[shard.Hint()].count(off)
	}
	return c.own.count(off)
}

// sum returns the counter of the Counts field at offset off (as count's),
// summed over own and the stripes.
func (c *keyCounts) sum(off uintptr) int64 {
	n := c.own.count(off).Load()
	if sh := c.stripes.Loaded(); sh != nil {
		for k := range sh {
			n += sh[k].count(off).Load()
		}
	}
	return n
}

// load returns the counts of c, own and the stripes summed, each counter
// read atomically.
func (c *keyCounts) load() Counts {
	var s Counts
	c.own.sumInto(&s)
	if sh := c.stripes.Loaded(); sh != nil {
		for k := range sh {
			sh[k].sumInto(&s)
		}
	}
	s.Attempts = s.Requests + s.Hedges
	return s
}

// addTo adds the counts of c to dst.
func (c *keyCounts) addTo(dst *counters) {
	dst.add(&c.own)
	if sh := c.stripes.Loaded(); sh != nil {
		for k := range sh {
			dst.add(&sh[k].counters)
		}
	}
}
