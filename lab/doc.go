// Package lab is a discrete-event simulator, in virtual time, of clients
// sending (possibly hedged) requests to replicated servers: the place where
// tailcut's claims are measured and where a user tries their own latency
// distribution before turning hedging on.
//
// The model (docs/DESIGN.md, "The lab's model"): an open-loop (Poisson, [Config.Rate])
// or closed-loop ([Config.Concurrency]) client sends requests of
// [Config.Fanout] legs each — a request finishes when its last leg does —
// to [Config.Replicas] replicas with [Config.Workers] workers each and a FIFO
// queue, so extra load costs queueing delay. Service times come from a named
// [Scenario]. A server either honours cancellation (a cancelled attempt frees
// its worker, or leaves the queue) or finishes the work anyway.
//
// Every run is deterministic for a seed. Arrivals and service times are
// drawn from separate streams, and the service time of attempt k of leg j of
// request i is drawn from a stream keyed by (i, j, k) alone, so every
// [Strategy] sees exactly the same workload: `none` and `adaptive` are
// compared on identical requests.
//
// The `adaptive` strategy drives the real [tailcut.Policy] (Begin, Hedge,
// Observe, End) with the virtual clock as now: a simulated result is a
// result of the shipped decision logic, not of a model of it. Each attempt
// is observed with its own latency from its own start (queueing included, as
// a client sees it); cancelled losers are observed at their cancellation
// with [tailcut.Canceled]. Its option period (`adaptive:period=off`,
// `=detect`, `=given`, `=60s`; [Strategy.Forecast]) sets the policy's
// cycle forecast, Config.Period: never, the cycle detected, the periodic
// scenario's own period, or the one given.
//
// [Compare] runs several strategies on one workload and judges each against
// the unhedged baseline by the rollout gates: the p99 down by at least
// [GateP99Cut], errors not up, extra load within the budget plus its burst.
// A hedge rate above 50 % carries [RootCauseWarning]. Beside a policy's
// run it sets the limit ([LimitOf]): the best p99 fixed delays reach on the
// unhedged run's latencies at the same extra load, attempts independent and
// every hedge granted. The published experiments ([Experiments],
// [LookupExperiment]; `tailcut lab experiment`) reproduce claims about
// hedging next to their published figures.
//
// The virtual clock is time.Unix(0, 0) plus the simulated offset. No event
// allocates: events are values in a slice-backed heap and attempt, leg and
// request records are reused. BenchmarkDefaultRun (the default four
// strategies on 50,000 requests) and BenchmarkMillion measure the speed.
package lab
