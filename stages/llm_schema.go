// This file turns a JSON schema file into Gemini's responseSchema (an
// OpenAPI 3.0 subset), refusing what it cannot express before anything
// runs, and checks an answer against it.

package stages

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"google.golang.org/genai"
)

// schemaKeys are the JSON schema keywords responseSchema can express.
// Annotations ($schema, $id, title, description, examples, default) are
// kept or ignored; everything else (references, combinators other than
// anyOf, additionalProperties, const, conditionals) is refused.
var schemaKeys = map[string]bool{
	"type": true, "properties": true, "required": true, "items": true, "enum": true,
	"description": true, "title": true, "format": true, "nullable": true,
	"minimum": true, "maximum": true, "minItems": true, "maxItems": true,
	"minLength": true, "maxLength": true, "pattern": true, "anyOf": true,
	"minProperties": true, "maxProperties": true, "propertyOrdering": true,
	"$schema": true, "$id": true, "examples": true, "default": true,
}

// schemaTypes maps JSON schema types to responseSchema types.
var schemaTypes = map[string]genai.Type{
	"string": genai.TypeString, "number": genai.TypeNumber, "integer": genai.TypeInteger,
	"boolean": genai.TypeBoolean, "array": genai.TypeArray, "object": genai.TypeObject,
}

// ParseResponseSchema converts a JSON schema document into Gemini's
// responseSchema. It refuses, naming the JSON pointer of the first
// offending keyword, what responseSchema cannot express: $ref and $defs,
// oneOf, allOf, not, additionalProperties, patternProperties, const,
// if/then/else, a type list other than [T, "null"], an enum of anything
// but strings, and a top level that is not an object.
func ParseResponseSchema(doc []byte) (*genai.Schema, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not a JSON document: %v", err)
	}
	s, err := convertSchema(v, "#")
	if err != nil {
		return nil, err
	}
	if s.Type != genai.TypeObject {
		return nil, fmt.Errorf("#: the top level must be {\"type\": \"object\", ...}: a stage's output is a JSON object")
	}
	return s, nil
}

