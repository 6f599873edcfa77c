package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// e2eUpstreamEnv makes the test binary an upstream server (see
// TestE2EUpstreamProcess): its value is the percentage of straggling
// requests.
const e2eUpstreamEnv = "TAILCUT_E2E_UPSTREAM"

// e2eStraggle is how long a straggling GET takes at the upstream: longer
// than the scheduling delays of a loaded shared machine (a few hundred ms
// at a load average of 8 on 2 cores), so that the gap hedging makes in the
// p99 stands out of the noise.
const e2eStraggle = time.Second

// TestE2EUpstreamProcess is not a test: run as a child process with
// e2eUpstreamEnv set, it is one upstream replica of the end-to-end test. It
// prints "ADDR host:port" and serves until killed:
//
//   - GET any path: answers in 1–3 ms, or after e2eStraggle for the
//     straggling percentage of requests; stops early when the request is
//     cancelled;
//   - paths containing "drain": prints "ENTERED path", answers after 1.5 s
//     (for the drain test);
//   - POST: counts the request per path, answers after 100 ms;
//   - /count?path=P: the POSTs counted for P;
//   - /stragglers?path=P: "S C", the GETs of P that straggled and how many
//     of them were cancelled (cut) before their time.
func TestE2EUpstreamProcess(t *testing.T) {
	pct, err := strconv.Atoi(os.Getenv(e2eUpstreamEnv))
	if err != nil {
		t.Skip("helper process for TestEndToEnd")
	}
	var mu sync.Mutex
	posts := map[string]int{}
	type stragglers struct{ started, cut int }
	slow := map[string]*stragglers{}
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
	var rngMu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/count":
			mu.Lock()
			fmt.Fprint(w, posts[r.URL.Query().Get("path")])
			mu.Unlock()
			return
		case "/stragglers":
			mu.Lock()
			if st := slow[r.URL.Query().Get("path")]; st != nil {
				fmt.Fprintf(w, "%d %d", st.started, st.cut)
			} else {
				fmt.Fprint(w, "0 0")
			}
			mu.Unlock()
			return
		}
		io.Copy(io.Discard, r.Body)
		var d time.Duration
		straggle := false
		switch {
		case strings.Contains(r.URL.Path, "drain"):
			fmt.Printf("ENTERED %s\n", r.URL.Path) // the test waits for this line
			os.Stdout.Sync()
			d = 1500 * time.Millisecond
		case r.Method == http.MethodPost:
			mu.Lock()
			posts[r.URL.Path]++
			mu.Unlock()
			d = 100 * time.Millisecond
		default:
			rngMu.Lock()
			straggle = rng.IntN(100) < pct
			d = time.Duration(1000+rng.IntN(2000)) * time.Microsecond
			rngMu.Unlock()
			if straggle {
				d = e2eStraggle
				mu.Lock()
				if slow[r.URL.Path] == nil {
					slow[r.URL.Path] = &stragglers{}
				}
				slow[r.URL.Path].started++
				mu.Unlock()
			}
		}
		select {
		case <-time.After(d):
			fmt.Fprintf(w, "done %s\n", r.URL.Path)
		case <-r.Context().Done():
			if straggle {
				mu.Lock()
				slow[r.URL.Path].cut++
				mu.Unlock()
			}
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	os.Stdout.Sync()
	(&http.Server{Handler: h}).Serve(ln)
}

// e2eProc is a child process with its output read line by line.
type e2eProc struct {
	cmd   *exec.Cmd
	pw    *io.PipeWriter
	lines chan string
	done  chan struct{} // closed once the output is read to the end
	once  sync.Once
	err   error
}

// startProc starts a process whose stdout or stderr (if stderr) is read.
func startProc(t *testing.T, cmd *exec.Cmd, stderr bool) *e2eProc {
	t.Helper()
	pr, pw := io.Pipe()
	if stderr {
		cmd.Stderr = pw
	} else {
		cmd.Stdout = pw
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &e2eProc{cmd: cmd, pw: pw, lines: make(chan string, 4096), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // nobody is reading any more
			}
		}
		io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		p.wait()
	})
	return p
}

// wait waits for the process to exit and its output to be read.
func (p *e2eProc) wait() error {
	p.once.Do(func() {
		p.err = p.cmd.Wait() // returns once the output is copied to pw
		p.pw.Close()
		<-p.done
	})
	return p.err
}

