package lab

import (
	"runtime"
	"sync"
)

// parallel calls f(0), …, f(n−1) on up to GOMAXPROCS goroutines and
// returns the error of the lowest i that failed. The experiments' runs are
// deterministic and independent: run together, they give what they give
// one by one.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := range next {
				errs[i] = f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// runEach runs every strategy on cfg, one after the other: Compare
// without its baseline and verdicts, for the experiments that read only
// the figures.
func runEach(cfg Config, strategies []Strategy) ([]*Result, error) {
	rs := make([]*Result, len(strategies))
	for i, st := range strategies {
		r, err := Run(cfg, st)
		if err != nil {
			return nil, err
		}
		rs[i] = r
	}
	return rs, nil
}
