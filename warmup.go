package tailcut

import "time"

// A key's warm-up, when Config.WarmupDelay is left at its default. The
// default 10 ms is a guess, and a guess far below the service's latency
// hedges every request while the key learns: on a service of 100 ms, each
// request of the first round is hedged at 10 ms and again at 20 ms, and
// the budget those hedges drain is not there for the first stragglers.
// Two rules make the guess cheap:
//
//   - Once the key has answers, however few, its warm-up delay is at
//     least key.WarmupFloor × their median (key.State.Delay).
//   - A request begun before the key's first answer (Request.blind) has
//     its first hedge re-timed at each slot from what the key knows then
//     (Policy.retime, key.State.Retime): the key's delay in force once an answer has come,
//     and until then key.WarmupFloor × the request's age, since a request
//     outliving every answer so far is not yet a straggler. Such a slot
//     is answered DenyEarly, and the caller asks again at the request's
//     new HedgeAt(1).
//
// A WarmupDelay set explicitly is used as given, and neither rule applies.

// retime re-times the first hedge of r, a request begun before its key's
// first answer, from what the key knows at now, and reports whether the
// slot at now is too early for it: then r's Delay (HedgeAt(1)) is the new
// time of its first hedge, and its later slots follow the key's schedule
// from there. Once r has a hedge it is re-timed no more; a slot that is
// not early but denied for another reason leaves it blind, and its next
// slot is looked at again.
func (p *Policy) retime(r *Request, now time.Time) bool {
	if r.hedges+int(r.would) > 0 {
		r.blind = false
		return false
	}
	d, gap, limit, early := r.ks.Retime(time.Duration(now.UnixNano()-r.start), now, &p.set)
	if !early {
		return false
	}
	r.delay, r.gap, r.asks = d, gap, 0
	if limit > 0 {
		r.limit = limit
	}
	return true
}
