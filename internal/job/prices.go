package job

import "github.com/sawtooth-dev/sawtooth/stages"

// StoredPrices is how each LLM stage of the job stored in a database
// (raw, as the store keeps it; file names the database) is priced: its
// model and the price it was given (a job file's price:, the
// --price-in/--price-out a run from flags recorded), online (the caller
// sets Batch for Batch API calls). It is nil when raw holds no job or
// cannot be read: the caller prices at the list price then, as it did
// before jobs were stored.
func StoredPrices(raw []byte, file string) map[string]stages.PriceConfig {
	if len(raw) == 0 {
		return nil
	}
	st, err := UnmarshalStored(raw)
	if err != nil {
		return nil
	}
	j, err := st.Job(file)
	if err != nil {
		return nil
	}
	prices := map[string]stages.PriceConfig{}
	for _, s := range j.Stages {
		l := s.LLM
		if l == nil {
			continue
		}
		pc := stages.PriceConfig{Model: l.Model}
		if pc.Model == "" {
			pc.Model = DefaultModel
		}
		if l.Price != nil {
			pc.InputPerM, pc.OutputPerM = l.Price.Input, l.Price.Output
		}
		prices[l.Name] = pc
	}
	return prices
}
