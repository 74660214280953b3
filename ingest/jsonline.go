package ingest

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
)

// plainObject reads b as one JSON object in place, as json.Unmarshal into
// a map of raw messages would, when every key is plain (no escape, valid
// UTF-8): the members' values share b's bytes, so they are read before
// the line's buffer is reused, as parseJSON does. ok is false for
// anything else, valid or not (a key with an escape, a value nested past
// jsonscan.MaxDepth, a line that is not an object, invalid JSON):
// jsonObject then reads the line through encoding/json, which decides
// and words what is wrong. Decoding through encoding/json was two thirds
// of reading a review file, checked and then ingested.
func plainObject(b []byte) (obj map[string]json.RawMessage, ok bool) {
	i := jsonscan.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	obj = make(map[string]json.RawMessage, 8)
	if i = jsonscan.SkipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return obj, jsonscan.SkipSpace(b, i+1) == len(b)
	}
	for {
		end, ok := jsonscan.String(b, i)
		if !ok {
			return nil, false
		}
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			return nil, false
		}
		if i = jsonscan.SkipSpace(b, end); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		start := jsonscan.SkipSpace(b, i+1)
		if end, ok = jsonscan.Value(b, start, 1); !ok {
			return nil, false
		}
		obj[string(key)] = b[start:end] // the last of a repeated key, as encoding/json keeps it
		switch i = jsonscan.SkipSpace(b, end); {
		case i >= len(b):
			return nil, false
		case b[i] == '}':
			return obj, jsonscan.SkipSpace(b, i+1) == len(b)
		case b[i] != ',':
			return nil, false
		}
		i = jsonscan.SkipSpace(b, i+1)
	}
}

// jsonString decodes raw, a JSON string already scanned as valid, as
// json.Unmarshal would: in place when it holds no escape and is valid
// UTF-8, as almost every text and field is; through encoding/json
// otherwise, which also replaces invalid UTF-8 with U+FFFD.
func jsonString(raw []byte) (string, error) {
	if in := raw[1 : len(raw)-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return string(in), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}
