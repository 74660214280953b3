package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Budget caps what a run spends on its priced stages. A zero field is no
// cap. When the next call's estimated cost would cross a cap, the stage
// stops starting calls, lets those in flight finish (their answers are
// committed), and the run stops as ErrStopped with a message saying how
// much was spent, how many items are left and about what they would cost.
type Budget struct {
	// RunUSD caps this run's spend.
	RunUSD float64
	// TotalUSD caps the database's lifetime spend: what Ledgers reports
	// when the run starts, plus this run's. In a fleet (a Claimer store)
	// Ledgers is read again before each call, so the cap holds for every
	// worker's committed spend together (see refreshFleetSpend).
	TotalUSD float64
}

// Estimator is an optional Stage interface that lets the runner price a
// call before making it (see Budget).
type Estimator interface {
	// EstimateInput is the input tokens a call for it will be billed,
	// estimated from the request's length. It makes no call.
	EstimateInput(it Item) int64
	// MaxOutputTokens is the most output tokens one call may be billed
	// (the cap the request sets): what a budget reserves for its answer.
	MaxOutputTokens() int64
}

// Ledger is one stage's money over a database's life, as committed.
type Ledger struct {
	// SpentUSD is what the stage's committed results were billed, failed
	// billed calls before them included.
	SpentUSD float64 `json:"spent_usd"`
	// SavedUSD is what the cached answers would have cost.
	SavedUSD float64 `json:"saved_usd"`
	// Paid is the results that were paid for (billed usage).
	Paid int64 `json:"paid"`
	// Cached is the answers reused without a call.
	Cached int64 `json:"cached"`
}

// Ledgers is an optional Store interface: the lifetime Ledger of each
// stage, written by Commit with the transitions (Transition.CostUSD,
// Cached, SavedUSD).
type Ledgers interface {
	Ledgers() (map[string]Ledger, error)
}

// QueueCounter is an optional Store interface: how many items are still
// to go through stage (queued at it or at an earlier stage). The budget
// stop uses it to say how many items are left.
type QueueCounter interface {
	QueuedThrough(stage string) (int, error)
}

// purse holds the run's spend against its Budget. Each call of a priced
// stage reserves its estimated cost first and settles it with the billed
// cost after; a call starts only if what is spent plus what is reserved
// plus its own estimate stays within every cap.
type purse struct {
	budget Budget
	mu     sync.Mutex
	// before is the lifetime spend that is not this run's: what was
	// committed when the run started, raised in a fleet by what the other
	// workers have committed since (refreshFleetSpend).
	before int64
	// committed is this run's spend as committed (in the ledgers).
	committed int64
	// committing is the cost of this run's commits in progress (sent to
	// the store, not yet known to have landed): see refreshFleetSpend.
	committing int64
	// commitEnded is closed, and replaced, whenever a commit ends.
	commitEnded chan struct{}
	// refreshMu guards refreshDone: open while one call reads the
	// fleet's spend, closed when it has, nil when none does.
	refreshMu   sync.Mutex
	refreshDone chan struct{}
	spent       int64 // this run's billed spend, every priced stage
	// reserved is the estimates of the calls in flight, open how many.
	reserved int64
	open     int
	// settled is closed and replaced whenever a reservation settles,
	// waking the calls waiting for room.
	settled chan struct{}
	// capped names the cap that stopped the run ("" none yet).
	capped string
}

// fits reports whether spending x this run keeps within every cap.
func (p *purse) fits(x int64) bool {
	if p.budget.RunUSD > 0 && x > toNanos(p.budget.RunUSD) {
		return false
	}
	if p.budget.TotalUSD > 0 && p.before+x > toNanos(p.budget.TotalUSD) {
		return false
	}
	return true
}

// reserve books est for one call. ok: the call may start. Otherwise, when
// wait is not nil, calls in flight may leave room once they settle: wait
// for it and ask again; when wait is nil nothing is in flight and the call
// can never fit: the stage must stop.
func (p *purse) reserve(est int64) (ok bool, wait <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fits(p.spent + p.reserved + est) {
		p.reserved += est
		p.open++
		return true, nil
	}
	if p.open > 0 {
		return false, p.settled
	}
	if p.capped == "" {
		p.capped = "total"
		if p.budget.RunUSD > 0 && p.spent+p.reserved+est > toNanos(p.budget.RunUSD) {
			p.capped = "run"
		}
	}
	return false, nil
}

// settle replaces a reservation of est by what the call was billed.
func (p *purse) settle(est, billed int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reserved -= est
	p.open--
	p.spent += billed
	close(p.settled)
	p.settled = make(chan struct{})
}

