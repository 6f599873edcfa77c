// Package bench compares tailcut's hedgehttp with other Go hedging
// libraries: the per-request overhead of each (benchmarks in this package)
// and the bhope workload run through each (cmd/bhope). It is a separate
// module so that the libraries compared never become dependencies of
// tailcut.
package bench
