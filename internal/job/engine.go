// This file holds the keys that tune how a job runs rather than what it
// asks: workers, the fleet, each LLM stage's timeout, stops, price and
// batch jobs. A run from flags sets every one of them, so the job it
// compiles to, and stores, runs the same under `run -f`.

package job

import "time"

// Fleet tunes a run on a PostgreSQL database; zeros mean the defaults.
type Fleet struct {
	// Lease is how long a worker's claim on an item lasts without a
	// heartbeat, as a Go duration; "" means pipeline.DefaultLease.
	Lease string `yaml:"lease,omitempty"`
	// Quota is shared (one limiter for the whole fleet, the default) or
	// independent (each worker its own).
	Quota string `yaml:"quota,omitempty"`
	// QuotaKey names the shared quota; "" means gemini/MODEL.
	QuotaKey string `yaml:"quota_key,omitempty"`
}

// Batch tunes an LLM stage's batch jobs; zeros mean the defaults.
type Batch struct {
	// Size is the most requests per batch job.
	Size int `yaml:"size,omitempty"`
	// Deadline is how long a job may stay pending or running before it
	// is cancelled; Poll the first interval between polls (Go durations).
	Deadline string `yaml:"deadline,omitempty"`
	Poll     string `yaml:"poll,omitempty"`
	// InlineBytes is the largest job sent as inlined requests; a bigger
	// one is uploaded as a JSONL file (the API takes 20 MB inlined).
	InlineBytes int `yaml:"inline_bytes,omitempty"`
	// CreateSettle is how long a job whose create's answer was lost (the
	// run killed while it was in flight) may take to show in the API's
	// list: until then it is looked for, not created again (a Go
	// duration).
	CreateSettle string `yaml:"create_settle,omitempty"`
	// MaxSends is how many batch jobs may ask for one item at the stage,
	// over every round, run and worker, before it goes to the stage's
	// dead letters instead of being paid for again.
	MaxSends int `yaml:"max_sends,omitempty"`
}

// Price is an LLM stage's price in USD per million tokens; nil means the
// model's list price.
type Price struct {
	Input  *float64 `yaml:"input_per_m,omitempty" json:",omitempty"`
	Output *float64 `yaml:"output_per_m,omitempty" json:",omitempty"`
}

// Duration is a duration key's value parsed; 0 when not given or not a
// duration (Load has reported that).
func Duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// checkEngine reports the job-wide engine, input and fleet settings the
// run cannot use.
func (j *Job) checkEngine(d *decoder) {
	if j.Workers < 0 {
		d.at("workers", "%d is negative: write a number of workers, or leave it out", j.Workers)
	}
	if j.Input.MaxLineBytes < 0 {
		d.at("input.max_line_bytes", "%d is negative", j.Input.MaxLineBytes)
	}
	if j.Input.MaxFieldLines < 0 {
		d.at("input.max_field_lines", "%d is negative", j.Input.MaxFieldLines)
	}
	if f := j.Fleet; f != nil {
		if f.Lease != "" {
			if l, err := time.ParseDuration(f.Lease); err != nil || l < time.Second {
				d.at("fleet.lease", "%q: write a duration of 1s or more, well above a call's latency (e.g. 30s)", f.Lease)
			}
		}
		switch f.Quota {
		case "", "shared", "independent":
		default:
			d.at("fleet.quota", "%q: write shared or independent", f.Quota)
		}
	}
}

// checkRun reports the engine settings of an LLM stage (limiter,
// stops, timeout, price, batch) the stage cannot run with.
func (l *LLM) checkRun(d *decoder, path string) {
	durations := []struct {
		key, v string
		zero   bool // 0 is a value ("never")
	}{
		{"timeout", l.Timeout, false}, {"max_wait", l.MaxWait, false}, {"max_outage", l.MaxOutage, false},
		{"max_refused", l.MaxRefused, true}, {"limiter.cooldown", l.Limiter.Cooldown, true},
	}
	if b := l.Batch; b != nil {
		durations = append(durations, struct {
			key, v string
			zero   bool
		}{"batch.deadline", b.Deadline, false}, struct {
			key, v string
			zero   bool
		}{"batch.poll", b.Poll, false}, struct {
			key, v string
			zero   bool
		}{"batch.create_settle", b.CreateSettle, false})
		if b.Size < 0 {
			d.at(path+".batch.size", "%d is negative: write a number of requests per job", b.Size)
		}
		if b.MaxSends < 0 {
			d.at(path+".batch.max_sends", "%d is negative: write how many batch jobs may ask for one item", b.MaxSends)
		}
		if b.InlineBytes < 0 {
			d.at(path+".batch.inline_bytes", "%d is negative: write the largest job in bytes sent inlined (bigger ones are uploaded as a file)", b.InlineBytes)
		}
	}
	for _, f := range durations {
		checkDuration(d, path+"."+f.key, f.v, f.zero)
	}
	lim := l.Limiter
	for _, f := range []struct {
		key string
		v   int
	}{{"fixed", lim.Fixed}, {"tpm", lim.TPM}, {"rpm", lim.RPM}} {
		if f.v < 0 {
			d.at(path+".limiter."+f.key, "%d is negative: write a number, or leave it out", f.v)
		}
	}
	if lim.Decrease < 0 || lim.Decrease >= 1 {
		d.at(path+".limiter.decrease", "%v: write a factor above 0 and below 1, e.g. 0.7, or leave it out", lim.Decrease)
	}
	if p := l.Price; p != nil {
		for _, f := range []struct {
			key string
			v   *float64
		}{{"input_per_m", p.Input}, {"output_per_m", p.Output}} {
			if f.v != nil && *f.v < 0 {
				d.at(path+".price."+f.key, "%v is negative: write USD per million tokens, or leave it out for the list price", *f.v)
			}
		}
	}
}

// checkDuration reports a duration key that is not a Go duration above
// 0 (or of 0, when zero allows it).
func checkDuration(d *decoder, key, v string, zero bool) {
	if v == "" {
		return
	}
	dur, err := time.ParseDuration(v)
	if err != nil || dur < 0 || dur == 0 && !zero {
		d.at(key, "%q is not a positive duration: write e.g. 30s, 5m or 2h", v)
	}
}

// PresetClassify is the built-in classify stage's preset.
const PresetClassify = "classify"

// checkPreset reports a preset the stage cannot be.
func (j *Job) checkPreset(d *decoder, path string, l *LLM) {
	if l.Preset == "" {
		return
	}
	if l.Preset != PresetClassify {
		d.at(path+".preset", "%q is not a preset: write classify, or leave it out", l.Preset)
		return
	}
	var bad []string
	if l.Name != "classify" {
		bad = append(bad, "name classify")
	}
	if l.When != "" || l.System != "" || l.SystemFile != "" || l.Output.SchemaFile != "" {
		bad = append(bad, "no when, system, system_file or output.schema_file")
	}
	if j.Backend == BackendVertex {
		bad = append(bad, "the gemini backend")
	}
	if len(bad) > 0 {
		d.at(path+".preset", "preset classify needs %s: change the stage, or remove `preset:` to make it a general LLM stage", joinAnd(bad))
	}
}

func joinAnd(parts []string) string {
	switch len(parts) {
	case 1:
		return parts[0]
	}
	out := parts[0]
	for _, p := range parts[1 : len(parts)-1] {
		out += ", " + p
	}
	return out + " and " + parts[len(parts)-1]
}
