package tailcut

import (
	"reflect"
	"slices"
)

// Counter describes one counter of [Counts] as it is published, from the
// tags of its field: the exporters (hedgeprom, hedgeotel) and the JSON
// derive their lists from [Counters], so that a counter added to Counts
// with its tags is published everywhere.
type Counter struct {
	// Field is the name of the Counts field.
	Field string
	// Name is its key in the JSON of Counts ([Counts.MarshalJSON]).
	Name string
	// Metric is the Prometheus metric's name after the namespace, e.g.
	// "requests_total"; Instrument the OpenTelemetry instrument's after
	// the prefix, e.g. "requests.started".
	Metric, Instrument string
	// Unit is what one count is, singular: "request", "hedge".
	Unit string
	// Help describes the counter in a metric's help text.
	Help string
	// ByReason reports an array indexed by Decision (index:"decision"):
	// [Counts.Each] reports it once per cause of denial, which the metrics
	// label with its name. An array indexed by attempt (index:"attempt")
	// is reported as the sum of its hedges' entries, index 0 (the
	// primary) left out.
	ByReason bool

	slot, slots int // the counter's place in Counts.slots
}

var counterList = countersOf(reflect.TypeFor[Counts]())

// countersOf reads the tags of t's fields (see [Counts]). It panics on a
// field that is not an int64 or an array of them, or that lacks a tag: a
// counter added without its names stops every program at start, tests
// first.
func countersOf(t reflect.Type) []Counter {
	list := make([]Counter, 0, t.NumField())
	slot := 0
	for i := range t.NumField() {
		f := t.Field(i)
		c := Counter{Field: f.Name, Name: f.Tag.Get("json"), Metric: f.Tag.Get("metric"), Instrument: f.Tag.Get("otel"),
			Unit: f.Tag.Get("unit"), Help: f.Tag.Get("help"), slot: slot, slots: 1}
		if c.Name == "" || c.Metric == "" || c.Instrument == "" || c.Unit == "" || c.Help == "" {
			panic("tailcut: Counts." + f.Name + " lacks one of its json, metric, otel, unit and help tags")
		}
		index := f.Tag.Get("index")
		switch {
		case f.Type.Kind() == reflect.Int64 && index == "":
		case f.Type.Kind() == reflect.Array && f.Type.Elem().Kind() == reflect.Int64 &&
			(index == "decision" && f.Type.Len() == NumDecisions || index == "attempt" && f.Type.Len() == MaxHedgesLimit+1):
			c.slots, c.ByReason = f.Type.Len(), index == "decision"
		default:
			panic("tailcut: Counts." + f.Name + " is neither an int64 nor an array of them indexed by decision or attempt")
		}
		if f.Offset != uintptr(slot)*8 {
			panic("tailcut: Counts." + f.Name + " is not where its slot is")
		}
		slot += c.slots
		list = append(list, c)
	}
	if slot != int(countSlots) {
		panic("tailcut: Counts has room for more than its counters")
	}
	return list
}

// Counters returns the counters of [Counts], in the order of its fields:
// what [Counts.Each] reports.
func Counters() []Counter { return slices.Clone(counterList) }

// Each calls f for each counter of c, in the order of [Counters], with i
// its index there and v its value. A counter ByReason is reported once per
// cause of denial (every Decision but Send and DryRun), with reason its
// name ([Decision.String]), the others once with reason "". Each neither
// allocates nor reads a clock.
func (c *Counts) Each(f func(i int, reason string, v int64)) {
	s := c.slots()
	for i := range counterList {
		k := &counterList[i]
		switch {
		case k.ByReason:
			for d := range numDecisions {
				if d.denial() {
					f(i, d.String(), s[k.slot+int(d)])
				}
			}
		case k.slots > 1: // by attempt: the hedges' wins
			var n int64
			for _, v := range s[k.slot+1 : k.slot+k.slots] {
				n += v
			}
			f(i, "", n)
		default:
			f(i, "", s[k.slot])
		}
	}
}

// Combine calls f(x, y) for each counter x of c (a pointer to it) and the
// same counter y of o, an array's entries one by one: it sums, subtracts or
// clamps whole Counts without naming their fields.
func (c *Counts) Combine(o *Counts, f func(x *int64, y int64)) {
	a, b := c.slots(), o.slots()
	for i := range a {
		f(&a[i], b[i])
	}
}

// denial reports whether d is a cause of denial: every Decision but Send
// and DryRun.
func (d Decision) denial() bool { return d != Send && d != DryRun }
