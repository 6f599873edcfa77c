package tailcut

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// numbered returns Counts whose every counter (each array entry apart)
// holds a different value, set through reflection, field by field: Send's
// and DryRun's denial entries, never counted, stay zero.
func numbered() Counts {
	var c Counts
	v := reflect.ValueOf(&c).Elem()
	n := int64(1)
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Array {
			f.SetInt(n)
			n++
			continue
		}
		for j := range f.Len() {
			if v.Type().Field(i).Name == "Denied" && !Decision(j).denial() {
				continue
			}
			f.Index(j).SetInt(n)
			n++
		}
	}
	return c
}

// TestCountersCoverCounts: every field of Counts is a Counter, read by
// Each, summed by add, visited by Combine and encoded in the JSON (and read
// back), all from its one declaration. A field declared without its tags
// stops the package at init (TestCountersOfRejects).
func TestCountersCoverCounts(t *testing.T) {
	c := numbered()
	typ := reflect.TypeFor[Counts]()
	list := Counters()
	if len(list) != typ.NumField() {
		t.Fatalf("%d counters for %d fields of Counts", len(list), typ.NumField())
	}
	seen := map[string]bool{}
	for i, k := range list {
		if k.Field != typ.Field(i).Name {
			t.Errorf("counter %d is %s, field %d is %s", i, k.Field, i, typ.Field(i).Name)
		}
		if !strings.HasSuffix(k.Metric, "_total") || strings.Contains(k.Instrument, "_total") || seen[k.Metric] || seen[k.Instrument] {
			t.Errorf("counter %s: metric %q, instrument %q: want a unique counter name in each", k.Field, k.Metric, k.Instrument)
		}
		seen[k.Metric], seen[k.Instrument] = true, true
		for d := range numDecisions {
			if k.ByReason && d.denial() && !strings.Contains(k.Help, d.String()) {
				t.Errorf("the help of %s does not name reason %s: %q", k.Field, d, k.Help)
			}
		}
	}

	// Each: a plain field's value, a denial per reason, the hedges' wins.
	v := reflect.ValueOf(c)
	got := map[string]int64{}
	c.Each(func(i int, reason string, n int64) { got[list[i].Field+"/"+reason] = n })
	want := map[string]int64{}
	for i, k := range list {
		f := v.Field(i)
		switch {
		case k.ByReason:
			for d := range numDecisions {
				if d.denial() {
					want[k.Field+"/"+d.String()] = f.Index(int(d)).Int()
				}
			}
		case f.Kind() == reflect.Array:
			want[k.Field+"/"] = c.hedgeWins()
		default:
			want[k.Field+"/"] = f.Int()
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Each reported %v, want %v", got, want)
	}

	// add and Combine: every counter, once.
	sum := c
	sum.add(&c)
	visits := 0
	sum.Combine(&c, func(x *int64, y int64) { *x -= 2 * y; visits++ })
	if sum != (Counts{}) || visits != int(countSlots) {
		t.Errorf("add then Combine left %+v after %d visits, want nothing after %d", sum, visits, countSlots)
	}

	// The JSON: every counter under its name, read back whole.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range list {
		if _, ok := doc[k.Name]; !ok {
			t.Errorf("JSON lacks %q: %s", k.Name, b)
		}
	}
	var back Counts
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Errorf("read back %+v (%v), want %+v", back, err, c)
	}
}

// TestCounterNames: the names the exporters publish stay what dashboards
// query; adding a counter adds names, never renames one.
func TestCounterNames(t *testing.T) {
	want := map[string][3]string{ // field: JSON, Prometheus, OpenTelemetry
		"Requests":     {"requests", "requests_total", "requests.started"},
		"Attempts":     {"attempts", "attempts_total", "attempts"},
		"Hedges":       {"hedges", "hedges_total", "hedges.sent"},
		"Wins":         {"wins_by_attempt", "hedge_wins_total", "hedge.wins"},
		"Failed":       {"failed", "requests_failed_total", "requests.failed"},
		"Abandoned":    {"abandoned", "requests_abandoned_total", "requests.abandoned"},
		"Denied":       {"denied", "hedges_denied_total", "hedges.denied"},
		"Triggered":    {"triggered", "hedge_triggers_total", "hedge.triggers"},
		"WouldHedge":   {"would_hedge", "dry_run_hedges_total", "dry_run.hedges"},
		"Chained":      {"chained", "requests_chained_total", "requests.chained"},
		"ChainOwed":    {"chain_owed", "requests_chain_owed_total", "requests.chain_owed"},
		"BreakerTrips": {"breaker_trips", "breaker_trips_total", "breaker.trips"},
	}
	have := map[string][3]string{}
	for _, k := range Counters() {
		have[k.Field] = [3]string{k.Name, k.Metric, k.Instrument}
	}
	for f, w := range want {
		if have[f] != w {
			t.Errorf("Counts.%s is published as %q, want %q", f, have[f], w)
		}
	}
}

