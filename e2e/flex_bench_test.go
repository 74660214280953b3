package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// BenchmarkFlexInFlight holds 5,000 flex calls in flight at once, each a
// worker goroutine in the classify stage's real client (genai over
// net/http) talking to `sawtooth sim` in a process of its own, so only
// the client's memory is measured. Once the simulator holds all of them
// it reads the heap and the goroutine stacks, and reports them per call
// in flight (heap-B/call, stack-B/call), then cancels the calls. Run:
//
//	go test ./e2e -run '^$' -bench FlexInFlight -benchtime 1x
func BenchmarkFlexInFlight(b *testing.B) {
	const inFlight = 5000
	// Flex latency of an hour: every call waits until it is canceled.
	sim := startSimProcess(b, "--latency", "1ms", "--sim-flex-latency", "1h")
	c, err := stages.NewClassify(context.Background(), stages.ClassifyConfig{APIKey: geminisim.DefaultAPIKey, BaseURL: sim.url,
		Tier: stages.TierConfig{Tier: stages.TierFlex}})
	if err != nil {
		b.Fatal(err)
	}
	items := make([]pipeline.Item, inFlight)
	for i := range items {
		text := fmt.Sprintf("review %d: the app crashes when I open the settings page after the update", i)
		out, _ := json.Marshal(stages.SanitizeOutput{Text: text, Chars: len(text), Changes: []string{}})
		items[i] = pipeline.Item{Record: pipeline.Record{ID: fmt.Sprint(i), Text: text}, Prev: out, Outputs: map[string]json.RawMessage{"sanitize": out}}
	}
	var heap, stack, goroutines float64
	b.ResetTimer()
	for range b.N {
		var before, during runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range items {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.Process(ctx, items[i])
			}()
		}
		for giveUp := time.Now().Add(5 * time.Minute); sim.stats(b).InFlight < inFlight; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(giveUp) {
				cancel()
				b.Fatalf("the simulator never held %d calls (%d)", inFlight, sim.stats(b).InFlight)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&during)
		heap += float64(int64(during.HeapInuse) - int64(before.HeapInuse))
		stack += float64(int64(during.StackInuse) - int64(before.StackInuse))
		goroutines += float64(runtime.NumGoroutine() - g0)
		cancel()
		wg.Wait()
	}
	n := float64(b.N * inFlight)
	b.ReportMetric(heap/n, "heap-B/call")
	b.ReportMetric(stack/n, "stack-B/call")
	b.ReportMetric(goroutines/n, "goroutines/call")
	b.ReportMetric((heap+stack)/float64(b.N)/(1<<20), "MiB/5000-calls")
}
