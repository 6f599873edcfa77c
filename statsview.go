package tailcut

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// String returns "completed", "failed", "canceled", "errored" or
// "abandoned".
func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Canceled:
		return "canceled"
	case Errored:
		return "errored"
	case Abandoned:
		return "abandoned"
	}
	return "unknown"
}

// String returns "success", "fatal", "retryable" or "server_error".
func (c Class) String() string {
	switch c {
	case Success:
		return "success"
	case Fatal:
		return "fatal"
	case Retryable:
		return "retryable"
	case ServerError:
		return "server_error"
	}
	return "unknown"
}

// countFields are the fields of [Counts] under their json tags, without
// Counts' methods (its MarshalJSON).
type countFields Counts

// countsJSON is the JSON form of [Counts]: every field under its json tag,
// denials by their Decision's name (the field at depth 0 hides the
// array's), the derived rates beside the counts.
type countsJSON struct {
	countFields
	Denied       map[string]int64 `json:"denied"`
	HedgeRate    float64          `json:"hedge_rate"`
	ExtraLoad    float64          `json:"extra_load"`
	HedgeWinRate float64          `json:"hedge_win_rate"`
	TriggerRate  float64          `json:"trigger_rate"`
}

func (c *Counts) json() countsJSON {
	j := countsJSON{countFields: countFields(*c), Denied: make(map[string]int64, NumDecisions),
		HedgeRate: c.HedgeRate(), ExtraLoad: c.ExtraLoad(), HedgeWinRate: c.HedgeWinRate(), TriggerRate: c.TriggerRate()}
	for d := range numDecisions {
		if d.denial() {
			j.Denied[d.String()] = c.Denied[d]
		}
	}
	return j
}

// MarshalJSON encodes the counts with names in snake_case, each field
// under its json tag: "requests", "attempts", "hedges", "wins_by_attempt"
// (index 0 the primary), "failed", "abandoned", "denied" (an object keyed
// by [Decision.String]: "budget", "breaker", …), "triggered",
// "would_hedge", "breaker_trips", "gain_trips", and the rates "hedge_rate",
// "extra_load", "hedge_win_rate" and "trigger_rate" as fractions (0.05 is
// 5 %).
func (c Counts) MarshalJSON() ([]byte, error) { return json.Marshal(c.json()) }

// UnmarshalJSON decodes counts as [Counts.MarshalJSON] encodes them, such
// as those of a proxy's /debug/tailcut read back; the rates, derived from
// the counts, and names it does not know are ignored.
func (c *Counts) UnmarshalJSON(b []byte) error {
	var j countsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = Counts(j.countFields)
	for d := range numDecisions {
		if d.denial() {
			c.Denied[d] = j.Denied[d.String()]
		}
	}
	return nil
}

// autoJSON is the JSON form of [AutoChoice]: durations in milliseconds.
type autoJSON struct {
	DelayMS     float64 `json:"delay_ms"`
	GapMS       float64 `json:"gap_ms"`
	Hedges      int     `json:"hedges"`
	Target      float64 `json:"target"`
	UnhedgedMS  float64 `json:"unhedged_ms"`
	HedgedMS    float64 `json:"hedged_ms"`
	HedgeRate   float64 `json:"hedge_rate"`
	Grant       float64 `json:"grant"`
	LaterGrant  float64 `json:"later_grant"`
	Reserve     float64 `json:"reserve"`
	TriggerCap  float64 `json:"trigger_cap"`
	WinShare    float64 `json:"win_share"`
	HedgesWon   float64 `json:"hedges_won"`
	Predicted   float64 `json:"hedges_predicted"`
	Correction  float64 `json:"correction"`
	Description string  `json:"description"`
}

// MarshalJSON encodes the choice with names in snake_case and durations
// in milliseconds ("delay_ms", "gap_ms", "unhedged_ms", "hedged_ms"); Cap
// is "trigger_cap", HedgesPredicted "hedges_predicted", and "description"
// is [AutoChoice.String].
func (a AutoChoice) MarshalJSON() ([]byte, error) {
	return json.Marshal(autoJSON{
		DelayMS: millis(a.Delay), GapMS: millis(a.Gap), Hedges: a.Hedges, Target: a.Target,
		UnhedgedMS: millis(a.Unhedged), HedgedMS: millis(a.Hedged), HedgeRate: a.HedgeRate, Grant: a.Grant,
		LaterGrant: a.LaterGrant, Reserve: a.Reserve, TriggerCap: a.Cap, WinShare: a.WinShare,
		HedgesWon: a.HedgesWon, Predicted: a.HedgesPredicted, Correction: a.Correction, Description: a.String(),
	})
}

