package lab

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

func TestZZForecast(t *testing.T) {
	seeds := 1
	if s := os.Getenv("FC_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for _, name := range []string{"diurnal", "batch"} {
		sc, _ := Lookup(name)
		for seed := 1; seed <= seeds; seed++ {
			for _, per := range []time.Duration{-1, 0, 2 * time.Minute} {
				cfg := Config{Scenario: sc, Requests: sc.Defaults.Requests, Seed: uint64(seed), Policy: tailcut.Config{Period: per}}
				r, err := Run(cfg, Strategy{Kind: Adaptive})
				if err != nil {
					t.Fatal(err)
				}
				k := r.PolicyStats.Keys[0]
				fmt.Printf("%s seed %d period %v: p99 %v extra %.4f detected %v shifts %d auto %+v\n", name, seed, per, r.P99, r.ExtraLoad, k.Period, k.Shifts, *k.Auto)
			}
		}
	}
}