// bill adds a cost no reservation covered (an unpriced estimate, or a
// stage run without a budget).
func (p *purse) bill(billed int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spent += billed
}

// commit records spend of this run that is now in the store's ledgers.
func (p *purse) commit(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.committed += n
}

// fleetBudget reports whether Budget.TotalUSD caps a fleet's spend (see
// refreshFleetSpend).
func (r *Runner) fleetBudget() bool {
	_, ledgers := r.Store.(Ledgers)
	_, fleet := r.Store.(Claimer)
	return r.Budget.TotalUSD > 0 && ledgers && fleet
}

// awaitCommits waits until none of this run's commits is in progress, or
// fleetSpendWait at most.
func (r *Runner) awaitCommits() {
	t := r.clock().NewTimer(fleetSpendWait)
	defer t.Stop()
	for {
		r.purse.mu.Lock()
		busy, ended := r.purse.committing != 0, r.purse.commitEnded
		r.purse.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-ended:
		case <-t.C():
			return
		}
	}
}

// beginCommit records a commit of results costing n in progress.
func (p *purse) beginCommit(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.committing += n
}

// endCommit records the commit begun with n as ended, applied of it
// landed in the ledgers.
func (p *purse) endCommit(n, applied int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.committing -= n
	p.committed += applied
	if p.commitEnded != nil {
		close(p.commitEnded)
	}
	p.commitEnded = make(chan struct{})
}

// ownSpend is this run's committed spend and the cost of its commits in
// progress.
func (p *purse) ownSpend() (committed, committing int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed, p.committing
}

// setBefore sets the spend that is not this run's to others, as the
// fleet's ledgers last read it.
func (p *purse) setBefore(others int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.before = others
}

func (p *purse) committedSpend() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed
}

func (p *purse) figures() (before, spent int64, capped string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.before, p.spent, p.capped
}

// sizer is one stage's running record of call sizes, for estimates.
type sizer struct {
	mu sync.Mutex
	// calls is the calls with billed usage; out the output tokens they
	// were billed; outMax the largest.
	calls, out, outMax int64
	// estIn and in are the estimated and billed input tokens of the
	// calls that had an estimate: their ratio calibrates the estimate.
	estIn, in int64
}

// observe records one call's estimated input and billed usage.
func (s *sizer) observe(estIn int64, u Usage) {
	if u == (Usage{}) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.out += u.CandidateTokens
	s.outMax = max(s.outMax, u.CandidateTokens)
	if estIn > 0 {
		s.estIn += estIn
		s.in += u.PromptTokens
	}
}

// reservation is the tokens to reserve for a call whose input is
// estimated at estIn: the input scaled by what earlier calls were billed
// against their estimates (a tokenizer is not a rune count), and the
// output at capOut, the most one answer can be billed (the request's
// max output tokens), when the stage states it. A budget must never be
// crossed, and the longest answer seen so far is no bound: a later one
// can be longer, and with every slot booked near the cap one such answer
// crossed it. A stage that states no cap (capOut 0) is reserved the
// largest output seen, fallbackOut before any answer.
func (s *sizer) reservation(estIn, capOut int64) Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := estIn
	if s.estIn > 0 {
		in = (estIn*s.in + s.estIn - 1) / s.estIn
	}
	out := capOut
	if out <= 0 {
		out = fallbackOut
		if s.calls > 0 {
			out = s.outMax
		}
	}
	return Usage{PromptTokens: in, CandidateTokens: out}
}

// fallbackOut is the output reserved for a call of a stage that states no
// output cap, before any answer was seen.
const fallbackOut = 1024

// estimate is the tokens (input, output) to reserve for it at stage i,
// at the dearest tier that may serve it, with the estimated input alone
// for calibration.
func (r *Runner) estimate(i int, it Item) (reserve Usage, estIn int64) {
	sc := &r.Stages[i]
	var capOut int64
	if e, ok := sc.Stage.(Estimator); ok {
		estIn, capOut = e.EstimateInput(it), e.MaxOutputTokens()
	} else {
		estIn = int64(utf8.RuneCountInString(it.Text)+3) / 4
	}
	reserve = r.counters[i].sizes.reservation(estIn, capOut)
	reserve.Tier = reserveTier(sc.Stage)
	return reserve, estIn
}

// BudgetStop is why a run stopped at its Budget (the Reason of Run's
// *ParkedError): which cap was reached and the figures a caller needs to
// say how to resume.
type BudgetStop struct {
	// Total says the lifetime cap (Budget.TotalUSD) was reached, not
	// this run's (Budget.RunUSD).
	Total bool
	// LimitUSD is the cap reached.
	LimitUSD float64
	// SpentUSD is what counts against the cap reached: this run's spend,
	// or the database's lifetime spend with Total; RunSpentUSD is this
	// run's.
	SpentUSD, RunSpentUSD float64
	// ItemsLeft is the items left at the stage that reached the cap and
	// before it, -1 when unknown; LeftUSD is about what they would cost
	// at this run's rate, -1 when unknown.
	ItemsLeft int
	LeftUSD   float64
}

