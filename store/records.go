package store

import "github.com/sawtooth-dev/sawtooth/pipeline"

// The store's names for the records and states it shares with every
// store (see pipeline/records.go).
type (
	Status      = pipeline.Status
	ItemState   = pipeline.ItemState
	BatchJob    = pipeline.BatchJob
	BatchCounts = pipeline.BatchCounts
	ReportStamp = pipeline.ReportStamp
)

const (
	Queued  = pipeline.StatusQueued
	Dead    = pipeline.StatusDead
	Done    = pipeline.StatusDone
	InBatch = pipeline.StatusInBatch
)
