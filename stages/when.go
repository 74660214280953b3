package stages

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// When is a compiled `when:` condition: an expr-lang expression over the
// item that decides whether a stage processes it. It sees each earlier
// stage's output by the stage's name (classify.label, extract.severity),
// and id, text and fields (fields.app). A field missing from an output is
// nil, so `classify.label == "bug"` is false for an item whose classify
// stage was skipped. An input field the record types (a JSON number or
// bool, a numeric CSV column: pipeline.Record.Types) is a number or a
// bool, so `fields.rating <= 2` compares numbers; any other field is a
// string. Safe for concurrent use.
type When struct {
	source  string
	program *vm.Program
}

// whenReserved are the names the item itself takes in a condition.
var whenReserved = []string{"id", "text", "fields"}

// CompileWhen compiles source, checking that it is a boolean expression
// naming only the stages in earlier (and id, text, fields).
func CompileWhen(source string, earlier []string) (*When, error) {
	env := map[string]any{"id": "", "text": "", "fields": map[string]any{}}
	for _, s := range earlier {
		for _, r := range whenReserved {
			if s == r {
				return nil, fmt.Errorf("a stage named %q cannot be read in when: (the name is the item's %s): rename the stage", s, r)
			}
		}
		env[s] = map[string]any{}
	}
	p, err := expr.Compile(source, expr.Env(env), expr.AsBool())
	if err != nil {
		may := "id, text, fields.NAME"
		if len(earlier) > 0 {
			may = "the earlier stages " + strings.Join(earlier, ", ") + ", and " + may
		}
		return nil, fmt.Errorf("when %q: %s (it may read %s)", source, exprMessage(err), may)
	}
	return &When{source: source, program: p}, nil
}

// exprMessage is an expr-lang error on one line: its message and where
// in the condition it is ("at column 15"), without the multi-line
// snippet, which a one-line message or a dead letter would show as a
// literal \n.
func exprMessage(err error) string {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return strings.Join(strings.Fields(err.Error()), " ")
	}
	msg := fe.Message
	if fe.Column > 0 || fe.Snippet != "" {
		msg += fmt.Sprintf(" (at column %d)", fe.Column+1)
	}
	return msg
}

// WhenRef is one `name.key` a condition reads: an earlier stage's output
// field (classify.label) or an input field (fields.app).
type WhenRef struct {
	Name, Key string
}

// WhenRefs lists the `name.key` members source reads with a constant key
// (classify.label, fields["app"]), in order, for checking the names
// against the stages' outputs and the input's fields before a run.
func WhenRefs(source string) ([]WhenRef, error) {
	tree, err := parser.Parse(source)
	if err != nil {
		return nil, fmt.Errorf("when %q: %s", source, exprMessage(err))
	}
	var v refVisitor
	ast.Walk(&tree.Node, &v)
	return v.refs, nil
}

type refVisitor struct{ refs []WhenRef }

func (v *refVisitor) Visit(n *ast.Node) {
	m, ok := (*n).(*ast.MemberNode)
	if !ok {
		return
	}
	id, ok1 := m.Node.(*ast.IdentifierNode)
	key, ok2 := m.Property.(*ast.StringNode)
	if ok1 && ok2 {
		v.refs = append(v.refs, WhenRef{Name: id.Value, Key: key.Value})
	}
}

// WhenFieldCompare is a comparison in a condition with an input field
// itself as one operand (fields.rating <= 2, "1" == fields.rating).
type WhenFieldCompare struct {
	// Key is the field; Op the operator (==, !=, <, <=, >, >=).
	Key, Op string
	// Literal is the other operand's kind when it is a literal:
	// "string", "number" or "bool"; "" when it is anything else.
	// Text is a string literal's value.
	Literal, Text string
}

// WhenFieldCompares lists the comparisons source makes with an input
// field itself, for checking them against the fields' types before a
// run: a field wrapped in a conversion (int(fields.x)) is not listed.
func WhenFieldCompares(source string) ([]WhenFieldCompare, error) {
	tree, err := parser.Parse(source)
	if err != nil {
		return nil, fmt.Errorf("when %q: %s", source, exprMessage(err))
	}
	var v compareVisitor
	ast.Walk(&tree.Node, &v)
	return v.out, nil
}

type compareVisitor struct{ out []WhenFieldCompare }

func (v *compareVisitor) Visit(n *ast.Node) {
	b, ok := (*n).(*ast.BinaryNode)
	if !ok {
		return
	}
	switch b.Operator {
	case "==", "!=", "<", "<=", ">", ">=":
	default:
		return
	}
	for _, sides := range [][2]ast.Node{{b.Left, b.Right}, {b.Right, b.Left}} {
		key, ok := inputField(sides[0])
		if !ok {
			continue
		}
		c := WhenFieldCompare{Key: key, Op: b.Operator}
		switch o := sides[1].(type) {
		case *ast.StringNode:
			c.Literal, c.Text = "string", o.Value
		case *ast.IntegerNode, *ast.FloatNode:
			c.Literal = "number"
		case *ast.BoolNode:
			c.Literal = "bool"
		}
		v.out = append(v.out, c)
	}
}

// inputField is the key of fields.KEY (or fields["KEY"]).
func inputField(n ast.Node) (string, bool) {
	m, ok := n.(*ast.MemberNode)
	if !ok {
		return "", false
	}
	id, ok1 := m.Node.(*ast.IdentifierNode)
	key, ok2 := m.Property.(*ast.StringNode)
	if !ok1 || !ok2 || id.Value != "fields" {
		return "", false
	}
	return key.Value, true
}

// String returns the condition as written.
func (w *When) String() string { return w.source }

// Match evaluates the condition for it. An error (a comparison of
// mismatched types, say) is permanent: the same item fails the same way.
func (w *When) Match(it pipeline.Item) (bool, error) {
	env := map[string]any{"id": it.ID, "text": it.Text, "fields": TypedFields(it.Record)}
	for name, raw := range it.Outputs {
		var out map[string]any
		if json.Unmarshal(raw, &out) == nil {
			env[name] = out
		}
	}
	v, err := expr.Run(w.program, env)
	if err != nil {
		return false, pipeline.Permanentf("when %q failed on item %s: %s: fix the condition", w.source, itemRef(it), exprMessage(err))
	}
	b, _ := v.(bool) // expr.AsBool made the program return a bool
	return b, nil
}

// TypedFields is r's fields as a condition sees them: a field r.Types
// marks a number is an int (a whole number that fits) or a float64, one
// marked bool a bool, and every other field its text. A typed field
// whose text does not read as its type is nil.
func TypedFields(r pipeline.Record) map[string]any {
	fields := make(map[string]any, len(r.Fields))
	for k, s := range r.Fields {
		switch r.Types[k] {
		case pipeline.FieldNumber:
			fields[k] = parseNumber(s)
		case pipeline.FieldBool:
			if b, err := strconv.ParseBool(s); err == nil {
				fields[k] = b
			} else {
				fields[k] = nil
			}
		default:
			fields[k] = s
		}
	}
	return fields
}

// parseNumber reads a JSON number's text: an int when it is whole and
// fits (so `fields.n == 3` holds for 3), else a float64; nil when it is
// not a finite number.
func parseNumber(s string) any {
	s = strings.TrimSpace(s)
	if i, err := strconv.Atoi(s); err == nil {
		return i
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f
	}
	return nil
}