// Error words the stop and its remedy in the domain's terms.
func (e *BudgetStop) Error() string { return e.Text(e.Remedy()) }

// Remedy is what to change to go on, in the domain's terms.
func (e *BudgetStop) Remedy() string {
	if e.Total {
		return "raise the total budget"
	}
	return "raise the run's budget"
}

// Text is the stop's message with remedy as the thing to change.
func (e *BudgetStop) Text(remedy string) string {
	items := "items left unknown"
	if e.ItemsLeft >= 0 {
		items = fmt.Sprintf("%s items left, about %s more at this rate", thousands(int64(e.ItemsLeft)), dollars(max(e.LeftUSD, 0)))
	}
	if e.Total {
		return fmt.Sprintf("total budget %s reached (%s spent in this database, %s in this run, %s): %s to continue",
			dollars(e.LimitUSD), dollars(e.SpentUSD), dollars(e.RunSpentUSD), items, remedy)
	}
	return fmt.Sprintf("budget %s reached (%s spent, %s): %s to continue", dollars(e.LimitUSD), dollars(e.SpentUSD), items, remedy)
}

// budgetStop is the *BudgetStop of a run stage i parked at its budget,
// with the figures at the end of the run.
func (r *Runner) budgetStop(i int) *BudgetStop {
	before, spent, capped := r.purse.figures()
	perItem, left := r.budgetLeft(i)
	stop := &BudgetStop{LimitUSD: r.Budget.RunUSD, SpentUSD: toUSD(spent), RunSpentUSD: toUSD(spent), ItemsLeft: left, LeftUSD: -1}
	if capped == "total" {
		stop.Total, stop.LimitUSD, stop.SpentUSD = true, r.Budget.TotalUSD, toUSD(before+spent)
	}
	if left >= 0 {
		stop.LeftUSD = perItem * float64(left)
	}
	return stop
}

// budgetLeft is what stage i spent per item it finished in this run (or
// would spend on one, before any), and how many items are left at it and
// before it (-1: unknown).
func (r *Runner) budgetLeft(i int) (perItem float64, left int) {
	left = -1
	if qc, ok := r.Store.(QueueCounter); ok {
		if n, err := qc.QueuedThrough(r.Stages[i].Stage.Name()); err == nil {
			left = n
		}
	}
	c := r.counters[i]
	// At this run's rate: what the stage spent per item it finished,
	// cached answers included, so a high hit rate forecasts less.
	if n := c.done.Load() + c.dead.Load(); n > 0 {
		return toUSD(c.spent.Load()) / float64(n), left
	}
	res, _ := r.estimate(i, Item{})
	return r.Stages[i].Price.Cost(res), left
}

// dollars formats USD to the cent, or to the tenth of a cent under a
// dollar so small figures are not all "$0.00".
func dollars(usd float64) string {
	if usd != 0 && math.Abs(usd) < 0.1 {
		return "$" + strconv.FormatFloat(usd, 'f', 4, 64)
	}
	return "$" + strconv.FormatFloat(usd, 'f', 2, 64)
}

// thousands writes n with comma separators: 3,112.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// budgeted reports whether the run has a spending cap.
func (r *Runner) budgeted() bool { return r.Budget.RunUSD > 0 || r.Budget.TotalUSD > 0 }

// book reserves the estimated cost of stage i's next call for it, when
// the stage is priced and the run has a Budget, waiting while calls in
// flight may still leave room. ok is false when the item must be given
// back: the budget is reached (the stage is parked) or the stage is
// stopping. estIn is the estimated input, for calibration.
func (r *Runner) book(ctx context.Context, i int, it Item, parkStage context.CancelFunc) (booked bool, reserved, estIn int64, ok bool) {
	sc := &r.Stages[i]
	if sc.Price.IsZero() {
		return false, 0, 0, true
	}
	u, estIn := r.estimate(i, it)
	if !r.budgeted() {
		return false, 0, estIn, true
	}
	reserved = sc.Price.nanos(u)
	settledRead := false
	for {
		r.refreshFleetSpend()
		fits, wait := r.purse.reserve(reserved)
		if fits {
			return true, reserved, estIn, true
		}
		if wait == nil && !settledRead && r.fleetBudget() {
			// About to stop for good on the fleet's figure: read it once
			// more with none of this run's commits in progress, which a
			// read can count twice.
			settledRead = true
			r.awaitCommits()
			continue
		}
		if wait == nil {
			r.budgetStage.CompareAndSwap(-1, int32(i))
			r.park(errBudgetParked)
			parkStage()
			return false, 0, 0, false
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return false, 0, 0, false
		}
	}
}

