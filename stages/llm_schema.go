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

func convertSchema(v any, at string) (*genai.Schema, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a schema object, got %s", at, jsonKind(v))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !schemaKeys[k] {
			return nil, fmt.Errorf("%s/%s: Gemini's responseSchema cannot express %q: remove it or rewrite the schema without it (supported: type, properties, required, items, enum, anyOf, format, nullable, minimum, maximum, minItems, maxItems, minLength, maxLength, pattern)", at, k, k)
		}
	}
	s := &genai.Schema{}
	str := func(k string) (string, error) {
		if m[k] == nil {
			return "", nil
		}
		x, ok := m[k].(string)
		if !ok {
			return "", fmt.Errorf("%s/%s: want a string", at, k)
		}
		return x, nil
	}
	num := func(k string) (*float64, error) {
		if m[k] == nil {
			return nil, nil
		}
		n, ok := m[k].(json.Number)
		if !ok {
			return nil, fmt.Errorf("%s/%s: want a number", at, k)
		}
		f, err := n.Float64()
		return &f, err
	}
	count := func(k string) (*int64, error) {
		f, err := num(k)
		if f == nil || err != nil {
			return nil, err
		}
		if *f < 0 || *f != math.Trunc(*f) {
			return nil, fmt.Errorf("%s/%s: want a whole number of 0 or more", at, k)
		}
		return genai.Ptr(int64(*f)), nil
	}
	var err error
	switch t := m["type"].(type) {
	case nil:
		if m["anyOf"] == nil {
			return nil, fmt.Errorf("%s: no \"type\": give every schema a type (responseSchema needs one)", at)
		}
	case string:
		if s.Type, ok = schemaTypes[t]; !ok {
			return nil, fmt.Errorf("%s/type: %q is not a type responseSchema knows (string, number, integer, boolean, array, object)", at, t)
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
			return nil, fmt.Errorf("%s/type: responseSchema takes one type, or [T, \"null\"]: use anyOf for a union", at)
		}
		s.Type, s.Nullable = schemaTypes[types[0]], genai.Ptr(true)
	default:
		return nil, fmt.Errorf("%s/type: want a string", at)
	}
	if s.Description, err = str("description"); err != nil {
		return nil, err
	}
	if s.Title, err = str("title"); err != nil {
		return nil, err
	}
	if s.Format, err = str("format"); err != nil {
		return nil, err
	}
	if s.Pattern, err = str("pattern"); err != nil {
		return nil, err
	}
	if s.Pattern != "" {
		if _, err := regexp.Compile(s.Pattern); err != nil {
			return nil, fmt.Errorf("%s/pattern: %v", at, err)
		}
	}
	if n, ok := m["nullable"].(bool); ok {
		s.Nullable = genai.Ptr(n)
	}
	if s.Minimum, err = num("minimum"); err != nil {
		return nil, err
	}
	if s.Maximum, err = num("maximum"); err != nil {
		return nil, err
	}
	for k, p := range map[string]**int64{"minItems": &s.MinItems, "maxItems": &s.MaxItems, "minLength": &s.MinLength,
		"maxLength": &s.MaxLength, "minProperties": &s.MinProperties, "maxProperties": &s.MaxProperties} {
		if *p, err = count(k); err != nil {
			return nil, err
		}
	}
	if e, ok := m["enum"]; ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			return nil, fmt.Errorf("%s/enum: want a non-empty list", at)
		}
		for _, x := range list {
			xs, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("%s/enum: responseSchema takes only string values in an enum, got %s", at, jsonKind(x))
			}
			s.Enum = append(s.Enum, xs)
		}
	}
	if p, ok := m["properties"]; ok {
		props, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s/properties: want an object", at)
		}
		s.Properties = map[string]*genai.Schema{}
		for name, ps := range props {
			if s.Properties[name], err = convertSchema(ps, at+"/properties/"+name); err != nil {
				return nil, err
			}
			s.PropertyOrdering = append(s.PropertyOrdering, name)
		}
		// A stable order: the answer's keys come in it.
		sort.Strings(s.PropertyOrdering)
	}
	if r, ok := m["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return nil, fmt.Errorf("%s/required: want a list of property names", at)
		}
		for _, x := range list {
			xs, ok := x.(string)
			if !ok || s.Properties[xs] == nil {
				return nil, fmt.Errorf("%s/required: %v is not one of the properties", at, x)
			}
			s.Required = append(s.Required, xs)
		}
	}
	if it, ok := m["items"]; ok {
		if s.Items, err = convertSchema(it, at+"/items"); err != nil {
			return nil, err
		}
	}
	if s.Type == genai.TypeArray && s.Items == nil {
		return nil, fmt.Errorf("%s: an array needs \"items\"", at)
	}
	if a, ok := m["anyOf"]; ok {
		list, ok := a.([]any)
		if !ok || len(list) == 0 {
			return nil, fmt.Errorf("%s/anyOf: want a non-empty list of schemas", at)
		}
		for i, x := range list {
			sub, err := convertSchema(x, fmt.Sprintf("%s/anyOf/%d", at, i))
			if err != nil {
				return nil, err
			}
			s.AnyOf = append(s.AnyOf, sub)
		}
	}
	return s, nil
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