// convertSchema converts the JSON schema v found at at: its keywords
// checked, then its type, scalar constraints, enum, properties, items and
// anyOf, each a step of its own.
func convertSchema(v any, at string) (*genai.Schema, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a schema object, got %s", at, jsonKind(v))
	}
	n := schemaNode{m: m, at: at}
	if err := n.checkKeys(); err != nil {
		return nil, err
	}
	s := &genai.Schema{}
	for _, step := range []func(*genai.Schema) error{n.setType, n.setScalars, n.setEnum, n.setProperties, n.setItems, n.setAnyOf} {
		if err := step(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// schemaNode is one schema object being converted, and where it is.
type schemaNode struct {
	m  map[string]any
	at string
}

// checkKeys refuses a keyword responseSchema cannot express, the first
// in sorted order.
func (n schemaNode) checkKeys() error {
	keys := make([]string, 0, len(n.m))
	for k := range n.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !schemaKeys[k] {
			return fmt.Errorf("%s/%s: Gemini's responseSchema cannot express %q: remove it or rewrite the schema without it (supported: type, properties, required, items, enum, anyOf, format, nullable, minimum, maximum, minItems, maxItems, minLength, maxLength, pattern)", n.at, k, k)
		}
	}
	return nil
}

func (n schemaNode) str(k string) (string, error) {
	if n.m[k] == nil {
		return "", nil
	}
	x, ok := n.m[k].(string)
	if !ok {
		return "", fmt.Errorf("%s/%s: want a string", n.at, k)
	}
	return x, nil
}

func (n schemaNode) num(k string) (*float64, error) {
	if n.m[k] == nil {
		return nil, nil
	}
	x, ok := n.m[k].(json.Number)
	if !ok {
		return nil, fmt.Errorf("%s/%s: want a number", n.at, k)
	}
	f, err := x.Float64()
	return &f, err
}

func (n schemaNode) count(k string) (*int64, error) {
	f, err := n.num(k)
	if f == nil || err != nil {
		return nil, err
	}
	if *f < 0 || *f != math.Trunc(*f) {
		return nil, fmt.Errorf("%s/%s: want a whole number of 0 or more", n.at, k)
	}
	return genai.Ptr(int64(*f)), nil
}

// setType reads "type": one type, or [T, "null"]; none only beside anyOf.
func (n schemaNode) setType(s *genai.Schema) error {
	var ok bool
	switch t := n.m["type"].(type) {
	case nil:
		if n.m["anyOf"] == nil {
			return fmt.Errorf("%s: no \"type\": give every schema a type (responseSchema needs one)", n.at)
		}
	case string:
		if s.Type, ok = schemaTypes[t]; !ok {
			return fmt.Errorf("%s/type: %q is not a type responseSchema knows (string, number, integer, boolean, array, object)", n.at, t)
		}
	case []any:
		var types []string
		for _, x := range t {
			if xs, ok := x.(string); ok && xs != "null" {
				types = append(types, xs)
			} else if !ok {
				types = append(types, "?")
			}
		}
		if len(types) != 1 || len(t) != 2 || schemaTypes[types[0]] == "" {
			return fmt.Errorf("%s/type: responseSchema takes one type, or [T, \"null\"]: use anyOf for a union", n.at)
		}
		s.Type, s.Nullable = schemaTypes[types[0]], genai.Ptr(true)
	default:
		return fmt.Errorf("%s/type: want a string", n.at)
	}
	return nil
}

// setScalars reads the string, number and count keywords.
func (n schemaNode) setScalars(s *genai.Schema) error {
	var err error
	for _, f := range []struct {
		k string
		p *string
	}{{"description", &s.Description}, {"title", &s.Title}, {"format", &s.Format}, {"pattern", &s.Pattern}} {
		if *f.p, err = n.str(f.k); err != nil {
			return err
		}
	}
	if s.Pattern != "" {
		if _, err := regexp.Compile(s.Pattern); err != nil {
			return fmt.Errorf("%s/pattern: %v", n.at, err)
		}
	}
	if b, ok := n.m["nullable"].(bool); ok {
		s.Nullable = genai.Ptr(b)
	}
	if s.Minimum, err = n.num("minimum"); err != nil {
		return err
	}
	if s.Maximum, err = n.num("maximum"); err != nil {
		return err
	}
	for k, p := range map[string]**int64{"minItems": &s.MinItems, "maxItems": &s.MaxItems, "minLength": &s.MinLength,
		"maxLength": &s.MaxLength, "minProperties": &s.MinProperties, "maxProperties": &s.MaxProperties} {
		if *p, err = n.count(k); err != nil {
			return err
		}
	}
	return nil
}

// setEnum reads "enum": strings only.
func (n schemaNode) setEnum(s *genai.Schema) error {
	e, ok := n.m["enum"]
	if !ok {
		return nil
	}
	list, ok := e.([]any)
	if !ok || len(list) == 0 {
		return fmt.Errorf("%s/enum: want a non-empty list", n.at)
	}
	for _, x := range list {
		xs, ok := x.(string)
		if !ok {
			return fmt.Errorf("%s/enum: responseSchema takes only string values in an enum, got %s", n.at, jsonKind(x))
		}
		s.Enum = append(s.Enum, xs)
	}
	return nil
}

// setProperties reads "properties", in a stable order, and "required",
// which must name them.
func (n schemaNode) setProperties(s *genai.Schema) error {
	if p, ok := n.m["properties"]; ok {
		props, ok := p.(map[string]any)
		if !ok {
			return fmt.Errorf("%s/properties: want an object", n.at)
		}
		s.Properties = map[string]*genai.Schema{}
		for name, ps := range props {
			var err error
			if s.Properties[name], err = convertSchema(ps, n.at+"/properties/"+name); err != nil {
				return err
			}
			s.PropertyOrdering = append(s.PropertyOrdering, name)
		}
		// A stable order: the answer's keys come in it.
		sort.Strings(s.PropertyOrdering)
	}
	r, ok := n.m["required"]
	if !ok {
		return nil
	}
	list, ok := r.([]any)
	if !ok {
		return fmt.Errorf("%s/required: want a list of property names", n.at)
	}
	for _, x := range list {
		xs, ok := x.(string)
		if !ok || s.Properties[xs] == nil {
			return fmt.Errorf("%s/required: %v is not one of the properties", n.at, x)
		}
		s.Required = append(s.Required, xs)
	}
	return nil
}

// setItems reads "items", which an array needs.
func (n schemaNode) setItems(s *genai.Schema) error {
	if it, ok := n.m["items"]; ok {
		var err error
		if s.Items, err = convertSchema(it, n.at+"/items"); err != nil {
			return err
		}
	}
	if s.Type == genai.TypeArray && s.Items == nil {
		return fmt.Errorf("%s: an array needs \"items\"", n.at)
	}
	return nil
}

// setAnyOf reads "anyOf": a non-empty list of schemas.
func (n schemaNode) setAnyOf(s *genai.Schema) error {
	a, ok := n.m["anyOf"]
	if !ok {
		return nil
	}
	list, ok := a.([]any)
	if !ok || len(list) == 0 {
		return fmt.Errorf("%s/anyOf: want a non-empty list of schemas", n.at)
	}
	for i, x := range list {
		sub, err := convertSchema(x, fmt.Sprintf("%s/anyOf/%d", n.at, i))
		if err != nil {
			return err
		}
		s.AnyOf = append(s.AnyOf, sub)
	}
	return nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// matchSchema checks a decoded answer (json.Number for numbers) against
// s and returns what is wrong, or "".
func matchSchema(s *genai.Schema, v any, at string) string {
	if v == nil {
		if s.Nullable != nil && *s.Nullable {
			return ""
		}
		return at + " is null"
	}
	if len(s.AnyOf) > 0 {
		for _, sub := range s.AnyOf {
			if matchSchema(sub, v, at) == "" {
				return ""
			}
		}
		return at + " matches none of anyOf"
	}
	switch s.Type {
	case genai.TypeString:
		x, ok := v.(string)
		if !ok {
			return at + " is not a string"
		}
		if len(s.Enum) > 0 && !slices.Contains(s.Enum, x) {
			return fmt.Sprintf("%s %q is not one of %s", at, clip(x, 40, ""), strings.Join(s.Enum, ", "))
		}
	case genai.TypeNumber, genai.TypeInteger:
		n, ok := v.(json.Number)
		if !ok {
			return at + " is not a number"
		}
		f, err := n.Float64()
		if err != nil || (s.Type == genai.TypeInteger && f != math.Trunc(f)) {
			return at + " is not " + map[genai.Type]string{genai.TypeNumber: "a number", genai.TypeInteger: "a whole number"}[s.Type]
		}
		if (s.Minimum != nil && f < *s.Minimum) || (s.Maximum != nil && f > *s.Maximum) {
			return fmt.Sprintf("%s %v is out of range", at, f)
		}
	case genai.TypeBoolean:
		if _, ok := v.(bool); !ok {
			return at + " is not true or false"
		}
	case genai.TypeArray:
		list, ok := v.([]any)
		if !ok {
			return at + " is not a list"
		}
		for i, x := range list {
			if p := matchSchema(s.Items, x, fmt.Sprintf("%s[%d]", at, i)); p != "" {
				return p
			}
		}
	case genai.TypeObject:
		obj, ok := v.(map[string]any)
		if !ok {
			return at + " is not an object"
		}
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				return fmt.Sprintf("%s has no %q", at, r)
			}
		}
		for k, x := range obj {
			if sub := s.Properties[k]; sub != nil {
				if p := matchSchema(sub, x, at+"."+k); p != "" {
					return p
				}
			}
		}
	}
	return ""
}