// TestCountersOfRejects: a field without its names, or of a kind the
// exporters cannot read, stops the package at init.
func TestCountersOfRejects(t *testing.T) {
	const tags = `json:"x" metric:"x_total" otel:"x" unit:"x" help:"X."`
	for name, typ := range map[string]reflect.Type{
		"no tags": reflect.StructOf([]reflect.StructField{{Name: "X", Type: reflect.TypeFor[int64]()}}),
		"no help": reflect.StructOf([]reflect.StructField{{Name: "X", Type: reflect.TypeFor[int64](),
			Tag: `json:"x" metric:"x_total" otel:"x" unit:"x"`}}),
		"int32":               reflect.StructOf([]reflect.StructField{{Name: "X", Type: reflect.TypeFor[int32](), Tag: tags}}),
		"array without index": reflect.StructOf([]reflect.StructField{{Name: "X", Type: reflect.TypeFor[[NumDecisions]int64](), Tag: tags}}),
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: countersOf accepted it", name)
				}
			}()
			countersOf(typ)
		}()
	}
}

func TestCountsEachAllocs(t *testing.T) {
	c := numbered()
	var sum int64
	if n := testing.AllocsPerRun(100, func() { c.Each(func(_ int, _ string, v int64) { sum += v }) }); n != 0 {
		t.Errorf("Each allocates %v times", n)
	}
}

// TestCountersLoadFillsEveryCount: the per-key atomic counters, each slot
// holding a different value, load into Counts with every counter set (but
// the Send and DryRun denial entries, never counted), and add carries
// every slot. A field added to Counts without its atomic counterpart and
// its line in load stays zero, and fails here.
func TestCountersLoadFillsEveryCount(t *testing.T) {
	var c counters
	for i := range c {
		c[i].Store(int64(i + 1))
	}
	got := c.load()
	slots := got.slots()
	attempts := unsafe.Offsetof(Counts{}.Attempts) / 8
	for i, v := range slots {
		want := int64(i + 1)
		if uintptr(i) == attempts {
			want = got.Requests + got.Hedges
		}
		if v != want {
			t.Errorf("slot %d of Counts loads %d, want %d", i, v, want)
		}
	}
	if got.Requests == 0 || got.Hedges == 0 || got.GainTrips == 0 || got.Denied[DenyBudget] == 0 {
		t.Errorf("load left fields zero: %+v", got)
	}
	var sum counters
	sum.add(&c)
	sum.add(&c)
	want := got
	want.add(&got)
	if l := sum.load(); l != want {
		t.Errorf("counters.add: loads %+v, want %+v", l, want)
	}
}

// TestKeyCountsSumEveryStripe: a key's counters read back (load, sum)
// its own counts and those of every stripe, not only those of the
// reader's shard: each holding its own value, the totals are their sums.
func TestKeyCountsSumEveryStripe(t *testing.T) {
	var c keyCounts
	reqs := unsafe.Offsetof(Counts{}.Requests)
	hedges := unsafe.Offsetof(Counts{}.Hedges)
	c.count(reqs, false).Store(1)
	want := int64(1)
	s := c.stripes.Get()
	for k := range s {
		s[k].count(reqs).Store(int64(2) << k)
		s[k].count(hedges).Store(1)
		want += int64(2) << k
	}
	if got := c.sum(reqs); got != want {
		t.Errorf("sum of Requests = %d, want %d", got, want)
	}
	l := c.load()
	if l.Requests != want || l.Hedges != int64(len(s)) || l.Attempts != want+int64(len(s)) {
		t.Errorf("load = %d requests, %d hedges, %d attempts; want %d, %d, %d", l.Requests, l.Hedges, l.Attempts, want, len(s), want+int64(len(s)))
	}
	var into counters
	c.addTo(&into)
	if got := into.load(); got != l {
		t.Errorf("addTo carries %+v, want %+v", got, l)
	}
}

// TestStripesConcurrentTotals: requests from many goroutines at once,
// which count in different stripes, add up to exact totals (run with
// -race).
func TestStripesConcurrentTotals(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := time.Unix(1_700_000_000, 0)
			for i := range each {
				now = now.Add(time.Millisecond)
				r := p.Begin("k", now)
				p.Observe(&r, 0, time.Duration(1+(g+i)%5)*time.Millisecond, Completed, now)
				p.End(&r, 0, now)
			}
		}()
	}
	wg.Wait()
	c := p.Counts()
	if c.Requests != goroutines*each || c.Wins[0] != goroutines*each {
		t.Errorf("%d requests, %d won by the primary; want %d each", c.Requests, c.Wins[0], goroutines*each)
	}
}
