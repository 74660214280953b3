package stages

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// stepClock is a clock a test moves by hand.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func tierClassify(t *testing.T, url string, tc TierConfig) *Classify {
	return newTestClassify(t, url, func(c *ClassifyConfig) { c.APIKey = geminisim.DefaultAPIKey; c.Tier = tc })
}

func TestClassify_Tiers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tier      string
		sim       geminisim.TierConfig
		wantAsked geminisim.Tier
		wantTier  string // Usage.Tier
		wantClass pipeline.Class
	}{
		{"standard asks nothing new", "", geminisim.TierConfig{}, geminisim.TierStandard, "", ""},
		{"flex is billed as flex", TierFlex, geminisim.TierConfig{}, geminisim.TierFlex, pipeline.TierFlex, ""},
		{"priority", TierPriority, geminisim.TierConfig{}, geminisim.TierPriority, pipeline.TierPriority, ""},
		{"priority served as standard is standard", TierPriority, geminisim.TierConfig{PriorityAsStandard: 1}, geminisim.TierPriority, "", ""},
		{"a flex 503 is a shed", TierFlex, geminisim.TierConfig{FlexShed: 1}, geminisim.TierFlex, "", pipeline.ClassShed},
		{"a bare flex 429 is a shed", TierFlex, geminisim.TierConfig{FlexShed: 1, ShedAnswer: geminisim.Shed429}, geminisim.TierFlex, "", pipeline.ClassShed},
		{"a flex 429 with details is a shed", TierFlex, geminisim.TierConfig{FlexShed: 1, ShedAnswer: geminisim.Shed429Details}, geminisim.TierFlex, "", pipeline.ClassShed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, url, _ := simServer(t, geminisim.Config{Tiers: tc.sim})
			c := tierClassify(t, url, TierConfig{Tier: tc.tier})
			res, err := c.Process(context.Background(), testItem("r1", "the app crashes on start"))
			if got := pipeline.ClassOf(context.Background(), err); got != tc.wantClass {
				t.Fatalf("class %q (%v), want %q", got, err, tc.wantClass)
			}
			if err == nil && res.Usage.Tier != tc.wantTier {
				t.Errorf("usage tier %q, want %q", res.Usage.Tier, tc.wantTier)
			}
			if st := sim.Stats(); st.Tiers[tc.wantAsked].Asked != 1 {
				t.Errorf("asked %+v, want one call asking %s", st.Tiers, tc.wantAsked)
			}
			var se *pipeline.ShedError
			if errors.As(err, &se) && (se.Tier != pipeline.TierFlex || se.Moved) {
				t.Errorf("shed %+v", se)
			}
		})
	}
}

// TestClassify_AutoMovesToStandard: in auto mode, and on flex with a
// deadline, an item flex keeps shedding goes to standard once its
// deadline since its first flex call has passed; before that its wait is
// bounded by the time it has left.
func TestClassify_AutoMovesToStandard(t *testing.T) {
	for _, tier := range []string{TierAuto, TierFlex} {
		t.Run(tier, func(t *testing.T) {
			clk := &stepClock{t: time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)}
			sim, url, _ := simServer(t, geminisim.Config{Tiers: geminisim.TierConfig{FlexShed: 1}})
			c := tierClassify(t, url, TierConfig{Tier: tier, FlexDeadline: time.Minute, Now: clk.Now})
			it := testItem("r1", "the app crashes on start")
			_, err := c.Process(context.Background(), it)
			var se *pipeline.ShedError
			if !errors.As(err, &se) || se.Moved || se.WaitAtMost != time.Minute {
				t.Fatalf("first flex call: %v (%+v), want a shed waiting at most 1m", err, se)
			}
			clk.Add(40 * time.Second)
			if _, err = c.Process(context.Background(), it); !errors.As(err, &se) || se.WaitAtMost != 20*time.Second {
				t.Fatalf("second flex call: %v (%+v), want a shed waiting at most 20s", err, se)
			}
			clk.Add(20 * time.Second)
			res, err := c.Process(context.Background(), it)
			if err != nil || res.Usage.Tier != "" {
				t.Fatalf("after the deadline: %v, tier %q; want an answer on standard", err, res.Usage.Tier)
			}
			st := sim.Stats()
			if st.Tiers[geminisim.TierFlex].Asked != 2 || st.Tiers[geminisim.TierStandard].Asked != 1 || st.Tiers[geminisim.TierStandard].Served != 1 {
				t.Errorf("sim tiers %+v", st.Tiers)
			}
			// The answered item's time is forgotten: it would start over.
			if n := len(c.tiers.since); n != 0 {
				t.Errorf("%d items still timed", n)
			}
		})
	}
}

