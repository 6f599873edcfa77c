package redisrig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NoiseChildEnv, set to 1 in a process's environment, makes
// [MaybeServeNoise] serve a noisy neighbour on its standard input and
// output instead of returning.
const NoiseChildEnv = "REDISRIG_NOISE_CHILD"

// MaybeServeNoise serves the noisy neighbours of a [NoiseProcess] and exits
// when the process was started as one (NoiseChildEnv=1), and returns
// otherwise. Commands that start a NoiseProcess from their own executable
// call it first thing in main (tests: in TestMain).
func MaybeServeNoise() {
	if os.Getenv(NoiseChildEnv) != "1" {
		return
	}
	if err := serveNoise(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "redisrig noise child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// The protocol, one line per message, fields separated by spaces:
//
//	parent: start RATE SCALE_NS ALPHA CAP_NS SEED ADDR...
//	child:  cost SORT_NS KEYS_NS SUNIONSTORE_NS   (or: error MESSAGE)
//	parent: rate RATE                             (no answer)
//	parent: dump
//	child:  iv REPLICA START_NS END_NS            (each span since the last dump)
//	child:  counts N0 N1 N2 N3 N4 FAILED SKIPPED  (totals, by noiseKinds)
//	parent: stop
//	child:  stopped

// serveNoise runs one noisy neighbour set for the parent on in and out.
func serveNoise(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	w := bufio.NewWriter(out)
	if !sc.Scan() {
		return errors.New("no start line")
	}
	cfg, addrs, err := parseStart(sc.Text())
	if err != nil {
		return err
	}
	n, err := StartNoise(addrs, cfg)
	if err != nil {
		fmt.Fprintf(w, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return w.Flush()
	}
	defer n.Stop()
	fmt.Fprintf(w, "cost %d %d %d\n", n.Cost["SORT"], n.Cost["KEYS"], n.Cost["SUNIONSTORE"])
	if err := w.Flush(); err != nil {
		return err
	}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "rate":
			r, err := strconv.ParseFloat(f[1], 64)
			if err != nil || !(r > 0) {
				return fmt.Errorf("bad rate line %q", sc.Text())
			}
			n.SetRate(r)
		case len(f) == 1 && f[0] == "dump":
			n.mu.Lock()
			for i, iv := range n.intervals {
				for _, x := range iv {
					fmt.Fprintf(w, "iv %d %d %d\n", i, x.start, x.end)
				}
				n.intervals[i] = iv[:0]
			}
			fmt.Fprint(w, "counts")
			for _, c := range n.counts {
				fmt.Fprintf(w, " %d", c)
			}
			fmt.Fprintf(w, " %d %d\n", n.errs, n.skipped)
			n.mu.Unlock()
			if err := w.Flush(); err != nil {
				return err
			}
		case len(f) == 1 && f[0] == "stop":
			n.Stop()
			fmt.Fprintln(w, "stopped")
			return w.Flush()
		default:
			return fmt.Errorf("unknown line %q", sc.Text())
		}
	}
	return sc.Err()
}

func parseStart(line string) (NoiseConfig, []string, error) {
	f := strings.Fields(line)
	if len(f) < 7 || f[0] != "start" {
		return NoiseConfig{}, nil, fmt.Errorf("bad start line %q", line)
	}
	rate, err1 := strconv.ParseFloat(f[1], 64)
	scale, err2 := strconv.ParseInt(f[2], 10, 64)
	alpha, err3 := strconv.ParseFloat(f[3], 64)
	capNs, err4 := strconv.ParseInt(f[4], 10, 64)
	seed, err5 := strconv.ParseUint(f[5], 10, 64)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return NoiseConfig{}, nil, fmt.Errorf("bad start line %q: %w", line, err)
	}
	return NoiseConfig{Rate: rate, Scale: time.Duration(scale), Alpha: alpha, Cap: time.Duration(capNs), Seed: seed}, f[6:], nil
}

// NoiseProcess is a noisy neighbour per replica running in a child
// process, so that its CPU time is not the benchmark's: the child is this
// process's executable, started with NoiseChildEnv=1 (see
// [MaybeServeNoise]).
type NoiseProcess struct {
	// Cost is the measured length of SORT, KEYS and SUNIONSTORE on the
	// first replica before the neighbours started (the fastest of ten).
	Cost map[string]time.Duration

	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	exited chan struct{}

	mu        sync.Mutex
	rate      float64
	intervals [][]interval
	counts    []int64
	failed    int64
	skipped   int64
}

