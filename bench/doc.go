// Package bench compares tailcut's hedgehttp with other Go hedging
// libraries: the per-request overhead of each (benchmarks in this package),
// the bhope workload run through each (cmd/bhope), and four workloads run
// through each and through a sweep of fixed delays, with medians over
// interleaved repetitions (cmd/compare); and tailcut.Do and tailcut.Gather
// against real redis-server replicas with noisy neighbours, next to fixed
// delays and failsafe-go (cmd/redisbench); and the shifts and hedges the
// auto delay makes over a stationary sub-millisecond service on loopback
// (cmd/fastloop). It is a separate module so that the libraries compared
// never become dependencies of tailcut.
package bench
