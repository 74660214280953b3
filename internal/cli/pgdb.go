package cli

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/storecopy/pgstage"
)

// libpqKeyword starts a libpq key=value connection string.
var libpqKeyword = regexp.MustCompile(`^\s*(host|hostaddr|port|dbname|user|service|sslmode|application_name|connect_timeout|options|target_session_attrs)\s*=`)

// isPostgres reports whether --db names a PostgreSQL database rather than
// a bbolt file: a postgres:// or postgresql:// URL, or a libpq key=value
// string ("host=db1 dbname=reviews").
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") || libpqKeyword.MatchString(db)
}

// libpqPassword finds password=... in a key=value connection string.
var libpqPassword = regexp.MustCompile(`(^|\s)password\s*=`)

// checkPostgresDSN refuses a connection string that carries a password:
// a flag shows in `ps` and in shell history. libpq's own places are
// read instead: PGPASSWORD, ~/.pgpass (PGPASSFILE), or a service file.
func checkPostgresDSN(dsn string) error {
	const fix = "put the password in PGPASSWORD or ~/.pgpass (mode 0600) instead: a password on the command line shows in `ps`"
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return usagef("--db %s: not a valid postgres URL (%v); e.g. postgres://user@host:5432/dbname", postgres.Redact(dsn), unwrapURL(err))
		}
		if _, has := u.User.Password(); has || u.Query().Has("password") {
			return usagef("--db %s: the URL holds a password; %s", postgres.Redact(dsn), fix)
		}
		return nil
	}
	if libpqPassword.MatchString(dsn) {
		return usagef("--db %s: the connection string holds a password; %s", postgres.Redact(dsn), fix)
	}
	return nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// dbOpen says how a command opens its database.
type dbOpen struct {
	Stages    []store.StageDef
	ReadOnly  bool
	MustExist bool
	// Flag gave the path, for messages: "" is --db.
	Flag string
}

// openDatabase opens --db: a PostgreSQL pipeline for a postgres URL or
// DSN (created on first use unless MustExist), else the bbolt file.
func openDatabase(target string, o dbOpen, bolt func() (*store.DB, error)) (pipeline.Database, error) {
	if !isPostgres(target) {
		db, err := bolt()
		if err != nil {
			return nil, wordStoreError(err, cmp.Or(o.Flag, "--db"))
		}
		return db, nil
	}
	if err := checkPostgresDSN(target); err != nil {
		return nil, err
	}
	db, err := postgres.Open(context.Background(), target, postgres.Options{Stages: o.Stages, ReadOnly: o.ReadOnly, MustExist: o.MustExist})
	if errors.Is(err, postgres.ErrNotFound) {
		switch staged, underWay, _ := pgstage.Unfinished(context.Background(), target); {
		case underWay:
			return nil, usagef("%s %s: no sawtooth pipeline there yet: a `sawtooth copy` into it is under way; wait for it to finish, or stop it and copy again",
				cmp.Or(o.Flag, "--db"), postgres.Redact(target))
		case staged:
			return nil, usagef("%s %s: no sawtooth pipeline there yet: a `sawtooth copy` into it stopped before its end; run the copy again (it starts over)",
				cmp.Or(o.Flag, "--db"), postgres.Redact(target))
		}
		return nil, usagef("--db %s: no sawtooth pipeline there yet (one is created by `sawtooth run --db %s --input FILE`, or `sawtooth migrate --db %s`)",
			postgres.Redact(target), shellQuote(postgres.Redact(target)), shellQuote(postgres.Redact(target)))
	}
	if err != nil {
		return nil, wordStoreError(wordLiveWorkers(wordOldSchema(err, target), target, false), cmp.Or(o.Flag, "--db"))
	}
	return db, nil
}

// wordLiveWorkers words postgres.ErrLiveWorkers, a migration refused while
// workers of the old version hold the pipeline, with the command to run
// once they are gone; any other error is returned as it is. It stays a
// fatal error (exit 1), as a database in use is: the command was called
// right.
func wordLiveWorkers(err error, target string, migrate bool) error {
	if !errors.Is(err, postgres.ErrLiveWorkers) {
		return err
	}
	run := "run `sawtooth migrate --db " + shellQuote(postgres.Redact(target)) + "`"
	if migrate {
		run += " again"
	} else {
		run += " (or this command again) before any worker of this version starts"
	}
	return &wordedError{err: err, msg: strings.Replace(err.Error(), postgres.OpenAgain, run, 1)}
}
