package cli

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// checkJobSample checks j's prompt templates and conditions on a sample
// item before anything is ingested or paid (job.CheckSample): the input's
// first good record when plan is not nil, else an item the job's
// database holds. Without either there is nothing to check on. An input
// joining a database that holds items is also checked against one of
// them (job.CheckSampleStored): items stored before sawtooth kept input
// types have every field as text. A problem is a usage error.
func checkJobSample(j *job.Job, plan *ingest.Plan) error {
	var sample, stored *pipeline.Record
	var fields []string
	if plan != nil {
		sample, fields = plan.Sample(), plan.Result().Fields
		stored = sampleFromDB(j)
	} else {
		sample = sampleFromDB(j)
	}
	if sample == nil {
		return nil
	}
	err := j.CheckSample(*sample, fields)
	if stored != nil {
		err = j.CheckSampleStored(*sample, fields, *stored)
	}
	if err != nil {
		return usage(err)
	}
	return nil
}

// wordFlagSample words checkJobSample's refusal of a job the flags
// compiled: the prompt's key is --prompt-file, and no job file has lines.
// Unchecked, a template reading a field no item has dead-lettered the
// first items at classify, one call each, before the run stopped.
func wordFlagSample(err error, promptFile string) error {
	var es job.Errors
	if !errors.As(err, &es) {
		return err
	}
	lines := make([]string, len(es))
	for i, e := range es {
		key := e.Key
		if strings.HasSuffix(key, ".prompt") && promptFile != "" {
			key = "--prompt-file " + promptFile
		}
		lines[i] = key + ": " + e.Msg
	}
	return usagef("%s", strings.Join(lines, "\n"))
}

var errSampled = errors.New("sampled")

// sampleFromDB is an item the job's database holds (one its first stage
// answered), or nil.
func sampleFromDB(j *job.Job) *pipeline.Record {
	if len(j.Stages) == 0 {
		return nil
	}
	db := openForPlan(j.DB)
	if db == nil {
		return nil
	}
	defer db.Close()
	var sample *pipeline.Record
	_ = db.ForEachOutput(j.Stages[0].Name(), func(rec pipeline.Record, _ json.RawMessage) error {
		sample = &rec
		return errSampled
	})
	return sample
}