// StartNoiseProcess starts the neighbours of addrs in a child process.
// The caller must call Stop.
func StartNoiseProcess(addrs []string, cfg NoiseConfig) (*NoiseProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), NoiseChildEnv+"=1")
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &NoiseProcess{Cost: map[string]time.Duration{}, cmd: cmd, in: in, out: bufio.NewScanner(out), exited: make(chan struct{}),
		rate: cfg.Rate, intervals: make([][]interval, len(addrs)), counts: make([]int64, len(noiseKinds))}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	_, err = fmt.Fprintf(in, "start %g %d %g %d %d %s\n", cfg.Rate, int64(cfg.Scale), cfg.Alpha, int64(cfg.Cap), cfg.Seed, strings.Join(addrs, " "))
	if err == nil {
		err = p.readCost()
	}
	if err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

func (p *NoiseProcess) readCost() error {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return fmt.Errorf("noise child: no answer to start: %w", err)
		}
		return errors.New("noise child: no answer to start")
	}
	f := strings.Fields(p.out.Text())
	if len(f) >= 1 && f[0] == "error" {
		return fmt.Errorf("noise child: %s", strings.Join(f[1:], " "))
	}
	if len(f) != 4 || f[0] != "cost" {
		return fmt.Errorf("noise child: bad cost line %q", p.out.Text())
	}
	for i, k := range noiseKinds[2:] {
		ns, err := strconv.ParseInt(f[1+i], 10, 64)
		if err != nil {
			return fmt.Errorf("noise child: bad cost line %q", p.out.Text())
		}
		p.Cost[k] = time.Duration(ns)
	}
	return nil
}

// Rate returns the slow commands a second per replica.
func (p *NoiseProcess) Rate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}

// SetRate sets the slow commands a second per replica; rate must be
// positive.
func (p *NoiseProcess) SetRate(rate float64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintf(p.in, "rate %g\n", rate); err != nil {
		return err
	}
	p.rate = rate
	return nil
}

// dump collects the spans and counts the child has recorded since the
// last dump. p.mu must be held.
func (p *NoiseProcess) dump() error {
	if _, err := fmt.Fprintln(p.in, "dump"); err != nil {
		return err
	}
	for p.out.Scan() {
		f := strings.Fields(p.out.Text())
		switch {
		case len(f) == 4 && f[0] == "iv":
			r, err1 := strconv.Atoi(f[1])
			a, err2 := strconv.ParseInt(f[2], 10, 64)
			b, err3 := strconv.ParseInt(f[3], 10, 64)
			if errors.Join(err1, err2, err3) != nil || r < 0 || r >= len(p.intervals) {
				return fmt.Errorf("noise child: bad line %q", p.out.Text())
			}
			p.intervals[r] = append(p.intervals[r], interval{a, b})
		case len(f) == 3+len(noiseKinds) && f[0] == "counts":
			var v []int64
			for _, s := range f[1:] {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return fmt.Errorf("noise child: bad line %q", p.out.Text())
				}
				v = append(v, n)
			}
			copy(p.counts, v)
			p.failed, p.skipped = v[len(noiseKinds)], v[len(noiseKinds)+1]
			return nil
		default:
			return fmt.Errorf("noise child: bad line %q", p.out.Text())
		}
	}
	if err := p.out.Err(); err != nil {
		return fmt.Errorf("noise child: output ended: %w", err)
	}
	return errors.New("noise child: output ended")
}

// WaitedShare returns the share of sends that reached their replica while
// one of the neighbours' slow commands held it, or an error if the child
// does not answer.
func (p *NoiseProcess) WaitedShare(sends []Send) (float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.dump(); err != nil {
		return 0, err
	}
	return waitedShare(p.intervals, sends), nil
}

// Counts returns how many commands of each kind were sent, by name, and
// how many failed or were dropped with 8 of a replica's in flight, as of
// the last WaitedShare.
func (p *NoiseProcess) Counts() (sent map[string]int64, failed, skipped int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sent = map[string]int64{}
	for i, k := range noiseKinds {
		sent[k] = p.counts[i]
	}
	return sent, p.failed, p.skipped
}

// Stop stops the neighbours, waits for their commands in flight and for
// the child to exit; a child that does not within 10 s is killed by PID.
func (p *NoiseProcess) Stop() {
	p.mu.Lock()
	_, _ = fmt.Fprintln(p.in, "stop")
	_ = p.in.Close()
	p.mu.Unlock()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// PID returns the child's process id.
func (p *NoiseProcess) PID() int { return p.cmd.Process.Pid }

func (p *NoiseProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}
