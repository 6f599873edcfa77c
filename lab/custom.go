package lab

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxSamples bounds a samples file, so that a wrong file cannot exhaust
// memory.
const maxSamples = 10_000_000

// ParseSamples reads latency samples, one per line: a Go duration ("12ms",
// "0.8s", "1m") or a bare number of milliseconds ("12", "0.8"). Blank lines
// and lines starting with # are skipped. Errors name the line.
func ParseSamples(r io.Reader) ([]time.Duration, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	var out []time.Duration
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		d, err := parseSample(s)
		if err != nil {
			return nil, fmt.Errorf("lab: samples line %d: %w", line, err)
		}
		if len(out) == maxSamples {
			return nil, fmt.Errorf("lab: samples: more than %d samples", maxSamples)
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lab: samples line %d: %w", line+1, err)
	}
	if len(out) == 0 {
		return nil, errors.New("lab: samples: no samples found (want one duration per line, like 12ms, 0.8s or 12)")
	}
	return out, nil
}

// maxLatency bounds one sample or spec value: a day.
const maxLatency = 24 * time.Hour

func parseSample(s string) (time.Duration, error) {
	var d time.Duration
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > float64(maxLatency/time.Millisecond) {
			return 0, fmt.Errorf("bad latency %q (want a non-negative number of milliseconds up to a day)", s)
		}
		d = time.Duration(v * float64(time.Millisecond))
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("bad latency %q (want a duration like 12ms or 0.8s, or a number of milliseconds)", s)
		}
	}
	if d < 0 || d > maxLatency {
		return 0, fmt.Errorf("latency %q out of range [0, 24h]", s)
	}
	return d, nil
}

// Spec is a service-time distribution written by hand, in YAML or JSON:
//
//	name: checkout
//	components:
//	  - {weight: 0.90, dist: uniform, min: 80ms, max: 120ms}
//	  - {weight: 0.05, dist: lognormal, mean: 300ms, sd: 20ms}
//	  - {weight: 0.05, dist: constant, value: 800ms}
//
// Each attempt draws a component with probability weight ÷ total weight,
// then a latency from it. Durations are Go durations or numbers of
// milliseconds. Optional fields set the scenario's defaults: requests,
// rate, concurrency, fanout, replicas, workers.
type Spec struct {
	Name        string          `yaml:"name"`
	Components  []SpecComponent `yaml:"components"`
	Requests    int             `yaml:"requests"`
	Rate        float64         `yaml:"rate"`
	Concurrency int             `yaml:"concurrency"`
	Fanout      int             `yaml:"fanout"`
	Replicas    int             `yaml:"replicas"`
	Workers     int             `yaml:"workers"`
}

// SpecComponent is one component of a [Spec]: constant (value), uniform
// (min, max), lognormal (mean, sd) or exponential (mean).
type SpecComponent struct {
	Weight float64      `yaml:"weight"`
	Dist   string       `yaml:"dist"`
	Value  SpecDuration `yaml:"value"`
	Min    SpecDuration `yaml:"min"`
	Max    SpecDuration `yaml:"max"`
	Mean   SpecDuration `yaml:"mean"`
	SD     SpecDuration `yaml:"sd"`
}

// SpecDuration is a duration in a spec: "12ms" or a number of milliseconds.
type SpecDuration time.Duration

// UnmarshalYAML accepts a Go duration string or a number of milliseconds.
func (d *SpecDuration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration like 12ms, got a %s", n.Line, kindName(n.Kind))
	}
	v, err := parseSample(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = SpecDuration(v)
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		return "value"
	}
}

// maxSpecSize bounds a spec file.
const maxSpecSize = 1 << 20

