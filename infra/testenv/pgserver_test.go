package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/infra/testenv"
)

func query(url string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var one int
	return c.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func TestPGServerStopStartFreezeThaw(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	url := pg.CreateDatabase(testenv.Name("tg_pg_"))
	if err := query(url, 10*time.Second); err != nil {
		t.Fatalf("a fresh server: %v", err)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}

	pg.Stop()
	if err := query(url, 5*time.Second); err == nil {
		t.Fatal("a stopped server answered")
	}
	pg.Start()
	if err := query(url, 10*time.Second); err != nil {
		t.Fatalf("after Start: %v", err)
	}

	// A frozen server accepts nothing and answers nothing: a query runs into its deadline
	// instead of failing at once.
	pg.Freeze()
	err = query(url, 500*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) && !pgconnTimeout(err) {
		t.Fatalf("a frozen server: got %v, want a timeout", err)
	}
	pg.Thaw()
	c2, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("after Thaw: %v", err)
	}
	defer c2.Close(ctx)
	var n int
	if err := c2.QueryRow(ctx, "SELECT n FROM kept").Scan(&n); err != nil || n != 7 {
		t.Fatalf("the data across stop and freeze: %d, %v", n, err)
	}

	// Stop while frozen thaws first rather than waiting forever.
	pg.Freeze()
	pg.Stop()
	pg.Start()
	if err := query(url, 10*time.Second); err != nil {
		t.Fatalf("after a frozen Stop and Start: %v", err)
	}
}

// pgconnTimeout: pgx reports a connect that ran out of time as its own error wrapping
// the context's, or as a timeout of the dial.
func pgconnTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return err != nil && errors.As(err, &te) && te.Timeout()
}