// String describes the schedule in one line: when the hedges go and the
// percentile predicted without and with them, and the correction of the
// predictions where the hedges won less than predicted, e.g. "hedge at 12ms, then
// every 8ms (2 at most); p99 45ms unhedged, 14ms hedged; 4.1 % of
// requests hedged".
func (a AutoChoice) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hedge at %v", short(a.Delay))
	if a.Hedges > 1 {
		fmt.Fprintf(&b, ", then every %v (%d at most)", short(a.Gap), a.Hedges)
	}
	fmt.Fprintf(&b, "; %s %v unhedged, %v hedged; %s of requests hedged",
		percentile(a.Target), short(a.Unhedged), short(a.Hedged), percent(a.HedgeRate))
	if a.Correction < 1 && a.HedgesPredicted > 0 {
		fmt.Fprintf(&b, "; hedges won %s where %s was predicted: predictions × %.2f",
			percent(a.HedgesWon), percent(a.HedgesPredicted), a.Correction)
	}
	return b.String()
}

// keyJSON is the JSON form of [KeyStats].
type keyJSON struct {
	Key string `json:"key"`
	countsJSON
	DelayMS           float64     `json:"delay_ms"`
	DelaySource       string      `json:"delay_source"`
	Pinned            bool        `json:"pinned"`
	Warm              bool        `json:"warm"`
	Breaker           string      `json:"breaker"`
	Gain              string      `json:"gain"`
	GainLast          *gainJSON   `json:"gain_last,omitempty"`
	Diagnosis         string      `json:"diagnosis"`
	WindowTriggerRate float64     `json:"window_trigger_rate"`
	P99MS             float64     `json:"p99_ms"`
	PredictedP99MS    float64     `json:"predicted_p99_ms"`
	Auto              *AutoChoice `json:"auto,omitempty"`
	Shifts            int64       `json:"shifts"`
	PeriodMS          float64     `json:"period_ms"`
}

// gainJSON is the JSON form of [GainFigures].
type gainJSON struct {
	ThresholdMS     float64 `json:"threshold_ms"`
	Hedged          float64 `json:"hedged"`
	HeldOut         float64 `json:"held_out"`
	HedgedExcessMS  float64 `json:"hedged_excess_ms"`
	HeldOutExcessMS float64 `json:"held_out_excess_ms"`
	Wins            int64   `json:"wins"`
	SavedPerWinMS   float64 `json:"saved_per_win_ms"`
	Pays            bool    `json:"pays"`
	Verdicts        int64   `json:"verdicts"`
}

// MarshalJSON encodes the key's figures with names in snake_case: "key",
// the counts as [Counts.MarshalJSON] has them, "delay_ms" and
// "delay_source" ([KeyStats.DelaySource]), "pinned", "warm", "breaker",
// "gain" and "diagnosis" by name ("closed", "healthy"), "gain_last" (the
// gain fuse's last verdict, [GainFigures], with "verdicts"; absent before
// one), "window_trigger_rate",
// "p99_ms" and "predicted_p99_ms", "auto" (see [AutoChoice.MarshalJSON];
// absent when nil), "shifts" and "period_ms". Durations are in
// milliseconds, rates fractions.
func (k KeyStats) MarshalJSON() ([]byte, error) {
	var last *gainJSON
	if g := k.GainLast; k.GainVerdicts > 0 {
		last = &gainJSON{ThresholdMS: millis(g.Threshold), Hedged: g.Hedged, HeldOut: g.HeldOut,
			HedgedExcessMS: millis(g.HedgedExcess), HeldOutExcessMS: millis(g.HeldOutExcess),
			Wins: g.Wins, SavedPerWinMS: millis(g.SavedPerWin), Pays: g.Pays, Verdicts: k.GainVerdicts}
	}
	return json.Marshal(keyJSON{
		Key: k.Key, countsJSON: k.Counts.json(),
		DelayMS: millis(k.Delay), DelaySource: k.DelaySource(), Pinned: k.Pinned, Warm: k.Warm,
		Breaker: k.Breaker.String(), Gain: k.Gain.String(), GainLast: last,
		Diagnosis: k.Diagnosis.String(), WindowTriggerRate: k.WindowTriggerRate,
		P99MS: millis(k.P99), PredictedP99MS: millis(k.PredictedP99), Auto: k.Auto,
		Shifts: k.Shifts, PeriodMS: millis(k.Period),
	})
}

// statsJSON is the JSON form of [Stats].
type statsJSON struct {
	countsJSON
	InflightHedges int64      `json:"inflight_hedges"`
	Keys           []KeyStats `json:"keys"`
}

// MarshalJSON encodes the totals as [Counts.MarshalJSON] has them,
// "inflight_hedges", and "keys", each key as [KeyStats.MarshalJSON] has
// it.
func (s Stats) MarshalJSON() ([]byte, error) {
	keys := s.Keys
	if keys == nil {
		keys = []KeyStats{}
	}
	return json.Marshal(statsJSON{countsJSON: s.Counts.json(), InflightHedges: s.InflightHedges, Keys: keys})
}