// TestClassify_FlexWithoutDeadlineStays: flex alone never moves an item
// to standard, however long flex sheds it.
func TestClassify_FlexWithoutDeadlineStays(t *testing.T) {
	clk := &stepClock{t: time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)}
	sim, url, _ := simServer(t, geminisim.Config{Tiers: geminisim.TierConfig{FlexShed: 1}})
	c := tierClassify(t, url, TierConfig{Tier: TierFlex, Now: clk.Now})
	it := testItem("r1", "the app crashes on start")
	for i := 0; i < 3; i++ {
		_, err := c.Process(context.Background(), it)
		var se *pipeline.ShedError
		if !errors.As(err, &se) || se.Moved || se.WaitAtMost != 0 {
			t.Fatalf("call %d: %v (%+v), want a flex shed with no deadline", i, err, se)
		}
		clk.Add(24 * time.Hour)
	}
	if st := sim.Stats(); st.Tiers[geminisim.TierStandard].Asked != 0 || st.Tiers[geminisim.TierFlex].Asked != 3 {
		t.Errorf("sim tiers %+v, want flex only", st.Tiers)
	}
}

func TestClassify_FlexTimeoutIsAShed(t *testing.T) {
	_, url, _ := simServer(t, geminisim.Config{Tiers: geminisim.TierConfig{FlexLatency: geminisim.Latency{Base: time.Hour}}})
	c := tierClassify(t, url, TierConfig{Tier: TierFlex, FlexTimeout: 20 * time.Millisecond})
	_, err := c.Process(context.Background(), testItem("r1", "the app crashes on start"))
	if got := pipeline.ClassOf(context.Background(), err); got != pipeline.ClassShed {
		t.Errorf("a flex call past its timeout: %s (%v), want shed", got, err)
	}
}

func TestLLM_TierAndCachedTokens(t *testing.T) {
	sim, url, _ := simServer(t, geminisim.Config{})
	ep := Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}
	system := strings.Repeat("Label definitions and worked examples shared by every item. ", 100)
	l := newTestLLM(t, LLMConfig{Name: "label", Endpoint: ep, Labels: []string{"bug", "other"}, SystemInstruction: system, Tier: TierConfig{Tier: TierFlex}})
	first, err := l.Process(context.Background(), testItem("r1", "the app crashes"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.Process(context.Background(), testItem("r2", "nice app"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage.CachedTokens != 0 || second.Usage.CachedTokens < 1024 || second.Usage.Tier != pipeline.TierFlex {
		t.Errorf("usage first %+v second %+v: want the second's shared prefix cached, on flex", first.Usage, second.Usage)
	}
	// Our price of both calls is the simulator's bill, to the nanodollar
	// or so.
	price, err := StagePrice(PriceConfig{Model: l.Model()}, true)
	if err != nil {
		t.Fatal(err)
	}
	ours := price.Cost(first.Usage) + price.Cost(second.Usage)
	if bill := float64(sim.Stats().BillNanoUSD()) / 1e9; bill == 0 || ours-bill > 2e-9 || bill-ours > 2e-9 {
		t.Errorf("our cost %.9f, simulator's bill %.9f", ours, bill)
	}
}

func TestCheckTier(t *testing.T) {
	for _, tc := range []struct {
		tier     string
		deadline time.Duration
		want     string
	}{
		{"", 0, ""}, {TierFlex, 0, ""}, {TierAuto, time.Hour, ""}, {TierAuto, 0, ""},
		{"cheap", 0, "use one of standard, flex, priority, auto"},
		{TierFlex, time.Hour, ""},
		{TierStandard, time.Hour, "needs tier flex or auto"},
		{TierPriority, time.Hour, "needs tier flex or auto"},
		{TierAuto, -time.Second, "positive"},
	} {
		err := CheckTier(tc.tier, tc.deadline)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckTier(%q, %s) = %v, want %q", tc.tier, tc.deadline, err, tc.want)
		}
	}
}

// TestClassify_FlexRefusalsByBody: which error answers to a flex call are
// the tier shedding load (wait and ask again, no attempt spent, never a
// dead letter) and which are not: a 429 naming the project's per-minute
// quota is the quota (the limiter must learn it and --max-refused must
// see it), and the server's own deadline (504 DEADLINE_EXCEEDED, genai
// sends X-Server-Timeout) is a shed like the client's timeout.
func TestClassify_FlexRefusalsByBody(t *testing.T) {
	const quota429 = `{"error":{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED","details":[
 {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel","quotaValue":"1000"}]},
 {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"20s"}]}}`
	for _, tc := range []struct {
		name   string
		code   int
		body   string
		tier   string
		want   pipeline.Class
		status string
	}{
		{"bare 429 on flex", 429, `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`, TierFlex, pipeline.ClassShed, ""},
		{"429 naming a per-minute quota on flex", 429, quota429, TierFlex, pipeline.ClassRateLimited, ""},
		{"504 on flex", 504, `{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`, TierFlex, pipeline.ClassShed, ""},
		{"408 on flex", 408, `{"error":{"code":408,"message":"Request timed out.","status":"DEADLINE_EXCEEDED"}}`, TierFlex, pipeline.ClassShed, ""},
		{"504 on standard", 504, `{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`, TierStandard, pipeline.ClassTransient, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				io.WriteString(w, tc.body) //nolint:errcheck // the client reads what it gets
			}))
			t.Cleanup(srv.Close)
			c := tierClassify(t, srv.URL, TierConfig{Tier: tc.tier})
			_, err := c.Process(context.Background(), testItem("r1", "the app crashes on start"))
			if got := pipeline.ClassOf(context.Background(), err); got != tc.want {
				t.Errorf("%s: class %s (%v), want %s", tc.name, got, err, tc.want)
			}
		})
	}
}
