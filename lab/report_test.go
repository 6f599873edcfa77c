package lab

import (
	"flag"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files of the report tests")

// label is one text element of a chart, with its box on the SVG's canvas
// (x right, y down, in points).
type label struct {
	text                   string
	minX, minY, maxX, maxY float64
}

var (
	svgOpen      = regexp.MustCompile(`<svg width="[^"]*" height="[^"]*" viewBox="0 0 ([0-9.]+) ([0-9.]+)"`)
	svgTextLaid  = regexp.MustCompile(`(?s)(<g transform="rotate\(90\)">\s*)?<text x="([^"]*)" y="([^"]*)"(?: textLength="([^"]*)")?[^>]*font-size:([0-9.]+)px">([^<]*)</text>`)
	svgAnyText   = regexp.MustCompile(`<text `)
	svgTransform = regexp.MustCompile(`transform="([^"]*)"`)
)

// chartLabels returns the size of the chart's canvas and its labels, each
// boxed as the browser draws it: textLength wide, from the baseline up by
// the height of capitals and ascenders (0.75 em in Liberation Serif and
// Times; the font's ascent, 0.89 em, is headroom above them) and down by
// the descent (0.216 em). It fails on text it cannot place.
func chartLabels(t *testing.T, svg string) (w, h float64, labels []label) {
	t.Helper()
	m := svgOpen.FindStringSubmatch(svg)
	if m == nil {
		t.Fatalf("no viewBox in %.200s", svg)
	}
	w, _ = strconv.ParseFloat(m[1], 64)
	h, _ = strconv.ParseFloat(m[2], 64)
	for _, tr := range svgTransform.FindAllStringSubmatch(svg, -1) {
		switch tr[1] {
		case "scale(1, -1)", "rotate(90)", fmt.Sprintf("scale(1, -1) translate(0, -%s)", m[2]):
		default:
			t.Fatalf("transform %q: the test cannot place text under it", tr[1])
		}
	}
	all := svgAnyText.FindAllStringIndex(svg, -1)
	laid := svgTextLaid.FindAllStringSubmatch(svg, -1)
	if len(laid) != len(all) {
		t.Fatalf("%d text elements, %d the test can read", len(all), len(laid))
	}
	for _, g := range laid {
		x, _ := strconv.ParseFloat(g[2], 64)
		y, _ := strconv.ParseFloat(g[3], 64)
		size, _ := strconv.ParseFloat(g[5], 64)
		length, err := strconv.ParseFloat(g[4], 64)
		if err != nil {
			// A browser draws it in whatever font it has.
			t.Errorf("%q has no textLength", html.UnescapeString(g[6]))
			length = textWidth(html.UnescapeString(g[6]), size)
		}
		up, down := 0.75*size, 0.216*size
		l := label{text: html.UnescapeString(g[6])}
		if g[1] == "" {
			// Inside scale(1,-1) translate(0,-h), the text's own
			// scale(1,-1): the baseline at h + y, the text running right.
			base := h + y
			l.minX, l.maxX, l.minY, l.maxY = x, x+length, base-up, base+down
		} else {
			// Under rotate(90) as well: a glyph's point (x+u, y+v) lands
			// at (y+v, h−x−u): the text runs up, its top facing left.
			l.minX, l.maxX, l.minY, l.maxY = y-up, y+down, h-x-length, h-x
		}
		labels = append(labels, l)
	}
	return w, h, labels
}

// checkLabels fails for a label outside its chart or over another label,
// and for a legend entry not below the x axis's label (over the data).
func checkLabels(t *testing.T, name, svg, xLabel string, legend []string) []label {
	t.Helper()
	w, h, labels := chartLabels(t, svg)
	const slack = 0.5
	axisBottom := -1.0
	for _, l := range labels {
		if l.text == xLabel {
			axisBottom = l.maxY
		}
	}
	if axisBottom < 0 {
		t.Errorf("%s: no x axis label %q", name, xLabel)
	}
	for _, want := range legend {
		found := false
		for _, l := range labels {
			if l.text == want && l.minY >= axisBottom-slack {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: legend entry %q is not below the plot", name, want)
		}
	}
	for i, l := range labels {
		if l.minX < -slack || l.minY < -slack || l.maxX > w+slack || l.maxY > h+slack {
			t.Errorf("%s: %q [%.1f, %.1f]×[%.1f, %.1f] runs out of the %.0f×%.0f chart", name, l.text, l.minX, l.maxX, l.minY, l.maxY, w, h)
		}
		for _, o := range labels[:i] {
			if l.minX < o.maxX-slack && o.minX < l.maxX-slack && l.minY < o.maxY-slack && o.minY < l.maxY-slack {
				t.Errorf("%s: %q overlaps %q", name, l.text, o.text)
			}
		}
	}
	return labels
}

// reportCharts are the report's kinds of chart, on small runs: the
// longest legend labels the lab and the experiments write.
type testChart struct {
	Chart
	xLabel string
	legend []string
}

func reportCharts(t *testing.T) map[string]testChart {
	t.Helper()
	cfg := Config{Scenario: mustLookup(t, "bhope"), Requests: 4000, Seed: 1, SeriesEvery: 20 * time.Millisecond}
	rs, err := Compare(cfg, DefaultStrategies())
	if err != nil {
		t.Fatal(err)
	}
	two := mustRun(t, cfg, "adaptive")
	two.Strategy = "adaptive (auto, 2 hedges: the default)"
	charts := map[string]testChart{}
	add := func(name string, c Chart, err error, xLabel string, legend ...string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		charts[name] = testChart{c, xLabel, legend}
	}
	c, err := TailChart("Latency tail: fraction of requests slower than x (log–log)", append(rs, two))
	var names []string
	for _, r := range append(rs, two) {
		names = append(names, r.Strategy)
	}
	add("tail", c, err, "latency (ms)", names...)
	var ad *Result
	for _, r := range rs {
		if r.PolicyStats != nil {
			ad = r
		}
	}
	c, err = SeriesChart("Hedge delay over time against the true quantile (adaptive)", ad.Series, "p95")
	add("series", c, err, "time (s)", "hedge delay", "true p95 of service time")
	var curve []FrontierPoint
	for i, ms := range []float64{60, 90, 110, 125, 130, 140, 160, 200, 250, 290, 310, 330, 400, 500, 700, 900} {
		curve = append(curve, FrontierPoint{Label: fmt.Sprint(ms), ExtraLoad: 0.10 - 0.006*float64(i), P99: 300 + ms/2})
	}
	c, err = FrontierChart("delay: p99 against extra load (static sweep; rules marked)", curve, []FrontierPoint{
		{Label: "static at true p90", ExtraLoad: 0.1, P99: 420}, {Label: "static at true p95", ExtraLoad: 0.06, P99: 330},
		{Label: "min(p90, SLA 200ms) × 0.8", ExtraLoad: 0.1, P99: 700}, {Label: "adaptive min(p90, SLA) × 0.8", ExtraLoad: 0.1, P99: 690},
		{Label: "adaptive auto (default)", ExtraLoad: 0.097, P99: 310}})
	add("frontier", c, err, "extra load (%)", "static delays", "static at true p90", "static at true p95",
		"min(p90, SLA 200ms) × 0.8", "adaptive min(p90, SLA) × 0.8", "adaptive auto (default)")
	return charts
}

// TestReportLabelsFit: every label of every kind of chart lies inside
// its chart and clear of the others — the legend below the plot, not over
// it; the last tick label whole — at the width the browser is told to
// draw it (textLength), whatever font it has. The labels are kept in a
// golden file (go test ./lab -run TestReportLabelsFit -update).
func TestReportLabelsFit(t *testing.T) {
	charts := reportCharts(t)
	var b strings.Builder
	for _, name := range []string{"tail", "series", "frontier"} {
		c, ok := charts[name]
		if !ok {
			t.Fatalf("no chart %s", name)
		}
		fmt.Fprintf(&b, "== %s\n", name)
		for _, l := range checkLabels(t, name, string(c.SVG), c.xLabel, c.legend) {
			fmt.Fprintf(&b, "%q\n", l.text)
		}
	}
	golden := filepath.Join("testdata", "report_labels.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("labels differ from %s (run with -update if intended):\n%s", golden, b.String())
	}
}
