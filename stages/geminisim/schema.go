// This file answers requests whose response schema is not the
// label/confidence/reason one: any object schema gets a deterministic
// answer that matches it.

package geminisim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// answerFor is the answer's JSON for a request: answerJSON when the
// schema names label, confidence or reason (or none is given), else a
// value built from the schema itself (see schemaAnswer).
func answerFor(gc *genConfig, user string, labels []string, props map[string]bool) string {
	if gc == nil || props["label"] || props["confidence"] || props["reason"] || len(props) == 0 {
		return answerJSON(user, labels, props)
	}
	raw := gc.ResponseSchema
	if len(raw) == 0 || string(raw) == "null" {
		raw = gc.ResponseJSONSchema
	}
	var sch schemaNode
	if json.Unmarshal(raw, &sch) != nil {
		return answerJSON(user, labels, props)
	}
	b, _ := json.Marshal(schemaAnswer(&sch, user, "$"))
	return string(b)
}

// schemaNode is the part of a response schema (responseSchema, OpenAPI
// style, with upper- or lowercase types) the simulator reads.
type schemaNode struct {
	Type       string                 `json:"type"`
	Enum       []string               `json:"enum"`
	Properties map[string]*schemaNode `json:"properties"`
	Items      *schemaNode            `json:"items"`
	AnyOf      []*schemaNode          `json:"anyOf"`
	Minimum    *float64               `json:"minimum"`
	Maximum    *float64               `json:"maximum"`
}

// schemaAnswer builds a value matching s, a pure function of the user
// text and the value's path: the same request gets the same answer. An
// enum's value is the one whose name the text mentions, else one picked
// by the text's hash; strings are short phrases naming the path.
func schemaAnswer(s *schemaNode, user, path string) any {
	h := sha256.Sum256([]byte(path + "\x00" + user))
	n := binary.BigEndian.Uint64(h[:8])
	if len(s.AnyOf) > 0 {
		return schemaAnswer(s.AnyOf[0], user, path)
	}
	switch strings.ToLower(s.Type) {
	case "string":
		if len(s.Enum) > 0 {
			low := strings.ToLower(user)
			for _, e := range s.Enum {
				if strings.Contains(low, strings.ToLower(e)) {
					return e
				}
			}
			return s.Enum[n%uint64(len(s.Enum))]
		}
		name := path[strings.LastIndexAny(path, ".$")+1:]
		return fmt.Sprintf("%s %x", name, h[:3])
	case "integer":
		lo, hi := 1.0, 5.0
		if s.Minimum != nil {
			lo = *s.Minimum
		}
		if s.Maximum != nil {
			hi = *s.Maximum
		}
		return int64(lo) + int64(n%uint64(max(1, int64(hi-lo)+1)))
	case "number":
		lo, hi := 0.0, 1.0
		if s.Minimum != nil {
			lo = *s.Minimum
		}
		if s.Maximum != nil {
			hi = *s.Maximum
		}
		return lo + (hi-lo)*float64(n%1000)/1000
	case "boolean":
		return n%2 == 0
	case "array":
		if s.Items == nil {
			return []any{}
		}
		out := []any{}
		for i := 0; i < 1+int(n%2); i++ {
			out = append(out, schemaAnswer(s.Items, user, fmt.Sprintf("%s[%d]", path, i)))
		}
		return out
	default: // object
		out := map[string]any{}
		names := make([]string, 0, len(s.Properties))
		for k := range s.Properties {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			out[k] = schemaAnswer(s.Properties[k], user, path+"."+k)
		}
		return out
	}
}