// ParseSpec reads a [Spec] in YAML or JSON (JSON is YAML). Unknown fields
// are errors with their line number; so are bad values.
func ParseSpec(r io.Reader) (*Spec, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("lab: spec: %w", err)
	}
	if len(b) > maxSpecSize {
		return nil, fmt.Errorf("lab: spec: larger than %d bytes", maxSpecSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("lab: spec: empty")
		}
		return nil, fmt.Errorf("lab: spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks the spec, naming the bad field.
func (s *Spec) Validate() error {
	if len(s.Components) == 0 {
		return errors.New("lab: spec: components: at least one component is needed")
	}
	if len(s.Components) > 1000 {
		return errors.New("lab: spec: components: at most 1000")
	}
	total := 0.0
	for i, c := range s.Components {
		at := fmt.Sprintf("lab: spec: components[%d]", i)
		if !(c.Weight > 0) || math.IsInf(c.Weight, 0) {
			return fmt.Errorf("%s: weight must be positive, got %v", at, c.Weight)
		}
		total += c.Weight
		switch c.Dist {
		case "constant":
			if c.Min != 0 || c.Max != 0 || c.Mean != 0 || c.SD != 0 {
				return fmt.Errorf("%s: constant takes only value", at)
			}
		case "uniform":
			if c.Max < c.Min || c.Max == 0 {
				return fmt.Errorf("%s: uniform needs 0 ≤ min ≤ max and max > 0, got min %v max %v", at, time.Duration(c.Min), time.Duration(c.Max))
			}
		case "lognormal":
			if c.Mean <= 0 || c.SD < 0 {
				return fmt.Errorf("%s: lognormal needs mean > 0 and sd ≥ 0, got mean %v sd %v", at, time.Duration(c.Mean), time.Duration(c.SD))
			}
		case "exponential":
			if c.Mean <= 0 {
				return fmt.Errorf("%s: exponential needs mean > 0", at)
			}
		case "":
			return fmt.Errorf("%s: dist is missing (constant, uniform, lognormal or exponential)", at)
		default:
			return fmt.Errorf("%s: unknown dist %q (constant, uniform, lognormal or exponential)", at, c.Dist)
		}
	}
	if math.IsInf(total, 0) {
		return errors.New("lab: spec: weights too large")
	}
	switch {
	case s.Requests < 0:
		return fmt.Errorf("lab: spec: requests must not be negative, got %d", s.Requests)
	case s.Rate < 0 || math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0):
		return fmt.Errorf("lab: spec: rate must be a positive number, got %v", s.Rate)
	case s.Concurrency < 0:
		return fmt.Errorf("lab: spec: concurrency must not be negative, got %d", s.Concurrency)
	case s.Rate > 0 && s.Concurrency > 0:
		return errors.New("lab: spec: set rate or concurrency, not both")
	case s.Fanout < 0, s.Replicas < 0, s.Workers < 0:
		return errors.New("lab: spec: fanout, replicas and workers must not be negative")
	}
	return nil
}

// sampler draws one latency from a component.
func (c SpecComponent) sampler() func(r *rand.Rand) time.Duration {
	switch c.Dist {
	case "uniform":
		lo, hi := float64(c.Min), float64(c.Max)
		return func(r *rand.Rand) time.Duration { return time.Duration(lo + (hi-lo)*r.Float64()) }
	case "lognormal":
		if c.SD == 0 {
			v := time.Duration(c.Mean)
			return func(*rand.Rand) time.Duration { return v }
		}
		l := newLognormal(time.Duration(c.Mean), time.Duration(c.SD))
		return func(r *rand.Rand) time.Duration { return min(l.draw(r), maxLatency) }
	case "exponential":
		m := float64(c.Mean)
		return func(r *rand.Rand) time.Duration { return min(time.Duration(r.ExpFloat64()*m), maxLatency) }
	default:
		v := time.Duration(c.Value)
		return func(*rand.Rand) time.Duration { return v }
	}
}

// customDefaults sizes the servers for a user's distribution of the given
// mean: three replicas of 16 workers at about 30 % utilisation.
func customDefaults(mean time.Duration) Defaults {
	rate := 100.0
	if mean > 0 {
		rate = 0.3 * 48 / mean.Seconds()
	}
	rate = math.Round(min(max(rate, 1), 100000))
	return Defaults{Requests: 20000, Rate: rate, Fanout: 1, Replicas: 3, Workers: 16}
}

// AdvisedSamples is the fewest samples a custom scenario is advised to
// have: ten above its p99. With fewer, its tail is a handful of values,
// drawn again and again, and [CustomFromSamples] sets a Caveat.
const AdvisedSamples = 1000

// CustomFromSamples returns the custom scenario whose service time is drawn
// (with replacement) from the given samples.
func CustomFromSamples(name string, samples []time.Duration) (*Scenario, error) {
	if len(samples) == 0 {
		return nil, errors.New("lab: custom scenario needs at least one sample")
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	var sum float64
	for _, d := range sorted {
		sum += float64(d)
	}
	mean := time.Duration(sum / float64(len(sorted)))
	return &Scenario{
		Name:     "custom",
		Summary:  fmt.Sprintf("%d latency samples from %s (mean %s, p99 %s)", len(sorted), name, Millis(mean)+" ms", Millis(quantileOf(sorted, 0.99))+" ms"),
		Defaults: customDefaults(mean),
		Draw: func(r *rand.Rand, _ Call) Service {
			return Service{Work: sorted[r.IntN(len(sorted))]}
		},
		CDF:    samplesCDF(sorted),
		Caveat: samplesCaveat(name, len(sorted)),
	}, nil
}

// samplesCaveat warns of a samples file smaller than AdvisedSamples.
func samplesCaveat(name string, n int) string {
	if n >= AdvisedSamples {
		return ""
	}
	return fmt.Sprintf("only %d latency samples in %s: the simulated latencies are those %d values drawn again and again, "+
		"and the p99 of any strategy is one of them; give at least %d (ten above the p99)", n, name, n, AdvisedSamples)
}

// CustomFromSpec returns the custom scenario of a spec.
func CustomFromSpec(name string, s *Spec) (*Scenario, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var total, mean float64
	cum := make([]float64, len(s.Components))
	draws := make([]func(*rand.Rand) time.Duration, len(s.Components))
	for i, c := range s.Components {
		total += c.Weight
		cum[i] = total
		draws[i] = c.sampler()
	}
	for _, c := range s.Components {
		var m float64
		switch c.Dist {
		case "uniform":
			m = float64(c.Min+c.Max) / 2
		case "lognormal", "exponential":
			m = float64(c.Mean)
		default:
			m = float64(c.Value)
		}
		mean += c.Weight / total * m
	}
	d := customDefaults(time.Duration(mean))
	if s.Requests > 0 {
		d.Requests = s.Requests
	}
	if s.Rate > 0 {
		d.Rate = s.Rate
	}
	if s.Concurrency > 0 {
		d.Concurrency, d.Rate = s.Concurrency, 0
	}
	if s.Fanout > 0 {
		d.Fanout = s.Fanout
	}
	if s.Replicas > 0 {
		d.Replicas = s.Replicas
	}
	if s.Workers > 0 {
		d.Workers = s.Workers
	}
	label := s.Name
	if label == "" {
		label = name
	}
	return &Scenario{
		Name:     "custom",
		Summary:  fmt.Sprintf("%s: %d components, mean %s ms", label, len(s.Components), Millis(time.Duration(mean))),
		Defaults: d,
		Draw: func(r *rand.Rand, _ Call) Service {
			u := r.Float64() * total
			i, _ := slices.BinarySearch(cum, u)
			return Service{Work: draws[min(i, len(draws)-1)](r)}
		},
		CDF: specCDF(s),
	}, nil
}

// Custom reads path as a spec (.yaml, .yml, .json) or a samples file (any
// other name) and returns the custom scenario.
func Custom(path string) (*Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("lab: samples: %w", err)
	}
	defer f.Close()
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		s, err := ParseSpec(f)
		if err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, path)
		}
		return CustomFromSpec(filepath.Base(path), s)
	}
	samples, err := ParseSamples(f)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return CustomFromSamples(filepath.Base(path), samples)
}
