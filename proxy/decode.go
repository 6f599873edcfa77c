package proxy

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// fields checks the mapping keys under n against the YAML names of type t
// (the config's own types, whose field names are their yaml tags), and
// reports each unknown key with its path, its line and the closest known
// name. It also records the path of every value by its line, for the
// decoder's type errors (see typeErrors).
func (v *validator) fields(n *yaml.Node, t reflect.Type, p path) {
	if n == nil {
		return
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			v.fields(c, t, p)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		return
	}
	if v.at == nil {
		v.at = map[int][]located{}
	}
	v.at[n.Line] = append(v.at[n.Line], located{n.Value, p})
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
		return // a value with its own syntax (Fraction, ByteSize)
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				v.fields(c, t.Elem(), append(append(path{}, p...), i))
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				v.fields(n.Content[i+1], t.Elem(), append(append(path{}, p...), n.Content[i].Value))
			}
		}
	case reflect.Struct:
		if n.Kind != yaml.MappingNode || t == reflect.TypeFor[time.Time]() {
			return
		}
		known := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Tag == "!!merge" || k.Value == "<<" {
				continue // a merge key: its mapping's keys land here, checked where written
			}
			kp := append(append(path{}, p...), k.Value)
			ft, ok := known[k.Value]
			if !ok {
				v.addAt(k.Line, kp, "unknown field%s", suggest(k.Value, known))
				if v.unknown == nil {
					v.unknown = map[int]bool{}
				}
				v.unknown[k.Line] = true
				continue
			}
			v.fields(n.Content[i+1], ft, kp)
		}
	}
}

// yamlFields returns the YAML names of struct type t's fields (inline
// structs' included) and their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					m[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
	}
	return m
}

// suggest returns ", did you mean x?" for the known name closest to name
// (at most a third of its letters apart), or the list of known names.
func suggest(name string, known map[string]reflect.Type) string {
	best, bestD := "", len(name)/3+1
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
		if d := editDistance(name, k); d < bestD || d == bestD && best != "" && k < best {
			best, bestD = k, d
		}
	}
	if best != "" {
		return ": did you mean " + best + "?"
	}
	slices.Sort(names)
	return ": want one of " + strings.Join(names, ", ")
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// typeErrorRE matches a YAML decoder's type error: line, YAML tag, value
// and Go type.
var typeErrorRE = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) (?:`(.*)` )?into (\\S+)$")

// unknownFieldRE matches the decoder's error for an unknown field.
var unknownFieldRE = regexp.MustCompile(`^field (.*) not found in type \S+$`)

// typeErrors records the decoder's type errors (each "line N: ...") with
// the path of the field at fault, in the config's own words rather than
// Go's, and returns their lines.
func (v *validator) typeErrors(te *yaml.TypeError) map[int]bool {
	lines := map[int]bool{}
	for _, e := range te.Errors {
		rest, ok := strings.CutPrefix(e, "line ")
		num, msg, _ := strings.Cut(rest, ": ")
		line, err := strconv.Atoi(num)
		if !ok || err != nil {
			v.errs = append(v.errs, fmt.Errorf("%s: %s", v.file, e))
			continue
		}
		if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
			if !v.unknown[line] {
				v.addAt(line, v.pathOn(line, m[1]), "unknown field")
			}
			continue
		}
		lines[line] = true
		value := ""
		if m := typeErrorRE.FindStringSubmatch(e); m != nil {
			value = m[3]
			msg = "want " + describeType(m[4]) + ", got "
			if value != "" {
				msg += strconv.Quote(value)
			} else {
				msg += "a " + yamlKind(m[2])
			}
		}
		v.addAt(line, v.pathOn(line, value), "%s", msg)
	}
	return lines
}

// located is a value of the config and its path.
type located struct {
	value string
	p     path
}

// pathOn returns the path of the value on line: the one written value if
// several share the line (a flow mapping), else the deepest one first
// seen there.
func (v *validator) pathOn(line int, value string) path {
	var p path
	for _, l := range v.at[line] {
		if value != "" && l.value == value {
			return l.p
		}
		if len(l.p) > len(p) {
			p = l.p
		}
	}
	return p
}

// describeType names what a Go type of the config is written as.
func describeType(goType string) string {
	switch {
	case goType == "time.Duration":
		return "a duration such as 250ms or 1m30s"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["):
		return "a mapping"
	}
	return "a mapping of fields" // a struct of the config
}

// yamlKind names a YAML tag for messages.
func yamlKind(tag string) string {
	switch tag {
	case "seq":
		return "list"
	case "map":
		return "mapping"
	case "str":
		return "string"
	}
	return tag
}

// sortByLine orders the errors by the line they name, in the order found
// within a line; those naming no line come first.
func (v *validator) sortByLine() {
	line := func(err error) int {
		rest, ok := strings.CutPrefix(err.Error(), v.file+":")
		if !ok {
			return 0
		}
		num, _, _ := strings.Cut(rest, ":")
		n, _ := strconv.Atoi(num)
		return n
	}
	slices.SortStableFunc(v.errs, func(a, b error) int { return line(a) - line(b) })
}