// errBudgetParked is the park reason of a budget stop; parkReason
// replaces it by the *BudgetStop once every call in flight has settled.
var errBudgetParked = errors.New("budget reached")

// parkReason is why the run parked, nil if it did not.
func (r *Runner) parkReason() error {
	why := r.parked()
	if i := r.budgetStage.Load(); why == errBudgetParked && i >= 0 {
		return r.budgetStop(int(i))
	}
	return why
}

// startPurse readies the run's purse: the lifetime spend so far from the
// store (when it keeps Ledgers) counts against Budget.TotalUSD.
func (r *Runner) startPurse() error {
	r.purse = purse{budget: r.Budget, settled: make(chan struct{}), commitEnded: make(chan struct{})}
	r.budgetStage.Store(-1)
	if r.Budget.TotalUSD <= 0 {
		return nil
	}
	l, ok := r.Store.(Ledgers)
	if !ok {
		return errors.New("a total budget needs a store that keeps the lifetime spend")
	}
	ledgers, err := l.Ledgers()
	if err != nil {
		return fmt.Errorf("read the spend so far: %w", err)
	}
	for _, lg := range ledgers {
		r.purse.before += toNanos(lg.SpentUSD)
	}
	return nil
}

// fleetSpendWait bounds how long a call waits for another's read of the
// fleet's spend (see refreshFleetSpend).
const fleetSpendWait = 2 * time.Second

// refreshFleetSpend keeps Budget.TotalUSD a cap on the fleet's spend
// when the runner is one worker of many (its Store is a Claimer): before
// a call it reads the ledgers, which every worker's commits add to, and
// counts what the others committed (the total less this run's committed
// spend) as spent before this run. What the others have in flight and
// not yet committed is not seen: the fleet can pass the cap by at most
// their calls in flight. One caller reads at a time, and the others wait
// for its figure rather than book against the last one: a reader
// descheduled mid-read (a loaded machine) would otherwise let this
// worker's other calls book any number of calls on a stale figure. A read
// that hangs (a database gone quiet) is waited for fleetSpendWait at
// most; then the last figure stands.
func (r *Runner) refreshFleetSpend() {
	if r.Budget.TotalUSD <= 0 {
		return
	}
	l, ok := r.Store.(Ledgers)
	if _, fleet := r.Store.(Claimer); !ok || !fleet {
		return
	}
	p := &r.purse
	p.refreshMu.Lock()
	if reading := p.refreshDone; reading != nil {
		p.refreshMu.Unlock()
		t := r.clock().NewTimer(fleetSpendWait)
		defer t.Stop()
		select {
		case <-reading:
		case <-t.C():
		}
		return
	}
	done := make(chan struct{})
	p.refreshDone = done
	p.refreshMu.Unlock()
	defer func() {
		p.refreshMu.Lock()
		p.refreshDone = nil
		p.refreshMu.Unlock()
		close(done)
	}()
	// A commit of this run may land in the ledgers between two reads of
	// this run's own count, and would then count as the others' too: read
	// again while one was in progress or landed, a few times, then keep
	// the figure that counts it twice (more than was spent: the cap
	// holds, and the next read corrects it). No lock is held across the
	// read, which a database gone quiet can hang.
	for try := 0; ; try++ {
		own, inProgress := p.ownSpend()
		ledgers, err := l.Ledgers()
		if err != nil {
			r.log().Warn("the fleet's spend is unreadable: counting the last one read", "err", err)
			return
		}
		var total int64
		for _, lg := range ledgers {
			total += toNanos(lg.SpentUSD)
		}
		after, stillInProgress := p.ownSpend()
		if after == own && inProgress == 0 && stillInProgress == 0 || try == 2 {
			p.setBefore(total - own)
			return
		}
	}
}

// sendBilled records what a given-back item's calls were billed, so the
// lifetime spend misses no billed call. Only a store that keeps Ledgers
// knows the Billed outcome.
func (r *Runner) sendBilled(i int, q Claim, paid Usage, spent int64) {
	if _, ok := r.Store.(Ledgers); !ok {
		return
	}
	r.send(i, Transition{Stage: r.Stages[i].Stage.Name(), ID: q.Item.ID, Seq: q.Seq, Outcome: Billed, Usage: paid, CostUSD: toUSD(spent)}, q.Attempt)
}
