package tailcut_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/tailcut/tailcut"
)

// errNil stands for a client's "not found" answer: go-redis's redis.Nil,
// database/sql's sql.ErrNoRows.
var errNil = errors.New("cache: nil")

// cache is a stand-in for a cache client such as go-redis's.
type cache map[string]string

func (c cache) Get(ctx context.Context, key string) (string, error) {
	if v, ok := c[key]; ok {
		return v, nil
	}
	return "", errNil
}

// A cache miss is an answer, not a failure: Do returns it at once, as the
// client returned it (err == errNil holds), sends no further attempt for
// it, and the policy counts it as answered — a workload with misses keeps
// its circuit breaker closed and its hedges on. One key for the
// operation, not one per item: the policy learns GET's latency once.
func ExampleDo_cacheMiss() {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		panic(err)
	}
	rdb := cache{"user:1": "ada"}
	for _, item := range []string{"user:1", "user:2"} {
		v, err := tailcut.Do(context.Background(), p, "redis:GET", func(ctx context.Context, a tailcut.Attempt) (string, error) {
			return rdb.Get(ctx, item)
		})
		switch {
		case err == errNil:
			fmt.Println(item, "not found")
		case err != nil:
			fmt.Println(item, "failed:", err)
		default:
			fmt.Println(item, "=", v)
		}
	}
	s := p.Stats()
	fmt.Println("requests:", s.Requests, "attempts:", s.Attempts, "failed:", s.Failed)
	// Output:
	// user:1 = ada
	// user:2 not found
	// requests: 2 attempts: 2 failed: 0
}

// An error that would look like a failure of the downstream, but is the
// answer, is marked with Final; a failure that does not look like one (a
// replica still loading its data) with Transient. Do returns either
// without its mark.
func ExampleFinal() {
	errLoading := errors.New("LOADING Redis is loading the dataset in memory")
	fmt.Println(tailcut.ErrorClass(errNil), tailcut.ErrorClass(errLoading))
	fmt.Println(tailcut.ErrorClass(tailcut.Transient(errLoading)), tailcut.ErrorClass(context.DeadlineExceeded))

	p, _ := tailcut.New(tailcut.Config{})
	_, err := tailcut.Do(context.Background(), p, "redis:GET", func(ctx context.Context, a tailcut.Attempt) (string, error) {
		if a.Index == 0 {
			return "", tailcut.Transient(errLoading) // the next attempt goes at once
		}
		return "ada", nil
	})
	fmt.Println(err, p.Stats().Attempts)
	// Output:
	// fatal fatal
	// retryable retryable
	// <nil> 2
}

// DoReplicas sends each attempt to another backend, the primary to the
// faster by recent latency: here the primary is stuck, and the hedge that
// rescues it goes to the other replica.
func ExampleDoReplicas() {
	type client struct{ name string } // a client of one replica, e.g. a *redis.Client
	rs, err := tailcut.NewReplicas(&client{"replica-a"}, &client{"replica-b"})
	if err != nil {
		panic(err)
	}
	p, _ := tailcut.New(tailcut.Config{WarmupDelay: 10 * time.Millisecond})
	var primary string
	v, err := tailcut.DoReplicas(context.Background(), p, "redis:GET", rs,
		func(ctx context.Context, c *client, a tailcut.Attempt) (string, error) {
			if a.Index == 0 {
				primary = c.name
				<-ctx.Done() // stuck behind a slow command; cancelled once the hedge wins
				return "", ctx.Err()
			}
			return c.name, nil
		})
	fmt.Println(err, v != primary, "hedges:", p.Stats().Hedges)
	// Output: <nil> true hedges: 1
}

// GatherOver fans out over 8 items under one policy key. A miss comes
// back as a value (found false), so that it does not end the fan-out.
func ExampleGatherOver() {
	p, _ := tailcut.New(tailcut.Config{})
	rdb := cache{"k1": "a", "k2": "b", "k5": "e"}
	type result struct {
		v     string
		found bool
	}
	items := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}
	rs, err := tailcut.GatherOver(context.Background(), p, "redis:GET", items,
		func(ctx context.Context, item string, a tailcut.Attempt) (result, error) {
			v, err := rdb.Get(ctx, item)
			if err == errNil {
				return result{}, nil
			}
			return result{v, err == nil}, err
		})
	fmt.Println(rs, err)
	fmt.Println("policy keys:", len(p.Stats().Keys))
	// Output:
	// [{a true} {b true} { false} { false} {e true} { false} { false} { false}] <nil>
	// policy keys: 1
}

// Stats print as a summary, a line for the totals and one per key, and
// encode to JSON with names and units; Handler serves both.
func ExampleHandler() {
	p, _ := tailcut.New(tailcut.Config{Quantile: 0.95, MaxHedges: 1})
	now := time.Unix(0, 0)
	for i := range 100 {
		r := p.Begin("redis:GET", now)
		lat := time.Duration(1+i%20) * time.Millisecond
		p.Observe(&r, 0, lat, tailcut.Completed, now.Add(lat))
		p.End(&r, 0, now.Add(lat))
		now = now.Add(10 * time.Millisecond)
	}
	fmt.Println(p.Stats())

	mux := http.NewServeMux()
	mux.Handle("GET /debug/tailcut", tailcut.Handler(p))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/tailcut", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		line = strings.TrimSpace(line)
		for _, field := range []string{`"key"`, `"delay_ms"`, `"delay_source"`, `"p99_ms"`, `"breaker": "`} {
			if strings.HasPrefix(line, field) {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// tailcut: 100 requests, 0 hedges (0.0 % extra load, 0 won), 0 failed, 0 abandoned
	//   "redis:GET": delay 18.9ms (quantile), p99 20ms; breaker closed, diagnosis unknown; 100 requests, 0 hedges (0.0 % extra load, 0 won), 0 failed, 0 abandoned
	// "key": "redis:GET",
	// "delay_ms": 18.869992,
	// "delay_source": "quantile",
	// "breaker": "closed",
	// "p99_ms": 20.036887,
}