// DelaySource says where Delay comes from: "caller" when the caller of
// the key's last request set it (Pinned: a per-request WithDelay, a gRPC
// service config's hedgingDelay), "warm-up" while the key knows too few
// latencies (Config.WarmupDelay), "auto" for the auto delay's schedule
// (Auto), and "quantile" for a pinned Config.Quantile.
func (k *KeyStats) DelaySource() string {
	switch {
	case k.Pinned:
		return "caller"
	case !k.Warm:
		return "warm-up"
	case k.Auto != nil:
		return "auto"
	}
	return "quantile"
}

// String summarises the counts in one line, e.g. "1000 requests, 52
// hedges (5.2 % extra load, 31 won), 0 failed, 0 abandoned; denied:
// budget 3".
func (c Counts) String() string {
	var b strings.Builder
	c.write(&b)
	return b.String()
}

func (c *Counts) write(b *strings.Builder) {
	fmt.Fprintf(b, "%d requests, %d hedges (%s extra load, %d won), %d failed, %d abandoned",
		c.Requests, c.Hedges, percent(c.ExtraLoad()), c.hedgeWins(), c.Failed, c.Abandoned)
	if c.WouldHedge > 0 {
		fmt.Fprintf(b, ", %d would-hedge (dry run)", c.WouldHedge)
	}
	sep := "; denied: "
	for d := range numDecisions {
		if n := c.DeniedBy(d); n > 0 && d != DenyEarly {
			fmt.Fprintf(b, "%s%s %d", sep, d, n)
			sep = ", "
		}
	}
	if c.BreakerTrips > 0 {
		fmt.Fprintf(b, "; breaker tripped %d×", c.BreakerTrips)
	}
	if c.GainTrips > 0 {
		fmt.Fprintf(b, "; gain fuse opened %d×", c.GainTrips)
	}
}

// String summarises the key in one line: its counts, its delay and where
// it comes from, its p99 and what hedging is predicted to make of it (when
// lower), its
// breaker and its diagnosis, e.g. `"db": delay 12ms (auto), p99 45ms →
// 14ms predicted; breaker closed, diagnosis healthy; 1000 requests, …`.
func (k KeyStats) String() string {
	var b strings.Builder
	k.write(&b)
	return b.String()
}

func (k *KeyStats) write(b *strings.Builder) {
	fmt.Fprintf(b, "%q: delay %v (%s)", k.Key, short(k.Delay), k.DelaySource())
	if k.P99 > 0 {
		fmt.Fprintf(b, ", p99 %v", short(k.P99))
		if k.PredictedP99 > 0 && k.PredictedP99 < k.P99 {
			fmt.Fprintf(b, " → %v predicted", short(k.PredictedP99))
		}
	}
	fmt.Fprintf(b, "; breaker %v, diagnosis %v", k.Breaker, k.Diagnosis)
	if k.Gain != GainClosed {
		fmt.Fprintf(b, ", gain fuse %v", k.Gain)
	}
	if k.Shifts > 0 {
		fmt.Fprintf(b, ", %d shifts", k.Shifts)
	}
	b.WriteString("; ")
	k.Counts.write(b)
}

// String summarises the policy's figures: a line of totals, then a line
// per key (see [KeyStats.String]). It is what fmt prints for a Stats, %v
// and %+v alike.
func (s Stats) String() string {
	var b strings.Builder
	b.WriteString("tailcut: ")
	s.Counts.write(&b)
	if s.InflightHedges > 0 {
		fmt.Fprintf(&b, "; %d hedges in flight", s.InflightHedges)
	}
	for i := range s.Keys {
		b.WriteString("\n  ")
		s.Keys[i].write(&b)
	}
	return b.String()
}

// Handler returns an http.Handler that serves the policy's [Stats], as
// the proxy's /debug/tailcut does its routes': JSON (see
// [Stats.MarshalJSON]) by default, the text of [Stats.String] with
// ?format=text. Mount it where an admin can reach it, e.g.
// mux.Handle("GET /debug/tailcut", tailcut.Handler(policy)); each request
// reads the policy's Stats, which walks every key's sketches.
func Handler(p *Policy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := p.Stats()
		if r.URL.Query().Get("format") == "text" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintln(w, s)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s) // a client gone mid-answer has no one to tell
	})
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// short rounds d to three significant digits for display.
func short(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	unit := time.Duration(math.Pow(10, math.Floor(math.Log10(float64(d)))-2))
	return d.Round(max(unit, 1))
}

// percent formats a fraction as a percentage, e.g. "5.2 %".
func percent(f float64) string { return fmt.Sprintf("%.1f %%", 100*f) }

// percentile names quantile q, e.g. "p99", "p99.9".
func percentile(q float64) string {
	return "p" + strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", 100*q), "0"), ".")
}
