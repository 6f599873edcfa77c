package tailcut

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// rootRequirements is everything the root module's go.mod may require. The
// root module holds the engine, latency, budget and hedgehttp; the adapters
// with heavy dependencies (gRPC, Prometheus, OpenTelemetry, Redis, the lab's
// charts, the CLI) are modules of their own, so that a project importing only
// the root never has its versions of those raised by minimal version
// selection. A requirement added here is a promise to every such project.
var rootRequirements = map[string]string{
	"github.com/DataDog/sketches-go": "the latency sketches",
	"golang.org/x/time":              "the token-bucket budget",
	"go.uber.org/goleak":             "tests: goroutine leaks",
	"golang.org/x/net":               "tests: hedgehttp recognises an x/net/http2 transport",
	// Indirect, through sketches-go's module graph.
	"google.golang.org/protobuf":  "sketches-go's encoding",
	"github.com/stretchr/testify": "sketches-go's tests",
	"go.yaml.in/yaml/v3":          "testify",
	"golang.org/x/text":           "x/net",
}

// TestRootModuleRequirements fails when the root module's go.mod requires a
// module outside rootRequirements.
func TestRootModuleRequirements(t *testing.T) {
	reqs, err := requirements("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) == 0 {
		t.Fatal("go.mod: no requirement found; the parser is out of step with the file")
	}
	for _, r := range reqs {
		if _, ok := rootRequirements[r]; !ok {
			t.Errorf("go.mod requires %s: the root module must stay light; put the code that needs it in a module of its own", r)
		}
	}
	if !slices.Contains(reqs, "github.com/DataDog/sketches-go") {
		t.Errorf("go.mod: sketches-go not found among %v", reqs)
	}
}

// requirements returns the module paths of a go.mod's require directives,
// in the one-line and the block form.
func requirements(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reqs []string
	block := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case line == "":
		case block && line == ")":
			block = false
		case block:
			reqs = append(reqs, strings.Fields(line)[0])
		case line == "require (":
			block = true
		case strings.HasPrefix(line, "require "):
			reqs = append(reqs, strings.Fields(line)[1])
		}
	}
	return reqs, sc.Err()
}