// waitLine returns the first line for which match returns true.
func (p *e2eProc) waitLine(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if match(l) {
				return l
			}
		case <-p.done:
			t.Fatalf("process ended before %s", what)
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestEndToEnd builds the tailcut binary and runs it as a real proxy in
// front of two upstream processes (one with stragglers), drives it with
// `tailcut load`, and checks what the sidecar promises.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "tailcut")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// Two upstream replicas: a healthy one, and one where 5 % of the
	// requests straggle (for e2eStraggle).
	var ups []string
	var upProcs []*e2eProc
	for _, pct := range []int{0, 5} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestE2EUpstreamProcess$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", e2eUpstreamEnv, pct))
		p := startProc(t, cmd, false)
		l := p.waitLine(t, "the upstream's address", func(l string) bool { return strings.HasPrefix(l, "ADDR ") })
		ups = append(ups, "http://"+strings.TrimPrefix(l, "ADDR "))
		upProcs = append(upProcs, p)
	}

	cfgPath := filepath.Join(dir, "tailcut.yaml")
	cfg := fmt.Sprintf(`
listeners: [{name: main, listen: "127.0.0.1:0"}]
admin: {listen: "127.0.0.1:0"}
log: {format: json}
shutdown_timeout: 10s
upstreams:
  - {name: pool, urls: [%q, %q]}
  - {name: straggly, urls: [%q]}
routes:
  # Hedged and unhedged routes to the straggling replica alone: a balancer
  # cannot steer around stragglers that strike at random.
  - name: hedged
    path_prefix: /h/
    upstream: straggly
  - name: plain
    path_prefix: /p/
    upstream: straggly
    policy: {hedge: false}
  # Both replicas.
  - name: pool
    path_prefix: /both/
    upstream: pool
`, ups[0], ups[1], ups[1])
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "proxy", "--config", cfgPath, "--check").CombinedOutput(); err != nil {
		t.Fatalf("--check: %v\n%s", err, out)
	}
	px := startProc(t, exec.Command(bin, "proxy", "--config", cfgPath), true)
	addrOf := func(listener string) string {
		l := px.waitLine(t, "listener "+listener, func(l string) bool {
			return strings.Contains(l, `"msg":"listening"`) && strings.Contains(l, `"listener":"`+listener+`"`)
		})
		var rec struct{ Addr string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		return "http://" + rec.Addr
	}
	traffic, admin := addrOf("main"), addrOf("admin")
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The proxy logs "listening" once its sockets are bound: a connection
	// waits in the backlog until the server takes it, so no polling.
	if code, _ := get(admin + "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d, want 200", code)
	}

	// p99 through the proxy, with and without hedging: both loads run at
	// once, side by side, so that whatever else the machine is doing falls
	// on both alike (one after the other, a busy spell during one of them
	// decided the comparison).
	type loadResult struct {
		res map[string]any
		err error
	}
	load := func(path string) <-chan loadResult {
		c := make(chan loadResult, 1)
		go func() {
			out, err := exec.Command(bin, "load", "--hedge", "off", "--rate", "125", "--requests", "1000", "--json", traffic+path).Output()
			if err != nil {
				c <- loadResult{err: fmt.Errorf("tailcut load %s: %v", path, err)}
				return
			}
			var rep struct{ Results []map[string]any }
			if err := json.Unmarshal(out, &rep); err != nil || len(rep.Results) != 1 {
				c <- loadResult{err: fmt.Errorf("tailcut load %s output: %v\n%s", path, err, out)}
				return
			}
			c <- loadResult{res: rep.Results[0]}
		}()
		return c
	}
	plainRun, hedgedRun := load("/p/item"), load("/h/item")
	pr, hr := <-plainRun, <-hedgedRun
	for _, r := range []loadResult{pr, hr} {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	plain, hedged := pr.res, hr.res
	t.Logf("p99 without hedging %.1f ms, with %.1f ms (p50 %.1f / %.1f ms)", plain["p99_ms"], hedged["p99_ms"], plain["p50_ms"], hedged["p50_ms"])
	if plain["errors"] != 0.0 || hedged["errors"] != 0.0 {
		t.Errorf("errors: %v without hedging, %v with", plain["errors"], hedged["errors"])
	}
	// What the upstream saw: the GETs of each route that straggled, and
	// how many of them the proxy cut (cancelled once a hedge had won).
	stragglers := func(path string) (started, cut int) {
		t.Helper()
		_, body := get(ups[1] + "/stragglers?path=" + path)
		if _, err := fmt.Sscan(body, &started, &cut); err != nil {
			t.Fatalf("/stragglers?path=%s: %q: %v", path, body, err)
		}
		return started, cut
	}
	pStarted, pCut := stragglers("/p/item")
	hStarted, hCut := stragglers("/h/item")
	t.Logf("stragglers cut: %d of %d without hedging, %d of %d with", pCut, pStarted, hCut, hStarted)
	// The hedges' work, counted where it happens: without hedging nothing
	// cuts a straggler; with hedging most stragglers are cut, as a hedge
	// sent after a delay of a few ms is answered long before the straggler
	// (this holds however loaded the machine: only a hedge denied by the
	// budget or straggling itself leaves its straggler uncut; at a load
	// average of 13 on 2 cores, 58 of 74 were cut).
	if pStarted == 0 || pCut != 0 {
		t.Errorf("without hedging, %d stragglers of which %d cut: want some, none cut", pStarted, pCut)
	}
	if hStarted == 0 || 2*hCut <= hStarted {
		t.Errorf("with hedging, %d stragglers of which %d cut: want most of them cut", hStarted, hCut)
	}
	// And the promise: a lower p99. Without hedging it is at least
	// e2eStraggle (5 % of the requests straggle); with hedging it is a
	// few ms on a quiet machine, the machine's scheduling delays on a
	// busy one, which the unhedged run, alongside, suffers as well.
	if p99 := hedged["p99_ms"].(float64); !(p99 < plain["p99_ms"].(float64)) {
		_, dbg := get(admin + "/debug/tailcut")
		t.Errorf("p99 with hedging %.1f ms, not below the %.1f ms without\n%v\n%v\n%s", p99, plain["p99_ms"], plain, hedged, dbg)
	}

	// /metrics parses, passes promtool's lint when it is installed, and
	// shows the hedges.
	_, metrics := get(admin + "/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(metrics))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	var hedges float64
	for _, m := range families["tailcut_hedges_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" && l.GetValue() == "hedged" {
				hedges = m.GetCounter().GetValue()
			}
		}
	}
	if hedges <= 0 {
		t.Errorf("tailcut_hedges_total{route=\"hedged\"} = %v, want > 0", hedges)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(metrics)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	} else {
		if os.Getenv("CI") != "" {
			t.Error("promtool not installed: .ci/run installs Debian's prometheus package for it")
		}
		t.Log("promtool not installed: lint skipped")
	}

	// /debug/tailcut shows the route.
	_, body := get(admin + "/debug/tailcut")
	var dbg struct {
		Routes []struct {
			Name   string
			Counts struct {
				Hedges   int64
				WinRate  float64 `json:"hedge_win_rate"`
				Requests int64
			}
			Upstreams []struct{ URL string }
		}
	}
	if err := json.Unmarshal([]byte(body), &dbg); err != nil {
		t.Fatalf("/debug/tailcut: %v\n%s", err, body)
	}
	found := false
	for _, r := range dbg.Routes {
		if r.Name == "hedged" {
			found = true
			if c := r.Counts; c.Requests != 1000 || c.Hedges == 0 || c.WinRate == 0 || len(r.Upstreams) != 1 {
				t.Errorf("/debug/tailcut route %+v", r)
			}
		}
	}
	if !found {
		t.Errorf("/debug/tailcut lacks the route:\n%s", body)
	}

	// A POST without Idempotency-Key, slower than the hedge delay, reaches
	// the upstreams exactly once.
	resp, err := client.Post(traffic+"/both/order", "text/plain", strings.NewReader("one order"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	total := 0
	for _, u := range ups {
		_, n := get(u + "/count?path=/both/order")
		k, _ := strconv.Atoi(n)
		total += k
	}
	if total != 1 {
		t.Errorf("the POST reached the upstreams %d times, want exactly 1", total)
	}

	// SIGTERM drains: a request in flight finishes, then the proxy exits 0.
	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := client.Get(traffic + "/p/drain")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b), err}
	}()
	// The straggling replica (the /p/ route's only one) prints a line when
	// the request reaches it.
	upProcs[1].waitLine(t, "the drain request at the upstream", func(l string) bool { return l == "ENTERED /p/drain" })
	if err := px.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "done /p/drain\n" {
		t.Errorf("request in flight at SIGTERM: %+v, want 200 \"done /p/drain\"", r)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- px.wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Errorf("proxy exit: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("proxy did not exit after SIGTERM")
	}
	var logs bytes.Buffer
	for {
		select {
		case l := <-px.lines:
			logs.WriteString(l + "\n")
			continue
		default:
		}
		break
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" log line after SIGTERM:\n%s", logs.String())
	}
}
