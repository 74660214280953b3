package cli

import (
	"strings"
	"testing"
)

func TestIsPostgres(t *testing.T) {
	tests := []struct {
		name, db string
		want     bool
	}{
		{"url", "postgres://app@db1:5432/reviews", true},
		{"postgresql url", "postgresql://db1/reviews?sslmode=require", true},
		{"key=value", "host=db1 dbname=reviews user=app", true},
		{"key=value, dbname first", "dbname=reviews", true},
		{"bbolt file", "reviews.db", false},
		{"path with =", "runs/a=b.db", false},
		{"absolute path", "/var/lib/sawtooth/reviews.db", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isPostgres(tc.db); got != tc.want {
				t.Errorf("isPostgres(%q) = %v, want %v", tc.db, got, tc.want)
			}
		})
	}
}

func TestCheckPostgresDSN_RefusesPasswords(t *testing.T) {
	tests := []struct {
		name, dsn string
		refused   bool
	}{
		{"no password", "postgres://app@db1/reviews", false},
		{"password in the user info", "postgres://app:hunter2@db1/reviews", true},
		{"password parameter", "postgres://app@db1/reviews?password=hunter2", true},
		{"key=value password", "host=db1 dbname=reviews password=hunter2", true},
		{"key=value without", "host=db1 dbname=reviews passfile=/etc/pgpass", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPostgresDSN(tc.dsn)
			if (err != nil) != tc.refused {
				t.Fatalf("checkPostgresDSN(%q) = %v, want refused %v", tc.dsn, err, tc.refused)
			}
			if err != nil && (strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "PGPASSWORD")) {
				t.Errorf("message %q shows the password or does not say where it goes", err)
			}
		})
	}
}
