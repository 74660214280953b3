package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/limiter"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// languageDetector is a stage of the program's own: it guesses an item's
// language from a few common words of its sanitized text. It calls nothing
// outside the process, so it needs no limiter; it is safe for concurrent
// use. OnCall, if set, is told of every call (the tests count them).
type languageDetector struct {
	OnCall func(id string)
}

var _ pipeline.Stage = languageDetector{}

// Name is the stage's key in the store: its queue, outputs and dead letters.
func (languageDetector) Name() string { return "language" }

// commonWords are a few words frequent in each language and rare in the
// others.
var commonWords = map[string][]string{
	"de": {"der", "die", "und", "ist", "nicht"},
	"en": {"the", "and", "is", "it", "not"},
	"fr": {"le", "la", "et", "est", "pas"},
}

// Process returns {"lang": "de"|"en"|"fr"|"und"}. Its input is the sanitize
// stage's output, which every later stage sees in it.Outputs.
func (d languageDetector) Process(_ context.Context, it pipeline.Item) (pipeline.Result, error) {
	if d.OnCall != nil {
		d.OnCall(it.ID)
	}
	var clean stages.SanitizeOutput
	if err := json.Unmarshal(it.Outputs["sanitize"], &clean); err != nil {
		return pipeline.Result{}, pipeline.Permanentf("language: item %q has no sanitized text: %v", it.ID, err)
	}
	best, bestHits := "und", 0
	words := strings.Fields(strings.ToLower(clean.Text))
	for _, lang := range []string{"de", "en", "fr"} {
		hits := 0
		for _, w := range words {
			if slices.Contains(commonWords[lang], strings.Trim(w, ".,!?")) {
				hits++
			}
		}
		if hits > bestHits {
			best, bestHits = lang, hits
		}
	}
	out, err := json.Marshal(map[string]string{"lang": best})
	return pipeline.Result{Output: out}, err
}

// libraryPipeline is sanitize -> classify -> language -> aggregate on db's
// file, classify calling the Gemini API at baseURL through client under an
// AIMD limiter. Open the store with libraryDefs.
func libraryPipeline(ctx context.Context, baseURL string, client *http.Client, lang languageDetector) ([]store.StageDef, []pipeline.StageConfig, error) {
	classify, err := stages.NewClassify(ctx, stages.ClassifyConfig{
		APIKey: geminisim.DefaultAPIKey, BaseURL: baseURL, HTTPClient: client,
	})
	if err != nil {
		return nil, nil, err
	}
	sanitize, aggregate := &stages.Sanitize{}, &stages.Aggregate{GroupBy: []string{}}
	defs := []store.StageDef{
		{Name: sanitize.Name()},
		// A changed model, prompt or label set changes the fingerprint, and
		// the store then reports the stage in ChangedStages.
		{Name: classify.Name(), Fingerprint: classify.Fingerprint()},
		{Name: lang.Name()},
		{Name: aggregate.Name()},
	}
	configs := []pipeline.StageConfig{
		{Stage: sanitize, MaxAttempts: 1},
		// The API stage: at most 8 calls in flight, the AIMD limiter
		// finding how many the quota allows below that.
		{Stage: classify, Workers: 8, Limiter: limiter.New(limiter.Config{Ceiling: 8})},
		{Stage: lang, MaxAttempts: 1},
		{Stage: aggregate, MaxAttempts: 1},
	}
	return defs, configs, nil
}

// exampleRecords are the items of the example.
var exampleRecords = []pipeline.Record{
	{ID: "r1", Text: "The app crashes when I open it and it is not fixed"},
	{ID: "r2", Text: "Die App ist zu teuer und der Preis ist nicht fair"},
	{ID: "r3", Text: "Le prix est trop cher et la mise à jour est pas bonne"},
	{ID: "r4", Text: "   "}, // blank: dead-lettered at sanitize
	{ID: "r5", Text: "Please add a dark mode, the screen is too bright"},
}

// A Go program builds its own pipeline: the library's sanitize, classify
// and aggregate stages with a stage of its own (a language detector)
// between classify and aggregate, on the same bbolt store, AIMD limiter,
// dead letters and run records the sawtooth command uses. Run again on the
// same file, it resumes where each item was.
func Example_customStage() {
	ctx := context.Background()

	// A Gemini-compatible simulator stands in for the API here; a real
	// program leaves BaseURL empty and sets APIKey.
	sim := geminisim.New(geminisim.Config{})
	baseURL, err := sim.Start("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer sim.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	dir, err := os.MkdirTemp("", "sawtooth-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	defs, configs, err := libraryPipeline(ctx, baseURL, client, languageDetector{})
	if err != nil {
		log.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "reviews.db"), store.Options{Stages: defs})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Ingest(exampleRecords); err != nil {
		log.Fatal(err)
	}

	runner := &pipeline.Runner{Store: db, Stages: configs, RunID: store.NewRunID(time.Now())}
	summary, err := runner.Run(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("run:", summary.Status)
	for _, s := range defs {
		st := summary.Stages[s.Name]
		fmt.Printf("  %-9s done %d dead %d\n", s.Name, st.Done, st.Dead)
	}

	// Every output, dead letter and the tally are in the store.
	err = db.ForEachOutput("language", func(rec pipeline.Record, out json.RawMessage) error {
		var lang struct{ Lang string }
		if err := json.Unmarshal(out, &lang); err != nil {
			return err
		}
		var label struct{ Label string }
		loc, err := db.Locate(rec.ID)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(loc.Output["classify"], &label); err != nil {
			return err
		}
		fmt.Printf("%s %s %s (%s)\n", rec.ID, lang.Lang, label.Label, loc.Status)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// The reports of the sawtooth command read the same file.
	data, err := report.Load(db, report.LoadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range data.Dead["sanitize"] {
		fmt.Printf("dead at sanitize: %v (%s)\n", r.IDs, strings.SplitN(r.Reason, ":", 2)[0])
	}
	fmt.Println("tally:", data.Tally.Items, "items", data.Tally.Labels)
	fmt.Println("last run:", data.LastRun.Status)
	page, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		log.Fatal(err)
	}
	defer page.Close()
	if err := report.HTML(page, data); err != nil {
		log.Fatal(err)
	}

	// Output:
	// run: complete
	//   sanitize  done 4 dead 1
	//   classify  done 4 dead 0
	//   language  done 4 dead 0
	//   aggregate done 4 dead 0
	// r1 en bug (done)
	// r2 de praise (done)
	// r3 fr feature_request (done)
	// r5 en feature_request (done)
	// dead at sanitize: [r4] (permanent)
	// tally: 4 items map[bug:1 feature_request:2 praise:1]
	// last run: complete
}
