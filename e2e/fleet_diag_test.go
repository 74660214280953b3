package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// stuckReport says where the items a fleet left queued are: their queue
// rows (attempt, owner, session and whether it lives), the sessions, the
// transactions and lock waits on the server, and the log of each worker
// (stopped first, so that its output is whole).
func stuckReport(url string, fleet []*worker) string {
	var sb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, url); err != nil {
		fmt.Fprintf(&sb, "connect: %v\n", err)
	} else {
		defer conn.Close(context.Background())
		for _, q := range []string{
			`SELECT q.seq, q.stage, q.item_id, q.attempt, q.owner, q.session, (q.visible_at - now())::text AS lease_left, q.batch,
				(SELECT (now() - s.beat_at)::text FROM sawtooth.worker_session s WHERE s.id = q.session) AS since_beat
			FROM sawtooth.todo q ORDER BY q.seq LIMIT 20`,
			`SELECT id, owner, (now() - beat_at)::text AS since_beat FROM sawtooth.worker_session ORDER BY id`,
			`SELECT stage, key, owner, session, (until - now())::text AS left FROM sawtooth.answer_flight LIMIT 20`,
			`SELECT pid, state, wait_event_type, wait_event, (now() - xact_start)::text AS in_tx, left(query, 120) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`,
			`SELECT locktype, relation::regclass, mode, pid FROM pg_locks WHERE NOT granted`,
		} {
			fmt.Fprintf(&sb, "\n%s\n", strings.Join(strings.Fields(q), " "))
			rows, err := conn.Query(ctx, q)
			if err != nil {
				fmt.Fprintf(&sb, "  error: %v\n", err)
				continue
			}
			for rows.Next() {
				vs, _ := rows.Values()
				fmt.Fprintln(&sb, append([]any{" "}, vs...)...)
			}
			if err := rows.Err(); err != nil {
				fmt.Fprintf(&sb, "  error: %v\n", err)
			}
		}
	}
	for i, w := range fleet {
		if !w.exited() {
			w.cmd.Process.Signal(syscall.SIGCONT)
			w.cmd.Process.Kill()
			<-w.done
		}
		fmt.Fprintf(&sb, "\nworker %d (pid %d, %v):\n%s\n", i, w.cmd.Process.Pid, w.err, tail(w.stderr.String(), 3000))
	}
	return sb.String()
}
